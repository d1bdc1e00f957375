/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* verifier.h - what older verifiers need spelled out. Debian 12's 6.1 (and
 * 6.12) verifier does not track the bounds of a byte swap, of an xor, or of
 * a value the compiler knows is bounded and so never masks: a length read
 * with bpf_ntohs() is then "unbounded" when added to a packet pointer. The
 * barrier hides from the compiler what it knows, so the mask it would drop
 * as a no-op stays in the program and the verifier sees it. */
#ifndef TW_VERIFIER_H
#define TW_VERIFIER_H

#include <linux/types.h>

/* v & mask, with the and kept in the program. */
static __always_inline __u32 tw_bound(__u32 v, __u32 mask)
{
	asm volatile("" : "+r"(v));
	return v & mask;
}

/* A helper's size argument in 1..max for a max that is a power of two,
 * from an n the caller has checked is in that range: 6.1 takes neither
 * "n != 0" nor clang's folded range check (n - 1 < max) as a lower bound,
 * but it follows the arithmetic here. */
static __always_inline __u32 tw_size(__u32 n, __u32 max)
{
	return tw_bound(n - 1, max - 1) + 1;
}

#endif
