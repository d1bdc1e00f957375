/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* consts.h - limits, verdict reasons and slot states shared by every
 * tierwall program. Enums listed here are exported to Go by bpf2go, so the
 * numbering is an ABI with pinned maps: append, never renumber. */
#ifndef TW_CONSTS_H
#define TW_CONSTS_H

/* Bumped whenever a pinned map's layout or meaning changes; user space
 * refuses to re-adopt pinned state written under another layout. An enum
 * so that bpf2go exports it. */
enum tw_layout {
	/* 4: exact tables and counters mmapable; 5: flow rules, the
	 * known-good lists, tw_jmp and the port profile in the feature
	 * buffers; 6: the heavy-hitter detector and provisional drops; 7:
	 * exact rules' counters in their slots, shared by the CPUs; 8: the
	 * heavy hitter counts in jiffies, samples, and marks its catches; 9:
	 * known-good members carry a token bucket, the config its rate; 10:
	 * the known-good sieve; 11: the known-good lists are plain hashes;
	 * 12: the port profile's fifth row, SYNs by length; 13: the SYN
	 * guard (its verdict, its per-CPU window, the config's budget) */
	TW_LAYOUT_VERSION = 13,
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

/* Flow rules (frule.h). TW_FRULE_MAX rules are evaluated in order, so the
 * bound is what one packet may cost: 64 rules that all miss add ~100 ns
 * here (BenchmarkFlowRules). Counters and buckets are addressed by a
 * rule id, not its position; there are twice as many ids as rules so that
 * a new set never has to reuse an id that the set it replaces still
 * counts into (ids are free again once the old bank is quiescent). */
enum tw_frule_limit {
	TW_FRULE_MAX = 64,
	TW_FRULE_IDS = 2 * TW_FRULE_MAX,
};

/* A rule's action; the values are those of rule.FlowAction. A zero action
 * ends the rule set: a bank holds its rules, then zeroed entries. */
enum tw_frule_action {
	TW_FA_END = 0,
	TW_FA_DROP = 1,
	TW_FA_RATE = 2,      /* per-CPU token bucket, rate_pps in all */
	TW_FA_SYNCOOKIE = 3, /* tail call into tw_jmp[TW_JMP_SYNPROXY] */
};

/* Which fragments a rule matches; the values are rule.FragmentMatch's. */
enum tw_frule_frag {
	TW_FM_ANY = 0,
	TW_FM_NONE = 1,  /* unfragmented only */
	TW_FM_FRAG = 2,  /* first or later fragments */
	TW_FM_LATER = 3, /* non-first fragments only */
};

/* What a packet is, for tw_frule_frag: tw_pkt.frag is 0 or these bits. A
 * later fragment has TW_PF_LATER and may have TW_PF_FIRST too (its MF
 * flag); only 0 is unfragmented. */
enum tw_pkt_frag {
	TW_PF_NONE = 0,
	TW_PF_FIRST = 1, /* more fragments follow */
	TW_PF_LATER = 2, /* offset > 0: no L4 header */
};

enum tw_frule_flag {
	TW_FRULE_F_DPORT = 1 << 0,  /* dport_lo..dport_hi applies */
	TW_FRULE_F_SPORT = 1 << 1,  /* sport_lo..sport_hi applies */
	TW_FRULE_F_LEN = 1 << 2,    /* len_lo..len_hi applies */
	TW_FRULE_F_BYPASS = 1 << 3, /* known-good sources pass */
};

/* Slots of tw_jmp, the filter's tail-call table. */
enum tw_jmp_slot {
	TW_JMP_SYNPROXY = 0,
};

/* The port profile: packets that passed, per CPU, by (protocol, side,
 * port), in four rows of 65536 __u64 counters (TCP source, TCP
 * destination, UDP source, UDP destination), and a fifth of the SYNs
 * (without ACK) that passed by IP length (IPv4 at [length], IPv6 at
 * [TW_SYNLEN_V6 | length], lengths from TW_SYNLEN_MAX counted at it),
 * kept in the feature buffers after the CPU headers, eight counters per
 * 64-byte slot. */
enum tw_port_profile {
	TW_PORT_ROW_SYNLEN = 4,
	TW_SYNLEN_V6 = 0x8000,
	TW_SYNLEN_MAX = 0x7fff,
	TW_PORT_ROWS = 5,
	TW_PORT_SLOTS = TW_PORT_ROWS * 65536 / 8, /* per CPU */
};

/* The heavy-hitter detector (heavy.h): a count-min sketch, per CPU, over
 * windows of 1 << tw_hh_config.tick_shift jiffies, in TW_HH_LINES cache lines of
 * TW_HH_SLOTS counters. A source has two counters in one line (a blocked
 * sketch: one cache miss a counted packet); an innocent source is over-counted
 * only when a heavy one shares its line and both of its slots, about
 * 1 / (TW_HH_LINES x 6) per heavy source. Cost and memory are fixed
 * whatever the number of sources. TW_HH_MAX_CPUS bounds the cross-CPU
 * sum. */
enum tw_hh_limit {
	TW_HH_LINES = 4096, /* per CPU: 256 KiB */
	TW_HH_SLOTS = 4,
	TW_HH_MAX_CPUS = 64,
	/* Catch marks (tw_hh_marks): 512 lines of 16, 32 KiB for all CPUs;
	 * a source shares both of its marks with one live entry with
	 * probability about 1 / (512 x 120). */
	TW_HH_MARK_LINES = 512,
	TW_HH_MARK_SLOTS = 16,
};

/* What put a source in the provisional table. */
enum tw_hh_kind {
	TW_HH_PACKETS = 1,
	TW_HH_SYNS = 2,
};

enum tw_prov_flag {
	TW_PROV_MONITOR = 1 << 0, /* monitor-only: counted, never dropped */
	TW_PROV_REVOKED = 1
			  << 1, /* the daemon refused it: passes until expiry */
};

/* Each CPU's cache of the exact rules it hit last (table.h): entries per
 * CPU, a power of two, indexed by the low bits of the slot index. The tag
 * of an IPv6 slot has TW_HOT_V6 set. */
enum tw_hot_limit {
	TW_HOT_SLOTS = 64,
	TW_HOT_V6 = 1U << 31,
};

enum tw_slot_state {
	TW_SLOT_EMPTY = 0, /* never used: ends a probe run */
	TW_SLOT_USED = 1,  /* holds a rule */
	TW_SLOT_TOMB = 2,  /* deleted: probe runs continue past it */
};

/* One verdict reason per packet; each has a per-CPU packets/bytes counter.
 * docs/ARCHITECTURE.md holds the policy table for the malformed kinds. */
enum tw_reason {
	TW_R_PASS = 0,        /* no rule matched */
	TW_R_DROP_EXACT,      /* /32 or /128 rule */
	TW_R_DROP_PREFIX,     /* LPM prefix rule */
	TW_R_ALLOW,           /* allowlisted: passes whatever block rules say */
	TW_R_NON_IP,          /* not IPv4/IPv6 after the tags, nor below */
	TW_R_ETH_TRUNC,       /* shorter than an Ethernet header */
	TW_R_VLAN_TRUNC,      /* VLAN tag cut short */
	TW_R_VLAN_DEPTH,      /* more tags than TW_MAX_VLAN */
	TW_R_IP4_TRUNC,       /* less than 20 bytes of IPv4 header */
	TW_R_IP4_VERSION,     /* ethertype IPv4, version field not 4 */
	TW_R_IP4_IHL,         /* IHL < 5 or options beyond the frame */
	TW_R_IP4_LEN,         /* total length < header or > frame */
	TW_R_IP6_TRUNC,       /* less than 40 bytes of IPv6 header */
	TW_R_IP6_VERSION,     /* ethertype IPv6, version field not 6 */
	TW_R_IP6_LEN,         /* payload length beyond the frame */
	TW_R_IP6_EXT_TRUNC,   /* extension header runs past the packet */
	TW_R_IP6_EXT_LIMIT,   /* more than TW_MAX_EXT extension headers */
	TW_R_L4_TRUNC,        /* unfragmented TCP/UDP header cut short */
	TW_R_NON_IP_ARP,      /* ARP (0x0806), passed */
	TW_R_NON_IP_MPLS,     /* MPLS (0x8847, 0x8848), passed */
	TW_R_NON_IP_PPPOE,    /* PPPoE (0x8863, 0x8864), passed */
	TW_R_DROP_FLOW,       /* flow rule, action drop */
	TW_R_DROP_FLOW_RATE,  /* flow rule, rate-limit, over the rate */
	TW_R_PASS_KNOWN_GOOD, /* flow rule with bypass, source known good */
	TW_R_SYNPROXY_MISSING, /* syn-cookie rule, no SYN proxy: passed */
	TW_R_DROP_PROVISIONAL, /* heavy hitter, dropped before the daemon saw it */
	TW_R_PASS_PROVISIONAL, /* heavy hitter in monitor-only mode: passed */
	TW_R_DROP_SYN_GUARD, /* SYN over the guard's budget, source not known good */
	TW_R_MAX,
};

#endif
