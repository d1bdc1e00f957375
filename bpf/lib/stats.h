/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* stats.h - the single exit: every packet leaves through tw_verdict, which
 * counts it against exactly one reason in a per-CPU array (no atomics) and
 * maps the reason to the XDP action. */
#ifndef TW_STATS_H
#define TW_STATS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "maps.h"

/* The reasons whose packets pass (the Go side's IsDrop); every other
 * reason drops. */
#define TW_PASSING                                                \
	(1U << TW_R_PASS | 1U << TW_R_ALLOW | 1U << TW_R_NON_IP | \
	 1U << TW_R_NON_IP_ARP | 1U << TW_R_NON_IP_MPLS |         \
	 1U << TW_R_NON_IP_PPPOE | 1U << TW_R_PASS_KNOWN_GOOD |   \
	 1U << TW_R_SYNPROXY_MISSING | 1U << TW_R_PASS_PROVISIONAL)

/* The XDP action of a reason, as a bit test rather than a switch: when
 * the reason is not a constant (the flow rules' verdict) a switch would
 * split the verifier's path into one per case, and every case would then
 * verify the rest of the program again. */
static __always_inline int tw_action(__u32 reason)
{
	if (reason < 32 && (TW_PASSING >> reason) & 1)
		return XDP_PASS;
	return XDP_DROP;
}

static __always_inline int tw_verdict(__u32 reason, __u32 len)
{
	struct tw_ctr *c = bpf_map_lookup_elem(&tw_verdicts, &reason);
	if (c) {
		c->packets++;
		c->bytes += len;
	}
	return tw_action(reason);
}

#endif
