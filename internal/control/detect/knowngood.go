// SPDX-License-Identifier: Apache-2.0

package detect

import (
	"net/netip"
	"slices"
)

// DefaultKnownGoodCap is the members at most, both families together.
const DefaultKnownGoodCap = 1 << 16

// KnownGood is the set of clients the mitigations must never touch: those
// the host's own TCP stack vouches for. A source joins only when it sent
// TCP other than SYNs to a destination the daemon protects (Victims.Protects)
// and Verify says the kernel holds a connection between the two past its
// handshake (sock_diag or conntrack, asked by the daemon). Packets alone
// prove nothing: three spoofed ACKs per address made 2,000 of 2,000 spoofed
// addresses members when "non-SYN TCP" was the proof (issue 32), and a
// steady spoofed source is as steady as a client. Without Verify nobody
// joins.
//
// The daemon pushes Members into the data plane's known-good list, which
// FlowRules with KnownGoodBypass let through; the ladder asks PrefixFree
// before it blocks a prefix, and no automatic ban ever names a member.
//
// Bounded so that an attacker cannot hold it full: at most Cap members
// (40 bytes each and a map slot, ~5 MiB at the default 65536); at most
// MaxJoin join per interval, so a botnet that completes handshakes fills
// it no faster than that; a newcomer may take the place of a member
// verified only once (the least recently seen of a sample), never of one
// the kernel vouched for again later (Reverify intervals after its join).
// Members leave when unseen for Expire intervals (not while an attack is
// on: a client silenced by its flooded server keeps its place) and when
// the kernel has not vouched for them for MaxAge intervals.
type KnownGood struct {
	Cap     int // members at most (default DefaultKnownGoodCap)
	MaxJoin int // members joining per interval at most (default 1024)
	// Reverify is how many intervals after its last verification a
	// member's traffic has the kernel asked again (default 60); MaxAge
	// how long a member stays without a verification (default 3600).
	Reverify int
	MaxAge   int
	Expire   int // intervals unseen after which a member leaves (default 600)
	// MaxChecks bounds the Verify calls for non-members per interval
	// (default 262144): a spoofed ACK flood costs at most that many
	// lookups, and its sources get no state.
	MaxChecks int

	// Verify reports whether the host's TCP stack holds a connection
	// from src to dst past its handshake (any ports). nil: nobody joins.
	Verify func(src, dst netip.Addr) bool

	idx     map[Key]int32
	ents    []kgEntry
	hand    int    // clock hand for eviction sampling
	epoch   uint32 // intervals so far
	nMem    int
	joined  int // joins this interval
	checks  int // Verify calls for non-members this interval
	version uint64
	// sorted are the members by address, for PrefixFree, as of version
	// sortedVer.
	sorted    []netip.Addr
	sortedVer uint64

	// Refused counts verified sources that found no room (the list full
	// of members verified more than once), Unverified the sources the
	// kernel did not vouch for: both for the daemon's metrics.
	Refused, Unverified, RateCapped uint64
}

type kgEntry struct {
	key      Key
	last     uint32 // epoch last seen
	verified uint32 // epoch of the last verification
	again    bool   // verified again, Reverify or more intervals after joining
	free     bool
}

// evictSample is how many entries a newcomer looks at to find one to
// replace: bounded work per new source.
const evictSample = 16

func (g *KnownGood) defaults() {
	if g.Cap <= 0 {
		g.Cap = DefaultKnownGoodCap
	}
	if g.MaxJoin <= 0 {
		g.MaxJoin = 1024
	}
	if g.Reverify <= 0 {
		g.Reverify = 60
	}
	if g.MaxAge <= 0 {
		g.MaxAge = 3600
	}
	if g.Expire <= 0 {
		g.Expire = 600
	}
	if g.MaxChecks <= 0 {
		g.MaxChecks = 1 << 18
	}
	if g.idx == nil {
		// Grown as members join, never past Cap: sized for the whole cap
		// up front, an empty list held 5 MB of heap (the heap profile of
		// make bench's 1M-source interval), and only verified handshakes
		// make it grow.
		g.idx = make(map[Key]int32, min(g.Cap, 1<<10))
		g.ents = make([]kgEntry, 0, min(g.Cap, 1<<10))
	}
}

// see records that k sent TCP or UDP to dst, a destination the daemon
// protects, this interval (nonSYN: TCP beyond SYNs, the only traffic after
// which the kernel is asked). It reports whether k is a member.
func (g *KnownGood) see(k Key, dst netip.Addr, nonSYN bool) bool {
	return g.offer(k, dst, nonSYN, false)
}

// vouched takes the kernel's word that k holds a connection past its
// handshake with a destination the daemon protects, without traffic from
// it (Victims.Connections): a member is seen and, when due, verified
// again; a newcomer joins under see's MaxJoin and slots. It reports
// whether k is a member.
func (g *KnownGood) vouched(k Key) bool {
	return g.offer(k, netip.Addr{}, false, true)
}

