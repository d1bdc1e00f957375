/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* nicflow.h - types and maps of the emulated SmartNIC in flow mode
 * (xdp_nicflow.c), after Napatech's Flow Manager as PF_RING drives it (Deri
 * et al., HPSR 2024): a hardware flow table of capacity K that the NIC's
 * "firmware" (internal/tier/nicstage) learns flows into, per-direction
 * counters the data plane keeps in each entry, and the verdicts of every
 * packet. The mark left for the host is flow.h's tw_flow_meta. */
#ifndef TW_NICFLOW_H
#define TW_NICFLOW_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "types.h"
#include "flow.h"

/* An entry's life. The data plane only ever moves ACTIVE to TERMINATING,
 * the firmware ACTIVE or TERMINATING to UNLEARNING, both by compare and
 * swap: neither can undo the other. */
enum tw_nicflow_state {
	TW_NFS_ACTIVE = 1,      /* learned: counted and acted on */
	TW_NFS_TERMINATING = 2, /* TCP end seen, firmware told; still a hit */
	TW_NFS_UNLEARNING = 3,  /* being removed: a miss from now on */
};

enum tw_nicflow_opt {
	TW_NFO_TCP_AUTO = 1, /* unlearn on RST or FIN from both sides */
};

/* One hardware flow. Counters are shared by all CPUs (both directions of a
 * flow may arrive on different queues) and updated with atomic adds; the
 * firmware writes the entry once, at learn, and never again but for the
 * state, so no update of the data plane is ever overwritten. */
struct tw_nicflow_entry {
	__u64 packets[2]; /* per direction of the key */
	__u64 bytes[2];   /* from the IP header on, as NICs count */
	__u64 flow_id;    /* the application's id */
	__u64 learned_ns; /* CLOCK_MONOTONIC, set by the firmware */
	__u64 last_ns;    /* last hit (learned_ns before any) */
	enum tw_nicflow_state state;
	__u32 tcp_flags; /* OR of the flags seen: dir 0 bits 0-7, dir 1 8-15 */
	__u32 hash;      /* the key's flow hash */
	__u32 idle_ms;   /* idle timeout; 0: none */
	__u32 life_ms;   /* lifetime; 0: none */
	__u8 action;     /* enum tw_flow_action */
	__u8 opts;       /* enum tw_nicflow_opt */
	__u16 _pad;
};

/* A flow named to or by the firmware: the auto-unlearn ring's record and
 * the argument of tw_nicflow_unlearning. */
struct tw_nicflow_ref {
	struct tw_flow_key key;
	__u64 flow_id;
};

/* What the stage did with a packet; one per-CPU counter each. Appended
 * only. Every packet is counted under exactly one outcome (HIT_DISCARD to
 * RETURN); the rest are counted besides it. */
enum tw_nicflow_verdict {
	TW_NFV_HIT_DISCARD = 0, /* learned, discard: dropped here */
	TW_NFV_HIT_HOST = 1,   /* learned, forward, passive: to the host, HIT */
	TW_NFV_HIT_TWIN = 2,   /* learned, forward, inline: out of the twin */
	TW_NFV_MISS = 3,       /* TCP/UDP, not learned: to the host, MISS */
	TW_NFV_UNH_FULL = 4,   /* a miss while the table is full: UNHANDLED */
	TW_NFV_UNH_PROTO = 5,  /* IP, neither TCP nor UDP: UNHANDLED */
	TW_NFV_UNH_FRAG = 6,   /* an IPv4 fragment: UNHANDLED */
	TW_NFV_UNH_EXT = 7,    /* IPv6 with extension headers: UNHANDLED */
	TW_NFV_UNH_PARSE = 8,  /* non-IP or malformed: UNHANDLED */
	TW_NFV_RETURN = 9,     /* host port: back from the host to the twin */
	TW_NFV_TX_ERROR = 10,  /* besides: redirect refused, dropped */
	TW_NFV_NO_META = 11,   /* besides: no headroom, passed without mark */
	TW_NFV_TERM_LOST = 12, /* besides: ring full, the sweep finds it */
	TW_NFV_UNLEARNING =
		13, /* besides: a miss on an entry being unlearned */
	TW_NFV_MAX = 14,
};

/* More fragments, beside parse.h's offset mask. */
#define TW_NF_IP_MF 0x2000

_Static_assert(sizeof(struct tw_nicflow_entry) == 80, "nicflow entry size");
_Static_assert(sizeof(struct tw_nicflow_ref) == 48, "nicflow ref size");

/* Set before load. Ports are ifindexes; 0 passes the packet up instead
 * (BPF_PROG_TEST_RUN). */
volatile const __u32 tw_nicflow_seed = 0;
volatile const __u32 tw_nicflow_capacity = 1 << 20;
volatile const __u32 tw_nicflow_host = 0;   /* the host-facing port */
volatile const __u32 tw_nicflow_twin = 0;   /* inline: the other wire port */
volatile const __u32 tw_nicflow_inline = 0; /* 1: forward to the twin */

/* Capacity K is the map size (set at load): the kernel refuses flow K+1.
 * Not preallocated: 1M entries would pin ~170 MB whether used or not. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct tw_flow_key);
	__type(value, struct tw_nicflow_entry);
	__uint(max_entries, 1 << 20);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} tw_nicflow_table SEC(".maps");

/* Flows in the table, kept by the firmware: a miss is UNHANDLED, not
 * MISS, when it is at the capacity (a NIC out of flow resources). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, 1);
} tw_nicflow_occ SEC(".maps");

/* TCP terminations for the firmware, so it need not scan for them. Read
 * every firmware tick (50 ms): 1 MiB holds 18K of them, 370K ends/s. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1024 * 1024);
} tw_nicflow_term SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, enum tw_nicflow_verdict);
	__type(value, struct tw_ctr);
	__uint(max_entries, TW_NFV_MAX);
} tw_nicflow_stats SEC(".maps");

/* The NIC's RSS-like flow hash: MurmurHash3 (x86_32) of the key's ten
 * words under the load-time seed. The key is sorted, so both directions
 * hash alike. Mirrored by nicstage.FlowHash. */
static __always_inline __u32 tw_nicflow_rotl(__u32 x, int r)
{
	return (x << r) | (x >> (32 - r));
}

static __always_inline __u32 tw_nicflow_hash(const __u32 *w, __u32 seed)
{
	__u32 h = seed;
#pragma unroll
	for (int i = 0; i < sizeof(struct tw_flow_key) / 4; i++) {
		__u32 k = w[i] * 0xcc9e2d51;
		k = tw_nicflow_rotl(k, 15) * 0x1b873593;
		h ^= k;
		h = tw_nicflow_rotl(h, 13) * 5 + 0xe6546b64;
	}
	h ^= sizeof(struct tw_flow_key);
	h ^= h >> 16;
	h *= 0x85ebca6b;
	h ^= h >> 13;
	h *= 0xc2b2ae35;
	h ^= h >> 16;
	return h;
}

static __always_inline void tw_nicflow_count(__u32 v, __u32 bytes)
{
	struct tw_ctr *c = bpf_map_lookup_elem(&tw_nicflow_stats, &v);
	if (c) {
		c->packets++;
		c->bytes += bytes;
	}
}

/* TCP end as the auto-unlearn option sees it: RST from either side, or FIN
 * from both (flags of both directions in one word). */
static __always_inline int tw_nicflow_tcp_end(__u32 flags)
{
	return (flags & 0x0404) || (flags & 0x0101) == 0x0101;
}

#endif
