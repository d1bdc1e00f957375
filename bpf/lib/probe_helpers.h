/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* probe_helpers.h - the flow probe's per-packet steps (xdp_probe.c): read
 * the NIC's mark, find or create the flow, count the packet in it, copy it
 * to user space while the flow is in DPI, and leave through one exit that
 * counts the outcome. Entries are shared by every CPU (both directions of a
 * flow may arrive on different queues), so everything a packet changes in
 * one is an atomic operation or a store that may race harmlessly (last_ns,
 * a newer timestamp wins or loses by nanoseconds). */
#ifndef TW_PROBE_HELPERS_H
#define TW_PROBE_HELPERS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "verifier.h"
#include "consts.h"
#include "types.h"
#include "parse.h"
#include "flow.h"
#include "probe.h"

#define TW_EEXIST 17 /* bpf_map_update_elem's errno for BPF_NOEXIST */

/* BPF atomics work on 32- and 64-bit words only, so a flags byte is ORed
 * into the aligned word that holds it; the byte's position in that word is
 * little-endian (bpf2go builds bpfel only). */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "little-endian");
#define TW_FLOW_FLAGS_OFF __builtin_offsetof(struct tw_flow, tcp_flags)

static __always_inline void tw_probe_count(__u32 v, __u32 bytes)
{
	struct tw_ctr *c = bpf_map_lookup_elem(&tw_probe_stats, &v);
	if (c) {
		c->packets++;
		c->bytes += bytes;
	}
}

/* The NIC stage's mark, from the metadata it wrote in front of the packet;
 * NONE without metadata or with anything but ours there. */
static __always_inline __u8 tw_probe_meta(struct xdp_md *ctx,
					  struct tw_flow_meta *out)
{
	void *data = (void *)(long)ctx->data;
	struct tw_flow_meta *m = (void *)(long)ctx->data_meta;
	if ((void *)(m + 1) > data || m->magic != TW_META_MAGIC ||
	    m->mark > TW_MARK_UNHANDLED)
		return TW_MARK_NONE;
	*out = *m;
	return m->mark;
}

/* Our flow hash when no NIC supplied one: murmur3's finalizer over the
 * sorted key, so both directions hash alike. */
static __always_inline __u32 tw_probe_hash(const struct tw_flow_key *k)
{
	__u32 h = 0x9e3779b9;
#pragma unroll
	for (int i = 0; i < (int)sizeof(*k) / 4; i++) {
		__u32 w;
		__builtin_memcpy(&w, (const __u8 *)k + 4 * i, 4);
		h ^= w;
		h *= 0xcc9e2d51;
		h = h << 13 | h >> 19;
	}
	h ^= h >> 16;
	h *= 0x85ebca6b;
	h ^= h >> 13;
	h *= 0xc2b2ae35;
	h ^= h >> 16;
	return h;
}

/* Finds the packet's flow or creates it (state DPI: sampling starts with
 * this packet), hashed by the NIC when it marked the packet with a hash. Two CPUs may create the same flow at once: BPF_NOEXIST lets
 * one insert win and the other use its entry. Counters start at zero and
 * are added to atomically afterwards, by the creator like anyone else.
 * NULL: the table is full (or the entry went between insert and lookup). */
static __always_inline struct tw_flow *
tw_probe_flow(const struct tw_flow_key *k, __u8 dir, __u32 nic_hash, __u64 now)
{
	struct tw_flow *f = bpf_map_lookup_elem(&tw_probe_flows, k);
	if (f)
		return f;
	struct tw_flow n = {
		.first_ns = now,
		.last_ns = now,
		.state = TW_FS_DPI,
		.action = TW_FA_FORWARD,
		.init_dir = dir,
	};
	n.hash = nic_hash ? nic_hash : tw_probe_hash(k);
	long err = bpf_map_update_elem(&tw_probe_flows, k, &n, BPF_NOEXIST);
	if (err == 0)
		tw_probe_count(TW_PV_FLOW_NEW, 0);
	else if (err != -TW_EEXIST) {
		tw_probe_count(TW_PV_REFUSED, 0);
		return NULL;
	}
	return bpf_map_lookup_elem(&tw_probe_flows, k);
}

static __always_inline void tw_probe_account(struct tw_flow *f, __u8 dir,
					     __u32 bytes, __u8 flags, __u8 mark,
					     __u64 now)
{
	dir &= 1;
	__sync_fetch_and_add(&f->packets[dir], 1);
	__sync_fetch_and_add(&f->bytes[dir], bytes);
	__sync_fetch_and_add(&f->marks[mark & 3], 1);
	/* Only new bits take the locked instruction. */
	if (flags & ~f->tcp_flags[dir]) {
		__u32 off = TW_FLOW_FLAGS_OFF + dir;
		__u32 *w = (__u32 *)((__u8 *)f + (off & ~3));
		__sync_fetch_and_or(w, (__u32)flags << ((off & 3) * 8));
	}
	if (now > f->last_ns)
		f->last_ns = now;
}

