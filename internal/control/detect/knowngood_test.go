// SPDX-License-Identifier: Apache-2.0

package detect

import (
	"math/rand/v2"
	"net/netip"
	"testing"
)

// spoofedACKs emits the spoofed sources from..from+n-1 in 10.9.0.0/16,
// each sending 3 ACKs (TCP, no SYN) to dst: what bought membership before
// issue 32.
func spoofedACKs(from, n int, dst netip.Addr) func(emit) {
	return func(e emit) {
		for i := from; i < from+n; i++ {
			src := netip.AddrFrom4([4]byte{10, 9, byte(i >> 8), byte(i)})
			e(flow{src: src, dst: dst, proto: 6, sport: uint16(1024 + i), dport: 443, packets: 3, size: 60})
		}
	}
}

// Three spoofed ACKs from each of 2,000 addresses, over many clean
// intervals, make none of them known-good: the host's stack holds no
// connection from them. (Before: 2,000 of 2,000.)
func TestKnownGoodSpoofedACKsBuyNothing(t *testing.T) {
	s := newSim(t, VictimConfig{})
	s.warm(10)
	// 200 new addresses an interval, each seen in two intervals in a
	// row: 600 pps, too little to be judged an attack.
	for i := range 21 {
		s.step(s.regularClients, spoofedACKs(100*i, 200, victimA))
	}
	if free, n := s.v.Good.PrefixFree(netip.MustParsePrefix("10.0.0.0/8")); !free {
		t.Fatalf("%d spoofed sources became known-good", n)
	}
	if s.v.Good.Len() != len(s.regular) {
		t.Fatalf("%d members, want the %d regular clients", s.v.Good.Len(), len(s.regular))
	}
}

// A source with a real connection joins only through a destination the
// daemon protects; traffic to anything else (a quiet destination behind
// this host) teaches nothing.
func TestKnownGoodOnlyProtectedDestinations(t *testing.T) {
	s := newSim(t, VictimConfig{})
	src := netip.MustParseAddr("198.18.0.7")
	s.established[src] = true
	other := netip.MustParseAddr("192.0.2.99") // not protected
	to := func(dst netip.Addr) func(emit) {
		return func(e emit) { e(flow{src: src, dst: dst, proto: 6, sport: 4000, dport: 443, packets: 5, size: 600}) }
	}
	for range 10 {
		s.step(to(other))
	}
	if s.v.Good.Contains(src) {
		t.Fatal("known-good from traffic to a destination the daemon does not protect")
	}
	s.step(to(victimA))
	if !s.v.Good.Contains(src) {
		t.Fatal("verified client of a protected destination not known-good")
	}
	// SYNs alone are no handshake, whatever the kernel says.
	syn := netip.MustParseAddr("198.18.0.8")
	s.established[syn] = true
	s.step(func(e emit) {
		e(flow{src: syn, dst: victimA, proto: 6, sport: 4001, dport: 443, packets: 2, syns: 2, size: 60})
	})
	if s.v.Good.Contains(syn) {
		t.Fatal("known-good from SYNs only")
	}
}

func kgAddr(i int) netip.Addr { return netip.AddrFrom4([4]byte{172, 20, byte(i >> 8), byte(i)}) }

var protectedDst = netip.MustParseAddr("192.0.2.10")

// The list is bounded and an attacker who completes handshakes cannot
// hold it: joins are capped per interval, newcomers displace only members
// verified once, and members the kernel vouched for again stay.
func TestKnownGoodCannotBeHeldFull(t *testing.T) {
	g := KnownGood{Cap: 100, MaxJoin: 10, Reverify: 5, Verify: func(src, dst netip.Addr) bool { return true }}
	// 100 clients join over 10 intervals (10 per interval at most).
	for i := range 100 {
		g.see(KeyOf(kgAddr(i)), protectedDst, true)
	}
	if g.Len() != 10 {
		t.Fatalf("%d joined in one interval, want the cap of 10", g.Len())
	}
	for range 10 {
		g.tick(false)
		for i := range 100 {
			g.see(KeyOf(kgAddr(i)), protectedDst, true)
		}
	}
	if g.Len() != 100 {
		t.Fatalf("%d members, want 100", g.Len())
	}
	// They keep talking: verified again past Reverify.
	for range 6 {
		g.tick(false)
		for i := range 100 {
			g.see(KeyOf(kgAddr(i)), protectedDst, true)
		}
	}
	// A botnet with real connections, 1,000 addresses for 50 intervals.
	for n := range 50 {
		g.tick(false)
		for i := range 1000 {
			g.see(KeyOf(netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)})), protectedDst, true)
		}
		if n%5 == 0 {
			for i := range 100 {
				g.see(KeyOf(kgAddr(i)), protectedDst, true)
			}
		}
	}
	for i := range 100 {
		if !g.Contains(kgAddr(i)) {
			t.Fatalf("re-verified client %s displaced; %d members, %d refused", kgAddr(i), g.Len(), g.Refused)
		}
	}
	if g.Len() > 100 || g.Entries() > 100 {
		t.Fatalf("%d members, %d entries over the cap of 100", g.Len(), g.Entries())
	}
}

