// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"hash/maphash"
	"math/bits"
	"net/netip"
	"slices"
	"time"

	"github.com/tierwall/tierwall/internal/control/detect"
)

// The circuit breaker's view of the sources: which have been seen in
// every recent interval at their usual rate (the regular clients a ban
// must not cover too many of), and which a detector named on their own.
// The loop tracks it each interval (track), marks the named (noteDetected)
// and asks it the share a ban would cover (establishedShare).

// establishedAfter is how many consecutive intervals make a source a
// regular one for the circuit breaker.
const establishedAfter = 5

// sourceHistory is the histories of the sources seen lately, in dense
// slices numbered by a map (see track for why two maps).
type sourceHistory struct {
	hist  map[detect.Key]int32 // sources seen in the last interval (positions in hists)
	next  map[detect.Key]int32 // the next interval's hist, being built by track (see there)
	hists []history            // what hist points to; freed entries are listed in free
	free  []int32
	made  [2]int // keys hist and next were made for
	// seen and seenNext are the few-packet sources of the last interval
	// and of this one, a bit each (hashed with seed): see track.
	seed           maphash.Seed
	seen, seenNext []uint64
	cand           []int32 // track's scratch: the interval's sources it may add
}

func newSourceHistory() sourceHistory {
	return sourceHistory{hist: map[detect.Key]int32{}, next: map[detect.Key]int32{}, seed: maphash.MakeSeed(),
		seen: make([]uint64, probationBits/64), seenNext: make([]uint64, probationBits/64)}
}

// A source that sent at most fewPackets in an interval is tracked only
// from its second interval in a row: a spoofed flood's sources send one
// or two packets each, once, and tracking each of them cost the daemon
// two maps and a slice the size of the flood (about 40 MB of its peak
// RSS at 1M sources an interval). Its first interval is remembered in
// two bits of a set of probationBits (a Bloom filter: 2 MiB in the two
// sets); bits other sources set admit one an interval early, which costs
// a slot, no more: about 5% of a flood of 1M new sources an interval,
// 0.3% of one of 250K.
// A client that sends so little becomes regular an interval later; one
// that sends more is tracked from its first interval, as a flood's heavy
// sources must be (detection-to-drop latency, noteDetected).
const (
	fewPackets    = 2
	probationBits = 1 << 23
)

// history is what the circuit breaker knows of a source: how many
// consecutive intervals it has been seen, whether any detector named it on
// its own, and its usual rate.
type history struct {
	run      int32
	missed   int32 // intervals missed in a row while the buffers overflowed
	detected bool
	norm     float64 // pps, learned while it was not detected
	pps      float64 // this interval
	first    int64   // start of the interval it showed up in (Unix ns), for detection-to-drop latency
}

// get is what the breaker knows of a, nil if nothing.
func (s *sourceHistory) get(a netip.Addr) *history {
	if i, ok := s.hist[detect.KeyOf(a)]; ok {
		return &s.hists[i]
	}
	return nil
}

// maxTracked bounds the sources the daemon keeps a history of. Past it, a
// flood's new sources are not tracked (they cannot become regular clients
// while it lasts); the clients known before it keep theirs. At ~70 bytes
// a source (a 40-byte history and its map slot) this is ~18 MiB whatever
// the number of sources.
const maxTracked = 1 << 18

// maxMissed is how many overflowing intervals an established source may
// be missing from before it is forgotten.
const maxMissed = 3

// normJump is how far above its usual rate a source stops counting as a
// regular client: a detector that names clients at their normal rate is
// misconfigured; a source that jumped is attacking.
const normJump = 3

// noteDetected marks the sources a detector named on their own this
// interval. They never become established: the breaker protects regular
// clients from a detector gone wrong, not attackers that wait their turn
// behind the per-interval ban limit.
func (s *sourceHistory) noteDetected(ds []detect.Detection) {
	for _, x := range ds {
		if x.Prefix.IsSingleIP() {
			if h := s.get(x.Prefix.Addr()); h != nil && (h.run < establishedAfter || h.pps > normJump*h.norm) {
				h.detected = true
			}
		}
	}
}

// establishedShare is the circuit breaker's measure: the share of the
// regular clients that a prefix covers. A regular client has been seen in
// each of the last establishedAfter intervals, was never named by a
// detector before it was established, and sends at its usual rate.
func (s *sourceHistory) establishedShare() (func(netip.Prefix) float64, int) {
	var established []netip.Addr
	for k, i := range s.hist {
		if h := &s.hists[i]; h.run >= establishedAfter && !h.detected && h.pps <= normJump*max(h.norm, 1) {
			established = append(established, k.Addr())
		}
	}
	isEst := make(map[netip.Addr]bool, len(established))
	for _, a := range established {
		isEst[a] = true
	}
	share := func(p netip.Prefix) float64 {
		if len(established) == 0 {
			return 0
		}
		if p.IsSingleIP() { // the common case: one lookup, not a scan
			if isEst[p.Addr()] {
				return 1 / float64(len(established))
			}
			return 0
		}
		n := 0
		for _, a := range established {
			if p.Contains(a) {
				n++
			}
		}
		return float64(n) / float64(len(established))
	}
	return share, len(established)
}

