/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* synproxy_helpers.h - the SYN-cookie stage's per-packet steps
 * (xdp_synproxy.c): read a SYN's options, turn the SYN into its cookie
 * SYN-ACK in place, check an ACK's cookie, and the single counted exit. */
#ifndef TW_SYNPROXY_HELPERS_H
#define TW_SYNPROXY_HELPERS_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/in.h>
#include <linux/tcp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "parse.h"
#include "synproxy.h"

#define TW_TCP_FIN 0x01
#define TW_TCP_SYN 0x02
#define TW_TCP_RST 0x04
#define TW_TCP_ACK 0x10

#define TW_TCPOPT_EOL 0
#define TW_TCPOPT_NOP 1
#define TW_TCPOPT_MSS 2
#define TW_TCPOPT_WINDOW 3
#define TW_TCPOPT_SACK_PERM 4
#define TW_TCPOPT_TIMESTAMP 8
#define TW_TCPOLEN_MSS 4
#define TW_TCPOLEN_WINDOW 3
#define TW_TCPOLEN_SACK_PERM 2
#define TW_TCPOLEN_TIMESTAMP 10
#define TW_TCP_MAX_WSCALE 14
#define TW_TCP_HDR_MAX 60
#define TW_IP_DF 0x4000
/* Header offsets that make packet pointers are masked with this: the
 * verifier only trusts a bounds check on a pointer whose variable offset
 * it knows to be small, and a compare would be lost when the compiler
 * reloads the offset. The parser's offsets lie inside the linear part of
 * the frame, at most a page, so the mask never changes them. */
#define TW_SP_OFF_MASK 0xfff

/* The low bits of the timestamp cookie, as SYNPROXY decodes them from the
 * ACK's TSecr (synproxy_check_timestamp_cookie): the client's window
 * scale (0xf: none) and whether it permitted SACK. ECN (bit 5) is never
 * offered, so the SYN-ACK does not accept it either. */
#define TW_TS_WSCALE_NONE 0xf
#define TW_TS_SACK (1 << 4)
#define TW_TS_LOWBITS 0x3f

static __always_inline int tw_sp_verdict(__u32 reason, __u32 len)
{
	struct tw_ctr *c = bpf_map_lookup_elem(&tw_sp_stats, &reason);
	if (c) {
		c->packets++;
		c->bytes += len;
	}
	switch (reason) {
	case TW_SP_SYN_ANSWERED:
		return XDP_TX;
	case TW_SP_ACK_VALID:
	case TW_SP_CT_PASS:
	case TW_SP_MALFORMED:
	case TW_SP_NO_TCP:
		return XDP_PASS;
	default:
		return XDP_DROP;
	}
}

/* The SYN's TCP header with its options, and what tw_sp_opt_step found in
 * them. Options are walked with bpf_loop: an open-coded loop over 40
 * bytes of variable-length options makes the verifier walk every path of
 * every iteration. */
struct tw_sp_syn {
	__u8 hdr[TW_TCP_HDR_MAX];
	__u32 end;    /* header length: options end there */
	__u32 off;    /* walk position, from 20 */
	__be32 tsval; /* the client's TSval, as it was on the wire */
	__u8 ts;
	__u8 sack;
	__u8 ws;
	__u8 wscale;
};

static long tw_sp_opt_step(__u32 i, void *arg)
{
	struct tw_sp_syn *s = arg;
	__u32 off = s->off;

	if (off >= s->end || off >= TW_TCP_HDR_MAX - 1)
		return 1;
	__u8 kind = s->hdr[off];
	if (kind == TW_TCPOPT_EOL)
		return 1;
	if (kind == TW_TCPOPT_NOP) {
		s->off = off + 1;
		return 0;
	}
	__u32 len = s->hdr[off + 1];
	if (len < 2 || off + len > s->end)
		return 1;
	if (kind == TW_TCPOPT_WINDOW && len == TW_TCPOLEN_WINDOW) {
		s->ws = 1;
		s->wscale = s->hdr[off + 2];
	} else if (kind == TW_TCPOPT_SACK_PERM && len == TW_TCPOLEN_SACK_PERM) {
		s->sack = 1;
	} else if (kind == TW_TCPOPT_TIMESTAMP && len == TW_TCPOLEN_TIMESTAMP) {
		if (off > TW_TCP_HDR_MAX - TW_TCPOLEN_TIMESTAMP)
			return 1;
		s->ts = 1;
		__builtin_memcpy(&s->tsval, &s->hdr[off + 2], 4);
	}
	s->off = off + len;
	return 0;
}

