// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* bench_wrap.c - benchmark driver for BPF_PROG_TEST_RUN. Each repetition
 * rewrites the test packet's source address from a sample table (uniform
 * or Zipf, filled by the harness) indexed by a per-CPU sequence number,
 * then tail-calls the program under test. The same wrapper drives the
 * filter, the plain-hash baseline and an empty program, so the wrapper's
 * own cost cancels out of the ratios. Never attached to an interface. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_helpers.h>

volatile const __u32 bw_mask = 0; /* samples - 1, a power of two */

struct bw_addr6 {
	__u8 a[16];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, 1);
} bw_samples4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct bw_addr6);
	__uint(max_entries, 1);
} bw_samples6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, 1);
} bw_seq SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, 1);
} bw_next SEC(".maps");

static __always_inline __u32 bw_next_index(void)
{
	__u32 zero = 0;
	__u32 *seq = bpf_map_lookup_elem(&bw_seq, &zero);
	if (!seq)
		return 0;
	return (*seq)++ & bw_mask;
}

SEC("xdp")
int bw_wrap4(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct iphdr *iph = data + sizeof(struct ethhdr);
	if ((void *)(iph + 1) > data_end)
		return XDP_ABORTED;
	__u32 i = bw_next_index();
	__u32 *a = bpf_map_lookup_elem(&bw_samples4, &i);
	if (!a)
		return XDP_ABORTED;
	iph->saddr = *a;
	bpf_tail_call(ctx, &bw_next, 0);
	return XDP_ABORTED;
}

SEC("xdp")
int bw_wrap6(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ipv6hdr *ip6 = data + sizeof(struct ethhdr);
	if ((void *)(ip6 + 1) > data_end)
		return XDP_ABORTED;
	__u32 i = bw_next_index();
	struct bw_addr6 *a = bpf_map_lookup_elem(&bw_samples6, &i);
	if (!a)
		return XDP_ABORTED;
	__builtin_memcpy(&ip6->saddr, a->a, 16);
	bpf_tail_call(ctx, &bw_next, 0);
	return XDP_ABORTED;
}

char _license[] SEC("license") = "Dual BSD/GPL";
