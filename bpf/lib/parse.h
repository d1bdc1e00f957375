/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* parse.h - bounds-checked parsing from Ethernet to L4 for the filter.
 * One function walks the headers and returns either TW_R_PASS (a
 * well-formed IP packet, fields filled in) or the reason it stopped: non-IP
 * or one of the malformed kinds of the policy table in ARCHITECTURE.md.
 * Every read is checked against data_end for the verifier and against the
 * IP length fields for correctness, so a lying length never reads past the
 * datagram. */
#ifndef TW_PARSE_H
#define TW_PARSE_H

#include <linux/types.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/in.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include "consts.h"
#include "verifier.h"

#define TW_ETH_P_8021Q 0x8100
#define TW_ETH_P_8021AD 0x88A8
/* Pre-standard QinQ outer tags, still configured on switches and
 * carrier gear: a tag the parser does not know would hide the packet
 * inside it as non-IP and let a blocked source through. */
#define TW_ETH_P_QINQ1 0x9100
#define TW_ETH_P_QINQ2 0x9200
/* Non-IP ethertypes counted by class: they pass unchecked, and the
 * counters show how much does (MPLS and PPPoE sessions carry IP the filter
 * does not look into). */
#define TW_ETH_P_ARP 0x0806
#define TW_ETH_P_MPLS_UC 0x8847
#define TW_ETH_P_MPLS_MC 0x8848
#define TW_ETH_P_PPPOE_DISC 0x8863
#define TW_ETH_P_PPPOE_SES 0x8864
#define TW_IP_OFFMASK 0x1fff
#define TW_IP_MF 0x2000

struct tw_pkt {
	__u8 family;   /* 4 or 6 */
	__u8 proto;    /* upper-layer protocol after extension headers */
	__u8 syn;      /* TCP SYN without ACK */
	__u8 nonfirst; /* non-first fragment: no L4 header here */
	__u8 mapped;   /* IPv6 with an IPv4-mapped source, see tw_unmap */
	/* The flags and fragment state sit in the first eight bytes, with
	 * syn and nonfirst, which the filter reads anyway: in a stack slot
	 * of their own they would be one more the verifier compares between
	 * parser paths, and the filter is near its instruction limit. */
	__u8 tcp_flags; /* the whole flags byte (FIN 0x01 ... CWR 0x80) */
	/* enum tw_pkt_frag bits: 0 unfragmented, TW_PF_FIRST (offset 0,
	 * more fragments), TW_PF_LATER set for a later fragment (IPv4
	 * MF/offset, or IPv6 fragment headers). An IPv6 fragment header with
	 * offset 0 and M clear (an atomic fragment, RFC 6946) is not a
	 * fragment: receivers process it as a whole packet. */
	__u8 frag;
	__u32 src4;
	__u32 dst4;
	__u32 src6[4];
	__u32 dst6[4];
	__be16 sport; /* TCP/UDP ports of a first fragment, else 0 */
	__be16 dport;
	/* Bytes from the IP header on: the datagram's declared length once
	 * the IP header is validated (Ethernet padding is not IP, and flow
	 * records count datagrams, IPFIX octetDeltaCount), else the rest of
	 * the frame. */
	__u32 l3len;
	/* For the flow probe: offsets from the frame start of the IP header,
	 * the L4 header, the L4 payload and the end of the datagram as its
	 * length fields declare it (Ethernet padding excluded). l4off and
	 * payoff are 0 when there is no L4 header (non-first fragment). */
	__u16 l3off;
	__u16 l4off;
	__u16 payoff;
	__u16 l3end;
};

struct tw_vlan_hdr {
	__be16 tci;
	__be16 proto;
};

/* Reads the TCP flags or checks the UDP header of an unfragmented or first
 * fragment. lim is the end of the datagram as the IP header declares it.
 * A first fragment too short for the whole TCP header is the RFC 1858
 * tiny-fragment trick: treated like any other truncated L4 header. */
static __always_inline int tw_parse_l4(void *l4, void *lim, void *data_end,
				       struct tw_pkt *p)
{
	if (p->nonfirst)
		return TW_R_PASS;
	if (p->proto == IPPROTO_TCP) {
		struct tcphdr *th = l4;
		if ((void *)(th + 1) > data_end || (void *)(th + 1) > lim)
			return TW_R_L4_TRUNC;
		p->syn = th->syn && !th->ack;
		p->tcp_flags = ((__u8 *)th)[13];
		p->sport = th->source;
		p->dport = th->dest;
		/* A data offset below 5 words is malformed; the payload is
		 * then taken to start after the fixed header. */
		__u16 doff = th->doff * 4;
		p->payoff =
			p->l4off + (doff < sizeof(*th) ? sizeof(*th) : doff);
	} else if (p->proto == IPPROTO_UDP) {
		struct udphdr *uh = l4;
		if ((void *)(uh + 1) > data_end || (void *)(uh + 1) > lim)
			return TW_R_L4_TRUNC;
		p->sport = uh->source;
		p->dport = uh->dest;
		p->payoff = p->l4off + sizeof(*uh);
	}
	return TW_R_PASS;
}

