/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* goodsieve.h - the known-good sieve: whether a source may be on the
 * known-good list, from one bit of tw_good_sieve (maps.h), before the
 * LRU hash is asked. A bypass rule asks for every packet it matches, and
 * in a spoofed flood nearly every source is new: the LRU lookup was a
 * miss in a random bucket of a megabyte-sized table each time, 10% of the
 * host CPU's busy time in a 500 Kpps SYN flood (perf, 2026-12-06). A bit
 * is a load from a 64 KB array that stays in cache.
 *
 * User space (internal/datapath/goodsieve.go) hashes members the same
 * way: tw_hash4 / tw_hash6 of table.h with the config's seed salted, so
 * which bits members take is unknown outside the host. A source whose bit
 * is set (a member, or one of the few others sharing a member's bit) is
 * looked up as before; a colliding attacker gains the lookup it always
 * had, nothing more. */
#ifndef TW_GOODSIEVE_H
#define TW_GOODSIEVE_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "maps.h"
#include "table.h"

/* Salts the exact tables' seed, so that the sieve's bits and the tables'
 * slots are not the same function of an address. */
#define TW_GOOD_SIEVE_SALT 0x9e3779b9U

/* src as tw_fview holds it: IPv4 in src[0] when src4. 0 only when the
 * source is surely no member; a missing word fails open to the lookup. */
static __always_inline int tw_good_maybe(const __u32 *src, __u8 src4,
					 __u32 seed)
{
	__u32 h = src4 ? tw_hash4(src[0], seed) : tw_hash6(src, seed);
	__u32 bit = h & (tw_good_sieve_bits - 1);
	__u32 w = bit / 64;
	__u64 *word = bpf_map_lookup_elem(&tw_good_sieve, &w);
	if (!word)
		return 1;
	return (*word >> (bit & 63)) & 1;
}

#endif
