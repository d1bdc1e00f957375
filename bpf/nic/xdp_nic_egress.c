// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* xdp_nic_egress.c - the emulated SmartNIC's transmit side, on its
 * host-facing port: what the host sends (its stack's packets and its XDP_TX
 * answers) leaves the card here. Frames for the networks the lab has (the
 * "internet" namespace's clients) go on to the wire; frames for any other
 * address would leave for the real internet, which the lab does not have,
 * so they are dropped here and counted. Without this a SYN flood answered
 * in XDP sent a million cookie SYN-ACKs a second for spoofed addresses
 * through the lab's bridge, on the host's CPU: a wire a real card does not
 * have, which filled the port's ring and lost the real clients' SYN-ACKs.
 * Being an XDP program on the veth peer it also makes veth deliver XDP_TX
 * frames at once (veth_xdp_flush wakes only a peer running XDP). */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>
#include "../lib/types.h"

/* The lab's networks; the value is unused. */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 16);
	__type(key, struct tw_lpm4_key);
	__type(value, __u8);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} tw_egress_nets4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 16);
	__type(key, struct tw_lpm6_key);
	__type(value, __u8);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} tw_egress_nets6 SEC(".maps");

enum tw_egress_verdict {
	TW_EG_WIRE = 0,     /* for the lab's networks: on to the wire */
	TW_EG_INTERNET = 1, /* for anywhere else: left the lab, dropped */
	TW_EG_OTHER = 2,    /* not IP (ARP, ...): on to the wire */
	TW_EG_MAX = 3,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, TW_EG_MAX);
	__type(key, __u32);
	__type(value, struct tw_ctr);
} tw_egress_stats SEC(".maps");

static __always_inline int tw_egress_count(enum tw_egress_verdict v, __u32 len,
					   int action)
{
	__u32 k = v;
	struct tw_ctr *c = bpf_map_lookup_elem(&tw_egress_stats, &k);
	if (c) {
		c->packets++;
		c->bytes += len;
	}
	return action;
}

SEC("xdp")
int tw_nic_egress(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 len = data_end - data;
	struct ethhdr *eth = data;

	if ((void *)(eth + 1) > data_end)
		return tw_egress_count(TW_EG_OTHER, len, XDP_PASS);
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);
		if ((void *)(ip + 1) > data_end)
			return tw_egress_count(TW_EG_OTHER, len, XDP_PASS);
		struct tw_lpm4_key k = { .prefixlen = 32, .addr = ip->daddr };
		/* Multicast and broadcast stay on the link. */
		if ((bpf_ntohl(ip->daddr) >> 28) >= 0xe ||
		    bpf_map_lookup_elem(&tw_egress_nets4, &k))
			return tw_egress_count(TW_EG_WIRE, len, XDP_PASS);
		return tw_egress_count(TW_EG_INTERNET, len, XDP_DROP);
	}
	if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);
		if ((void *)(ip6 + 1) > data_end)
			return tw_egress_count(TW_EG_OTHER, len, XDP_PASS);
		struct tw_lpm6_key k = { .prefixlen = 128 };
		__builtin_memcpy(k.addr, &ip6->daddr, sizeof(k.addr));
		/* Multicast (neighbour discovery) stays on the link. */
		if (k.addr[0] == 0xff ||
		    bpf_map_lookup_elem(&tw_egress_nets6, &k))
			return tw_egress_count(TW_EG_WIRE, len, XDP_PASS);
		return tw_egress_count(TW_EG_INTERNET, len, XDP_DROP);
	}
	return tw_egress_count(TW_EG_OTHER, len, XDP_PASS);
}

char _license[] SEC("license") = "Dual BSD/GPL";