// track keeps each source's history: when it showed up in passed traffic
// (the interval's start: the earliest its first packet can have been), for
// how many intervals in a row, and its usual rate. A source absent from an
// interval is forgotten (see below for intervals that overflowed).
func (s *sourceHistory) track(start time.Time, tr *detect.Traffic) {
	update := func(h *history, src *detect.Source) {
		h.run++
		h.pps = tr.Rate(src.Packets)
		switch {
		case h.run == 1:
			h.norm = h.pps
		case h.run <= establishedAfter:
			h.norm += (h.pps - h.norm) / float64(h.run) // mean while establishing
		case !h.detected && h.pps <= normJump*h.norm:
			h.norm = 0.95*h.norm + 0.05*h.pps // follows slow change, never a jump
		}
	}
	// The sources already tracked, looked up in the interval (not each of
	// the interval's sources in the history: a flood brings a million).
	// The survivors and the new sources go to a second map, cleared and
	// swapped every interval, rather than deleting the absent ones: a
	// flood replaces most of the tracked sources every interval, and a
	// map that many keys are deleted from fills with tombstones and grows
	// again (measured: ~40 MB of garbage per interval at 1M sources).
	//
	// A source missing from an interval that overflowed may not have fit:
	// an established client stays in the breaker's denominator through up
	// to maxMissed such intervals (a flood of new keys must not push the
	// regular clients out), so this state stays bounded by the buffers'
	// capacity times maxMissed+1 whatever the attacker does.
	// Sized once for what this interval can bring (at most maxTracked):
	// a map grown key by key to a flood's size leaves garbage as large as
	// itself behind, and RSS is what MemoryMax limits.
	// The interval's sources that may be added: those past probation.
	s.cand = s.cand[:0]
	for j := range tr.Sources {
		if tr.Sources[j].Packets > fewPackets {
			s.cand = append(s.cand, int32(j))
			continue
		}
		h := maphash.Comparable(s.seed, tr.SourceKey(j))
		b1, b2 := (h>>32)%probationBits, (h&(1<<32-1))%probationBits
		s.seenNext[b1/64] |= 1 << (b1 % 64)
		s.seenNext[b2/64] |= 1 << (b2 % 64)
		if s.seen[b1/64]&(1<<(b1%64)) != 0 && s.seen[b2/64]&(1<<(b2%64)) != 0 {
			s.cand = append(s.cand, int32(j))
		}
	}
	s.seen, s.seenNext = s.seenNext, s.seen
	clear(s.seenNext)
	// Rounded up to a power of two: a count that creeps up interval by
	// interval would make a new map each time, and leave the last behind.
	if need := min(1<<bits.Len(uint(len(s.hist)+len(s.cand))), maxTracked); need > s.made[1] {
		s.made[1] = need
		s.next = make(map[detect.Key]int32, need)
		s.hists = slices.Grow(s.hists, need-len(s.hists))
	}
	next := s.next
	gone := 0
	for k, i := range s.hist {
		h := &s.hists[i]
		if j := tr.SourceIndex(k); j >= 0 {
			update(h, &tr.Sources[j])
			h.missed = 0
		} else if tr.Overflow > 0 && h.run >= establishedAfter && h.missed < maxMissed {
			h.missed++
		} else {
			s.free = append(s.free, i)
			gone++
			continue
		}
		next[k] = i
	}
	// New sources, while there is room: the absent ones above still count
	// against maxTracked this interval, as they always have.
	for _, j := range s.cand {
		if len(next)+gone >= maxTracked {
			break
		}
		k := tr.SourceKey(int(j))
		if _, ok := next[k]; ok {
			continue
		}
		var i int32
		if n := len(s.free); n > 0 {
			i, s.free = s.free[n-1], s.free[:n-1]
		} else {
			i = int32(len(s.hists))
			s.hists = append(s.hists, history{})
		}
		s.hists[i] = history{first: start.UnixNano()}
		next[k] = i
		update(&s.hists[i], &tr.Sources[j])
	}
	s.hist, s.next = next, s.hist
	s.made[0], s.made[1] = s.made[1], s.made[0]
	clear(s.next) // keeps its buckets for the next interval
}
