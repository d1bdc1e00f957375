/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* nic.h - the emulated SmartNIC's match stage: an exact-match hardware
 * table of capacity K with per-rule counters, in front of the host, and
 * its lookup. Kept apart from maps.h: the NIC stage is a different device
 * with its own state and never sees the filter's maps. Its NIC CPU is in
 * nic_cpu.h: the lab's generator runs this table (xdp_gen.c) but never
 * the NIC CPU. */
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
	__u32 pol_n;        /* policers in force: 0 skips tw_nic_pol */
	__u64 cpu_rate_pps; /* NIC CPU capacity, shared by all CPUs; 0: none */
};

_Static_assert(sizeof(struct tw_nic_key) == 40, "nic key size");
_Static_assert(sizeof(struct tw_nic_config) == 32, "nic config size");

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

/* The hardware's flow policers: the daemon's flow rules for floods whose
 * sources cannot be listed, matched on destination and packet shape as
 * the filter matches them (fmatch.h), with a rate or a drop and nothing
 * that needs the host (no known-good bypass, no SYN proxy): what tc
 * flower with a police action does on a real card. A small table, as a
 * NIC's is; the first match decides.
 *
 * Replaced whole as the filter's flow rules are (maps.h): the set lives
 * in one of two banks, tw_nic_pol points at the one in force, and user
 * space writes the other, then swaps; the swap returns after an RCU grace
 * period, so a packet meets the old set or the new one, never a rule half
 * written. tw_frule.id indexes a policer's counters and bucket: a policer
 * kept across a swap keeps both, a new one gets an id the old set does
 * not use. */
#define TW_NIC_POL_MAX 16
#define TW_NIC_POL_IDS (2 * TW_NIC_POL_MAX)

struct tw_nic_pol_set {
	struct tw_frule rule[TW_NIC_POL_MAX]; /* then action TW_FA_END */
};

struct tw_nic_pol_bank {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct tw_nic_pol_set);
	__uint(max_entries, 1);
};

/* const: see the filter's banks in maps.h, for clang 14's BTF. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, const struct tw_nic_pol_set);
	__uint(max_entries, 1);
} tw_nic_pol_a SEC(".maps"), tw_nic_pol_b SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__type(key, __u32);
	__uint(max_entries, 1);
	__array(values, struct tw_nic_pol_bank);
} tw_nic_pol SEC(".maps");

/* Per policer id, per CPU: packets and bytes matched, dropped. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct tw_fctr);
	__uint(max_entries, TW_NIC_POL_IDS);
} tw_nic_pol_ctr SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct tw_fbucket);
	__uint(max_entries, TW_NIC_POL_IDS);
} tw_nic_pol_tb SEC(".maps");

_Static_assert(sizeof(struct tw_nic_pol_set) == 64 * TW_NIC_POL_MAX,
	       "policer set size");

static __always_inline void tw_nic_count(void *map, __u32 idx, __u32 bytes)
{
	struct tw_ctr *c = bpf_map_lookup_elem(map, &idx);
	if (c) {
		c->packets++;
		c->bytes += bytes;
	}
}

/* The table's rule for k, a packet's full key: its 5-tuple rule when any
 * is installed, else its source's. A miss leaves k as the source key. */
static __always_inline struct tw_nic_rule *
tw_nic_lookup(const struct tw_nic_config *cfg, struct tw_nic_key *k)
{
	struct tw_nic_rule *r = NULL;
	if (cfg && cfg->flows_n)
		r = bpf_map_lookup_elem(&tw_nic_rules, k);
	if (!r) {
		/* A source rule: everything but family and source zero. */
		k->proto = 0;
		k->sport = 0;
		k->dport = 0;
		__builtin_memset(k->dst, 0, sizeof(k->dst));
		r = bpf_map_lookup_elem(&tw_nic_rules, k);
	}
	return r;
}

#endif
