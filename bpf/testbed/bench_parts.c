// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* bench_parts.c - the filter's drop path cut into rungs, for the benchmark's
 * breakdown of the fixed cost at one rule: each program is the previous
 * one plus one piece, built from the filter's own headers, so the
 * difference between two neighbours is what that piece costs. Never
 * attached to an interface; its maps are its own. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "../lib/consts.h"
#include "../lib/types.h"
#include "../lib/maps.h"
#include "../lib/parse.h"
#include "../lib/table.h"
#include "../lib/stats.h"

/* tw_filter_parse, as the filter has it: a global function. */
__noinline int bp_parse_fn(struct xdp_md *ctx, struct tw_pkt *p)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	if (!p)
		return TW_R_ETH_TRUNC;
	int r = tw_parse(data, data_end, p);
	if (r == TW_R_PASS)
		tw_unmap(p);
	return r;
}

/* The full parse alone: what a packet the filter's plain-IPv4 path does
 * not take pays first (not a rung: the drop path below skips it). */
SEC("xdp")
int bp_parse(struct xdp_md *ctx)
{
	struct tw_pkt p = {};
	if (bp_parse_fn(ctx, &p) != TW_R_PASS)
		return XDP_PASS;
	return XDP_DROP;
}

/* Rung 1: the plain-IPv4 check, as the filter makes it first. */
SEC("xdp")
int bp_plain(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 src;
	if (!tw_plain4(data, data_end, &src))
		return XDP_PASS;
	return XDP_DROP;
}

/* Rung 2: + the configuration read and the verdict counter. */
SEC("xdp")
int bp_verdict(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 len = data_end - data;
	__u32 zero = 0;
	struct tw_config *cfg = bpf_map_lookup_elem(&tw_cfg, &zero);
	__u32 src;
	if (!cfg || !tw_plain4(data, data_end, &src))
		return XDP_PASS;
	return tw_verdict(TW_R_DROP_EXACT, len);
}

/* Rung 3: + the exact lookup and the rule's counting (hash, slot, hot
 * entry, clock). The filter adds the allowlist and sampler tests. */
SEC("xdp")
int bp_exact(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 len = data_end - data;
	__u32 zero = 0;
	struct tw_config *cfg = bpf_map_lookup_elem(&tw_cfg, &zero);
	__u32 src;
	if (!cfg || !tw_plain4(data, data_end, &src))
		return XDP_PASS;
	if (cfg->exact4_n && tw_exact4_hit(src, cfg->seed, len))
		return tw_verdict(TW_R_DROP_EXACT, len);
	return tw_verdict(TW_R_PASS, len);
}

/* What one call of a helper (or of a global function) costs, for the
 * heavy-hitter detector's choices (heavy.h): each program makes eight, and
 * bp_calls_none is the same program with none. On hosts whose kernel
 * returns through a mitigation thunk (SRSO "safe RET" on these AMD hosts)
 * every call pays it; the inlined ones (bpf_jiffies64, the CPU id, an
 * array lookup) do not. */
volatile __u64 bp_sink;

__noinline int bp_global(__u32 x)
{
	if (!x)
		return 0;
	bp_sink += x;
	return 1;
}

#define BP_EIGHT(x) x x x x x x x x

SEC("xdp")
int bp_calls_none(struct xdp_md *ctx)
{
	BP_EIGHT(bp_sink += ctx->ingress_ifindex;)
	return XDP_PASS;
}

SEC("xdp")
int bp_calls_ktime(struct xdp_md *ctx)
{
	BP_EIGHT(bp_sink += bpf_ktime_get_ns();)
	return XDP_PASS;
}

SEC("xdp")
int bp_calls_coarse(struct xdp_md *ctx)
{
	BP_EIGHT(bp_sink += bpf_ktime_get_coarse_ns();)
	return XDP_PASS;
}

SEC("xdp")
int bp_calls_jiffies(struct xdp_md *ctx)
{
	BP_EIGHT(bp_sink += bpf_jiffies64();)
	return XDP_PASS;
}

SEC("xdp")
int bp_calls_prandom(struct xdp_md *ctx)
{
	BP_EIGHT(bp_sink += bpf_get_prandom_u32();)
	return XDP_PASS;
}

SEC("xdp")
int bp_calls_global(struct xdp_md *ctx)
{
	BP_EIGHT(bp_global(ctx->data_end - ctx->data);)
	return XDP_PASS;
}

char _license[] SEC("license") = "Dual BSD/GPL";