/* enum tw_pkt_frag as bits, TW_PF_LATER for any offset, TW_PF_FIRST for
 * the more-fragments flag (so a later fragment may carry both), computed
 * without a branch: the verifier would otherwise follow every parser path
 * once more per fragment state, and the filter is near its limit. */
static __always_inline __u8 tw_frag_bits(__u16 off, __u16 more)
{
	__u32 later = ((__u32)off + 0xffff) >> 16; /* off != 0 */
	__u32 first = ((__u32)more + 0xffff) >> 16;
	return later << 1 | first;
}

static __always_inline int tw_parse_ipv4(void *l3, void *data_end,
					 struct tw_pkt *p)
{
	struct iphdr *iph = l3;
	if ((void *)(iph + 1) > data_end)
		return TW_R_IP4_TRUNC;
	if (iph->version != 4)
		return TW_R_IP4_VERSION;
	__u32 hlen = iph->ihl * 4;
	if (hlen < sizeof(*iph) || l3 + hlen > data_end)
		return TW_R_IP4_IHL;
	__u32 tot = tw_bound(bpf_ntohs(iph->tot_len), 0xffff);
	/* Frames may carry Ethernet padding after the datagram, never less. */
	if (tot < hlen || l3 + tot > data_end)
		return TW_R_IP4_LEN;

	p->family = 4;
	p->proto = iph->protocol;
	p->src4 = iph->saddr;
	p->dst4 = iph->daddr;
	__u16 fo = bpf_ntohs(iph->frag_off);
	p->nonfirst = (fo & TW_IP_OFFMASK) != 0;
	p->frag = tw_frag_bits(fo & TW_IP_OFFMASK, fo & TW_IP_MF);
	p->l3end = p->l3off + tot;
	p->l3len = tot;
	if (!p->nonfirst)
		p->l4off = p->l3off + hlen;
	return tw_parse_l4(l3 + hlen, l3 + tot, data_end, p);
}

static __always_inline int tw_is_ext(__u8 nh)
{
	return nh == IPPROTO_HOPOPTS || nh == IPPROTO_ROUTING ||
	       nh == IPPROTO_FRAGMENT || nh == IPPROTO_DSTOPTS ||
	       nh == IPPROTO_AH;
}

static __always_inline int tw_parse_ipv6(void *l3, void *data_end,
					 struct tw_pkt *p)
{
	struct ipv6hdr *ip6 = l3;
	if ((void *)(ip6 + 1) > data_end)
		return TW_R_IP6_TRUNC;
	if (ip6->version != 6)
		return TW_R_IP6_VERSION;
	void *cur = (void *)(ip6 + 1);
	void *lim = cur + tw_bound(bpf_ntohs(ip6->payload_len), 0xffff);
	if (lim > data_end)
		return TW_R_IP6_LEN;

	p->family = 6;
	__builtin_memcpy(p->src6, &ip6->saddr, 16);
	__builtin_memcpy(p->dst6, &ip6->daddr, 16);

	__u8 nh = ip6->nexthdr;
	for (int i = 0; i < TW_MAX_EXT; i++) {
		if (!tw_is_ext(nh))
			break;
		__u8 *h = cur;
		if ((void *)(h + 8) > data_end || (void *)(h + 8) > lim)
			return TW_R_IP6_EXT_TRUNC;
		__u32 len;
		if (nh == IPPROTO_FRAGMENT) {
			__u16 fo = (__u16)h[2] << 8 | h[3];
			__u16 off = fo & 0xfff8;
			if (off)
				p->nonfirst = 1;
			/* Several fragment headers are malformed but
			 * possible: the bits of all of them count, so no
			 * header hides a later fragment. */
			p->frag |= tw_frag_bits(off, fo & 1);
			len = 8;
		} else if (nh == IPPROTO_AH) {
			len = ((__u32)h[1] + 2) * 4;
		} else {
			len = ((__u32)h[1] + 1) * 8;
		}
		if (cur + len > lim)
			return TW_R_IP6_EXT_TRUNC;
		nh = h[0];
		cur += len;
	}
	if (tw_is_ext(nh))
		return TW_R_IP6_EXT_LIMIT;
	p->proto = nh;
	if (cur > data_end)
		return TW_R_IP6_EXT_TRUNC;
	p->l3end = p->l3off + (lim - l3);
	p->l3len = lim - l3;
	if (!p->nonfirst)
		p->l4off = p->l3off + (cur - l3);
	return tw_parse_l4(cur, lim, data_end, p);
}

static __always_inline int tw_is_mapped(const __u32 *a)
{
	return a[0] == 0 && a[1] == 0 && a[2] == bpf_htonl(0xffff);
}

/* An IPv6 packet from ::ffff:a.b.c.d is a packet from a.b.c.d: a
 * dual-stack socket hands it to the application as that IPv4 peer, and
 * rules only ever name the IPv4 form (they refuse mapped prefixes). So it
 * becomes family 4 for the rule lookups and the feature key, with the
 * destination unmapped too, or 0.0.0.0 when it has no IPv4 form; the IPv6
 * addresses stay in src6/dst6. Other encodings of IPv4 in IPv6
 * (::a.b.c.d, 64:ff9b::/96, 2002::/16) are routable IPv6 sources and stay
 * IPv6. Called by the filter only: the NIC stage matches what hardware
 * would, the header as it is. */