/* Linux's SYN options, the layout most SYNs carry (and floods copying
 * it): MSS, SACK_PERM, timestamps, NOP, window scale, 20 bytes. Read at
 * their fixed offsets, this layout costs no walk: each step of
 * tw_sp_opt_step is a call from bpf_loop, and a call returns through the
 * CPU's return thunk. Any other layout is walked. */
static __always_inline int tw_sp_opts_linux(struct tw_sp_syn *s)
{
	const __u8 *o = s->hdr + 20;
	if (s->end != 40 || o[0] != TW_TCPOPT_MSS || o[1] != TW_TCPOLEN_MSS ||
	    o[4] != TW_TCPOPT_SACK_PERM || o[5] != TW_TCPOLEN_SACK_PERM ||
	    o[6] != TW_TCPOPT_TIMESTAMP || o[7] != TW_TCPOLEN_TIMESTAMP ||
	    o[16] != TW_TCPOPT_NOP || o[17] != TW_TCPOPT_WINDOW ||
	    o[18] != TW_TCPOLEN_WINDOW)
		return 0;
	s->sack = 1;
	s->ts = 1;
	__builtin_memcpy(&s->tsval, &o[8], 4);
	s->ws = 1;
	s->wscale = o[19];
	return 1;
}

/* Milliseconds of the coarse monotonic clock, for the timestamp cookie,
 * whose low six bits carry the client's options (64 ms steps): a tick's
 * resolution is plenty. The clock is read once per tick per CPU, as the
 * filter's (table.h's tw_coarse_now): bpf_jiffies64 is inlined into a
 * load where any ktime helper is a call. */
static __always_inline __u32 tw_sp_now_ms(void)
{
	__u32 zero = 0;
	struct tw_clock *c = bpf_map_lookup_elem(&tw_sp_clock, &zero);
	__u64 j = bpf_jiffies64();
	if (!c)
		return bpf_ktime_get_coarse_ns() / 1000000;
	if (c->jiffies != j) {
		c->jiffies = j;
		c->now = bpf_ktime_get_coarse_ns();
	}
	return c->now / 1000000;
}

/* The SYN-ACK's TCP header, options at most MSS, SACK_PERM + timestamp,
 * NOP + window scale: the order Linux uses. */
struct tw_sp_tcp {
	struct tcphdr th;
	__be32 opt[5];
};

_Static_assert(sizeof(struct tw_sp_tcp) == 40, "SYN-ACK header size");

/* Internet checksum over n 16-bit words, unfolded. Words are loaded in
 * host order: the one's-complement sum is the same bytes either way. */
static __always_inline __u32 tw_csum_add(__u32 sum, const void *p, int n)
{
	const __u16 *w = p;
#pragma unroll
	for (int i = 0; i < n; i++)
		sum += w[i];
	return sum;
}

static __always_inline __u16 tw_csum_fold(__u32 sum)
{
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)~sum;
}

/* Fills t with the SYN-ACK for SYN s and returns its length.
 *
 * Without a timestamp the cookie can hold nothing but the MSS, so the
 * SYN-ACK offers only the MSS: announcing window scaling or SACK that
 * SYNPROXY cannot learn back from the ACK would leave client and server
 * disagreeing. With a timestamp, the client's window scale and SACK
 * permission ride in the low six bits of our TSval, exactly where
 * SYNPROXY looks for them when the ACK echoes it, and the SYN-ACK offers
 * what the client offered. The window is 0, as in SYNPROXY's own SYN-ACK:
 * the client sends nothing before the server connection exists, and
 * SYNPROXY opens the window once it does. */
