/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* frule.h - flow rules: the rules for floods whose sources cannot be
 * listed. They match what a packet is sent to and what it looks like
 * (BGP FlowSpec's fields: destination prefix, protocol, port ranges, TCP
 * flags, length, fragments), in order, and the first match decides: drop,
 * rate-limit, or hand TCP to the SYN proxy; a rule may let known-good
 * sources pass. The filter asks them after the source lists, so an
 * allowlisted source is never rate-limited and a blocked one is dropped
 * and counted as such. Rules live in the bank tw_frules points at
 * (maps.h: the set is swapped whole). */
#ifndef TW_FRULE_H
#define TW_FRULE_H

#include <linux/bpf.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "consts.h"
#include "types.h"
#include "maps.h"
#include "parse.h"
#include "fmatch.h"
#include "goodsieve.h"

/* A known-good member's burst outside the host's connections: 100 ms of
 * its rate, at least one packet. */
#define TW_GOOD_BURST_NS 100000000ULL
#define TW_GOOD_RATE_CAP (1ULL << 32)

/* The packet's 4-tuple as a socket lookup takes it (the source as the
 * socket's peer); returns its size. */
static __always_inline __u32 tw_sock_tuple(const struct tw_fview *v,
					   struct bpf_sock_tuple *t)
{
	if (!v->sent6) {
		t->ipv4.saddr = v->src[0];
		t->ipv4.daddr = v->dst[3];
		t->ipv4.sport = bpf_htons(v->sport);
		t->ipv4.dport = bpf_htons(v->dport);
		return sizeof(t->ipv4);
	}
	if (v->src4) {
		/* tw_unmap made a mapped source IPv4: the socket saw it as
		 * sent. */
		t->ipv6.saddr[2] = bpf_htonl(0xffff);
		t->ipv6.saddr[3] = v->src[0];
	} else {
		__builtin_memcpy(t->ipv6.saddr, v->src, 16);
	}
	__builtin_memcpy(t->ipv6.daddr, v->dst, 16);
	t->ipv6.sport = bpf_htons(v->sport);
	t->ipv6.dport = bpf_htons(v->dport);
	return sizeof(t->ipv6);
}

/* Whether the packet belongs to a TCP connection of this host: a socket
 * for its exact 4-tuple, established or on its way (a request or
 * time-wait socket). The lookup falls back to a listener when there is
 * none, and a listener is no proof: a spoofed packet reaches it too. An
 * off-path attacker who spoofs a member's address does not know the
 * member's ephemeral port, so this is what the address alone cannot be. */
static __always_inline int tw_connected(struct xdp_md *ctx,
					const struct tw_fview *v)
{
	if (v->proto != IPPROTO_TCP || !v->ports)
		return 0;
	struct bpf_sock_tuple t = {};
	__u32 size = tw_sock_tuple(v, &t);
	struct bpf_sock *sk =
		bpf_skc_lookup_tcp(ctx, &t, size, BPF_F_CURRENT_NETNS, 0);
	if (!sk)
		return 0;
	int ok = sk->state != BPF_TCP_LISTEN;
	bpf_sk_release(sk);
	return ok;
}

/* Whether a UDP packet answers one of this host's own queries: a socket
 * connected to its source, bound to its destination (a resolver's, an NTP
 * client's). The lookup falls back to an unconnected socket, a server's,
 * which any source reaches, so only a socket with a peer port counts. A
 * reflection flood's drop rule (source port 53 or 123) cut the host's own
 * DNS and NTP answers: their servers never complete a TCP handshake, so
 * they are no known-good members. A spoofer must hit the exact 4-tuple:
 * the server and the socket's ephemeral port. */
static __always_inline int tw_udp_answer(struct xdp_md *ctx,
					 const struct tw_fview *v)
{
	if (v->proto != IPPROTO_UDP || !v->ports)
		return 0;
	struct bpf_sock_tuple t = {};
	__u32 size = tw_sock_tuple(v, &t);
	struct bpf_sock *sk =
		bpf_sk_lookup_udp(ctx, &t, size, BPF_F_CURRENT_NETNS, 0);
	if (!sk)
		return 0;
	int ok = sk->dst_port != 0;
	bpf_sk_release(sk);
	return ok;
}

/* The member's shared token bucket: rate is for all CPUs together. The
 * bucket is one per member, written without atomics by whichever CPU
 * sees the packet: two CPUs can both take the last packet's credit, so
 * the overshoot is at most a packet per CPU per refill, and a member's
 * traffic spread over every CPU is still held near its rate. Credit is in
 * 1/10^9 of a packet: a nanosecond earns rate units. */
static __always_inline int tw_good_admit(struct tw_good *g, __u64 rate)
{
	if (!rate)
		return 0;
	if (rate > TW_GOOD_RATE_CAP)
		rate = TW_GOOD_RATE_CAP;
	__u64 burst = rate * TW_GOOD_BURST_NS;
	if (burst < TW_NSEC)
		burst = TW_NSEC;
	/* A new member's bucket is zero: the gap since time 0 fills it. */
	return tw_bucket_take(&g->credit, &g->last_ns, rate, burst, TW_NSEC);
}

/* Whether a bypass rule lets the packet pass as known-good: an answer to
 * one of the host's connected UDP sockets, whoever sent it; or its source
 * is on the list, and the packet is of one of the host's connections, or
 * within the member's rate (v->good_pps) when it is not (a new
 * connection's SYN, UDP, a forwarded destination). A flood spoofed from a
 * member's address is then its rule's to drop beyond that rate, and the
 * member's own connections keep passing. */
