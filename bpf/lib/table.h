/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* table.h - the exact-match source tables: open addressing with linear
 * probing over a plain BPF array, keyed by a seeded hash that user space
 * computes identically (internal/datapath/hash.go).
 *
 * Why not a BPF hash map: at 1M entries a htab lookup is two dependent
 * cache misses (bucket, then element) and a per-CPU value is a third. Here
 * a hit is one 32- or 64-byte slot in a flat array that also holds the
 * rule's counters, so it touches one random cache line and one page, and
 * neighbouring probe slots share the line. */
#ifndef TW_TABLE_H
#define TW_TABLE_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "maps.h"

static __always_inline __u32 tw_mix32(__u32 h)
{
	h ^= h >> 16;
	h *= 0x7feb352d;
	h ^= h >> 15;
	h *= 0x846ca68b;
	h ^= h >> 16;
	return h;
}

static __always_inline __u32 tw_hash4(__u32 addr, __u32 seed)
{
	return tw_mix32(addr ^ seed);
}

/* Two independent 64-bit multiplies, then one 32-bit finaliser: cheaper
 * than four chained rounds and still seeded end to end. */
static __always_inline __u32 tw_hash6(const __u32 *a, __u32 seed)
{
	__u64 x = ((__u64)a[0] << 32 | a[1]) ^ ((__u64)seed << 32 | seed);
	__u64 y = ((__u64)a[2] << 32 | a[3]) ^ ((__u64)~seed << 32 | seed);
	__u64 h = x * 0x9E3779B97F4A7C15ULL + y * 0xC2B2AE3D27D4EB4FULL;
	return tw_mix32((__u32)(h >> 32) ^ (__u32)h);
}

/* The coarse clock, read once per tick per CPU: bpf_jiffies64 is inlined
 * into a load, where bpf_ktime_get_coarse_ns is a helper call whose two
 * returns each go through the SRSO "safe RET" thunk on these AMD hosts,
 * per packet. The coarse clock only moves at a tick, with jiffies; it may
 * be read just before the tick updates it, and then lags a tick behind
 * until the next, far below last_hit's resolution. */
static __always_inline __u64 tw_coarse_now(void)
{
	__u32 zero = 0;
	struct tw_clock *c = bpf_map_lookup_elem(&tw_clock, &zero);
	__u64 j = bpf_jiffies64();
	if (!c)
		return bpf_ktime_get_coarse_ns();
	if (c->jiffies != j) {
		c->jiffies = j;
		c->now = bpf_ktime_get_coarse_ns();
	}
	return c->now;
}

static __always_inline void tw_touch(__u64 *last_hit)
{
	__u64 now = tw_coarse_now();
	if (now - *last_hit > TW_LAST_HIT_RES_NS)
		*last_hit = now;
}

static __always_inline void tw_count(void *ctrmap, __u32 cpu, __u32 stride,
				     __u32 idx, __u32 len)
{
	if (cpu >= tw_nr_cpus)
		return;
	__u32 k = cpu * stride + idx;
	struct tw_ctr *c = bpf_map_lookup_elem(ctrmap, &k);
	if (c) {
		c->packets++;
		c->bytes += len;
	}
}

/* User space sizes tw_ex_hot and reads it by these constants: an anchor
 * (never read) so that BTF describes them for bpf2go -type. */
const enum tw_hot_limit tw_hot_limit_anchor __attribute__((unused));

/* Counting a hit. Each CPU keeps its last TW_HOT_SLOTS rules' counts in
 * its own tw_hot entries, so a rule hit again and again on one CPU (one
 * source at full rate, from every CPU at once) counts in memory no other
 * CPU writes, as the per-CPU counters did; a rule not in the cache is
 * counted in its slot, whose line the key compare has just brought in,
 * and becomes the entry's rule. Uniform traffic over a large table thus
 * touches one random line per packet, and a hot source's slot line is not
 * bounced between CPUs on every packet.
 *
 * The slot's counters are shared, so adds to them are atomic: plain adds
 * from two CPUs at once lose updates (measured: 1.7% at full rate from
 * both CPUs here), and per-rule rates must stay exact. An entry that still
 * holds counts when another rule takes it moves them into its slot first,
 * with seq odd meanwhile (struct tw_hot). */
