/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* flow.h - the flow probe's shared types (Deri et al., HPSR 2024): the
 * flow key both tiers use, the mark the NIC stage leaves in XDP metadata
 * for the host, the software flow entry and the DPI sample. The NIC stage
 * (xdp_nicflow.c) and the host's probe (xdp_probe.c) include it; Go gets
 * every struct through bpf2go -type. */
#ifndef TW_FLOW_H
#define TW_FLOW_H

#include <linux/types.h>
#include "parse.h"

/* A flow key names both directions: the endpoints are sorted, the lower
 * (address bytes, then port in host order) first. IPv4 addresses sit in the
 * first four bytes. dir 0 is a packet sent by the lo endpoint, dir 1 by the
 * hi one. Go's flow.Key sorts the same way (tested against this code). */
struct tw_flow_key {
	__u8 family; /* 4 or 6 */
	__u8 proto;
	__u16 _pad;
	__be16 port_lo; /* port of addr_lo; 0 for protocols without ports */
	__be16 port_hi;
	__u8 addr_lo[16];
	__u8 addr_hi[16];
};

/* How the NIC handled a packet that reaches the host: PF_RING's
 * PKT_FLAGS_FLOW_HIT / _MISS / _UNHANDLED. */
enum tw_flow_mark {
	TW_MARK_NONE = 0, /* no NIC stage marked it (no metadata) */
	TW_MARK_HIT =
		1, /* a learned flow the NIC counted and still passed up */
	TW_MARK_MISS = 2, /* no learned flow */
	TW_MARK_UNHANDLED =
		3, /* not matchable: non-TCP/UDP, fragment, table full */
};

#define TW_META_MAGIC 0x74776d6b /* "twmk": metadata we wrote, not garbage */

/* XDP metadata (bpf_xdp_adjust_meta) in front of every packet the NIC
 * stage passes on; it survives bpf_redirect between veths. */
struct tw_flow_meta {
	__u32 magic;
	__u8 mark; /* enum tw_flow_mark */
	__u8 dir;  /* direction within the flow key */
	__u16 _pad;
	__u32 hash; /* the NIC's flow hash (RSS-like), 0 when unhandled */
	__u32 _pad2;
	__u64 flow_id; /* the application's id of a hit flow, else 0 */
};

/* Software flow states: new -> dpi -> learning -> offloaded | software
 * -> ended. Appended only. */
enum tw_flow_state {
	TW_FS_NEW = 0,       /* first packet seen */
	TW_FS_DPI = 1,       /* samples going to user space */
	TW_FS_LEARNING = 2,  /* verdict given, learn queued to the NIC */
	TW_FS_OFFLOADED = 3, /* the NIC counts and handles it */
	TW_FS_SOFTWARE = 4,  /* kept in software (policy, learn failed) */
	TW_FS_ENDED = 5,     /* record emitted, entry about to go */
};

/* What software does with a flow's packets (inline mode). */
enum tw_flow_action {
	TW_FA_FORWARD = 0,
	TW_FA_DISCARD = 1,
};

/* One software flow. Counters are updated with atomic adds: both
 * directions of a flow may be handled on different CPUs. */
struct tw_flow {
	__u64 packets[2]; /* per direction */
	__u64 bytes[2];   /* from the IP header on, as the NIC counts */
	__u64 first_ns;   /* bpf_ktime_get_ns */
	__u64 last_ns;
	__u32 hash;        /* the NIC's flow hash, or ours without a NIC */
	__u32 dpi_sent;    /* samples handed to user space (atomic) */
	__u32 dpi_lost;    /* samples the ring buffer refused */
	__u8 state;        /* enum tw_flow_state */
	__u8 action;       /* enum tw_flow_action */
	__u8 init_dir;     /* direction of the first packet seen */
	__u8 tcp_flags[2]; /* OR of the flags seen, per direction */
	__u8 _pad[7];
	__u64 marks[4]; /* packets per enum tw_flow_mark */
};

/* A DPI sample: the IP packet from its header on, at most snaplen bytes. */
#define TW_DPI_SNAP_MAX 1024

struct tw_dpi_sample {
	struct tw_flow_key key;
	__u64 ts_ns;
	__u32 hash;
	__u16 caplen; /* bytes in data */
	__u16 l3len;  /* the datagram's length */
	__u16 l4off;  /* offsets within data; 0: no L4 header */
	__u16 payoff;
	__u8 dir;
	__u8 seq; /* sample number within the flow, from 0 */
	__u8 tcp_flags;
	__u8 mark;
	__u8 data[TW_DPI_SNAP_MAX];
};

_Static_assert(sizeof(struct tw_flow_key) == 40, "flow key size");
_Static_assert(sizeof(struct tw_flow_meta) == 24, "flow meta size");
_Static_assert(sizeof(struct tw_flow) == 104, "flow entry size");

static __always_inline int tw_flow_addr_cmp(const __u8 *a, const __u8 *b)
{
#pragma unroll
	for (int i = 0; i < 16; i++) {
		if (a[i] != b[i])
			return a[i] < b[i] ? -1 : 1;
	}
	return 0;
}

static __always_inline int tw_flow_word_cmp(__u32 a, __u32 b)
{
	__u32 x = bpf_ntohl(a), y = bpf_ntohl(b);
	return x < y ? -1 : x > y ? 1 : 0;
}

/* Builds the key of a parsed packet and returns its direction. Called on
 * the header as it is (no unmapping): hardware matches what it sees.
 * Addresses are compared as big-endian 32-bit words, which orders them as
 * tw_flow_addr_cmp orders bytes, and copied straight from the packet
 * fields: byte arrays on the stack cost a program ~320 of its 512 bytes. */
static __always_inline __u8 tw_flow_key_of(const struct tw_pkt *p,
					   struct tw_flow_key *k)
{
	int c = 0;
	if (p->family == 4) {
		c = tw_flow_word_cmp(p->src4, p->dst4);
	} else {
#pragma unroll
		for (int i = 0; i < 4; i++) {
			if (c == 0)
				c = tw_flow_word_cmp(p->src6[i], p->dst6[i]);
		}
	}
	if (c == 0)
		c = bpf_ntohs(p->sport) < bpf_ntohs(p->dport) ? -1 :
		    bpf_ntohs(p->sport) > bpf_ntohs(p->dport) ? 1 :
								0;
	__u8 dir = c > 0;
	k->family = p->family;
	k->proto = p->proto;
	k->_pad = 0;
	k->port_lo = dir ? p->dport : p->sport;
	k->port_hi = dir ? p->sport : p->dport;
	__builtin_memset(k->addr_lo, 0, sizeof(k->addr_lo));
	__builtin_memset(k->addr_hi, 0, sizeof(k->addr_hi));
	if (p->family == 4) {
		__u32 lo = dir ? p->dst4 : p->src4,
		      hi = dir ? p->src4 : p->dst4;
		__builtin_memcpy(k->addr_lo, &lo, 4);
		__builtin_memcpy(k->addr_hi, &hi, 4);
	} else {
		__builtin_memcpy(k->addr_lo, dir ? p->dst6 : p->src6, 16);
		__builtin_memcpy(k->addr_hi, dir ? p->src6 : p->dst6, 16);
	}
	return dir;
}

#endif
