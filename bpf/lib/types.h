/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* types.h - every struct that crosses the kernel/user boundary. Go gets
 * these through bpf2go -type, never by hand; the asserts pin the sizes the
 * table code and the Go side rely on. */
#ifndef TW_TYPES_H
#define TW_TYPES_H

#include <linux/types.h>
#include "consts.h"

/* Exact-match slot for one source, with the rule's counters in it: a hit
 * reads and writes one cache line, where a separate per-CPU counter array
 * cost a second random line (and, past the TLB's reach, a second page
 * walk) per packet. The counters are shared by the CPUs and added
 * atomically (table.h says why that and not plain adds). Two IPv4 slots
 * share a line; an IPv6 slot is a line of its own, never straddling two. */
struct tw_exact4 {
	__u32 addr; /* network byte order */
	enum tw_slot_state state;
	__u64 last_hit; /* CLOCK_MONOTONIC_COARSE ns, shared, rate-limited */
	__u64 packets;
	__u64 bytes;
};

struct tw_exact6 {
	__u8 addr[16];
	enum tw_slot_state state;
	__u32 _pad;
	__u64 last_hit;
	__u64 packets;
	__u64 bytes;
	__u64 _pad2[2];
};

/* One CPU's pending counts of one exact rule, [cpu * TW_HOT_SLOTS +
 * (slot & (TW_HOT_SLOTS - 1))]: a rule's counters are its slot's plus
 * every CPU's entry tagged with it. Only that CPU writes the entry, except
 * that user space zeroes the counts of a slot it gives a new rule. seq is
 * odd while the CPU moves the counts into the slot, so a reader can tell
 * a torn reading from a good one. */
struct tw_hot {
	__u32 tag; /* slot index, | TW_HOT_V6 for the IPv6 table */
	__u32 seq;
	__u64 packets;
	__u64 bytes;
};

/* One CPU's reading of the coarse clock and the jiffies it was read at
 * (tw_clock, table.h). */
struct tw_clock {
	__u64 jiffies;
	__u64 now; /* CLOCK_MONOTONIC_COARSE ns */
};

/* One CPU's window of the SYN guard (synguard.h): the jiffy it counts,
 * and the SYNs it passed in that jiffy. */
struct tw_sg {
	__u64 jiffies;
	__u64 passed;
};

/* Per-rule counter of the prefix and allowlist tries. Stored per CPU as
 * [cpu * cap + id] in a plain array: each core writes only its own block,
 * so no atomics are needed. */
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
	/* Rules in the active flow-rule bank; 0 skips the bank. Written
	 * before a swap that adds rules, after one that empties the bank,
	 * so it is never 0 while rules are active. */
	__u32 frule_n;
	/* Feature hash seed, random per created state (tw_feat_hash). */
	__u32 feat_seed[TW_FEAT_SEED_WORDS];
	/* Packets per second, all CPUs together, that one known-good source
	 * may pass a bypass rule with outside the host's connections: its
	 * address alone is no proof, since anyone can spoof it. 0: none. */
	__u32 good_pps;
	/* The SYN guard's budget (synguard.h): SYNs per CPU per jiffy that
	 * sources which are not known good may pass to the host's stack when
	 * no list or rule decided them; 0: the guard is off. */
	__u32 syn_guard;
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

/* One flow rule (frule.h), one cache line. Destinations are 16 bytes
 * whatever the family, IPv4 as ::ffff:a.b.c.d, so one comparison serves
 * IPv4 packets and IPv6 packets to IPv4-mapped destinations alike. Ports
 * and lengths are in host order. Everything the operator wrote is kept
 * (family, prefix length, which ranges apply), so user space reads the
 * rule set back from the bank and needs no other record of it. */
struct tw_frule {
	__u8 dst[16];   /* prefix address, masked */
	__u8 mask[16];  /* IPv4: 96 one bits, then the prefix's */
	__u64 rate_pps; /* TW_FA_RATE: packets per second, all CPUs */
	__u16 dport_lo;
	__u16 dport_hi;
	__u16 sport_lo;
	__u16 sport_hi;
	__u16 len_lo; /* IP datagram length, header included */
	__u16 len_hi;
	enum tw_frule_action action; /* TW_FA_END ends the set */
	__u8 id;       /* counter and bucket index, < TW_FRULE_IDS */
	__u8 family;   /* 4 or 6; 6 only matches packets sent as IPv6 */
	__u8 bits;     /* prefix length in its own family */
	__u8 proto;    /* 0: any */
	__u8 tcp_mask; /* 0: any flags */
	__u8 tcp_value;
	__u8 frag;  /* enum tw_frule_frag */
	__u8 flags; /* enum tw_frule_flag */
};

