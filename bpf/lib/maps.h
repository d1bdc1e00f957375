/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* maps.h - the filter's map inventory (docs/ARCHITECTURE.md lists the pin
 * names). Sizes here are placeholders: user space sets max_entries from the
 * load-time capacities before loading, and the matching masks below. */
#ifndef TW_MAPS_H
#define TW_MAPS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "types.h"
#include "consts.h"

/* Set before load. Exact tables are powers of two; the prefix and
 * allowlist counters are laid out [cpu][id], so the data plane needs the
 * CPU count. The exact tables (which hold their rules' counters) are
 * mmapable: the daemon reads the counters of every ban each interval, and
 * at 500K bans a syscall per slot
 * (lookup or batch, ~300 ns each here) costs seconds, a read from memory
 * milliseconds. Writes still go through the syscall, in the order the
 * table's concurrency rules need. */
volatile const __u32 tw_ex4_slots = 1;
volatile const __u32 tw_ex6_slots = 1;
volatile const __u32 tw_pfx_cap = 1;
volatile const __u32 tw_allow_cap = 1;
volatile const __u32 tw_nr_cpus = 1;
/* Feature buffers: slots per CPU region (a power of two) and the number of
 * keys a region takes before counting overflow. */
volatile const __u32 tw_feat_slots = 1;
volatile const __u32 tw_feat_cap = 1;
/* Bits in the known-good sieve (tw_good_sieve), a power of two. */
volatile const __u32 tw_good_sieve_bits = 64;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct tw_exact4);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
} tw_ex4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct tw_exact6);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
} tw_ex6 SEC(".maps");

/* Each CPU's coarse clock, read once a tick (tw_coarse_now). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct tw_clock);
	__uint(max_entries, 1);
} tw_clock SEC(".maps");

/* Each CPU's window of the SYN guard (synguard.h). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct tw_sg);
	__uint(max_entries, 1);
} tw_sg SEC(".maps");

/* [cpu * TW_HOT_SLOTS + slot & (TW_HOT_SLOTS - 1)], sized at load;
 * mmapable so that user space reads it with the tables. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct tw_hot);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
} tw_ex_hot SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__type(key, struct tw_lpm4_key);
	__type(value, struct tw_lpm_val);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1);
} tw_pfx4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__type(key, struct tw_lpm6_key);
	__type(value, struct tw_lpm_val);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1);
} tw_pfx6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct tw_ctr);
	__uint(max_entries, 1);
} tw_pfx_ctr SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__type(key, struct tw_lpm4_key);
	__type(value, struct tw_lpm_val);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1);
} tw_allow4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__type(key, struct tw_lpm6_key);
	__type(value, struct tw_lpm_val);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1);
} tw_allow6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct tw_ctr);
	__uint(max_entries, 1);
} tw_allow_ctr SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, enum tw_reason);
	__type(value, struct tw_ctr);
	__uint(max_entries, TW_R_MAX);
} tw_verdicts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct tw_config);
	__uint(max_entries, 1);
} tw_cfg SEC(".maps");

/* Feature buffers. The data plane fills whichever one tw_feat points at;
 * user space swaps the pointer (the update waits for an RCU grace period,
 * so no program still writes the old buffer) and drains the old one.
 *
 * Each buffer is a flat, mmapable array split into one open-addressing
 * region per CPU ([cpu * tw_feat_slots + slot], then one header slot per
 * CPU at [tw_nr_cpus * tw_feat_slots + cpu]), then each CPU's port
 * profile (TW_PORT_SLOTS slots of eight __u64 counters, from
 * [tw_nr_cpus * (tw_feat_slots + 1) + cpu * TW_PORT_SLOTS]): the profile
 * rides in the same buffer so that one swap, one grace period, makes both
 * a consistent interval. A CPU only ever writes its
 * own region, so inserts need no atomics, and user space reads a drained
 * buffer straight from memory: a per-CPU BPF hash costs ~420 ns of kernel
 * time per entry to batch-read here (scattered elements and per-CPU
 * values), which alone breaks the 100 ms budget for 300K keys. */
struct tw_feat_map {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct tw_feat_slot);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
};

struct tw_feat_map tw_feat_a SEC(".maps");
struct tw_feat_map tw_feat_b SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__type(key, __u32);
	__uint(max_entries, 1);
	__array(values, struct tw_feat_map);
} tw_feat SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct tw_feat_stats);
	__uint(max_entries, 1);
} tw_fstats SEC(".maps");

