// SPDX-License-Identifier: GPL-2.0
/* bench_baseline.c - reference programs the filter is measured against:
 * one lookup of the IPv4 source in a plain BPF hash map (what most XDP
 * blocklists do), and an empty program that only returns. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 1);
} bl_hash SEC(".maps");

SEC("xdp")
int bl_hash_lookup(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct iphdr *iph = data + sizeof(struct ethhdr);
	if ((void *)(iph + 1) > data_end)
		return XDP_PASS;
	__u32 k = iph->saddr;
	if (bpf_map_lookup_elem(&bl_hash, &k))
		return XDP_DROP;
	return XDP_PASS;
}

SEC("xdp")
int bl_empty(struct xdp_md *ctx)
{
	return XDP_DROP;
}

char _license[] SEC("license") = "GPL";
