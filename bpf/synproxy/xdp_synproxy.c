// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* xdp_synproxy.c - the SYN-cookie stage, slot 0 of the filter's tail-call
 * array tw_jmp: the filter jumps here with TCP packets of a syn-cookie
 * rule, the frame as it arrived. SYNs are answered in XDP with cookie
 * SYN-ACKs, so a flood never reaches the stack; the kernel's SYNPROXY
 * (nft, internal/synproxy) takes the ACKs with valid cookies and opens the
 * real connections; what conntrack already knows passes; the rest drops. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "../lib/consts.h"
#include "../lib/types.h"
#include "../lib/parse.h"
#include "../lib/conntrack.h"
#include "../lib/synproxy.h"
#include "../lib/synproxy_helpers.h"

/* The parser and the two paths are global functions, each verified once
 * on its own (as in xdp_probe.c): inlined, every state the parser's loops
 * leave behind multiplied the paths after it past the verifier's 1M
 * instructions. */
__attribute__((noinline)) int tw_sp_parse(struct xdp_md *ctx, struct tw_pkt *p)
{
	if (!ctx || !p)
		return TW_R_ETH_TRUNC;
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	return tw_parse(data, data_end, p);
}

__attribute__((noinline)) int tw_sp_syn(struct xdp_md *ctx,
					const struct tw_pkt *p)
{
	if (!p)
		return TW_SP_MALFORMED;
	return tw_sp_answer_syn(ctx, p);
}

__attribute__((noinline)) int tw_sp_other(struct xdp_md *ctx,
					  const struct tw_pkt *p, __u32 flags)
{
	if (!p)
		return TW_SP_MALFORMED;
	int known = tw_ct_known(ctx, p);
	if (known > 0)
		return TW_SP_CT_PASS;
	if (known < 0)
		return TW_SP_CT_ERROR;
	if (flags == TW_TCP_ACK)
		return tw_sp_check_ack(ctx, p);
	return TW_SP_DROP_OTHER;
}

SEC("xdp")
int tw_synproxy(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 len = data_end - data;
	struct tw_pkt p = {};

	int r = tw_sp_parse(ctx, &p);
	if (r == TW_R_NON_IP || r == TW_R_NON_IP_ARP || r == TW_R_NON_IP_MPLS ||
	    r == TW_R_NON_IP_PPPOE)
		return tw_sp_verdict(TW_SP_NO_TCP, len);
	if (r != TW_R_PASS)
		return tw_sp_verdict(TW_SP_MALFORMED, len);
	if (p.proto != IPPROTO_TCP || p.nonfirst)
		return tw_sp_verdict(TW_SP_NO_TCP, len);

	__u32 flags = p.tcp_flags &
		      (TW_TCP_SYN | TW_TCP_ACK | TW_TCP_RST | TW_TCP_FIN);
	/* No conntrack lookup for a SYN: the raw table leaves SYNs untracked
	 * and SYNPROXY would answer this one with the same cookie, so the
	 * lookup would only cost the flood time. */
	if (flags == TW_TCP_SYN)
		return tw_sp_verdict(tw_sp_syn(ctx, &p), len);
	return tw_sp_verdict(tw_sp_other(ctx, &p, flags), len);
}

char _license[] SEC("license") = "Dual BSD/GPL";
