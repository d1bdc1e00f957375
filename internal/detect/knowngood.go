// SPDX-License-Identifier: Apache-2.0

package detect

import (
	"math/bits"
	"net/netip"
)

// KnownGood is the set of clients the mitigations must never touch: the
// sources steady in the baseline, seen with TCP or UDP toward a victim in
// at least Steady of the last 32 intervals in which that victim was
// clean, or that sent it non-SYN TCP (the rest of a handshake, which a
// spoofed source cannot answer) in HandshakeIntervals of them. The daemon
// pushes Members into the data plane's known-good list, which FlowRules
// with KnownGoodBypass let through, and the ladder asks PrefixFree before
// it blocks a prefix.
//
// Membership is learned only from the traffic of victims judged clean in
// that interval, so an attacker cannot earn it during an attack on the
// victim (the set is frozen for that victim). While any attack is on,
// nothing expires either: a client that goes quiet because its server is
// flooded keeps its place.
//
// Memory: at most Cap entries (members and candidates together), each
// 40 bytes plus its map slot, so ~5 MiB at the default 65536 whatever the
// number of sources. A new candidate only replaces a candidate seen no
// more often than itself (the least steady, by a bounded sample); members
// leave only by expiry. A spray of one-shot sources therefore churns the
// candidates, never the members.
type KnownGood struct {
	Cap                int // entries at most (default 65536)
	Steady             int // sightings in the last 32 clean intervals that make a member (default 5)
	HandshakeIntervals int // clean intervals with non-SYN TCP that make a member (default 2)
	Expire             int // intervals unseen after which a member leaves (default 600)

	idx     map[Key]int32
	ents    []kgEntry
	hand    int    // clock hand for eviction sampling
	epoch   uint32 // intervals so far
	nMem    int
	version uint64
}

type kgEntry struct {
	key       Key
	seen      uint32 // bit i: seen i intervals before last
	last      uint32 // epoch last seen
	handshake uint8  // clean intervals with non-SYN TCP (saturating)
	hsEpoch   uint32 // epoch+1 of the last handshake counted (0: never)
	// usual is the most packets it sent one victim in an interval,
	// smoothed (EWMA of per-pair packets over its clean intervals): a
	// member flooding far above it is revoked (see revoke).
	usual   float32
	member  bool
	revoked bool // was a member, caught flooding: never again while the entry lives
	free    bool
}

// evictSample is how many entries a newcomer looks at to find one to
// replace: bounded work per new source.
const evictSample = 16

func (g *KnownGood) defaults() {
	if g.Cap <= 0 {
		g.Cap = 1 << 16
	}
	if g.Steady <= 0 {
		g.Steady = 5
	}
	if g.HandshakeIntervals <= 0 {
		g.HandshakeIntervals = 2
	}
	if g.Expire <= 0 {
		g.Expire = 600
	}
	if g.idx == nil {
		g.idx = make(map[Key]int32, g.Cap)
		g.ents = make([]kgEntry, 0, g.Cap)
	}
}

// score is how steady e has been: its sightings in the last 32 intervals.
func (g *KnownGood) score(e *kgEntry) int {
	if d := g.epoch - e.last; d < 32 {
		return bits.OnesCount32(e.seen << d)
	}
	return 0
}

// see records that k sent TCP or UDP to a clean victim this interval
// (nonSYN: TCP beyond SYNs). It reports false when there was no room.
func (g *KnownGood) see(k Key, nonSYN bool, packets uint64) bool {
	g.defaults()
	i, ok := g.idx[k]
	if !ok {
		if i, ok = g.slot(); !ok {
			return false
		}
		g.ents[i] = kgEntry{key: k, last: g.epoch}
		g.idx[k] = i
	}
	e := &g.ents[i]
	if e.last != g.epoch || e.seen&1 == 0 {
		d := g.epoch - e.last
		if d >= 32 {
			e.seen = 0
		} else {
			e.seen <<= d
		}
		e.seen |= 1
		e.last = g.epoch
	}
	if e.usual == 0 {
		e.usual = float32(packets)
	} else {
		e.usual += (float32(packets) - e.usual) / 8
	}
	if nonSYN && e.hsEpoch != g.epoch+1 && e.handshake < 255 {
		e.handshake++
		e.hsEpoch = g.epoch + 1
	}
	if !e.member && !e.revoked && (bits.OnesCount32(e.seen) >= g.Steady || int(e.handshake) >= g.HandshakeIntervals) {
		e.member = true
		g.nMem++
		g.version++
	}
	return true
}

