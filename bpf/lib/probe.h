/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* probe.h - constants, counters and maps of the flow probe's software tier
 * (xdp_probe.c): per-flow state in a hash table, the first packets of each
 * flow copied to user space for DPI, and per-CPU counters of what happened
 * to every packet. The flow types themselves are shared with the NIC stage
 * and live in flow.h.
 *
 * Every packet is counted exactly once across the tiers. A packet the NIC
 * marked HIT was counted by the NIC's flow table; in passive mode the probe
 * adds it to the per-mark totals only (TW_PV_NIC_COUNTED), never to a flow
 * entry, and neither creates an entry nor samples for it. Inline, a HIT
 * packet is one the NIC handed to software to forward: it is counted in its
 * flow like any other. */
#ifndef TW_PROBE_H
#define TW_PROBE_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "types.h"
#include "flow.h"

/* Upper bound of tw_probe_dpi_pkts: sample numbers fit the u8 seq, and no
 * classifier needs more than a few packets. */
#define TW_DPI_PKTS_MAX 32

/* Set before load (internal/probe/xdp checks the ranges too). */
volatile const __u32 tw_probe_dpi_pkts = 10; /* samples per flow */
volatile const __u32 tw_probe_snaplen = 512; /* <= TW_DPI_SNAP_MAX */
volatile const __u32 tw_probe_inline = 0;    /* 0: passive, 1: inline */
/* Bytes waiting in the sample ring that wake its reader; 0 wakes it for
 * every sample. A reader that polls on its own clock sets this: one wake-up
 * per sample costs more CPU than the sample's DPI at thousands of new flows
 * a second, and the threshold still wakes it before the ring can fill. */
volatile const __u32 tw_probe_ring_wake = 0;

/* Per-CPU counters, packets and bytes (from the IP header on, as the NIC
 * counts; the whole frame when there is no IP header). Three groups each
 * partition the packets: the mark, the class, the outcome. The events at
 * the end count things, not packets. Appended only: an ABI with user space
 * and, once pinned, with state left by an older program. */
enum tw_probe_verdict {
	/* The NIC's mark; index = enum tw_flow_mark. */
	TW_PV_MARK_NONE = 0,
	TW_PV_MARK_HIT = 1,
	TW_PV_MARK_MISS = 2,
	TW_PV_MARK_UNHANDLED = 3,
	/* Class: where the packet's counters went. */
	TW_PV_TRACKED = 4,     /* into its flow entry */
	TW_PV_NIC_COUNTED = 5, /* passive HIT: the NIC's counters hold it */
	TW_PV_TABLE_FULL = 6,  /* untracked: its flow has no entry, no room */
	TW_PV_NON_IP = 7,      /* untracked: not IP (ARP, MPLS, PPPoE, ...) */
	TW_PV_MALFORMED = 8,   /* untracked: the parser refused it */
	TW_PV_FRAGMENT = 9,    /* untracked: non-first fragment, no ports */
	/* Outcome. */
	TW_PV_CONSUMED = 10, /* passive: dropped once accounted */
	TW_PV_FORWARD = 11,  /* inline: redirected to the egress port */
	TW_PV_DISCARD = 12,  /* inline: the flow's action is discard */
	TW_PV_TX_ERROR = 13, /* inline: no egress port, dropped */
	/* Events. */
	TW_PV_FLOW_NEW = 14, /* entries created */
	TW_PV_REFUSED = 15,  /* inserts the full table refused (one per
			      * packet of a flow that finds no room) */
	TW_PV_DPI_SENT = 16, /* samples submitted to the ring buffer */
	TW_PV_DPI_LOST = 17, /* samples the ring buffer had no room for */
	TW_PV_MAX = 18,
};

/* Context of tw_probe_set_state, the control program user space runs through
 * BPF_PROG_TEST_RUN to set a flow's state and action in place. */
struct tw_probe_ctl {
	struct tw_flow_key key;
	__u8 state;  /* enum tw_flow_state */
	__u8 action; /* enum tw_flow_action */
	__u16 _pad;
	__u32 _pad2;
};

/* Return values of tw_probe_set_state. */
enum tw_probe_ctl_ret {
	TW_CTL_OK = 0,
	TW_CTL_NO_FLOW = 1,
};

_Static_assert(sizeof(struct tw_probe_ctl) == 48, "probe ctl size");

/* A batch of control operations (tw_probe_ctl_batch): user space writes
 * them into tw_probe_ops, which it maps, and runs the program once for
 * all of them. One system call, not one per flow: a state change and a
 * delete for every flow were a tenth of the probe's CPU at 1000 flows a
 * second. */
enum tw_probe_op_kind {
	TW_OP_SET_STATE = 1, /* state and action, in place */
	TW_OP_TAKE = 2,      /* copy the entry into flow, then delete it */
};

struct tw_probe_op {
	struct tw_flow_key key;
	__u8 kind;   /* enum tw_probe_op_kind */
	__u8 state;  /* TW_OP_SET_STATE: enum tw_flow_state */
	__u8 action; /* TW_OP_SET_STATE: enum tw_flow_action */
	__u8 ret;    /* written back: enum tw_probe_ctl_ret */
	__u32 _pad;
	struct tw_flow flow; /* TW_OP_TAKE: the entry as it was deleted */
};

enum tw_probe_ops_limit {
	TW_PROBE_OPS = 256, /* operations a batch holds */
};

/* The context of tw_probe_ctl_batch: how many of tw_probe_ops to run. */
struct tw_probe_batch {
	__u32 n;
	__u32 _pad;
};

/* Types user space needs that no map or program signature names: BTF only
 * describes those, so bpf2go -type would not find these without this
 * anchor (a constant in .rodata, never read). */
struct tw_probe_btf {
	struct tw_dpi_sample sample;
	struct tw_flow_meta meta;
	enum tw_flow_mark mark;
	enum tw_flow_state state;
	enum tw_flow_action action;
	enum tw_probe_ctl_ret ctl_ret;
	enum tw_probe_op_kind op_kind;
	enum tw_probe_ops_limit ops_limit;
};
const struct tw_probe_btf tw_probe_btf_anchor __attribute__((unused));

/* The software flow table. Capacity is set at load; a plain hash, never
 * LRU: a full table refuses new flows (counted) and never evicts one whose
 * record user space has not emitted. Preallocated, so an insert never
 * allocates in the packet path. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct tw_flow_key);
	__type(value, struct tw_flow);
	__uint(max_entries, 1);
} tw_probe_flows SEC(".maps");

/* The operations of a batch (struct tw_probe_op), mapped by user space. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct tw_probe_op);
	__uint(max_entries, TW_PROBE_OPS);
} tw_probe_ops SEC(".maps");

/* DPI samples (struct tw_dpi_sample); size set at load. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} tw_probe_ring SEC(".maps");

/* Inline mode: slot 0 is the egress port, set by user space. */
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, 1);
} tw_probe_egress SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, enum tw_probe_verdict);
	__type(value, struct tw_ctr);
	__uint(max_entries, TW_PV_MAX);
} tw_probe_stats SEC(".maps");

#endif
