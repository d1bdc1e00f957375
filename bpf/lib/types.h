/* SPDX-License-Identifier: GPL-2.0-only */
/* types.h - every struct that crosses the kernel/user boundary. Go gets
 * these through bpf2go -type, never by hand; the asserts pin the sizes the
 * table code and the Go side rely on. */
#ifndef TW_TYPES_H
#define TW_TYPES_H

#include <linux/types.h>
#include "consts.h"

/* Exact-match slot for one IPv4 source. Four slots share a cache line, so
 * a probe run of a few slots usually costs one memory access. */
struct tw_exact4 {
	__u32 addr; /* network byte order */
	enum tw_slot_state state;
	__u64 last_hit; /* CLOCK_MONOTONIC_COARSE ns, shared, rate-limited */
};

struct tw_exact6 {
	__u8 addr[16];
	enum tw_slot_state state;
	__u32 _pad;
	__u64 last_hit;
};

/* Per-rule counter. Stored per CPU as [cpu * slots + slot] in a plain
 * array: each core writes only its own block, so no atomics are needed. */
struct tw_ctr {
	__u64 packets;
	__u64 bytes;
};

struct tw_lpm4_key {
	__u32 prefixlen;
	__u32 addr;
};

struct tw_lpm6_key {
	__u32 prefixlen;
	__u8 addr[16];
};

/* Value of a prefix or allowlist entry: id indexes the per-CPU counters. */
struct tw_lpm_val {
	__u32 id;
	__u32 _pad;
	__u64 last_hit;
};

/* Read by the data plane on every packet; written only by user space, which
 * also keeps here what it needs to re-adopt the pinned state. */
struct tw_config {
	enum tw_layout layout; /* TW_LAYOUT_VERSION of whoever made the maps */
	__u32 seed;     /* exact-table hash seed, random per created table */
	__u32 allow4_n; /* entry counts: an empty trie is never searched */
	__u32 allow6_n;
	__u32 pfx4_n;
	__u32 pfx6_n;
	__u32 exact4_n;
	__u32 exact6_n;
	__u32 features; /* 0 disables feature extraction */
	__u32 xdp_mode; /* attach mode of the pinned link (1 native, 2 generic) */
	__u32 exact4_cap; /* rule capacity; the table has more slots than this */
	__u32 exact6_cap;
	__u64 feat_since; /* CLOCK_MONOTONIC ns the active feature buffer started */
	__u32 feat_cap; /* feature keys per CPU region per interval */
	__u32 _pad2;
	/* Feature hash seed, random per created state (tw_feat_hash). */
	__u32 feat_seed[TW_FEAT_SEED_WORDS];
};

/* Feature-extraction key: one per (family, source, destination, protocol). */
struct tw_feat_key {
	__u8 family; /* 4 or 6 */
	__u8 proto;
	__u16 _pad;
	__u8 src[16]; /* IPv4 in the first four bytes */
	__u8 dst[16];
};

/* One slot of a feature buffer: exactly one cache line. family == 0 marks
 * a free slot. The last slot of each CPU's region is its header instead
 * (used = keys stored this interval, in packets). */
struct tw_feat_slot {
	struct tw_feat_key key;
	__u32 _pad;
	__u64 packets;
	__u64 bytes;
	__u64 syns; /* TCP SYN without ACK */
};

struct tw_feat_stats {
	__u64 overflow; /* packets not counted because the buffer was full */
};

_Static_assert(sizeof(struct tw_exact4) == 16, "exact4 slot size");
_Static_assert(sizeof(struct tw_exact6) == 32, "exact6 slot size");
_Static_assert(sizeof(struct tw_ctr) == 16, "counter size");
_Static_assert(sizeof(struct tw_feat_key) == 36, "feature key size");
_Static_assert(sizeof(struct tw_config) == 104, "config size");
_Static_assert(sizeof(struct tw_feat_slot) == 64, "feature slot size");

#endif
