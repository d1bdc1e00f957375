// SPDX-License-Identifier: Apache-2.0

package detect

import (
	"math/bits"
	"math/rand/v2"
)

// recentSources remembers which sources were seen in the recent past, to
// count the new ones in an interval: a spoofed flood brings thousands of
// sources nobody has seen, every interval, whatever its spread, where a
// service's clients mostly return. Two Bloom filters of fixed size
// rotate: sources are added to the current one, looked up in both, and
// when the current one has taken its capacity or rotateEvery intervals
// have passed it becomes the previous one and a cleared one takes its
// place. So "recent" is the last one to two rotations, the memory is
// 2 × bloomBits/8 bytes whatever the number of sources, and a source is
// never falsely new (only, at the rate below, falsely known).
//
// Only sources of clean intervals are added (Victims.Observe): a flood's
// sources would fill the filters, push the false-positive rate up and
// make the next flood's sources look known.
type recentSources struct {
	cur, prev   []uint64 // bloomBits bits each
	added       int      // keys added to cur
	age         int      // intervals since cur was started
	rotateEvery int
	s0, s1      uint64 // hash seed, random per process: an attacker cannot aim at bits
}

const (
	bloomBits = 1 << 21 // 256 KiB per filter
	bloomK    = 5
	// bloomCap keys per filter keep the false-positive rate under 1%
	// ((1-e^(-k·n/m))^k ≈ 0.8% at n = m/10.5).
	bloomCap = bloomBits / 10
)

func newRecentSources(rotateEvery int) *recentSources {
	return &recentSources{cur: make([]uint64, bloomBits/64), prev: make([]uint64, bloomBits/64),
		rotateEvery: max(rotateEvery, 1), s0: rand.Uint64() | 1, s1: rand.Uint64()}
}

// probes are the key's bloomK bit positions by double hashing.
func (r *recentSources) hash(k Key) (h1, h2 uint64) {
	hi, lo := bits.Mul64(k.hi^r.s0, k.lo^r.s1)
	h1 = hi ^ lo
	hi, lo = bits.Mul64(h1^r.s1, 0x9e3779b97f4a7c15)
	return h1, (hi ^ lo) | 1
}

func has(f []uint64, h1, h2 uint64) bool {
	for i := range uint64(bloomK) {
		b := (h1 + i*h2) & (bloomBits - 1)
		if f[b>>6]&(1<<(b&63)) == 0 {
			return false
		}
	}
	return true
}

// seen reports whether k was added in the recent past.
func (r *recentSources) seen(k Key) bool {
	h1, h2 := r.hash(k)
	return has(r.cur, h1, h2) || has(r.prev, h1, h2)
}

// add remembers k, rotating first when the current filter is full.
func (r *recentSources) add(k Key) {
	if r.added >= bloomCap {
		r.rotate()
	}
	h1, h2 := r.hash(k)
	if has(r.cur, h1, h2) {
		return // already there: no capacity spent
	}
	for i := range uint64(bloomK) {
		b := (h1 + i*h2) & (bloomBits - 1)
		r.cur[b>>6] |= 1 << (b & 63)
	}
	r.added++
}

// tick ends an interval, rotating every rotateEvery intervals.
func (r *recentSources) tick() {
	r.age++
	if r.age >= r.rotateEvery {
		r.rotate()
	}
}

func (r *recentSources) rotate() {
	r.cur, r.prev = r.prev, r.cur
	clear(r.cur)
	r.added, r.age = 0, 0
}
