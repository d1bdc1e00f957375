/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* synproxy.h - constants, configuration and counters of the SYN-cookie
 * stage (xdp_synproxy.c). The filter tail-calls it for packets of a
 * syn-cookie rule: it answers SYNs with cookie SYN-ACKs itself, passes the
 * ACKs that carry a valid cookie to the kernel's SYNPROXY (which checks the
 * cookie again and opens the real connection to the server), passes what
 * conntrack already knows and drops the rest. What the SYN-ACK carries has
 * to be what SYNPROXY expects to read back from the ACK; see
 * tw_sp_build_synack. */
#ifndef TW_SYNPROXY_H
#define TW_SYNPROXY_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "types.h"

/* Set before load, and equal to the SYNPROXY rule's mss and wscale (the
 * nft statement's "must match the backend"): the SYN-ACK announces them
 * to the client in SYNPROXY's place, and the server's real ones must be
 * the same because SYNPROXY translates sequence numbers, not windows. */
volatile const __u32 tw_sp_mss = 1460;
volatile const __u32 tw_sp_wscale = 7;
/* TTL / hop limit of the SYN-ACK: a fresh value like the kernel's own
 * replies, not the SYN's, which a spoofer chooses and which is already
 * spent by the path it came over. */
volatile const __u32 tw_sp_ttl = 64;

/* One per packet, each with a per-CPU packets/bytes counter (bytes of the
 * frame as it arrived). Appended only: an ABI with user space. */
enum tw_sp_reason {
	/* SYN: cookie SYN-ACK sent back, XDP_TX. */
	TW_SP_SYN_ANSWERED = 0,
	/* Unknown flow, ACK with a valid cookie: pass, for SYNPROXY. */
	TW_SP_ACK_VALID = 1,
	/* Unknown flow, ACK with a bad cookie: drop. */
	TW_SP_ACK_INVALID = 2,
	/* Conntrack knows the flow: pass. */
	TW_SP_CT_PASS = 3,
	/* Unknown flow, neither SYN nor ACK (RST, FIN, SYN-ACK...): drop. */
	TW_SP_DROP_OTHER = 4,
	/* SYN that cannot be answered (TCP header longer than the datagram,
	 * no room for the SYN-ACK): drop. */
	TW_SP_SYN_UNFIT = 5,
	/* The conntrack lookup itself failed: drop. */
	TW_SP_CT_ERROR = 6,
	/* The parser refused the frame: pass, the kernel drops what it
	 * cannot use (the filter has counted why). */
	TW_SP_MALFORMED = 7,
	/* Not IP, not TCP, or a later fragment without the TCP header: pass
	 * (the filter only tail-calls TCP). */
	TW_SP_NO_TCP = 8,
	TW_SP_MAX = 9,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, enum tw_sp_reason);
	__type(value, struct tw_ctr);
	__uint(max_entries, TW_SP_MAX);
} tw_sp_stats SEC(".maps");

/* The coarse clock, read once per tick per CPU (tw_sp_now_ms). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct tw_clock);
	__uint(max_entries, 1);
} tw_sp_clock SEC(".maps");

#endif