/* Takes the flow's next sample number while it has fewer than
 * tw_probe_dpi_pkts, or returns -1. A compare-and-swap rather than a plain
 * fetch-add, so dpi_sent stops at the limit exactly instead of counting
 * every packet of the flow; four lost races skip this packet, and the next
 * one takes the number. */
static __always_inline int tw_probe_claim(struct tw_flow *f)
{
	__u32 n = tw_probe_dpi_pkts;
	if (n > TW_DPI_PKTS_MAX)
		n = TW_DPI_PKTS_MAX;
#pragma unroll
	for (int i = 0; i < 4; i++) {
		__u32 old = *(volatile __u32 *)&f->dpi_sent;
		if (old >= n)
			return -1;
		if (__sync_val_compare_and_swap(&f->dpi_sent, old, old + 1) ==
		    old)
			return old;
	}
	return -1;
}

/* Copies the packet, from the IP header on and at most the snap length,
 * into the ring buffer. A sample number is used even when the ring is full:
 * dpi_sent counts numbers given out, dpi_lost those that never reached user
 * space, and the gap in seq shows user space which one is missing. */
static __always_inline void tw_probe_sample(struct xdp_md *ctx,
					    const struct tw_pkt *p,
					    const struct tw_flow_key *k,
					    struct tw_flow *f, __u8 dir,
					    __u8 mark, __u64 now)
{
	if (f->state != TW_FS_DPI && f->state != TW_FS_NEW)
		return;
	int seq = tw_probe_claim(f);
	if (seq < 0)
		return;
	struct tw_dpi_sample *s =
		bpf_ringbuf_reserve(&tw_probe_ring, sizeof(*s), 0);
	if (!s) {
		__sync_fetch_and_add(&f->dpi_lost, 1);
		tw_probe_count(TW_PV_DPI_LOST, 0);
		return;
	}
	__u32 l3len = p->l3end - p->l3off;
	__u32 cap = l3len;
	if (cap > tw_probe_snaplen)
		cap = tw_probe_snaplen;
	/* The helper wants a size the verifier can bound: 1..sizeof(data). */
	if (cap < 1 || cap > TW_DPI_SNAP_MAX ||
	    bpf_xdp_load_bytes(ctx, p->l3off, s->data,
			       tw_size(cap, TW_DPI_SNAP_MAX)) < 0) {
		bpf_ringbuf_discard(s, 0);
		__sync_fetch_and_add(&f->dpi_lost, 1);
		tw_probe_count(TW_PV_DPI_LOST, 0);
		return;
	}
	__builtin_memcpy(&s->key, k, sizeof(*k));
	s->ts_ns = now;
	s->hash = f->hash;
	s->caplen = cap;
	s->l3len = l3len;
	s->l4off = p->l4off ? p->l4off - p->l3off : 0;
	s->payoff = p->payoff ? p->payoff - p->l3off : 0;
	s->dir = dir;
	s->seq = seq;
	s->tcp_flags = p->tcp_flags;
	s->mark = mark;
	__u64 wake = 0;
	if (tw_probe_ring_wake)
		wake = bpf_ringbuf_query(&tw_probe_ring, BPF_RB_AVAIL_DATA) >=
				       tw_probe_ring_wake ?
			       BPF_RB_FORCE_WAKEUP :
			       BPF_RB_NO_WAKEUP;
	bpf_ringbuf_submit(s, wake);
	tw_probe_count(TW_PV_DPI_SENT, 0);
}

/* The single exit: counts the packet's class and outcome. Passive, every
 * packet is consumed; inline, it goes to the egress port unless its flow
 * is to be discarded (untracked packets are forwarded: the probe is not
 * the filter). */
static __always_inline int tw_probe_out(__u32 class, const struct tw_flow *f,
					__u32 bytes)
{
	tw_probe_count(class, bytes);
	if (!tw_probe_inline) {
		tw_probe_count(TW_PV_CONSUMED, bytes);
		return XDP_DROP;
	}
	if (f && f->action == TW_FA_DISCARD) {
		tw_probe_count(TW_PV_DISCARD, bytes);
		return XDP_DROP;
	}
	long r = bpf_redirect_map(&tw_probe_egress, 0, XDP_DROP);
	tw_probe_count(r == XDP_REDIRECT ? TW_PV_FORWARD : TW_PV_TX_ERROR,
		       bytes);
	return r == XDP_REDIRECT ? XDP_REDIRECT : XDP_DROP;
}

#endif
