// SPDX-License-Identifier: Apache-2.0

package detect

import (
	"encoding/binary"
	"math/bits"
	"math/rand/v2"
	"net/netip"
)

// Key is an address in 16 bytes without netip.Addr's zone pointer: the
// address's IPv6 form, an IPv4 address as ::ffff:a.b.c.d. Traffic unmaps
// every address before keying it, so no IPv6 address it holds has that
// form and a Key converts back one to one. Keys are what per-source state
// is indexed by: no pointer for the garbage collector to scan, 16 bytes
// where netip.Addr takes 24, and a hash that is two multiplications.
type Key struct{ hi, lo uint64 }

// KeyOf is a's key (its zone dropped). An IPv4-mapped IPv6 address has
// the key of its IPv4 address.
func KeyOf(a netip.Addr) Key {
	b := a.As16()
	return Key{binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])}
}

func (k Key) is4() bool { return k.hi == 0 && k.lo>>32 == 0xffff }

// Addr is the address k stands for (IPv4 for the ::ffff:0:0/96 form).
func (k Key) Addr() netip.Addr {
	if k.is4() {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], uint32(k.lo))
		return netip.AddrFrom4(b)
	}
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], k.hi)
	binary.BigEndian.PutUint64(b[8:], k.lo)
	return netip.AddrFrom16(b)
}

// less orders keys as netip.Addr.Less orders their addresses: IPv4 first.
func (k Key) less(o Key) bool {
	if a, b := k.is4(), o.is4(); a != b {
		return a
	}
	if k.hi != o.hi {
		return k.hi < o.hi
	}
	return k.lo < o.lo
}

// maxProbe bounds a probe run in an index. The index is seeded and at
// most half full, so runs are short; a key that would need a longer one
// (crafted keys sharing a home slot, or bad luck) goes to a Go map, whose
// hash is randomised per map. Either way a key costs at most maxProbe
// probes and one map operation, so no choice of addresses makes building
// an interval quadratic.
const maxProbe = 32

// index numbers distinct keys 0, 1, 2, ... in the order they are first
// put: open addressing over a table of int32 (4 bytes a slot, at most
// half full), where a Go map of the same keys costs ~6 times the memory
// and a cache miss per key in its control words. Keys are never removed
// one by one, only all at once by reset, so a key is in the table iff one
// of the first maxProbe slots of its run holds it (runs only grow), and
// otherwise in spill.
type index struct {
	keys   []Key
	tbl    []int32 // -1: empty; else a position in keys
	mask   uint32
	s0, s1 uint64 // the hash's seed, random per index
	spill  map[Key]int32
}

func (x *index) hash(k Key) uint32 {
	hi, lo := bits.Mul64(k.hi^x.s0, k.lo^x.s1)
	hi, lo = bits.Mul64(hi^x.s1, lo^0x9e3779b97f4a7c15)
	return uint32(hi ^ lo)
}

// reset empties x for about n keys, keeping its memory unless it is far
// larger than n needs (a flood's million-key table is not kept through
// quiet intervals).
func (x *index) reset(n int) {
	if x.s0 == 0 {
		x.s0, x.s1 = rand.Uint64()|1, rand.Uint64()
	}
	slots := 1 << bits.Len(uint(max(2*n, 64)-1))
	if len(x.tbl) < slots || len(x.tbl) > 4*slots {
		x.tbl = make([]int32, slots)
		x.keys = make([]Key, 0, n)
	}
	for i := range x.tbl {
		x.tbl[i] = -1
	}
	x.mask = uint32(len(x.tbl) - 1)
	x.keys = x.keys[:0]
	x.spill = nil
}

// get returns k's number, or -1.
func (x *index) get(k Key) int32 {
	p := x.hash(k) & x.mask
	for range maxProbe {
		j := x.tbl[p]
		if j < 0 {
			return -1
		}
		if x.keys[j] == k {
			return j
		}
		p = (p + 1) & x.mask
	}
	if j, ok := x.spill[k]; ok {
		return j
	}
	return -1
}

// put returns k's number, numbering it next when it is new.
func (x *index) put(k Key) (j int32, isNew bool) {
	if 2*(len(x.keys)+1) > len(x.tbl) {
		x.grow()
	}
	p := x.hash(k) & x.mask
	for range maxProbe {
		j := x.tbl[p]
		if j < 0 {
			j = int32(len(x.keys))
			x.keys = append(x.keys, k)
			x.tbl[p] = j
			return j, true
		}
		if x.keys[j] == k {
			return j, false
		}
		p = (p + 1) & x.mask
	}
	if j, ok := x.spill[k]; ok {
		return j, false
	}
	if x.spill == nil {
		x.spill = map[Key]int32{}
	}
	j = int32(len(x.keys))
	x.keys = append(x.keys, k)
	x.spill[k] = j
	return j, true
}

// grow doubles the table and puts every key back in its order.
func (x *index) grow() {
	keys := x.keys
	x.tbl = make([]int32, 2*max(len(x.tbl), 32))
	x.mask = uint32(len(x.tbl) - 1)
	for i := range x.tbl {
		x.tbl[i] = -1
	}
	x.spill = nil
	x.keys = make([]Key, 0, 2*len(keys))
	for _, k := range keys {
		x.put(k)
	}
}
