/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* fmatch.h - a flow rule's match and token bucket, with no map of their
 * own: the filter's flow rules (frule.h) and the emulated NIC's policers
 * (nic.h) test packets against the same struct tw_frule the same way, so
 * a rule the daemon moves to the NIC matches there exactly what it
 * matched in XDP. */
#ifndef TW_FMATCH_H
#define TW_FMATCH_H

#include <linux/bpf.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "types.h"
#include "parse.h"

#define TW_NSEC 1000000000ULL
/* A rate-limit rule's burst: 10 ms of its per-CPU rate, at least one
 * packet. Long enough that a CPU taking a NAPI batch (64 frames arrive
 * together, tens of microseconds apart from the next batch) is not cut
 * below its share by timing alone; short enough that the overshoot over
 * any second is at most 1% of the rate. The one-packet floor keeps rates
 * below 100 packets per second per CPU from admitting nothing. */
#define TW_FRULE_BURST_NS 10000000ULL
/* Rates above this are no limit a host could see; capping keeps the
 * bucket arithmetic within 64 bits (burst = rate * 10^7). */
#define TW_FRULE_RATE_CAP (1ULL << 40)

/* Which tw_pkt.frag values (0 to 3) each tw_frule_frag accepts, a nibble
 * per rule value: ANY 0b1111, NONE 0b0001, FRAG (first or later) 0b1110,
 * LATER 0b1100. */
#define TW_FRAG_ACCEPT 0xCE1F

/* What the rules look at, taken from the packet once: everything
 * tw_frule_decide needs, so that it can be verified apart (see there). */
struct tw_fview {
	__u32 dst[4] __attribute__((aligned(8))); /* IPv4 as ::ffff:a.b.c.d */
	__u32 src[4]; /* after tw_unmap: IPv4 in src[0] when src4 */
	__u32 l3len;
	__u16 sport; /* host order; 0 without ports */
	__u16 dport;
	__u8 proto;
	__u8 tcp_flags;
	__u8 frag;  /* enum tw_pkt_frag bits */
	__u8 ports; /* TCP or UDP with its header here */
	__u8 sent6; /* arrived as IPv6 */
	__u8 src4;  /* the source is IPv4 (or IPv4-mapped) */
	__u8 _pad[2];
	__u32 good_pps;  /* tw_config.good_pps */
	__u32 good_seed; /* the known-good sieve's hash seed (goodsieve.h) */
};

/* The destination is taken from the header as sent, not from tw_unmap
 * (which only unmaps the destination of a mapped source, and to 0.0.0.0
 * when it is native IPv6): an IPv6 packet to ::ffff:a.b.c.d is a packet to
 * a.b.c.d for a dual-stack socket, so IPv4 rules must catch it whatever its
 * source, or switching encodings would dodge them. */
static __always_inline void tw_fview_init(struct tw_fview *v,
					  const struct tw_pkt *p)
{
	if (p->family == 4 && !p->mapped) {
		v->dst[2] = bpf_htonl(0xffff);
		v->dst[3] = p->dst4;
	} else {
		__builtin_memcpy(v->dst, p->dst6, 16);
		v->sent6 = 1;
	}
	if (p->family == 4) {
		v->src4 = 1;
		v->src[0] = p->src4;
	} else {
		__builtin_memcpy(v->src, p->src6, 16);
	}
	v->l3len = p->l3len;
	v->proto = p->proto;
	v->frag = p->frag;
	v->ports = (p->proto == IPPROTO_TCP || p->proto == IPPROTO_UDP) &&
		   !p->nonfirst;
	v->sport = bpf_ntohs(p->sport);
	v->dport = bpf_ntohs(p->dport);
	v->tcp_flags = p->tcp_flags;
}

/* The same test as rule.FlowRule.Match. Ports and TCP flags never match a
 * packet without them (a later fragment, another protocol), whatever the
 * range: a rule for port 53 must not catch the fragments of other
 * traffic, and one for "frag later" is how those are matched. */
static __always_inline int tw_frule_match(const struct tw_frule *r,
					  const struct tw_fview *v)
{
	/* Two 64-bit words, the last first: it holds an IPv4 address and
	 * an IPv6 /64's interface bits, where rules differ most. */
	const __u64 *d = (const __u64 *)r->dst;
	const __u64 *m = (const __u64 *)r->mask;
	const __u64 *a = (const __u64 *)v->dst;
	if ((a[1] & m[1]) != d[1] || (a[0] & m[0]) != d[0])
		return 0;
	if (r->family == 6 && !v->sent6)
		return 0;
	if (r->proto && r->proto != v->proto)
		return 0;
	if (!((TW_FRAG_ACCEPT >> ((r->frag & 3) * 4 + (v->frag & 3))) & 1))
		return 0;
	__u8 f = r->flags;
	if ((f & TW_FRULE_F_LEN) &&
	    (v->l3len < r->len_lo || v->l3len > r->len_hi))
		return 0;
	if (f & (TW_FRULE_F_DPORT | TW_FRULE_F_SPORT) || r->tcp_mask) {
		if (!v->ports)
			return 0;
		if ((f & TW_FRULE_F_DPORT) &&
		    (v->dport < r->dport_lo || v->dport > r->dport_hi))
			return 0;
		if ((f & TW_FRULE_F_SPORT) &&
		    (v->sport < r->sport_lo || v->sport > r->sport_hi))
			return 0;
		if (r->tcp_mask &&
		    (v->proto != IPPROTO_TCP ||
		     (v->tcp_flags & r->tcp_mask) != r->tcp_value))
			return 0;
	}
	return 1;
}

/* One step of a token bucket: credit earns rate units a nanosecond up to
 * burst, and a packet costs unit. A long idle gap saturates rather than
 * overflows (dt * rate), and a zeroed bucket (last_ns 0) starts full.
 * Returns whether the packet is admitted. */
static __always_inline int tw_bucket_take(__u64 *credit, __u64 *last_ns,
					  __u64 rate, __u64 burst, __u64 unit)
{
	__u64 now = bpf_ktime_get_ns();
	__u64 c = *credit;
	if (c > burst)
		c = burst;
	if (now > *last_ns) {
		__u64 dt = now - *last_ns;
		if (dt > (burst - c) / rate)
			c = burst;
		else
			c += dt * rate;
	}
	*last_ns = now;
	if (c < unit) {
		*credit = c;
		return 0;
	}
	*credit = c - unit;
	return 1;
}

/* Per-CPU token bucket: each CPU admits rate/nr_cpus packets per second,
 * so the CPUs together admit at most the rate with no shared cache line
 * and no atomics. The price: a flood that reaches fewer CPUs than the
 * machine has (RSS hashes a few flows to a few queues) gets only those
 * CPUs' shares. Credit is counted in 1/(nr_cpus * 10^9) of a packet, so a
 * CPU earns exactly rate units per nanosecond and no division is needed
 * per packet but the one that bounds a long idle gap. A new rule's bucket
 * is zeroed by user space and so starts full. */
static __always_inline int tw_rate_take(struct tw_fbucket *b, __u64 rate,
					__u32 ncpu)
{
	if (!rate)
		return 0;
	if (rate > TW_FRULE_RATE_CAP)
		rate = TW_FRULE_RATE_CAP;
	__u64 unit = (__u64)(ncpu ? ncpu : 1) * TW_NSEC; /* one packet */
	__u64 burst = rate * TW_FRULE_BURST_NS;
	if (burst < unit)
		burst = unit;
	return tw_bucket_take(&b->credit, &b->last_ns, rate, burst, unit);
}

#endif
