// SPDX-License-Identifier: GPL-2.0-only
/* xdp_probe.c - the flow probe's software tier (Deri et al., HPSR 2024) on
 * the host port: per-flow counters in XDP, the first packets of each new
 * flow copied to user space for DPI, and the NIC's hit/miss/unhandled mark
 * counted. Passive, it consumes mirrored traffic; inline, it forwards to
 * the egress port what user space has not told it to discard. tw_probe_set_state
 * is user space's way to change a flow's state and action in place. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "lib/consts.h"
#include "lib/types.h"
#include "lib/parse.h"
#include "lib/flow.h"
#include "lib/probe.h"
#include "lib/probe_helpers.h"

SEC("xdp")
int tw_probe(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct tw_flow_meta meta = {};
	struct tw_pkt p = {};

	__u8 mark = tw_probe_meta(ctx, &meta);
	int r = tw_parse(data, data_end, &p);
	__u32 bytes = r == TW_R_PASS ? p.l3len : data_end - data;
	tw_probe_count(TW_PV_MARK_NONE + mark, bytes);
	if (r == TW_R_NON_IP || r == TW_R_NON_IP_ARP || r == TW_R_NON_IP_MPLS ||
	    r == TW_R_NON_IP_PPPOE)
		return tw_probe_out(TW_PV_NON_IP, NULL, bytes);
	if (r != TW_R_PASS)
		return tw_probe_out(TW_PV_MALFORMED, NULL, bytes);
	if (p.nonfirst)
		return tw_probe_out(TW_PV_FRAGMENT, NULL, bytes);
	if (mark == TW_MARK_HIT && !tw_probe_inline)
		return tw_probe_out(TW_PV_NIC_COUNTED, NULL, bytes);

	struct tw_flow_key k;
	__u8 dir = tw_flow_key_of(&p, &k);
	__u64 now = bpf_ktime_get_ns();
	struct tw_flow *f = tw_probe_flow(&k, dir, &meta, mark, now);
	if (!f)
		return tw_probe_out(TW_PV_TABLE_FULL, NULL, bytes);
	tw_probe_account(f, dir, bytes, p.tcp_flags, mark, now);
	tw_probe_sample(ctx, &p, &k, f, dir, mark, now);
	return tw_probe_out(TW_PV_TRACKED, f, bytes);
}

/* Sets a flow's state and action, run by user space through
 * BPF_PROG_TEST_RUN. Two byte stores into the live entry: rewriting the
 * whole value from user space would lose the counter increments made
 * between its read and its write. */
SEC("syscall")
int tw_probe_set_state(struct tw_probe_ctl *c)
{
	struct tw_flow_key k;
	__builtin_memcpy(&k, &c->key, sizeof(k));
	struct tw_flow *f = bpf_map_lookup_elem(&tw_probe_flows, &k);
	if (!f)
		return TW_CTL_NO_FLOW;
	f->state = c->state;
	f->action = c->action;
	return TW_CTL_OK;
}

char _license[] SEC("license") = "GPL";
