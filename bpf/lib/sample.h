/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* sample.h - the packet sampler behind the attack reports' pcap: 1 in N
 * of the packets the filter drops go, cut to TW_SAMPLE_SNAP bytes, into a
 * BPF ring buffer that the daemon drains each interval. N lives in a
 * one-entry array that user space writes (0: off, the default), so a
 * filter that is not sampling pays one lookup and one branch per drop and
 * nothing per pass. The maps are not pinned: sampling belongs to the
 * daemon that loaded the program and turns it on during an attack. */
#ifndef TW_SAMPLE_H
#define TW_SAMPLE_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "verifier.h"
#include "stats.h"

#define TW_SAMPLE_SNAP 256

/* One sample. The layout is read by hand in internal/datapath/sample.go
 * (parseSample): keep the two in step. */
struct tw_sample_rec {
	__u64 ts_ns;  /* bpf_ktime_get_ns: CLOCK_MONOTONIC */
	__u32 len;    /* the packet's length on the wire */
	__u32 cap;    /* bytes of it in data */
	__u32 reason; /* the verdict reason that dropped it */
	__u32 pad;
	__u8 data[TW_SAMPLE_SNAP];
};
_Static_assert(sizeof(struct tw_sample_rec) == 24 + TW_SAMPLE_SNAP,
	       "tw_sample_rec layout is read by hand in sample.go");

/* [0]: sample 1 in this many drops; 0 turns the sampler off. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, 1);
} tw_sample SEC(".maps");

/* 256 KiB: about 900 samples between two drains, more than an attack
 * report keeps. A full ring loses samples, never packets. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} tw_sample_rb SEC(".maps");

/* A global function, verified once, rather than inlined at every exit
 * that drops. */
__noinline int tw_sample_drop(struct xdp_md *ctx, __u32 reason)
{
	__u32 zero = 0;
	__u32 *every = bpf_map_lookup_elem(&tw_sample, &zero);
	if (!ctx || !every || !*every)
		return 0;
	if (*every > 1 && bpf_get_prandom_u32() % *every)
		return 0;
	__u32 len = ctx->data_end - ctx->data;
	__u32 cap = len;
	if (cap > TW_SAMPLE_SNAP)
		cap = TW_SAMPLE_SNAP;
	if (cap < 1)
		return 0;
	cap = tw_size(cap, TW_SAMPLE_SNAP);
	struct tw_sample_rec *r =
		bpf_ringbuf_reserve(&tw_sample_rb, sizeof(*r), 0);
	if (!r)
		return 0;
	r->ts_ns = bpf_ktime_get_ns();
	r->len = len;
	r->cap = cap;
	r->reason = reason;
	r->pad = 0;
	if (bpf_xdp_load_bytes(ctx, 0, r->data, cap)) {
		bpf_ringbuf_discard(r, 0);
		return 0;
	}
	bpf_ringbuf_submit(r, 0);
	return 0;
}

/* tw_verdict for the filter's exits: a drop may be sampled. The sampler
 * is off but during attacks, so the test is made here, inline: a call to
 * tw_sample_drop and its return cost more than the rest of a drop's
 * bookkeeping here (a return goes through the SRSO "safe RET" thunk on
 * these AMD hosts). */
static __always_inline int tw_exit(struct xdp_md *ctx, __u32 reason, __u32 len)
{
	int act = tw_verdict(reason, len);
	if (act == XDP_DROP) {
		__u32 zero = 0;
		__u32 *every = bpf_map_lookup_elem(&tw_sample, &zero);
		if (every && *every)
			tw_sample_drop(ctx, reason);
	}
	return act;
}

#endif