/* Flow rules, in two banks. The data plane reads whichever one tw_frules
 * points at; user space writes the whole new set into the other, then
 * points tw_frules at it. That update returns only after an RCU grace
 * period, so once it returns no program still reads the old bank and it
 * may be rewritten next time: a packet sees the old set or the new one,
 * never a mix or a half-written rule, and the data plane takes no lock. */
struct tw_frule_bank {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct tw_frule_set);
	__uint(max_entries, 1);
};

/* The banks themselves name their value const struct tw_frule_set: clang
 * 14 describes a struct reached through a map-in-map's values only as a
 * forward declaration, and when tw_frules is described first the same
 * pointer type would leave the banks' value unsized; a distinct pointer
 * type makes it describe the struct in full. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, const struct tw_frule_set);
	__uint(max_entries, 1);
} tw_frules_a SEC(".maps"), tw_frules_b SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__type(key, __u32);
	__uint(max_entries, 1);
	__array(values, struct tw_frule_bank);
} tw_frules SEC(".maps");

/* [cpu * TW_FRULE_IDS + id], sized at load. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct tw_fctr);
	__uint(max_entries, 1);
} tw_frule_ctr SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct tw_fbucket);
	__uint(max_entries, 1);
} tw_frule_tb SEC(".maps");

/* Known-good sources (network order), consulted only by a rule with the
 * bypass flag. A plain hash, not an LRU: the daemon bounds the members
 * (KnownGood.Cap, no more than the capacity set at load) and chooses whom
 * to let go. The kernel's common LRU keeps free slots on each CPU's own
 * list, and an insert on a CPU whose list and the shared one ran dry
 * evicted a member (the least recently used, whatever the daemon knew of
 * it) long before the map was full; the daemon, which pushes only its
 * changes, never put it back. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, struct tw_good);
	__uint(max_entries, 1);
} tw_good4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u8[16]);
	__type(value, struct tw_good);
	__uint(max_entries, 1);
} tw_good6 SEC(".maps");

/* The known-good sieve (goodsieve.h): one bit per hashed member address,
 * both families, tw_good_sieve_bits / 64 words. User space sets a bit
 * before it adds a member and clears it only when no member left hashes
 * there, so a clear bit proves a source is no member and a bypass rule
 * skips the LRU lookup: a flood of spoofed sources missed it on every
 * packet, a random bucket of a 1 MB table each time. Mmapable: user
 * space sets bits with atomic ORs, no syscall per member. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);
} tw_good_sieve SEC(".maps");

/* Tail-call targets: TW_JMP_SYNPROXY is the SYN proxy (bpf/synproxy/xdp_synproxy.c,
 * loaded by internal/synproxy/xdp). An empty slot makes the call fall
 * through. */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__type(key, enum tw_jmp_slot);
	__type(value, __u32);
	__uint(max_entries, 1);
} tw_jmp SEC(".maps");

/* The heavy-hitter detector (heavy.h). The sketch is TW_HH_LINES lines
 * per CPU, CPU-major in one array sized at load (a per-CPU array would
 * cost a second, dependent miss a lookup, through its pointer table, and
 * the cross-CPU sum reads the other CPUs' lines directly); the
 * provisional tables are sized at load
 * (their capacity bounds what an attacker with countless sources can
 * make the data plane hold); the protected lists mirror the daemon's
 * protected rail, consulted only before a source is caught. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct tw_hh_config);
	__uint(max_entries, 1);
} tw_hh_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct tw_hh_state);
	__uint(max_entries, 1);
} tw_hh_shared SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct tw_hh_pcpu);
	__uint(max_entries, 1);
} tw_hh_cpu SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct tw_hh_marks);
	__uint(max_entries, TW_HH_MARK_LINES);
} tw_hh_live SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct tw_hh_line);
	__uint(max_entries, 1);
} tw_hh_sketch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct tw_hh_stats);
	__uint(max_entries, 1);
} tw_hh_ctr SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, struct tw_prov);
	__uint(max_entries, 1);
} tw_prov4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u8[16]);
	__type(value, struct tw_prov);
	__uint(max_entries, 1);
} tw_prov6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__type(key, struct tw_lpm4_key);
	__type(value, __u32);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1);
} tw_protect4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__type(key, struct tw_lpm6_key);
	__type(value, __u32);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1);
} tw_protect6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 << 10);
} tw_hh_events SEC(".maps");

#endif