static __always_inline void tw_slot_add(__u32 tag, __u64 packets, __u64 bytes)
{
	__u32 idx = tag & ~TW_HOT_V6;
	if (tag & TW_HOT_V6) {
		struct tw_exact6 *e = bpf_map_lookup_elem(&tw_ex6, &idx);
		if (e) {
			__sync_fetch_and_add(&e->packets, packets);
			__sync_fetch_and_add(&e->bytes, bytes);
		}
		return;
	}
	struct tw_exact4 *e = bpf_map_lookup_elem(&tw_ex4, &idx);
	if (e) {
		__sync_fetch_and_add(&e->packets, packets);
		__sync_fetch_and_add(&e->bytes, bytes);
	}
}

static __always_inline void tw_exact_count(__u32 tag, __u64 *packets, __u32 len)
{
	__u32 cpu = bpf_get_smp_processor_id();
	__u32 k = cpu * TW_HOT_SLOTS + (tag & (TW_HOT_SLOTS - 1));
	struct tw_hot *h =
		cpu < tw_nr_cpus ? bpf_map_lookup_elem(&tw_ex_hot, &k) : 0;
	if (h && h->tag == tag) {
		h->packets++;
		h->bytes += len;
		return;
	}
	if (h) {
		if (h->packets) {
			__u32 old = h->tag;
			__u64 p = h->packets, b = h->bytes;
			__sync_fetch_and_add(&h->seq, 1);
			h->tag = tag;
			h->packets = 0;
			h->bytes = 0;
			tw_slot_add(old, p, b);
			__sync_fetch_and_add(&h->seq, 1);
		} else {
			h->tag = tag;
		}
	}
	__sync_fetch_and_add(packets, 1);
	__sync_fetch_and_add(packets + 1, len);
}

/* Returns 1 and counts the hit when addr is blocked. */
static __always_inline int tw_exact4_hit(__u32 addr, __u32 seed, __u32 len)
{
	__u32 h = tw_hash4(addr, seed);
	for (__u32 i = 0; i < TW_MAX_PROBE; i++) {
		__u32 idx = (h + i) & (tw_ex4_slots - 1);
		struct tw_exact4 *e = bpf_map_lookup_elem(&tw_ex4, &idx);
		if (!e)
			return 0;
		__u32 st = *(volatile __u32 *)&e->state;
		if (st == TW_SLOT_EMPTY)
			return 0;
		if (st == TW_SLOT_USED && e->addr == addr) {
			tw_exact_count(idx, &e->packets, len);
			tw_touch(&e->last_hit);
			return 1;
		}
	}
	return 0;
}

static __always_inline int tw_exact6_hit(const __u32 *a, __u32 seed, __u32 len)
{
	__u32 h = tw_hash6(a, seed);
	for (__u32 i = 0; i < TW_MAX_PROBE; i++) {
		__u32 idx = (h + i) & (tw_ex6_slots - 1);
		struct tw_exact6 *e = bpf_map_lookup_elem(&tw_ex6, &idx);
		if (!e)
			return 0;
		__u32 st = *(volatile __u32 *)&e->state;
		if (st == TW_SLOT_EMPTY)
			return 0;
		const __u32 *k = (const __u32 *)e->addr;
		if (st == TW_SLOT_USED && k[0] == a[0] && k[1] == a[1] &&
		    k[2] == a[2] && k[3] == a[3]) {
			tw_exact_count(idx | TW_HOT_V6, &e->packets, len);
			tw_touch(&e->last_hit);
			return 1;
		}
	}
	return 0;
}

/* Longest-prefix match in an LPM trie; counts against the entry's id. */
static __always_inline int tw_lpm_hit(void *trie, void *key, void *ctrmap,
				      __u32 cap, __u32 cpu, __u32 len)
{
	struct tw_lpm_val *v = bpf_map_lookup_elem(trie, key);
	if (!v)
		return 0;
	if (v->id < cap)
		tw_count(ctrmap, cpu, cap, v->id, len);
	tw_touch(&v->last_hit);
	return 1;
}

#endif