// offer is see and vouched: the kernel is asked (Verify) only when it has
// not vouched already, and only for non-SYN traffic.
func (g *KnownGood) offer(k Key, dst netip.Addr, nonSYN, vouched bool) bool {
	g.defaults()
	proven := func() bool { return vouched || g.Verify(k.Addr(), dst) }
	askable := vouched || nonSYN && g.Verify != nil
	if i, ok := g.idx[k]; ok {
		e := &g.ents[i]
		e.last = g.epoch
		if askable && g.epoch-e.verified >= uint32(g.Reverify) && proven() {
			e.verified, e.again = g.epoch, true
		}
		return true
	}
	if !askable {
		return false
	}
	if g.joined >= g.MaxJoin {
		g.RateCapped++
		return false
	}
	if !vouched {
		if g.checks >= g.MaxChecks {
			return false
		}
		g.checks++
	}
	if !proven() {
		g.Unverified++
		return false
	}
	i, ok := g.slot()
	if !ok {
		g.Refused++
		return false
	}
	g.ents[i] = kgEntry{key: k, last: g.epoch, verified: g.epoch}
	g.idx[k] = i
	g.nMem++
	g.joined++
	g.version++
	return true
}

// slot finds room for a newcomer: a free entry, a new one under Cap, or
// the least recently seen of a sample of members verified only once and
// not seen this interval.
func (g *KnownGood) slot() (int32, bool) {
	if len(g.ents) < g.Cap {
		g.ents = append(g.ents, kgEntry{})
		return int32(len(g.ents) - 1), true
	}
	best := -1
	for range evictSample {
		g.hand = (g.hand + 1) % len(g.ents)
		e := &g.ents[g.hand]
		if e.free {
			return int32(g.hand), true
		}
		if e.again || e.last == g.epoch {
			continue
		}
		if best < 0 || e.last < g.ents[best].last {
			best = g.hand
		}
	}
	if best < 0 {
		return 0, false
	}
	g.drop(best)
	g.ents[best].free = false
	return int32(best), true
}

// drop ends entry i's membership.
func (g *KnownGood) drop(i int) {
	e := &g.ents[i]
	delete(g.idx, e.key)
	*e = kgEntry{free: true}
	g.nMem--
	g.version++
}

// tick ends an interval. Members unseen for Expire intervals leave unless
// an attack is on (frozen); members the kernel has not vouched for in
// MaxAge intervals leave whatever is on: their place was bought by a
// connection long gone.
func (g *KnownGood) tick(frozen bool) {
	g.defaults()
	g.epoch++
	g.joined, g.checks = 0, 0
	for i := range g.ents {
		e := &g.ents[i]
		if e.free {
			continue
		}
		if g.epoch-e.verified > uint32(g.MaxAge) || (!frozen && g.epoch-e.last > uint32(g.Expire)) {
			g.drop(i)
		}
	}
}

// Contains reports whether a is a known-good client.
func (g *KnownGood) Contains(a netip.Addr) bool {
	return g.has(KeyOf(a.Unmap()))
}

func (g *KnownGood) has(k Key) bool {
	_, ok := g.idx[k]
	return ok
}

// Version changes whenever a member joins or leaves: the daemon pushes
// Members into the data plane only when it moved.
func (g *KnownGood) Version() uint64 { return g.version }

// Len is the number of members.
func (g *KnownGood) Len() int { return g.nMem }

// Entries is the number of entries held (members: at most Cap).
func (g *KnownGood) Entries() int { return len(g.idx) }

// AppendMembers appends every member's address to dst: what the daemon
// pushes into the data plane's known-good list.
func (g *KnownGood) AppendMembers(dst []netip.Addr) []netip.Addr {
	for i := range g.ents {
		if e := &g.ents[i]; !e.free {
			dst = append(dst, e.key.Addr())
		}
	}
	return dst
}

// PrefixFree reports whether p holds no member, and how many it holds:
// two binary searches in the members sorted by address, sorted again only
// when they changed. It is asked for every prefix detection (spareKnownGood),
// by the ladder and for each peer's ban: scanning every member for each,
// 10,000 prefix detections (spoofed /64s) against a full list cost some
// 650 million comparisons an interval.
func (g *KnownGood) PrefixFree(p netip.Prefix) (free bool, n int) {
	p = p.Masked()
	if !p.IsValid() {
		return true, 0
	}
	if g.sortedVer != g.version || g.sorted == nil {
		g.sorted = slices.SortedFunc(func(yield func(netip.Addr) bool) {
			for i := range g.ents {
				if e := &g.ents[i]; !e.free && !yield(e.key.Addr()) {
					return
				}
			}
		}, netip.Addr.Compare)
		g.sortedVer = g.version
	}
	first := p.Addr()
	lo, _ := slices.BinarySearchFunc(g.sorted, first, netip.Addr.Compare)
	hi := lo
	for hi < len(g.sorted) && p.Contains(g.sorted[hi]) {
		hi++
		if hi-lo == 64 {
			// Many: the rest by search, the prefix's last address.
			last := lastAddr(p)
			end, found := slices.BinarySearchFunc(g.sorted[hi:], last, netip.Addr.Compare)
			hi += end
			if found {
				hi++
			}
			break
		}
	}
	return hi == lo, hi - lo
}

// lastAddr is the highest address of p (masked).
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}
