// SPDX-License-Identifier: GPL-2.0-only
/* bench_parts.c - the filter's drop path cut into rungs, for the benchmark's
 * breakdown of the fixed cost at one rule: each program is the previous
 * one plus one piece, built from the filter's own headers, so the
 * difference between two neighbours is what that piece costs. Never
 * attached to an interface; its maps are its own. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "lib/consts.h"
#include "lib/types.h"
#include "lib/maps.h"
#include "lib/parse.h"
#include "lib/table.h"
#include "lib/stats.h"

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

/* Rung 1: the parse alone. */
SEC("xdp")
int bp_parse(struct xdp_md *ctx)
{
	struct tw_pkt p = {};
	if (bp_parse_fn(ctx, &p) != TW_R_PASS)
		return XDP_PASS;
	return XDP_DROP;
}

/* Rung 2: + the configuration read and the verdict counter. */
SEC("xdp")
int bp_verdict(struct xdp_md *ctx)
{
	__u32 len = ctx->data_end - ctx->data;
	struct tw_pkt p = {};
	if (bp_parse_fn(ctx, &p) != TW_R_PASS)
		return XDP_PASS;
	__u32 zero = 0;
	struct tw_config *cfg = bpf_map_lookup_elem(&tw_cfg, &zero);
	if (!cfg || p.family != 4)
		return XDP_PASS;
	return tw_verdict(TW_R_DROP_EXACT, len);
}

/* Rung 3: + the exact lookup and the rule's counting (hash, slot, hot
 * entry, clock). The filter adds the allowlist and sampler tests. */
SEC("xdp")
int bp_exact(struct xdp_md *ctx)
{
	__u32 len = ctx->data_end - ctx->data;
	struct tw_pkt p = {};
	if (bp_parse_fn(ctx, &p) != TW_R_PASS)
		return XDP_PASS;
	__u32 zero = 0;
	struct tw_config *cfg = bpf_map_lookup_elem(&tw_cfg, &zero);
	if (!cfg || p.family != 4)
		return XDP_PASS;
	if (cfg->exact4_n && tw_exact4_hit(p.src4, cfg->seed, len))
		return tw_verdict(TW_R_DROP_EXACT, len);
	return tw_verdict(TW_R_PASS, len);
}

char _license[] SEC("license") = "GPL";
