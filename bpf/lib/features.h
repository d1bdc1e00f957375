/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* features.h - the paper's feature extraction: per (source, destination,
 * protocol) packet, byte and SYN counts of traffic that passed the filter,
 * and the port profile of the same traffic, in this CPU's regions of
 * whichever buffer tw_feat currently points at (layout in maps.h). A full region costs a bounded probe and a counter
 * bump, never a stall. */
#ifndef TW_FEATURES_H
#define TW_FEATURES_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "maps.h"
#include "parse.h"
#include "table.h"

/* Where a key lives in its region. Keys are chosen by whoever sends the
 * packets: with a hash they could compute, keys sharing one home slot would
 * push each other past TW_FEAT_PROBE into overflow, never counted and so
 * never detected. So the hash is keyed by a random per-state seed: NH (the
 * universal hash of UMAC and Adiantum) over the key's nine 32-bit words,
 * under which two different keys agree in all 64 bits for about one seed
 * in 2^32, then folded and finalised into the slot bits. Five multiplies,
 * as it runs for every packet that passes (SipHash-1-3 cost 20 ns more per
 * packet here). User space mirrors it (hash.go) to merge in region order
 * and bounds its own probing (snapshot.go). */
static __always_inline __u32 tw_feat_hash(const struct tw_feat_key *k,
					  const __u32 *seed)
{
	const __u32 *m = (const __u32 *)k;
	__u64 h = (__u64)(__u32)(m[0] + seed[0]) * (__u32)(m[1] + seed[1]);
	h += (__u64)(__u32)(m[2] + seed[2]) * (__u32)(m[3] + seed[3]);
	h += (__u64)(__u32)(m[4] + seed[4]) * (__u32)(m[5] + seed[5]);
	h += (__u64)(__u32)(m[6] + seed[6]) * (__u32)(m[7] + seed[7]);
	/* The key's ninth word pairs with a padding zero; an odd factor keeps
	 * it counted whatever the seed. */
	h += (__u64)(__u32)(m[8] + seed[8]) * (seed[9] | 1);
	return tw_mix32((__u32)(h >> 32) ^ (__u32)h);
}

static __always_inline int tw_feat_eq(const struct tw_feat_key *a,
				      const struct tw_feat_key *b)
{
	const __u64 *x = (const __u64 *)a, *y = (const __u64 *)b;
	return x[0] == y[0] && x[1] == y[1] && x[2] == y[2] && x[3] == y[3] &&
	       *(const __u32 *)((const __u8 *)a + 32) ==
		       *(const __u32 *)((const __u8 *)b + 32);
}

static __always_inline void tw_feat_overflow(void)
{
	__u32 zero = 0;
	struct tw_feat_stats *s = bpf_map_lookup_elem(&tw_fstats, &zero);
	if (s)
		s->overflow++;
}

static __always_inline void tw_port_bump(void *buf, __u32 base, __u32 row,
					 __u32 col)
{
	__u32 n = row * 65536 + (col & 0xffff);
	__u32 idx = base + n / 8;
	__u64 *s = bpf_map_lookup_elem(buf, &idx);
	if (s)
		s[n & 7]++;
}

/* The port profile: one counter per side of a TCP or UDP packet that
 * passed, by port, so the control plane can see what a flood shares when
 * its sources share nothing (a reflection's source port, a victim's
 * service) and pick a flow rule. Later fragments carry no ports. A SYN
 * also counts by its IP length: a flood tool's SYNs all have one size
 * (its option layout), which the host's clients may never send, and a
 * flow rule can drop that size where answering each SYN with a cookie
 * costs the host a transmitted SYN-ACK. */
static __always_inline void tw_ports(void *buf, const struct tw_pkt *p,
				     __u32 cpu)
{
	__u32 row;
	if (p->nonfirst)
		return;
	if (p->proto == IPPROTO_TCP)
		row = 0;
	else if (p->proto == IPPROTO_UDP)
		row = 2;
	else
		return;
	__u32 base = tw_nr_cpus * (tw_feat_slots + 1) + cpu * TW_PORT_SLOTS;
	tw_port_bump(buf, base, row, bpf_ntohs(p->sport));
	tw_port_bump(buf, base, row + 1, bpf_ntohs(p->dport));
	if (p->syn) {
		__u32 l = p->l3len < TW_SYNLEN_MAX ? p->l3len : TW_SYNLEN_MAX;
		if (p->family == 6)
			l |= TW_SYNLEN_V6;
		tw_port_bump(buf, base, TW_PORT_ROW_SYNLEN, l);
	}
}

static __always_inline void tw_features(const struct tw_pkt *p, __u32 len,
					__u32 cpu, const __u32 *seed)
{
	__u32 zero = 0;
	void *buf = bpf_map_lookup_elem(&tw_feat, &zero);
	if (!buf || cpu >= tw_nr_cpus)
		return;
	tw_ports(buf, p, cpu);

	struct tw_feat_key k __attribute__((aligned(8))) = {};
	k.family = p->family;
	k.proto = p->proto;
	if (p->family == 4) {
		__builtin_memcpy(k.src, &p->src4, 4);
		__builtin_memcpy(k.dst, &p->dst4, 4);
	} else {
		__builtin_memcpy(k.src, p->src6, 16);
		__builtin_memcpy(k.dst, p->dst6, 16);
	}

	__u32 h = tw_feat_hash(&k, seed);
	__u32 base = cpu * tw_feat_slots;
	for (__u32 i = 0; i < TW_FEAT_PROBE; i++) {
		__u32 idx = base + ((h + i) & (tw_feat_slots - 1));
		struct tw_feat_slot *s = bpf_map_lookup_elem(buf, &idx);
		if (!s)
			return;
		if (s->key.family == 0) {
			__u32 hi = tw_nr_cpus * tw_feat_slots + cpu;
			struct tw_feat_slot *hdr =
				bpf_map_lookup_elem(buf, &hi);
			if (!hdr || hdr->packets >= tw_feat_cap)
				break;
			hdr->packets++;
			s->key = k;
			s->packets = 1;
			s->bytes = len;
			s->syns = p->syn;
			return;
		}
		if (tw_feat_eq(&s->key, &k)) {
			s->packets++;
			s->bytes += len;
			s->syns += p->syn;
			return;
		}
	}
	tw_feat_overflow();
}

#endif
