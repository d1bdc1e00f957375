// SPDX-License-Identifier: Apache-2.0

package datapath

import (
	"fmt"
	"math/bits"
	"net/netip"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// The known-good sieve (bpf/lib/goodsieve.h): one bit per hashed member
// address, both families in one array, which a bypass rule reads before
// it asks the LRU lists. A clear bit proves the source is no member, so a
// spoofed flood's packets skip the lookup that missed for nearly every
// one of them.
//
// The invariant the data plane relies on: every member's bit is set while
// the member is on a list. Adding sets the bit before the member is
// written; removing deletes the members first and then rewrites each word
// to what the members still on the lists need, which only clears bits no
// member holds. Both run under the state's lock, so no other writer can
// add a member between the reading and the rewrite. A member the LRU
// evicts leaves its bit set until the next removal rewrites the sieve:
// one more source looked up, never one member missed. Words are 64-bit
// aligned and stored whole; a reader racing a rewrite sees the old word
// or the new one, and both hold every remaining member's bit.

// goodSieveSalt is TW_GOOD_SIEVE_SALT (a #define, which bpf2go does not
// export): the config's seed is salted with it for the sieve.
const goodSieveSalt = 0x9e3779b9

// sieveBits sizes the sieve for good entries per family: 4 bits a member
// of both full lists, so that a full pair of lists sets about a fifth of
// the bits and a flood's source still skips the lookup four times in
// five; the default 2 x 65,536 members take 64 KB.
func sieveBits(good uint32) uint32 {
	n := 8 * uint64(good)
	if n < 64 {
		n = 64
	}
	return uint32(1) << bits.Len64(n-1)
}

// sieveBit is the bit the data plane reads for a (IPv4 unmapped).
func (d *Datapath) sieveBit(a netip.Addr) uint32 {
	seed := d.ex4.seed ^ goodSieveSalt
	var h uint32
	if a.Is4() {
		h = hash4(a, seed)
	} else {
		h = hash6(a, seed)
	}
	return h & (d.sizes.sieveBits - 1)
}

// goodSieve maps the sieve read-write into this process once; the
// mapping lives until the Datapath closes.
func (d *Datapath) goodSieve() ([]uint64, error) {
	if d.sieve != nil {
		return d.sieve, nil
	}
	words, raw, err := mmapArrayProt[uint64](d.maps.TwGoodSieve, int(d.sizes.sieveBits/64), unix.PROT_READ|unix.PROT_WRITE)
	if err != nil {
		return nil, fmt.Errorf("known-good sieve: %w", err)
	}
	d.sieve, d.sieveRaw = words, raw
	return words, nil
}

// unmapSieve releases goodSieve's mapping.
func (d *Datapath) unmapSieve() {
	if d.sieveRaw != nil {
		_ = unix.Munmap(d.sieveRaw)
		d.sieve, d.sieveRaw = nil, nil
	}
}

// sieveAdd sets the bits of addrs (already unmapped), before they are
// written to the lists.
func (d *Datapath) sieveAdd(v4 []uint32, v6 [][16]byte) error {
	sieve, err := d.goodSieve()
	if err != nil {
		return err
	}
	set := func(b uint32) { atomic.OrUint64(&sieve[b/64], 1<<(b%64)) }
	for _, k := range v4 {
		set(d.sieveBit(addr4(k)))
	}
	for _, k := range v6 {
		set(d.sieveBit(netip.AddrFrom16(k)))
	}
	return nil
}

// sieveRebuild rewrites the sieve from the members on the lists now,
// after members were deleted. Words that do not change are not written.
func (d *Datapath) sieveRebuild() error {
	sieve, err := d.goodSieve()
	if err != nil {
		return err
	}
	k4, err := readGoodKeys[uint32](d.maps.TwGood4)
	if err != nil {
		return fmt.Errorf("known-good sieve: reading the IPv4 list: %w", err)
	}
	k6, err := readGoodKeys[[16]byte](d.maps.TwGood6)
	if err != nil {
		return fmt.Errorf("known-good sieve: reading the IPv6 list: %w", err)
	}
	next := make([]uint64, len(sieve))
	for _, k := range k4 {
		b := d.sieveBit(addr4(k))
		next[b/64] |= 1 << (b % 64)
	}
	for _, k := range k6 {
		b := d.sieveBit(netip.AddrFrom16(k))
		next[b/64] |= 1 << (b % 64)
	}
	for i := range sieve {
		if atomic.LoadUint64(&sieve[i]) != next[i] {
			atomic.StoreUint64(&sieve[i], next[i])
		}
	}
	return nil
}

// SaturateKnownGoodSieve sets every bit of the sieve (full) or rewrites
// it from the lists again (!full). Saturated, every packet of a bypass
// rule asks the lists, as before the sieve existed: tierwall-bench
// measures the sieve against that. The lists are not touched.
func (d *Datapath) SaturateKnownGoodSieve(full bool) error {
	lk, err := d.lock()
	if err != nil {
		return err
	}
	defer lk.Unlock()
	if !full {
		return d.sieveRebuild()
	}
	sieve, err := d.goodSieve()
	if err != nil {
		return err
	}
	for i := range sieve {
		atomic.StoreUint64(&sieve[i], ^uint64(0))
	}
	return nil
}

// SieveBytes is the known-good sieve's size for lists of good entries
// per family.
func SieveBytes(good int) int { return int(sieveBits(uint32(good)) / 8) }