static __always_inline __u32 tw_sp_build_synack(struct tw_sp_tcp *t,
						const struct tw_sp_syn *s,
						__u32 cookie)
{
	const struct tcphdr *sth = (const void *)s->hdr;
	__u32 hl = sizeof(struct tcphdr) + 4;

	t->th.source = sth->dest;
	t->th.dest = sth->source;
	t->th.seq = bpf_htonl(cookie);
	t->th.ack_seq = bpf_htonl(bpf_ntohl(sth->seq) + 1);
	t->th.syn = 1;
	t->th.ack = 1;
	t->opt[0] = bpf_htonl(TW_TCPOPT_MSS << 24 | TW_TCPOLEN_MSS << 16 |
			      (tw_sp_mss & 0xffff));
	if (s->ts) {
		__u32 low = TW_TS_WSCALE_NONE;
		if (s->ws)
			low = s->wscale > TW_TCP_MAX_WSCALE ?
				      TW_TCP_MAX_WSCALE :
				      s->wscale;
		if (s->sack)
			low |= TW_TS_SACK;
		__u32 now = tw_sp_now_ms();
		__u32 first = TW_TCPOPT_NOP << 24 | TW_TCPOPT_NOP << 16;
		if (s->sack)
			first = TW_TCPOPT_SACK_PERM << 24 | TW_TCPOLEN_SACK_PERM
								    << 16;
		t->opt[1] = bpf_htonl(first | TW_TCPOPT_TIMESTAMP << 8 |
				      TW_TCPOLEN_TIMESTAMP);
		t->opt[2] = bpf_htonl((now & ~TW_TS_LOWBITS) | low);
		t->opt[3] = s->tsval;
		hl += 12;
		if (s->ws) {
			t->opt[4] = bpf_htonl(
				TW_TCPOPT_NOP << 24 | TW_TCPOPT_WINDOW << 16 |
				TW_TCPOLEN_WINDOW << 8 | (tw_sp_wscale & 0xff));
			hl += 4;
		}
	}
	t->th.doff = hl / 4;
	return hl;
}

/* The SYN-ACK's IP and TCP headers, in the order they go on the wire:
 * written with one store. */
struct tw_sp_out4 {
	struct iphdr ip;
	struct tw_sp_tcp t;
};

struct tw_sp_out6 {
	struct ipv6hdr ip;
	struct tw_sp_tcp t;
};

_Static_assert(sizeof(struct tw_sp_out4) == 60, "IPv4 SYN-ACK size");
_Static_assert(sizeof(struct tw_sp_out6) == 80, "IPv6 SYN-ACK size");

/* Answers the SYN in p with a cookie SYN-ACK, rewriting the frame in
 * place: MACs swapped (VLAN tags stay), a fresh IP header without options
 * or extension headers from the SYN's destination to its source, the
 * SYN-ACK's TCP header, nothing after it. The SYN's checksum is not
 * checked: a corrupted SYN costs one reply like any spoofed one of the
 * flood, its ACK fails the cookie (or SYNPROXY's checksum check), and
 * frames from a local sender (veth) carry only a partial checksum.
 *
 * A flood is answered here packet by packet, so the helper calls are
 * counted: every call returns through the CPU's return thunk. The TCP
 * header is read with one copy (its length from the frame first), its
 * options walked only when they are not Linux's layout, the frame's tail
 * moved only when the SYN-ACK's length differs (a Linux SYN's does not),
 * and the headers written with one store. */
