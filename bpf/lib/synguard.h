/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* synguard.h - the SYN guard: a ceiling on the SYNs that reach the host's
 * stack from sources that are not known good, per CPU and jiffy, for the
 * time before the daemon has a rule for a SYN flood.
 *
 * Why: until the victim detector's interval ends (up to one interval, 500
 * ms by default), a flood of SYNs from random sources meets no rule, only
 * the kernel, which answers each with a SYN cookie through the whole
 * stack: microseconds a SYN where XDP's drop costs tens of nanoseconds. On
 * a loaded host the receive ring then overflows, and the packets it loses
 * are anyone's: a verified client's SYN, lost there, waits out TCP's one
 * second retransmission timeout. In make eval-spoof under a busy loop on
 * each CPU that first interval cost the clients of a 0.7 Mpps SYN flood
 * about 7% of their connections (docs/ARCHITECTURE.md). The guard holds
 * what the stack is given to the budget the daemon sets, so the ring keeps
 * up, and what it drops is only the excess from sources it has no proof
 * for: a known-good source's SYN passes over the budget too, within the
 * member's own rate (tw_known_good, frule.h), as a bypass rule lets it.
 *
 * It is not a detector and decides nothing lasting: a window is one jiffy,
 * what it drops it counts (TW_R_DROP_SYN_GUARD), and the packets it drops
 * were counted into the feature buffers first, so the victim detector sees
 * the flood whole and puts its rule (SYN cookies, which answer every SYN)
 * ahead of the guard, which then meets none of the flood. Under its budget
 * it costs a SYN one per-CPU lookup and the jiffies load. */
#ifndef TW_SYNGUARD_H
#define TW_SYNGUARD_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "consts.h"
#include "types.h"
#include "maps.h"
#include "frule.h"

/* Whether a SYN over the budget passes as known good: a global function,
 * verified once on its own rather than inlined into the filter's every
 * path (tw_known_good asks the sieve, the list and the sockets). */
__noinline int tw_sg_good(struct xdp_md *ctx, const struct tw_fview *v)
{
	if (!ctx || !v)
		return 0;
	return tw_known_good(ctx, v);
}

/* The guard's verdict for a SYN that no list or rule decided (TW_R_PASS):
 * TW_R_PASS under the budget, TW_R_PASS_KNOWN_GOOD or TW_R_DROP_SYN_GUARD
 * over it. The window starts again at the first SYN of a later jiffy; a
 * window ahead of jiffies (only a test writes one) goes on counting. */
static __always_inline int tw_syn_guard(struct xdp_md *ctx,
					const struct tw_pkt *p,
					const struct tw_config *cfg)
{
	__u32 zero = 0;
	struct tw_sg *s = bpf_map_lookup_elem(&tw_sg, &zero);
	if (!s)
		return TW_R_PASS;
	__u64 now = bpf_jiffies64();
	if ((__s64)(now - s->jiffies) > 0) {
		s->jiffies = now;
		s->passed = 0;
	}
	if (s->passed < cfg->syn_guard) {
		s->passed++;
		return TW_R_PASS;
	}
	struct tw_fview v = {};
	tw_fview_init(&v, p);
	v.good_pps = cfg->good_pps;
	v.good_seed = cfg->seed ^ TW_GOOD_SIEVE_SALT;
	if (tw_sg_good(ctx, &v))
		return TW_R_PASS_KNOWN_GOOD;
	return TW_R_DROP_SYN_GUARD;
}

#endif
