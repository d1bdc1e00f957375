/* SPDX-License-Identifier: GPL-2.0-only */
/* stats.h - the single exit: every packet leaves through tw_verdict, which
 * counts it against exactly one reason in a per-CPU array (no atomics) and
 * maps the reason to the XDP action. */
#ifndef TW_STATS_H
#define TW_STATS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "maps.h"

static __always_inline int tw_verdict(__u32 reason, __u32 len)
{
	struct tw_ctr *c = bpf_map_lookup_elem(&tw_verdicts, &reason);
	if (c) {
		c->packets++;
		c->bytes += len;
	}
	switch (reason) {
	case TW_R_PASS:
	case TW_R_ALLOW:
	case TW_R_NON_IP:
	case TW_R_NON_IP_ARP:
	case TW_R_NON_IP_MPLS:
	case TW_R_NON_IP_PPPOE:
		return XDP_PASS;
	default:
		return XDP_DROP;
	}
}

#endif