static __always_inline void tw_unmap(struct tw_pkt *p)
{
	if (p->family != 6 || !tw_is_mapped(p->src6))
		return;
	p->family = 4;
	p->mapped = 1;
	p->src4 = p->src6[3];
	p->dst4 = tw_is_mapped(p->dst6) ? p->dst6[3] : 0;
}

static __always_inline int tw_is_vlan(__be16 proto)
{
	return proto == bpf_htons(TW_ETH_P_8021Q) ||
	       proto == bpf_htons(TW_ETH_P_8021AD) ||
	       proto == bpf_htons(TW_ETH_P_QINQ1) ||
	       proto == bpf_htons(TW_ETH_P_QINQ2);
}

static __always_inline int tw_non_ip(__be16 proto)
{
	if (proto == bpf_htons(TW_ETH_P_ARP))
		return TW_R_NON_IP_ARP;
	if (proto == bpf_htons(TW_ETH_P_MPLS_UC) ||
	    proto == bpf_htons(TW_ETH_P_MPLS_MC))
		return TW_R_NON_IP_MPLS;
	if (proto == bpf_htons(TW_ETH_P_PPPOE_DISC) ||
	    proto == bpf_htons(TW_ETH_P_PPPOE_SES))
		return TW_R_NON_IP_PPPOE;
	return TW_R_NON_IP;
}

/* A plain IPv4 frame: untagged, a 20-byte header, and lengths and a
 * TCP or UDP header that tw_parse accepts. For exactly these tw_parse
 * returns TW_R_PASS with family 4 and this source, so the filter can ask
 * the source lists before the parser runs, and drop a listed source
 * without it (xdp_filter.c). The TCP and UDP checks are tw_parse_l4's,
 * done on the declared length, which is within the frame. Returns 1 and
 * the source in *src when plain. */
static __always_inline int tw_plain4(void *data, void *data_end, __u32 *src)
{
	struct ethhdr *eth = data;
	struct iphdr *iph = (void *)(eth + 1);
	if ((void *)(iph + 1) > data_end)
		return 0;
	if (eth->h_proto != bpf_htons(ETH_P_IP) || *(__u8 *)iph != 0x45)
		return 0;
	__u32 tot = tw_bound(bpf_ntohs(iph->tot_len), 0xffff);
	if (tot < sizeof(*iph) || (void *)iph + tot > data_end)
		return 0;
	if (!(iph->frag_off & bpf_htons(TW_IP_OFFMASK))) {
		if (iph->protocol == IPPROTO_TCP &&
		    tot < sizeof(*iph) + sizeof(struct tcphdr))
			return 0;
		if (iph->protocol == IPPROTO_UDP &&
		    tot < sizeof(*iph) + sizeof(struct udphdr))
			return 0;
	}
	*src = iph->saddr;
	return 1;
}

/* The link layer: the Ethernet header and up to TW_MAX_VLAN tags. Returns
 * TW_R_PASS with the ethertype in *proto, the IP header in *l3 and
 * p->l3off/l3len set when an IP header follows, else the reason (a
 * truncated or too deep tag stack, or the non-IP class). */
static __always_inline int tw_parse_eth(void *data, void *data_end,
					struct tw_pkt *p, __be16 *proto,
					void **l3)
{
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > data_end)
		return TW_R_ETH_TRUNC;
	void *cur = (void *)(eth + 1);
	__be16 et = eth->h_proto;

	for (int i = 0; i < TW_MAX_VLAN; i++) {
		if (!tw_is_vlan(et))
			break;
		struct tw_vlan_hdr *vh = cur;
		if ((void *)(vh + 1) > data_end)
			return TW_R_VLAN_TRUNC;
		et = vh->proto;
		cur = (void *)(vh + 1);
	}
	if (tw_is_vlan(et))
		return TW_R_VLAN_DEPTH;

	p->l3len = data_end - cur;
	p->l3off = cur - data;
	*proto = et;
	*l3 = cur;
	if (et == bpf_htons(ETH_P_IP) || et == bpf_htons(ETH_P_IPV6))
		return TW_R_PASS;
	return tw_non_ip(et);
}

/* The IP layer on, from its header at cur (p->l3off from the frame start)
 * of the ethertype tw_parse_eth returned. */
static __always_inline int tw_parse_l3(void *cur, void *data_end,
				       struct tw_pkt *p, __be16 proto)
{
	if (proto == bpf_htons(ETH_P_IP))
		return tw_parse_ipv4(cur, data_end, p);
	return tw_parse_ipv6(cur, data_end, p);
}

static __always_inline int tw_parse(void *data, void *data_end,
				    struct tw_pkt *p)
{
	__be16 proto;
	void *l3;
	int r = tw_parse_eth(data, data_end, p, &proto, &l3);
	if (r != TW_R_PASS)
		return r;
	return tw_parse_l3(l3, data_end, p, proto);
}

#endif
