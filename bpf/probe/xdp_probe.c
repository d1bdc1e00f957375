// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* xdp_probe.c - the flow probe's software tier (Deri et al., HPSR 2024) on
 * the host port: per-flow counters in XDP, the first packets of each new
 * flow copied to user space for DPI, and the NIC's hit/miss/unhandled mark
 * counted. Passive, it consumes mirrored traffic; inline, it forwards to
 * the egress port what user space has not told it to discard. tw_probe_set_state
 * is user space's way to change a flow's state and action in place. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "../lib/consts.h"
#include "../lib/types.h"
#include "../lib/parse.h"
#include "../lib/flow.h"
#include "../lib/probe.h"
#include "../lib/probe_helpers.h"

/* The parser and the tracked path are global functions, each verified
 * once on its own: inlined, every parse outcome multiplied the branches
 * after it and the verifier walked ~780K instructions of its 1M limit
 * (~315K now, nearly all of them the parser's). */
__noinline int tw_probe_parse(struct xdp_md *ctx, struct tw_pkt *p)
{
	if (!ctx || !p)
		return TW_R_ETH_TRUNC;
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	return tw_parse(data, data_end, p);
}

__noinline int tw_probe_track(struct xdp_md *ctx, const struct tw_pkt *p,
			      __u32 mark, __u32 nic_hash, __u32 bytes)
{
	if (!ctx || !p)
		return XDP_DROP;
	struct tw_flow_key k;
	__u8 m = mark & 3;
	__u8 dir = tw_flow_key_of(p, &k);
	__u64 now = bpf_ktime_get_ns();
	struct tw_flow *f = tw_probe_flow(&k, dir, nic_hash, now);
	if (!f)
		return tw_probe_out(TW_PV_TABLE_FULL, NULL, bytes);
	tw_probe_account(f, dir, bytes, p->tcp_flags, m, now);
	tw_probe_sample(ctx, p, &k, f, dir, m, now);
	return tw_probe_out(TW_PV_TRACKED, f, bytes);
}

SEC("xdp")
int tw_probe(struct xdp_md *ctx)
{
	/* Taken now and kept as a number: left to the compiler, data_end
	 * is spilled as a 32-bit value, which the verifier refuses. */
	__u32 flen = (long)ctx->data_end - (long)ctx->data;
	asm volatile("" : "+r"(flen));
	struct tw_flow_meta meta = {};
	struct tw_pkt p = {};

	__u8 mark = tw_probe_meta(ctx, &meta);
	int r = tw_probe_parse(ctx, &p);
	__u32 bytes = r == TW_R_PASS ? p.l3len : flen;
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
	/* Our own hash unless a NIC stage marked the packet with its own. */
	__u32 nic_hash = mark != TW_MARK_NONE ? meta.hash : 0;
	return tw_probe_track(ctx, &p, mark, nic_hash, bytes);
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

static long tw_probe_op_run(__u32 i, void *unused)
{
	struct tw_probe_op *op = bpf_map_lookup_elem(&tw_probe_ops, &i);
	if (!op)
		return 1;
	struct tw_flow *f = bpf_map_lookup_elem(&tw_probe_flows, &op->key);
	if (!f) {
		op->ret = TW_CTL_NO_FLOW;
		return 0;
	}
	if (op->kind == TW_OP_TAKE) {
		/* The entry is read again after it is unlinked: a packet that
		 * found it just before (on another CPU, where the probe's XDP
		 * runs) has added to it by then, where a copy made only
		 * before the unlink would lose its count (eval-flows once
		 * lost a packet so at 1M flows). A preallocated element is
		 * never freed, only reused by a later insert, which sets
		 * first_ns: the copy made before the unlink stands if that
		 * changed (a reuse within the delete's own time, which a
		 * freelist per CPU makes unlikely). */
		__u64 first = f->first_ns;
		__builtin_memcpy(&op->flow, f, sizeof(op->flow));
		if (bpf_map_delete_elem(&tw_probe_flows, &op->key)) {
			op->ret = TW_CTL_NO_FLOW;
			return 0;
		}
		struct tw_flow after;
		__builtin_memcpy(&after, f, sizeof(after));
		if (after.first_ns == first &&
		    *(volatile __u64 *)&f->first_ns == first)
			__builtin_memcpy(&op->flow, &after, sizeof(after));
	} else {
		f->state = op->state;
		f->action = op->action;
	}
	op->ret = TW_CTL_OK;
	return 0;
}

/* tw_probe_ctl_batch runs the first n operations of tw_probe_ops, in
 * order, each with its own result. */
SEC("syscall")
int tw_probe_ctl_batch(struct tw_probe_batch *b)
{
	__u32 n = b->n;
	if (n > TW_PROBE_OPS)
		n = TW_PROBE_OPS;
	bpf_loop(n, tw_probe_op_run, NULL, 0);
	return 0;
}

char _license[] SEC("license") = "Dual BSD/GPL";