/* A rule set: a bank's one value, so that one lookup yields every rule
 * (a lookup per rule in a map reached through tw_frules is a helper call
 * each, more than the rule's own test). Rules in order, then entries with
 * action TW_FA_END. */
struct tw_frule_set {
	struct tw_frule rule[TW_FRULE_MAX];
};

/* Per-rule counters, [cpu * TW_FRULE_IDS + id]: each core writes only its
 * own, so no atomics. matched counts every packet the rule decided
 * (including those handed to the SYN proxy); dropped and good split it. */
struct tw_fctr {
	__u64 packets; /* matched */
	__u64 bytes;
	__u64 dropped;
	__u64 good; /* passed as known good */
};

/* Per-rule, per-CPU token bucket, [cpu * TW_FRULE_IDS + id], apart from
 * the counters so that reading counters never races the bucket's writer.
 * credit is in 1/(nr_cpus * 10^9) of a packet (tw_frule_admit). */
struct tw_fbucket {
	__u64 credit;
	__u64 last_ns; /* CLOCK_MONOTONIC */
};

/* Value of a known-good entry (tw_good4, tw_good6). */
struct tw_good {
	__u64 added_ns; /* CLOCK_MONOTONIC when user space added it */
	/* The member's shared token bucket for packets that belong to no
	 * connection of this host (frule.h: tw_known_good), in 1/10^9 of a
	 * packet; zero when added, so a new member starts with its burst. */
	__u64 credit;
	__u64 last_ns; /* CLOCK_MONOTONIC of the bucket's last packet */
};

/* The heavy-hitter detector's settings (tw_hh_cfg), written by user space.
 * Thresholds are per window and for all CPUs together; the local ones are
 * the same divided by the CPU count, rounded down: a source over the
 * threshold in all is over the local one on at least one CPU, so only
 * then are the other CPUs' counters read. */
struct tw_hh_config {
	__u64 window_ns; /* 0: detector off; else the effective window */
	__u64 ttl_ns;    /* a provisional entry's life unless confirmed */
	__u32 pkt_thresh;
	__u32 syn_thresh;
	__u32 pkt_local;
	__u32 syn_local;
	__u32 seed;    /* sketch hash seed, random per created state */
	__u32 monitor; /* 1: provisional entries count but never drop */
	__u32 prefix6; /* IPv6 sources are counted per prefix of this length */
	/* The window is 1 << tick_shift jiffies: the packet path reads
	 * jiffies, an inlined load, where either ktime helper is a call
	 * (tens of ns with the return thunks of these hosts), and a
	 * window of whole ticks holds exactly its length of traffic. */
	__u32 tick_shift;
	/* How long, in jiffies, a catch's marks (tw_hh_marks) hold: the TTL rounded up, plus slack for jiffies lagging
	 * the precise clock the entry expires by. */
	__u32 ttl_ticks;
	/* Sampling: the sketch counts 1 in 2^sample_shift packets (SYNs
	 * always, for the SYN threshold), the daemon's choice from the
	 * packet threshold so that it stays at 32 sampled packets a window or
	 * more; 0 counts every packet. When sampling, the sketch only finds
	 * candidates (the sum of the CPUs' sampled counts at pkt_sum), which
	 * are caught on an exact count of pkt_thresh (tw_prov.cand); when
	 * not, pkt_sum is pkt_thresh and the sketch catches. pkt_local is in
	 * the sketch's (sampled) units, pkt_thresh in packets. */
	__u32 sample_shift;
	__u32 pkt_sum;
	__u32 _pad;
};

/* Shared by all CPUs, written only when a catch or a candidate is marked:
 * until marks_until (jiffies) no mark can be live, and the packet path
 * reads none. */
struct tw_hh_state {
	__u64 marks_until;
};

/* Per CPU: the sampling countdown, packets until the next one the
 * sketch counts, reloaded at random (rng: a xorshift state, 0 until
 * seeded) so that a source cannot time its packets around it. */
struct tw_hh_pcpu {
	__u32 skip;
	__u32 rng;
};

/* One sketch counter; win is the window it counts (the low 32 bits of
 * jiffies >> tick_shift), so a stale counter is reset by the first packet
 * of a new window instead of by a sweep. */
struct tw_hh_bucket {
	__u32 win;
	__u32 pkts;
	__u32 syns;
	__u32 _pad;
};

/* A line of catch marks (the map tw_hh_live): each slot holds the jiffy (low 32
 * bits) until which a provisional entry, a catch or a candidate, may hold
 * a source whose two marks are there. The packet path looks the
 * provisional table up only for a source whose two marks are both live,
 * so a live catch costs the other sources a read of this small table,
 * shared by the CPUs and written only by catches, not a hash-table miss. */
struct tw_hh_marks {
	__u32 until[TW_HH_MARK_SLOTS];
};

