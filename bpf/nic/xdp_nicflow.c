// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* xdp_nicflow.c - the emulated SmartNIC in flow mode (Deri et al., HPSR
 * 2024): a hardware flow table on the wire-facing port. A learned flow's
 * packets are counted per direction in its entry and discarded, or
 * forwarded: to the host marked HIT (passive) or out of the twin wire port
 * (inline). Everything else goes to the host marked MISS or UNHANDLED; the
 * mark travels in XDP metadata (flow.h's tw_flow_meta). In inline mode the
 * host sends what it lets through back to the NIC's host-facing port, where
 * tw_nicflow_ret puts it on the twin: the second half of the same path,
 * sharing this file's counters. tw_nicflow_unlearning is firmware, not data
 * plane: it runs from user space to flip an entry's state in place. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "../lib/consts.h"
#include "../lib/types.h"
#include "../lib/parse.h"
#include "../lib/flow.h"
#include "../lib/nicflow.h"

/* Leaves exactly one tw_flow_meta in front of the frame, replacing any
 * metadata it came with, so the host finds the mark at data_meta. */
static __always_inline int tw_nf_mark(struct xdp_md *ctx, __u8 mark, __u8 dir,
				      __u32 hash, __u64 id)
{
	int have = ctx->data - ctx->data_meta;
	if (bpf_xdp_adjust_meta(ctx, have - (int)sizeof(struct tw_flow_meta)))
		return -1;
	void *data = (void *)(long)ctx->data;
	struct tw_flow_meta *m = (void *)(long)ctx->data_meta;
	if ((void *)(m + 1) > data)
		return -1;
	m->magic = TW_META_MAGIC;
	m->mark = mark;
	m->dir = dir;
	m->_pad = 0;
	m->hash = hash;
	m->_pad2 = 0;
	m->flow_id = id;
	return 0;
}

static __always_inline int tw_nf_redirect(__u32 ifindex, __u32 bytes)
{
	if (!ifindex)
		return XDP_PASS;
	int r = bpf_redirect(ifindex, 0);
	if (r != XDP_REDIRECT) {
		tw_nicflow_count(TW_NFV_TX_ERROR, bytes);
		return XDP_DROP;
	}
	return r;
}

/* To the host with a mark; without one (counted) if there is no room. */
static __always_inline int tw_nf_host(struct xdp_md *ctx, __u32 v, __u32 bytes,
				      __u8 mark, __u8 dir, __u32 hash, __u64 id)
{
	tw_nicflow_count(v, bytes);
	if (tw_nf_mark(ctx, mark, dir, hash, id))
		tw_nicflow_count(TW_NFV_NO_META, bytes);
	return tw_nf_redirect(tw_nicflow_host, bytes);
}

/* To the wire: a NIC sends the frame, never the host's metadata. */
static __always_inline int tw_nf_twin(struct xdp_md *ctx, __u32 v, __u32 bytes)
{
	tw_nicflow_count(v, bytes);
	int have = ctx->data - ctx->data_meta;
	if (have > 0)
		bpf_xdp_adjust_meta(ctx, have);
	return tw_nf_redirect(tw_nicflow_twin, bytes);
}

/* TCP flags of a hit, and auto-unlearn: fetch_or makes exactly one CPU see
 * the flags complete the end, and the compare and swap leaves an entry the
 * firmware is already unlearning alone. */
static __always_inline void tw_nf_tcp(struct tw_nicflow_entry *e,
				      const struct tw_flow_key *k, __u32 bits,
				      __u32 bytes)
{
	__u32 old = __sync_fetch_and_or(&e->tcp_flags, bits);
	if (!(e->opts & TW_NFO_TCP_AUTO) || tw_nicflow_tcp_end(old) ||
	    !tw_nicflow_tcp_end(old | bits))
		return;
	if (__sync_val_compare_and_swap(&e->state, TW_NFS_ACTIVE,
					TW_NFS_TERMINATING) != TW_NFS_ACTIVE)
		return;
	struct tw_nicflow_ref *r =
		bpf_ringbuf_reserve(&tw_nicflow_term, sizeof(*r), 0);
	if (!r) {
		tw_nicflow_count(TW_NFV_TERM_LOST, bytes);
		return;
	}
	__builtin_memcpy(&r->key, k, sizeof(r->key));
	r->flow_id = e->flow_id;
	bpf_ringbuf_submit(r, BPF_RB_NO_WAKEUP);
}

static __always_inline void tw_nf_account(struct tw_nicflow_entry *e,
					  const struct tw_flow_key *k,
					  const struct tw_pkt *p, __u8 dir)
{
	__sync_fetch_and_add(&e->packets[dir & 1], 1);
	__sync_fetch_and_add(&e->bytes[dir & 1], p->l3len);
	e->last_ns = bpf_ktime_get_ns();
	if (p->proto != IPPROTO_TCP)
		return;
	__u32 bits = (__u32)p->tcp_flags << ((dir & 1) * 8);
	/* Most packets add no new flag: read before paying for an atomic. */
	if ((e->tcp_flags & bits) != bits)
		tw_nf_tcp(e, k, bits, p->l3len);
}

/* A subprogram: the unrolled endpoint compare, inlined into the rest,
 * made clang 14 spill past the 512-byte stack. */
static __noinline __u8 tw_nf_key(const struct tw_pkt *p, struct tw_flow_key *k)
{
	return tw_flow_key_of(p, k);
}

/* A global function: the verifier checks it once, on its own, and the
 * caller goes on from one state instead of one per path through the
 * parser (with it inlined, the program took 720K verified instructions and
 * two seconds to load). */
__noinline int tw_nf_parse(struct xdp_md *ctx, struct tw_pkt *p)
{
	if (!p)
		return TW_R_ETH_TRUNC;
	return tw_parse((void *)(long)ctx->data, (void *)(long)ctx->data_end,
			p);
}

SEC("xdp")
int tw_nicflow(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 flen = data_end - data;
	struct tw_pkt p = {};

	if (tw_nf_parse(ctx, &p) != TW_R_PASS)
		return tw_nf_host(ctx, TW_NFV_UNH_PARSE, flen,
				  TW_MARK_UNHANDLED, 0, 0, 0);
	if (p.family == 4) {
		struct iphdr *iph = data + (p.l3off & 0xff);
		if ((void *)(iph + 1) > data_end)
			return tw_nf_host(ctx, TW_NFV_UNH_PARSE, flen,
					  TW_MARK_UNHANDLED, 0, 0, 0);
		if (iph->frag_off & bpf_htons(TW_IP_OFFMASK | TW_NF_IP_MF))
			return tw_nf_host(ctx, TW_NFV_UNH_FRAG, p.l3len,
					  TW_MARK_UNHANDLED, 0, 0, 0);
	} else if (p.nonfirst || p.l4off != p.l3off + sizeof(struct ipv6hdr)) {
		/* Like many NIC parsers, this one matches a bare IPv6
		 * header only; every IPv6 fragment is among what it skips
		 * (tw_pkt does not say "first fragment" apart). */
		return tw_nf_host(ctx, TW_NFV_UNH_EXT, p.l3len,
				  TW_MARK_UNHANDLED, 0, 0, 0);
	}
	if (p.proto != IPPROTO_TCP && p.proto != IPPROTO_UDP)
		return tw_nf_host(ctx, TW_NFV_UNH_PROTO, p.l3len,
				  TW_MARK_UNHANDLED, 0, 0, 0);

	union {
		struct tw_flow_key k;
		__u32 w[sizeof(struct tw_flow_key) / 4];
	} key;
	__u8 dir = tw_nf_key(&p, &key.k);
	__u32 hash = tw_nicflow_hash(key.w, tw_nicflow_seed);

	struct tw_nicflow_entry *e =
		bpf_map_lookup_elem(&tw_nicflow_table, &key.k);
	if (e) {
		__u32 st = *(volatile __u32 *)&e->state;
		if (st == TW_NFS_ACTIVE || st == TW_NFS_TERMINATING) {
			tw_nf_account(e, &key.k, &p, dir);
			if (e->action == TW_FA_DISCARD) {
				tw_nicflow_count(TW_NFV_HIT_DISCARD, p.l3len);
				return XDP_DROP;
			}
			if (tw_nicflow_inline)
				return tw_nf_twin(ctx, TW_NFV_HIT_TWIN,
						  p.l3len);
			return tw_nf_host(ctx, TW_NFV_HIT_HOST, p.l3len,
					  TW_MARK_HIT, dir, hash, e->flow_id);
		}
		/* Unlearning: the firmware reads the final counters once
		 * programs that saw it active are done; from here on the
		 * host counts the flow. */
		tw_nicflow_count(TW_NFV_UNLEARNING, p.l3len);
	}

	__u32 zero = 0;
	__u32 *occ = bpf_map_lookup_elem(&tw_nicflow_occ, &zero);
	if (occ && *occ >= tw_nicflow_capacity)
		return tw_nf_host(ctx, TW_NFV_UNH_FULL, p.l3len,
				  TW_MARK_UNHANDLED, 0, 0, 0);
	return tw_nf_host(ctx, TW_NFV_MISS, p.l3len, TW_MARK_MISS, dir, hash,
			  0);
}

/* Inline mode, on the NIC's host-facing port: what the host sends back
 * after inspection (XDP_TX or a redirect on its side) leaves by the twin. */
SEC("xdp")
int tw_nicflow_ret(struct xdp_md *ctx)
{
	return tw_nf_twin(ctx, TW_NFV_RETURN, ctx->data_end - ctx->data);
}

/* Firmware: marks a flow UNLEARNING in place (a map update from user space
 * would replace the entry and lose the adds of programs running on the old
 * one). Returns the state it found, 0 if the flow is not there. */
SEC("syscall")
int tw_nicflow_unlearning(struct tw_nicflow_ref *ref)
{
	struct tw_flow_key k;
	__builtin_memcpy(&k, &ref->key, sizeof(k));
	struct tw_nicflow_entry *e = bpf_map_lookup_elem(&tw_nicflow_table, &k);
	if (!e || e->flow_id != ref->flow_id)
		return 0;
	__u32 old = __sync_val_compare_and_swap(&e->state, TW_NFS_ACTIVE,
						TW_NFS_UNLEARNING);
	/* Only the data plane moves ACTIVE on, and only to TERMINATING. */
	if (old == TW_NFS_TERMINATING)
		__sync_val_compare_and_swap(&e->state, TW_NFS_TERMINATING,
					    TW_NFS_UNLEARNING);
	return old;
}

char _license[] SEC("license") = "Dual BSD/GPL";
