// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* xdp_oracle.c - the evaluation's ideal filter. It knows the flood by its
 * signature (UDP to one destination port: every UDP flood of
 * `make eval-spoof` uses port 9, which no client does) and drops it from
 * the first packet, at the least an XDP program can cost: no tables, no
 * counters but its own two, no feature extraction. What the clients get
 * under it is what any filter behind the host's receive ring could give
 * them; the rest is the ring's and the CPU's, not the defence's. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

volatile const __u16 tw_oracle_port = 9; /* the flood's UDP destination port */

/* 0: frames dropped, 1: frames passed. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} tw_oracle_ctr SEC(".maps");

static __always_inline int tw_oracle_count(__u32 k, int verdict)
{
	__u64 *c = bpf_map_lookup_elem(&tw_oracle_ctr, &k);
	if (c)
		(*c)++;
	return verdict;
}

/* The flood's frames are untagged IPv4 without options or IPv6 without
 * extension headers, as the generator builds them. */
SEC("xdp")
int tw_oracle(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	__u8 proto;
	__u8 *l4;

	if ((void *)(eth + 1) > data_end)
		return tw_oracle_count(1, XDP_PASS);
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		__u8 *ip = (void *)(eth + 1);
		if ((void *)(ip + 20) > data_end || (ip[0] & 0x0f) != 5)
			return tw_oracle_count(1, XDP_PASS);
		proto = ip[9];
		l4 = ip + 20;
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		__u8 *ip = (void *)(eth + 1);
		if ((void *)(ip + 40) > data_end)
			return tw_oracle_count(1, XDP_PASS);
		proto = ip[6];
		l4 = ip + 40;
	} else {
		return tw_oracle_count(1, XDP_PASS);
	}
	if (proto != 17 || (void *)(l4 + 8) > data_end)
		return tw_oracle_count(1, XDP_PASS);
	if (((__u16)l4[2] << 8 | l4[3]) == tw_oracle_port)
		return tw_oracle_count(0, XDP_DROP);
	return tw_oracle_count(1, XDP_PASS);
}

char _license[] SEC("license") = "Dual BSD/GPL";
