/* SPDX-License-Identifier: GPL-2.0-only */
/* nic.h - types and maps of the emulated SmartNIC stage (xdp_nic.c): an
 * exact-match hardware table of capacity K with per-rule counters, in front
 * of the host. Kept apart from maps.h: the NIC stage is a different device
 * with its own state and never sees the filter's maps. */
#ifndef TW_NIC_H
#define TW_NIC_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "types.h"

/* A hardware rule's match: a source address alone (every other field
 * zero) or a full 5-tuple flow. Ports are in network order. */
struct tw_nic_key {
	__u8 family; /* 4 or 6 */
	__u8 proto;  /* 0 for a source rule */
	__u16 _pad;
	__be16 sport;
	__be16 dport;
	__u8 src[16]; /* IPv4 in the first four bytes */
	__u8 dst[16];
};

enum tw_nic_action {
	TW_NIC_DROP = 1,    /* drop in "hardware": never reaches the host */
	TW_NIC_FORWARD = 2, /* count and pass on (flow offload) */
};

struct tw_nic_rule {
	enum tw_nic_action action;
	__u32 id; /* index of the rule's counters in tw_nic_ctr */
};

/* What the stage did with a packet; one per-CPU counter each. Appended
 * only: the numbering is an ABI with pinned maps. */
enum tw_nic_verdict {
	TW_NV_HIT_DROP = 0,
	TW_NV_HIT_FORWARD = 1,
	TW_NV_MISS = 2,         /* IP, no rule: passed to the host */
	TW_NV_UNHANDLED = 3,    /* not parsed (non-IP, malformed): passed on */
	TW_NV_TX_ERROR = 4,     /* redirect to the host port failed: dropped */
	TW_NV_CPU = 5,          /* handed to the filter on the NIC CPU */
	TW_NV_CPU_OVERLOAD = 6, /* over NIC CPU rate: dropped unfiltered */
	TW_NV_MAX = 7,
};

/* What the stage does besides forwarding (tw_nic_config.flags): the
 * paper's four approaches are combinations of these. */
enum tw_nic_flags {
	TW_NIC_F_TABLE = 1, /* match the hardware table */
	TW_NIC_F_CPU = 2,   /* run the XDP filter on the NIC CPU (tail call) */
};

struct tw_nic_config {
	__u32 host_ifindex; /* port toward the host; 0: XDP_PASS (tests) */
	__u32 flows_n;      /* 5-tuple rules installed: skip that lookup at 0 */
	__u32 capacity;     /* K, kept for re-adoption */
	__u32 latency_us;   /* emulated per-update latency, kept likewise */
	enum tw_nic_flags flags;
	__u32 _pad;
	__u64 cpu_rate_pps; /* NIC CPU capacity, shared by all CPUs; 0: none */
};

_Static_assert(sizeof(struct tw_nic_key) == 40, "nic key size");
_Static_assert(sizeof(struct tw_nic_config) == 32, "nic config size");

/* Set before load: CPUs sharing the NIC CPU rate. */
volatile const __u32 tw_nic_ncpu = 1;

/* The filter program the NIC CPU runs (slot 0), loaded with its own maps
 * by internal/datapath and inserted here instead of attached to a link. */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, 1);
} tw_nic_cpu SEC(".maps");

/* Per-CPU token bucket for cpu_rate_pps: credit in nanopackets. */
struct tw_nic_bucket {
	__u64 credit;
	__u64 last_ns;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct tw_nic_bucket);
	__uint(max_entries, 1);
} tw_nic_bucket SEC(".maps");

/* Capacity K is the map size: the kernel itself refuses rule K+1. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct tw_nic_key);
	__type(value, struct tw_nic_rule);
	__uint(max_entries, 512);
} tw_nic_rules SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct tw_ctr);
	__uint(max_entries, 512);
} tw_nic_ctr SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, enum tw_nic_verdict);
	__type(value, struct tw_ctr);
	__uint(max_entries, TW_NV_MAX);
} tw_nic_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct tw_nic_config);
	__uint(max_entries, 1);
} tw_nic_cfg SEC(".maps");

#endif
