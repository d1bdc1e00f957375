/* SPDX-License-Identifier: GPL-2.0-only */
/* consts.h - limits, verdict reasons and slot states shared by every
 * tierwall program. Enums listed here are exported to Go by bpf2go, so the
 * numbering is an ABI with pinned maps: append, never renumber. */
#ifndef TW_CONSTS_H
#define TW_CONSTS_H

/* Bumped whenever a pinned map's layout or meaning changes; user space
 * refuses to re-adopt pinned state written under another layout. An enum
 * so that bpf2go exports it. */
enum tw_layout {
	TW_LAYOUT_VERSION = 4, /* 4: exact tables and counters mmapable */
};

/* Parser bounds. Two tags cover 802.1Q and QinQ (802.1ad or the legacy
 * 0x9100/0x9200 outer tag, any TPID at either depth); eight extension
 * headers is more than any legitimate IPv6 packet carries. */
#define TW_MAX_VLAN 2
#define TW_MAX_EXT 8

/* Longest linear-probe run the data plane walks in an exact table. User
 * space refuses an insert that would need a longer run ("table full"), so a
 * rule is never stored where the data plane would not find it. */
#define TW_MAX_PROBE 128

/* Longest probe run in a feature buffer region. Regions have at least
 * twice as many slots as the capacity, so runs stay short; a longer one is
 * counted as overflow like a full region. */
#define TW_FEAT_PROBE 32

/* 32-bit words of the feature hash seed: one per word of the 36-byte
 * feature key, plus one to pair with the last (see tw_feat_hash). */
#define TW_FEAT_SEED_WORDS 10

/* last_hit is shared by all CPUs; it is only rewritten when older than this,
 * so a flood does not bounce the cache line between cores. */
#define TW_LAST_HIT_RES_NS 250000000ULL

enum tw_slot_state {
	TW_SLOT_EMPTY = 0, /* never used: ends a probe run */
	TW_SLOT_USED = 1,  /* holds a rule */
	TW_SLOT_TOMB = 2,  /* deleted: probe runs continue past it */
};

/* One verdict reason per packet; each has a per-CPU packets/bytes counter.
 * docs/ARCHITECTURE.md holds the policy table for the malformed kinds. */
enum tw_reason {
	TW_R_PASS = 0,      /* no rule matched */
	TW_R_DROP_EXACT,    /* /32 or /128 rule */
	TW_R_DROP_PREFIX,   /* LPM prefix rule */
	TW_R_ALLOW,         /* allowlisted: passes whatever block rules say */
	TW_R_NON_IP,        /* not IPv4/IPv6 after the tags, nor below */
	TW_R_ETH_TRUNC,     /* shorter than an Ethernet header */
	TW_R_VLAN_TRUNC,    /* VLAN tag cut short */
	TW_R_VLAN_DEPTH,    /* more tags than TW_MAX_VLAN */
	TW_R_IP4_TRUNC,     /* less than 20 bytes of IPv4 header */
	TW_R_IP4_VERSION,   /* ethertype IPv4, version field not 4 */
	TW_R_IP4_IHL,       /* IHL < 5 or options beyond the frame */
	TW_R_IP4_LEN,       /* total length < header or > frame */
	TW_R_IP6_TRUNC,     /* less than 40 bytes of IPv6 header */
	TW_R_IP6_VERSION,   /* ethertype IPv6, version field not 6 */
	TW_R_IP6_LEN,       /* payload length beyond the frame */
	TW_R_IP6_EXT_TRUNC, /* extension header runs past the packet */
	TW_R_IP6_EXT_LIMIT, /* more than TW_MAX_EXT extension headers */
	TW_R_L4_TRUNC,      /* unfragmented TCP/UDP header cut short */
	TW_R_NON_IP_ARP,    /* ARP (0x0806), passed */
	TW_R_NON_IP_MPLS,   /* MPLS (0x8847, 0x8848), passed */
	TW_R_NON_IP_PPPOE,  /* PPPoE (0x8863, 0x8864), passed */
	TW_R_MAX,
};

#endif