// A member leaves when unseen for Expire intervals (not during an
// attack), and when the kernel has not vouched for it in MaxAge.
func TestKnownGoodEviction(t *testing.T) {
	ok := map[netip.Addr]bool{}
	g := KnownGood{Expire: 20, MaxAge: 100, Reverify: 10, Verify: func(src, dst netip.Addr) bool { return ok[src] }}
	quiet, gone, stays := kgAddr(1), kgAddr(2), kgAddr(3)
	for _, a := range []netip.Addr{quiet, gone, stays} {
		ok[a] = true
		g.see(KeyOf(a), protectedDst, true)
	}
	ok[gone] = false // its connection closed; it keeps sending (spoofed, or a stray)
	for range 30 {
		g.tick(true) // an attack is on: nothing expires by disuse
		g.see(KeyOf(gone), protectedDst, true)
		g.see(KeyOf(stays), protectedDst, true)
	}
	if !g.Contains(quiet) {
		t.Fatal("an unseen member expired while an attack was on")
	}
	g.tick(false)
	if g.Contains(quiet) {
		t.Fatal("a member unseen for 31 intervals kept")
	}
	for range 80 {
		g.tick(false)
		g.see(KeyOf(gone), protectedDst, true)
		g.see(KeyOf(stays), protectedDst, true)
	}
	if g.Contains(gone) || !g.Contains(stays) {
		t.Fatalf("after MaxAge: unverified member kept %v, re-verified member kept %v", g.Contains(gone), g.Contains(stays))
	}
}

// A known-good client above the per-source limit is never banned: its
// address is what a spoofer aiming the ban at it sends from. The victim's
// flood is met by the next rung. (Before: the member lost its membership
// for good and was banned.)
func TestVictimNeverBansMember(t *testing.T) {
	s := newSim(t, VictimConfig{})
	member := netip.MustParseAddr("198.18.0.1")
	s.established[member] = true
	steady := func(e emit) {
		e(flow{src: member, dst: victimA, proto: 6, sport: 1, dport: 443, packets: 10, size: 600})
	}
	for range 30 {
		s.step(s.regularClients, steady)
	}
	if !s.v.Good.Contains(member) {
		t.Fatal("verified client not known-good")
	}
	s.regular[member] = true // the loop fails on any dropped packet of it
	spoof := func(e emit) {
		e(flow{src: member, dst: victimA, proto: 17, sport: 1, dport: 80, packets: 50000, size: 600})
	}
	dec := s.step(s.regularClients, steady, spoof)
	if len(dec.Apply) != 1 {
		t.Fatalf("%d mitigations", len(dec.Apply))
	}
	m := dec.Apply[0]
	for _, p := range m.Prefixes {
		if p.Contains(member) {
			t.Fatalf("known-good %s banned: %s", member, m.Reason)
		}
	}
	if len(m.Spared) != 1 || m.Spared[0] != member {
		t.Fatalf("spared %v, want [%s]: %s", m.Spared, member, m.Reason)
	}
	if !s.v.Good.Contains(member) {
		t.Fatal("member lost its membership to traffic from its address")
	}
}

// PrefixFree by binary search counts what a scan of every member counts,
// for prefixes of both families, of every width, holding none, one or
// many members, after members joined and left.
func TestKnownGoodPrefixFreeAgreesWithScan(t *testing.T) {
	g := &KnownGood{Verify: func(netip.Addr, netip.Addr) bool { return true }, MaxJoin: 1 << 20, MaxChecks: 1 << 20}
	rng := rand.New(rand.NewPCG(3, 4))
	dst := netip.MustParseAddr("192.0.2.1")
	var added []netip.Addr
	for i := range 3000 {
		var a netip.Addr
		if i%3 == 0 {
			a = netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0, byte(rng.IntN(4)), 6: byte(rng.IntN(256)), 15: byte(rng.IntN(256))})
		} else {
			a = netip.AddrFrom4([4]byte{10, byte(rng.IntN(4)), byte(rng.IntN(256)), byte(rng.IntN(256))})
		}
		g.see(KeyOf(a), dst, true)
		added = append(added, a)
	}
	scan := func(p netip.Prefix) int {
		n := 0
		for _, a := range g.AppendMembers(nil) {
			if p.Contains(a) {
				n++
			}
		}
		return n
	}
	check := func(when string) {
		for range 2000 {
			a := added[rng.IntN(len(added))]
			p, _ := a.Prefix(rng.IntN(a.BitLen() + 1))
			if rng.IntN(4) == 0 { // an address next to it: maybe no member
				b := a.As16()
				b[15] ^= 0x80
				if a.Is4() {
					p, _ = netip.AddrFrom4([4]byte(b[12:])).Prefix(rng.IntN(33))
				} else {
					p, _ = netip.AddrFrom16(b).Prefix(rng.IntN(129))
				}
			}
			free, n := g.PrefixFree(p)
			if want := scan(p); n != want || free != (want == 0) {
				t.Fatalf("%s: PrefixFree(%s) = %v, %d; the scan counts %d", when, p, free, n, want)
			}
		}
	}
	check("after 3,000 joins")
	for i := 0; i < len(g.ents); i += 3 {
		if !g.ents[i].free {
			g.drop(i)
		}
	}
	check("after a third left")
}