/* A sketch line: one cache line of counters. A source's two counters are
 * two slots of one line, so counting it costs one cache miss, not two. */
struct tw_hh_line {
	struct tw_hh_bucket b[TW_HH_SLOTS];
};

/* A provisional drop (tw_prov4, tw_prov6). Counters are shared by the CPUs
 * (atomic adds): only a source already caught pays for them.
 *
 * Or, while cand is 1, a candidate: the sampled sketch found the source
 * near its packet threshold, and its packets are now counted exactly,
 * per window (cwin, cpkts), shared by the CPUs; it is caught only when
 * that exact count reaches the threshold (cand goes to 0, the entry
 * becomes a provisional drop in place), else it expires after a few
 * windows. Never dropped, never reported, not listed to the daemon. */
struct tw_prov {
	__u64 added_ns;   /* CLOCK_MONOTONIC */
	__u64 expires_ns; /* passes (and is removed) from then on */
	__u64 packets;
	__u64 bytes;
	__u32 count; /* the window's count that caught it */
	__u8 kind;   /* enum tw_hh_kind */
	__u8 flags;  /* enum tw_prov_flag */
	__u16 _pad;
	__u32 cwin; /* the window cpkts counts (jiffies >> tick_shift) */
	__u32 _pad2;
	/* 64 bits: atomics on 32 need a newer BPF ISA than the filter's. */
	__u64 cand; /* 1: a candidate; 0 once caught (compare-and-swap) */
	__u64 cpkts;
};

/* Reported through tw_hh_events when a provisional entry is made. */
struct tw_hh_event {
	__u8 addr[16]; /* IPv4 in the first four bytes; IPv6 masked */
	__u8 family;
	__u8 kind;
	__u8 prefix; /* 32, or tw_hh_config.prefix6 */
	__u8 flags;
	__u32 count;
	__u64 at_ns;
};

/* Per CPU: what the detector did, for saturation and exemptions. */
struct tw_hh_stats {
	__u64 caught;     /* provisional entries made */
	__u64 table_full; /* over threshold (or a candidate): no room */
	__u64 ring_full;  /* entry made, its event lost */
	/* Over threshold (or a candidate), known good or protected: not
	 * caught, not watched. */
	__u64 exempt_good;
	__u64 exempt_protect;
	__u64 expired; /* entries (not candidates) found expired */
	__u64 checks;  /* cross-CPU sums */
	__u64 marked;  /* provisional-table lookups the sketch's marks let by */
	__u64 candidates; /* candidates made (sampled counting only) */
};

_Static_assert(sizeof(struct tw_exact4) == 32, "two exact4 slots a line");
_Static_assert(sizeof(struct tw_exact6) == 64, "an exact6 slot is a line");
_Static_assert(sizeof(struct tw_ctr) == 16, "counter size");
_Static_assert(sizeof(struct tw_hot) == 24, "hot entry size");
_Static_assert(__builtin_offsetof(struct tw_exact4, bytes) ==
			       __builtin_offsetof(struct tw_exact4, packets) +
				       8 &&
		       __builtin_offsetof(struct tw_exact6, bytes) ==
			       __builtin_offsetof(struct tw_exact6, packets) +
				       8,
	       "tw_exact_count finds bytes right after packets");
_Static_assert(TW_HOT_SLOTS * sizeof(struct tw_hot) % 64 == 0,
	       "each CPU's hot entries start a cache line");
_Static_assert(sizeof(struct tw_feat_key) == 36, "feature key size");
_Static_assert(sizeof(struct tw_config) == 112, "config size");
_Static_assert(sizeof(struct tw_feat_slot) == 64, "feature slot size");
_Static_assert(sizeof(struct tw_frule) == 64, "flow rule size");
_Static_assert(sizeof(struct tw_frule_set) == 64 * TW_FRULE_MAX,
	       "flow rule set size");
_Static_assert(sizeof(struct tw_fctr) == 32, "flow rule counter size");
_Static_assert(sizeof(struct tw_fbucket) == 16, "token bucket size");
_Static_assert(sizeof(struct tw_good) == 24, "known-good value size");
_Static_assert(sizeof(struct tw_hh_config) == 64, "heavy-hitter config size");
_Static_assert(sizeof(struct tw_hh_bucket) == 16, "sketch counter size");
_Static_assert(sizeof(struct tw_hh_marks) == 64, "a mark line is a cache line");
_Static_assert(sizeof(struct tw_hh_line) == 64,
	       "a sketch line is a cache line");
_Static_assert(sizeof(struct tw_prov) == 64, "provisional entry size");
_Static_assert(sizeof(struct tw_hh_event) == 32, "heavy-hitter event size");
_Static_assert(sizeof(struct tw_feat_slot) == 8 * sizeof(__u64),
	       "a feature slot holds eight port-profile counters");

#endif