static __always_inline __u32 tw_sp_answer_syn(struct xdp_md *ctx,
					      const struct tw_pkt *p)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct tw_sp_syn s = {};
	struct tcphdr *sth = (void *)s.hdr;

	/* The parser read the TCP header's fixed part from the frame's
	 * linear part: the data offset is there too. */
	__u8 *doff = data + (p->l4off & TW_SP_OFF_MASK) + 12;
	if ((void *)(doff + 1) > data_end)
		return TW_SP_SYN_UNFIT;
	__u32 thl = (*doff >> 4) * 4;
	if (thl < sizeof(*sth) || p->l4off + thl > p->l3end)
		return TW_SP_SYN_UNFIT;
	if (bpf_xdp_load_bytes(ctx, p->l4off, s.hdr, thl))
		return TW_SP_SYN_UNFIT;

	/* The helpers read the addresses from the IP header and the ports,
	 * sequence number and MSS option from the TCP header; they take
	 * the copy, whose length the verifier knows. */
	__s64 cookie;
	__u32 l3off = p->l3off & TW_SP_OFF_MASK;
	if (p->family == 4) {
		struct iphdr *iph = data + l3off;
		if ((void *)(iph + 1) > data_end)
			return TW_SP_MALFORMED;
		cookie = bpf_tcp_raw_gen_syncookie_ipv4(iph, sth, thl);
	} else {
		struct ipv6hdr *ip6 = data + l3off;
		if ((void *)(ip6 + 1) > data_end)
			return TW_SP_MALFORMED;
		cookie = bpf_tcp_raw_gen_syncookie_ipv6(ip6, sth, thl);
	}
	if (cookie < 0)
		return TW_SP_SYN_UNFIT;

	s.end = thl;
	s.off = sizeof(*sth);
	if (thl > sizeof(*sth) && !tw_sp_opts_linux(&s))
		bpf_loop(TW_TCP_HDR_MAX - sizeof(*sth), tw_sp_opt_step, &s, 0);

	struct tw_sp_out4 o4 = {};
	struct tw_sp_out6 o6 = {};
	struct tw_sp_tcp *t = p->family == 4 ? &o4.t : &o6.t;
	__u32 hl = tw_sp_build_synack(t, &s, (__u32)cookie);
	__u32 sum = bpf_htons(IPPROTO_TCP) + bpf_htons(hl);
	sum = tw_csum_add(sum, t, sizeof(*t) / 2);

	long err;
	if (p->family == 4) {
		o4.ip.version = 4;
		o4.ip.ihl = sizeof(o4.ip) / 4;
		o4.ip.tot_len = bpf_htons(sizeof(o4.ip) + hl);
		o4.ip.frag_off = bpf_htons(TW_IP_DF);
		o4.ip.ttl = tw_sp_ttl;
		o4.ip.protocol = IPPROTO_TCP;
		o4.ip.saddr = p->dst4;
		o4.ip.daddr = p->src4;
		o4.ip.check =
			tw_csum_fold(tw_csum_add(0, &o4.ip, sizeof(o4.ip) / 2));
		sum = tw_csum_add(sum, &o4.ip.saddr, 4);
		o4.t.th.check = tw_csum_fold(sum);
		int delta = (int)(p->l3off + sizeof(o4.ip) + hl) -
			    (int)(data_end - data);
		if (delta && bpf_xdp_adjust_tail(ctx, delta))
			return TW_SP_SYN_UNFIT;
		err = bpf_xdp_store_bytes(ctx, p->l3off, &o4,
					  sizeof(o4.ip) + hl);
	} else {
		o6.ip.version = 6;
		o6.ip.payload_len = bpf_htons(hl);
		o6.ip.nexthdr = IPPROTO_TCP;
		o6.ip.hop_limit = tw_sp_ttl;
		__builtin_memcpy(&o6.ip.saddr, p->dst6, 16);
		__builtin_memcpy(&o6.ip.daddr, p->src6, 16);
		sum = tw_csum_add(sum, &o6.ip.saddr, 16);
		o6.t.th.check = tw_csum_fold(sum);
		int delta = (int)(p->l3off + sizeof(o6.ip) + hl) -
			    (int)(data_end - data);
		if (delta && bpf_xdp_adjust_tail(ctx, delta))
			return TW_SP_SYN_UNFIT;
		err = bpf_xdp_store_bytes(ctx, p->l3off, &o6,
					  sizeof(o6.ip) + hl);
	}
	if (err)
		return TW_SP_SYN_UNFIT;

	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > data_end)
		return TW_SP_SYN_UNFIT;
	__u8 mac[ETH_ALEN];
	__builtin_memcpy(mac, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, mac, ETH_ALEN);
	return TW_SP_SYN_ANSWERED;
}

/* An ACK of a flow conntrack does not know: valid only if it completes a
 * handshake whose SYN-ACK carried our cookie (ack_seq - 1), which is the
 * only way a connection starts behind SYNPROXY. */
static __always_inline __u32 tw_sp_check_ack(struct xdp_md *ctx,
					     const struct tw_pkt *p)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 l3off = p->l3off & TW_SP_OFF_MASK;
	__u32 l4off = p->l4off & TW_SP_OFF_MASK;
	long err;

	struct tcphdr *th = data + l4off;
	if ((void *)(th + 1) > data_end)
		return TW_SP_MALFORMED;
	if (p->family == 4) {
		struct iphdr *iph = data + l3off;
		if ((void *)(iph + 1) > data_end)
			return TW_SP_MALFORMED;
		err = bpf_tcp_raw_check_syncookie_ipv4(iph, th);
	} else {
		struct ipv6hdr *ip6 = data + l3off;
		if ((void *)(ip6 + 1) > data_end)
			return TW_SP_MALFORMED;
		err = bpf_tcp_raw_check_syncookie_ipv6(ip6, th);
	}
	return err ? TW_SP_ACK_INVALID : TW_SP_ACK_VALID;
}

#endif