static __always_inline int tw_known_good(struct xdp_md *ctx,
					 const struct tw_fview *v)
{
	if (tw_udp_answer(ctx, v))
		return 1;
	if (!tw_good_maybe(v->src, v->src4, v->good_seed))
		return 0;
	/* Keys copied to the stack: v is a global function's argument,
	 * which 6.1's verifier does not take as a map key. */
	struct tw_good *g;
	if (v->src4) {
		__u32 k4 = v->src[0];
		g = bpf_map_lookup_elem(&tw_good4, &k4);
	} else {
		__u32 k6[4];
		__builtin_memcpy(k6, v->src, 16);
		g = bpf_map_lookup_elem(&tw_good6, k6);
	}
	if (!g)
		return 0;
	if (tw_connected(ctx, v))
		return 1;
	return tw_good_admit(g, v->good_pps);
}

/* The rule's per-CPU token bucket (tw_rate_take) for CPU-and-rule slot k. */
static __always_inline int tw_frule_admit(const struct tw_frule *r, __u32 k)
{
	struct tw_fbucket *b = bpf_map_lookup_elem(&tw_frule_tb, &k);
	if (!b)
		return 0;
	return tw_rate_take(b, r->rate_pps, tw_nr_cpus);
}

/* What the rule a packet matched does with it: counts it, lets a
 * known-good source pass when the rule bypasses them, then drops,
 * rate-limits or hands it on as TW_R_SYNPROXY_MISSING (see
 * tw_frule_decide). r is a copy of the rule on the caller's stack.
 *
 * A global function of its own: called from inside the rule scan, this
 * code was verified again for each of the 64 places the scan can stop
 * (the verifier knows which rule matched, and every one is a different
 * state), 117K of the filter's processed instructions. */
__noinline int tw_frule_act(struct xdp_md *ctx, const struct tw_fview *v,
			    const struct tw_frule *r, __u32 cpu, __u32 len)
{
	if (!ctx || !v || !r)
		return TW_R_PASS;
	__u32 id = r->id;
	__u32 k = cpu * TW_FRULE_IDS + id;
	struct tw_fctr *c = NULL;
	if (cpu < tw_nr_cpus && id < TW_FRULE_IDS)
		c = bpf_map_lookup_elem(&tw_frule_ctr, &k);
	if (c) {
		c->packets++;
		c->bytes += len;
	}
	if ((r->flags & TW_FRULE_F_BYPASS) && tw_known_good(ctx, v)) {
		if (c)
			c->good++;
		return TW_R_PASS_KNOWN_GOOD;
	}
	switch (r->action) {
	case TW_FA_DROP:
		break;
	case TW_FA_RATE:
		if (tw_frule_admit(r, k))
			return TW_R_PASS;
		break;
	case TW_FA_SYNCOOKIE:
		return TW_R_SYNPROXY_MISSING;
	default:
		return TW_R_PASS;
	}
	if (c)
		c->dropped++;
	return r->action == TW_FA_RATE ? TW_R_DROP_FLOW_RATE : TW_R_DROP_FLOW;
}

/* Runs the rules on a packet whose source passed the lists and returns
 * the verdict reason: TW_R_PASS when no rule matched or a rate-limit rule
 * admitted the packet, TW_R_PASS_KNOWN_GOOD, a drop, or, for a syn-cookie
 * rule, TW_R_SYNPROXY_MISSING: the caller hands the packet to the SYN
 * proxy, and that is its verdict only when no proxy is loaded.
 *
 * A global function, so the verifier checks it once, on its own: inlined,
 * the 64-rule scan was verified again for every parser path that reaches
 * it with a different state (VLAN depth, extension headers, fragment
 * state), past the verifier's million-instruction limit. */
__noinline int tw_frule_decide(struct xdp_md *ctx, const struct tw_fview *v,
			       __u32 cpu, __u32 len)
{
	__u32 zero = 0;
	if (!ctx || !v)
		return TW_R_PASS;
	void *bank = bpf_map_lookup_elem(&tw_frules, &zero);
	if (!bank)
		return TW_R_PASS;
	const struct tw_frule_set *set = bpf_map_lookup_elem(bank, &zero);
	if (!set)
		return TW_R_PASS;

	struct tw_frule hit;
	for (__u32 i = 0; i < TW_FRULE_MAX; i++) {
		const struct tw_frule *c = &set->rule[i];
		if (c->action == TW_FA_END)
			break;
		if (tw_frule_match(c, v)) {
			__builtin_memcpy(&hit, c, sizeof(hit));
			return tw_frule_act(ctx, v, &hit, cpu, len);
		}
	}
	return TW_R_PASS;
}

/* The flow rules' verdict for a packet. A syn-cookie rule does not return
 * when the SYN proxy is loaded: the tail call replaces this program, and
 * the proxy decides and counts the packet. */
static __always_inline int tw_flow_rules(struct xdp_md *ctx,
					 const struct tw_pkt *p, __u32 len,
					 __u32 cpu, const struct tw_config *cfg)
{
	struct tw_fview v = {};
	tw_fview_init(&v, p);
	v.good_pps = cfg->good_pps;
	v.good_seed = cfg->seed ^ TW_GOOD_SIEVE_SALT;
	int r = tw_frule_decide(ctx, &v, cpu, len);
	if (r == TW_R_SYNPROXY_MISSING)
		/* No proxy loaded, the call falls through: fail open to
		 * the kernel's own SYN cookies rather than drop every
		 * connection. */
		bpf_tail_call(ctx, &tw_jmp, TW_JMP_SYNPROXY);
	return r;
}

#endif
