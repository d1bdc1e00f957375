// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* bench_baseline.c - reference programs the filter is measured against:
 * one lookup of the IPv4 source in a plain BPF hash map (what most XDP
 * blocklists do), an empty program that only returns, and the "one line"
 * floor: a single read of one cache line, chosen by hashing the source, in
 * a plain array as large as the filter's exact table. No lookup structure
 * that must read per-packet state from a table that size can cost less. */
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

struct bl_line {
	__u64 w[8];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct bl_line);
	__uint(max_entries, 1);
} bl_lines SEC(".maps");

volatile const __u32 bl_lines_mask = 0;

SEC("xdp")
int bl_one_line(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct iphdr *iph = data + sizeof(struct ethhdr);
	if ((void *)(iph + 1) > data_end)
		return XDP_PASS;
	__u32 h = iph->saddr;
	h ^= h >> 16;
	h *= 0x7feb352d;
	h ^= h >> 15;
	__u32 k = h & bl_lines_mask;
	struct bl_line *l = bpf_map_lookup_elem(&bl_lines, &k);
	if (l && l->w[0] == 0xdeadbeef)
		return XDP_PASS;
	return XDP_DROP;
}

SEC("xdp")
int bl_empty(struct xdp_md *ctx)
{
	return XDP_DROP;
}

char _license[] SEC("license") = "Dual BSD/GPL";