// slot finds room for a newcomer: a free entry, a new one under Cap, or
// the least steady of a sample of candidates, if it is no steadier than a
// newcomer (seen at most once).
func (g *KnownGood) slot() (int32, bool) {
	if len(g.ents) < g.Cap {
		g.ents = append(g.ents, kgEntry{})
		return int32(len(g.ents) - 1), true
	}
	best, bestScore := -1, 2
	for range evictSample {
		g.hand = (g.hand + 1) % len(g.ents)
		e := &g.ents[g.hand]
		if e.free {
			best = g.hand
			break
		}
		if e.member {
			continue
		}
		if s := g.score(e); s < bestScore {
			best, bestScore = g.hand, s
		}
	}
	if best < 0 {
		return 0, false
	}
	if e := &g.ents[best]; !e.free {
		delete(g.idx, e.key)
	}
	return int32(best), true
}

// tick ends an interval. Unless an attack is on (frozen), members unseen
// for Expire intervals, and candidates that fell out of the 32-interval
// window, are dropped.
func (g *KnownGood) tick(frozen bool) {
	g.defaults()
	g.epoch++
	if frozen {
		return
	}
	for i := range g.ents {
		e := &g.ents[i]
		if e.free {
			continue
		}
		age := g.epoch - e.last
		if (e.member && age > uint32(g.Expire)) || (!e.member && age >= 32) {
			if e.member {
				g.nMem--
				g.version++
			}
			delete(g.idx, e.key)
			*e = kgEntry{free: true}
		}
	}
}

// usualOf is the usual packets per interval of member k toward one
// victim, and whether k is a member.
func (g *KnownGood) usualOf(k Key) (float64, bool) {
	i, ok := g.idx[k]
	if !ok || !g.ents[i].member {
		return 0, false
	}
	return float64(g.ents[i].usual), true
}

// revoke ends k's membership for good (while its entry lives): a client
// that earned its place and then floods, or a bot that was patient.
func (g *KnownGood) revoke(k Key) {
	if i, ok := g.idx[k]; ok && g.ents[i].member {
		g.ents[i].member, g.ents[i].revoked = false, true
		g.nMem--
		g.version++
	}
}

// Contains reports whether a is a known-good client.
func (g *KnownGood) Contains(a netip.Addr) bool {
	return g.has(KeyOf(a.Unmap()))
}

func (g *KnownGood) has(k Key) bool {
	i, ok := g.idx[k]
	return ok && g.ents[i].member
}

// Version changes whenever a member joins or leaves: the daemon pushes
// Members into the data plane only when it moved.
func (g *KnownGood) Version() uint64 { return g.version }

// Len is the number of members.
func (g *KnownGood) Len() int { return g.nMem }

// Entries is the number of members and candidates held (at most Cap).
func (g *KnownGood) Entries() int { return len(g.idx) }

// AppendMembers appends every member's address to dst: what the daemon
// pushes into the data plane's known-good list.
func (g *KnownGood) AppendMembers(dst []netip.Addr) []netip.Addr {
	for i := range g.ents {
		if e := &g.ents[i]; !e.free && e.member {
			dst = append(dst, e.key.Addr())
		}
	}
	return dst
}

// PrefixFree reports whether p holds no member, and how many it holds.
// It scans the members (at most Cap): the ladder asks it a few times per
// attacked victim, not per source.
func (g *KnownGood) PrefixFree(p netip.Prefix) (free bool, n int) {
	p = p.Masked()
	for i := range g.ents {
		if e := &g.ents[i]; !e.free && e.member && p.Contains(e.key.Addr()) {
			n++
		}
	}
	return n == 0, n
}
