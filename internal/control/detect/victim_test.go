// SPDX-License-Identifier: Apache-2.0

package detect

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/tierwall/tierwall/internal/rule"
)

// The per-victim tests run a closed loop: each interval's flows pass
// through the mitigations in force (bans, and flow rules with the
// known-good bypass the data plane applies from Good's members), what
// passes becomes the Traffic and PortProfile Observe sees, what is dropped
// is reported per victim, and Observe's decisions are applied for the next
// interval. The loop also checks, every interval, that no packet of a
// regular client was dropped.

var (
	victimA  = netip.MustParseAddr("192.0.2.10")
	victimB  = netip.MustParseAddr("192.0.2.20")
	victim6  = netip.MustParseAddr("2001:db8:10::10")
	clients  = netip.MustParsePrefix("172.16.0.0/12") // where every regular IPv4 client lives
	clients6 = netip.MustParsePrefix("2001:db8:c::/48")
)

// flow is one (source, destination, protocol, ports) of an interval.
type flow struct {
	src, dst     netip.Addr
	proto        uint8
	sport, dport uint16
	packets      uint64
	syns         uint64
	size         uint64
	synLen       int // its SYNs' IP length (0: Linux's, 60 or 80)
}

// synIPLen is the IP length of f's SYNs.
func (f flow) synIPLen() int {
	switch {
	case f.synLen > 0:
		return f.synLen
	case f.dst.Is4():
		return 60
	}
	return 80
}

type emit func(flow)

type sim struct {
	t      *testing.T
	v      *Victims
	active map[uint64]Mitigation
	n      int // intervals run
	// clientDrops counts dropped packets of the regular clients (ground
	// truth, not Good): must stay 0.
	clientDrops uint64
	regular     map[netip.Addr]bool
	established map[netip.Addr]bool // sources with a connection the host's stack holds, besides regular
	tr          *Traffic
	pp          *PortProfile
	// overflow is the share of other sources' packets the feature
	// buffers had no room for: the port profile counts them, the
	// traffic only as Overflow.
	overflow float64
}

func newSim(t *testing.T, c VictimConfig) *sim {
	s := &sim{t: t, v: NewVictims(c), active: map[uint64]Mitigation{}, regular: map[netip.Addr]bool{},
		established: map[netip.Addr]bool{}, tr: NewTraffic(time.Second), pp: &PortProfile{}}
	// The host's TCP stack: the regular clients and the sources a test
	// gives real connections have them; nothing spoofed does.
	s.v.Good.Verify = func(src, dst netip.Addr) bool { return s.regular[src] || s.established[src] }
	s.v.Protects = func(a netip.Addr) bool { return a == victimA || a == victimB || a == victim6 }
	return s
}

// step runs one interval of flows produced by gens.
func (s *sim) step(gens ...func(emit)) Decision {
	s.t.Helper()
	s.n++
	s.tr.Reset(time.Second, 1024)
	s.pp.Reset()
	dropped := map[netip.Addr]uint64{}
	budget := map[string]uint64{}
	for _, g := range gens {
		g(func(f flow) {
			passed, syns := s.filter(f, budget)
			if d := f.packets - passed; d > 0 {
				dropped[f.dst] += d
				if s.regular[f.src] {
					s.clientDrops += d
				}
			}
			if passed > 0 {
				counted, csyns := passed, syns
				if s.overflow > 0 && !s.regular[f.src] {
					counted = passed - uint64(s.overflow*float64(passed))
					csyns = min(syns, counted)
					s.tr.Overflow += passed - counted
				}
				if counted > 0 {
					s.tr.Add(f.src, f.dst, f.proto, counted, counted*f.size, csyns)
				}
				s.pp.Add(f.proto, f.sport, f.dport, passed)
				if f.proto == 6 && syns > 0 {
					fam := uint8(4)
					if !f.dst.Is4() {
						fam = 6
					}
					s.pp.AddSYN(fam, f.synIPLen(), syns)
				}
			}
		})
	}
	dec := s.v.Observe(Input{Traffic: s.tr, Ports: s.pp, Dropped: dropped})
	for _, m := range dec.Apply {
		s.checkSafe(m)
		s.active[m.ID] = m
	}
	for _, w := range dec.Withdraw {
		if _, ok := s.active[w.ID]; !ok {
			s.t.Fatalf("interval %d: withdrawal of unknown mitigation %d", s.n, w.ID)
		}
		delete(s.active, w.ID)
	}
	if s.clientDrops > 0 {
		s.t.Fatalf("interval %d: %d packets of regular clients dropped", s.n, s.clientDrops)
	}
	return dec
}

// checkSafe fails on a mitigation that could drop a regular client: a
// prefix holding one, a rule without the bypass, or a client that is not
// known-good by the time of the attack.
func (s *sim) checkSafe(m Mitigation) {
	s.t.Helper()
	for _, p := range m.Prefixes {
		for a := range s.regular {
			if p.Contains(a) {
				s.t.Fatalf("interval %d: %s blocks regular client %s (%s)", s.n, p, a, m.Reason)
			}
		}
	}
	for _, r := range m.Rules {
		if !r.KnownGoodBypass {
			s.t.Fatalf("rule without the known-good bypass: %s", r)
		}
		if err := r.Check(); err != nil {
			s.t.Fatalf("rule %s: %v", r, err)
		}
		if r.Dst.Bits() != r.Dst.Addr().BitLen() || r.Dst.Addr() != m.Victim {
			s.t.Fatalf("rule %s is wider than the victim %s", r, m.Victim)
		}
	}
}

// filter is the data plane: bans first, then flow rules, known-good
// clients bypassing rules. It returns the packets and SYNs that pass.
func (s *sim) filter(f flow, budget map[string]uint64) (uint64, uint64) {
	for _, m := range s.active {
		for _, p := range m.Prefixes {
			if p.Contains(f.src) {
				return 0, 0
			}
		}
	}
	good := s.v.Good.Contains(f.src)
	for id, m := range s.active {
		for i, r := range m.Rules {
			flags, length := uint8(rule.TCPAck), uint16(0)
			if f.syns == f.packets {
				flags, length = rule.TCPSyn, uint16(f.synIPLen())
			}
			if !r.Match(f.dst, f.proto, f.sport, f.dport, flags, length, rule.FragNone) {
				continue
			}
			if r.KnownGoodBypass && good {
				return f.packets, f.syns
			}
			switch r.Action {
			case rule.FlowDrop:
				return 0, 0
			case rule.FlowSYNCookie:
				return f.packets - f.syns, 0 // SYNs answered in XDP; validated ACKs pass
			case rule.FlowRateLimit:
				k := fmt.Sprint(id, i)
				if _, ok := budget[k]; !ok {
					budget[k] = r.RatePPS
				}
				n := min(budget[k], f.packets)
				budget[k] -= n
				return n, min(f.syns, n)
			}
		}
	}
	return f.packets, f.syns
}

// regularClients emits the steady clients: 200 IPv4 clients of victim A
// over TCP 443 (handshakes: mostly non-SYN), 50 of them also over QUIC
// (UDP 443), 100 clients of victim B, 50 IPv6 clients of victim6. About
// 2150 pps to A, 1000 to B and 500 to victim6.
func (s *sim) regularClients(e emit) {
	i := s.n
	for c := 0; c < 200; c++ {
		src := netip.AddrFrom4([4]byte{172, 16, byte(c / 250), byte(c%250 + 1)})
		s.regular[src] = true
		n := uint64(5 + (c*7+i*3)%11)
		syn := uint64(0)
		if (c+i)%10 == 0 {
			syn = 1
		}
		e(flow{src: src, dst: victimA, proto: 6, sport: uint16(40000 + c), dport: 443, packets: n, syns: syn, size: 600})
		if c < 50 {
			e(flow{src: src, dst: victimA, proto: 17, sport: uint16(50000 + c), dport: 443, packets: 3, size: 1200})
		}
	}
	for c := 0; c < 100; c++ {
		src := netip.AddrFrom4([4]byte{172, 16, 2, byte(c + 1)})
		s.regular[src] = true
		e(flow{src: src, dst: victimB, proto: 6, sport: uint16(40000 + c), dport: 80, packets: uint64(8 + (c+i)%5), size: 400})
	}
	for c := 0; c < 50; c++ {
		b := clients6.Addr().As16()
		b[15] = byte(c + 1)
		src := netip.AddrFrom16(b)
		s.regular[src] = true
		e(flow{src: src, dst: victim6, proto: 6, sport: uint16(40000 + c), dport: 443, packets: uint64(8 + (c+i)%5), size: 800})
	}
}

// warm runs n clean intervals and checks that every regular client ended
// up known-good.
func (s *sim) warm(n int) {
	s.t.Helper()
	for range n {
		if dec := s.step(s.regularClients); len(dec.Attacks) > 0 || len(dec.Apply) > 0 {
			s.t.Fatalf("interval %d of clean traffic judged an attack: %+v", s.n, dec.Attacks)
		}
	}
	for a := range s.regular {
		if !s.v.Good.Contains(a) {
			s.t.Fatalf("regular client %s is not known-good after %d clean intervals", a, n)
		}
	}
}

// randIn is a random address in p (rand from r).
func randIn(r *rand.Rand, p netip.Prefix) netip.Addr {
	b := p.Addr().As16()
	off := 0
	if p.Addr().Is4() {
		off = 12
	}
	bits := p.Bits() + off*8
	var x [16]byte
	binary.BigEndian.PutUint64(x[:8], r.Uint64())
	binary.BigEndian.PutUint64(x[8:], r.Uint64())
	for i := range 16 {
		keep := min(max(bits-8*i, 0), 8)
		m := byte(0xff << (8 - keep))
		if keep == 0 {
			m = 0
		}
		b[i] = b[i]&m | x[i]&^m
	}
	a := netip.AddrFrom16(b)
	if p.Addr().Is4() {
		a = a.Unmap()
	}
	return a
}

// spoofed emits n flows from random sources in p (not in avoid) to dst.
func spoofed(seed uint64, p, avoid netip.Prefix, n int, dst netip.Addr, proto uint8, dport uint16, pkts uint64, syn bool) func(emit) {
	return func(e emit) {
		r := rand.New(rand.NewPCG(seed, 7))
		for range n {
			a := randIn(r, p)
			if avoid.IsValid() && avoid.Contains(a) {
				continue
			}
			f := flow{src: a, dst: dst, proto: proto, sport: uint16(1024 + r.IntN(60000)), dport: dport, packets: pkts, size: 64}
			if syn {
				f.syns = pkts
			}
			e(f)
		}
	}
}

func TestVictimFloods(t *testing.T) {
	all4 := netip.MustParsePrefix("0.0.0.0/0")
	reflection := func(e emit) {
		for i := range 10000 {
			x := splitmix(uint64(i))
			src := netip.AddrFrom4([4]byte{byte(x>>24) | 1, byte(x >> 16), byte(x >> 8), byte(x)})
			if clients.Contains(src) {
				continue
			}
			sport := uint16(53)
			if i%2 == 1 {
				sport = 123
			}
			e(flow{src: src, dst: victimA, proto: 17, sport: sport, dport: uint16(1024 + i%60000), packets: 100, size: 1400})
		}
	}
	heavy := func(e emit) {
		for i := range 5 {
			e(flow{src: netip.AddrFrom4([4]byte{203, 0, 113, byte(i + 1)}), dst: victimA, proto: 17, sport: 4444, dport: 80, packets: 20000, size: 512})
		}
	}
	slash24 := func(base [3]byte) func(emit) {
		return func(e emit) {
			for h := 1; h < 255; h++ {
				e(flow{src: netip.AddrFrom4([4]byte{base[0], base[1], base[2], byte(h)}), dst: victimA, proto: 17, sport: 5555, dport: 9999, packets: 200, size: 512})
			}
		}
	}
	slash16 := func(e emit) {
		for i := range 65536 {
			e(flow{src: netip.AddrFrom4([4]byte{10, 20, byte(i >> 8), byte(i)}), dst: victimA, proto: 17, sport: uint16(1024 + i%60000), dport: 27015, packets: 20, size: 64})
		}
	}
	tests := []struct {
		name   string
		victim netip.Addr
		flood  func(seed uint64) func(emit)
		rung   Rung
		check  func(m Mitigation) string // "" when as wanted
	}{
		{"random sources in a /16", victimA, func(uint64) func(emit) { return slash16 }, RungPrefix,
			wantPrefix("10.20.0.0/16")},
		{"random sources in a /16", victimA, func(s uint64) func(emit) {
			return spoofed(s, netip.MustParsePrefix("10.128.0.0/16"), netip.Prefix{}, 300000, victimA, 17, 27015, 3, false)
		}, RungPrefix, wantPrefix("10.128.0.0/16")},
		// Wider than the widest automatic ban (/16): met on the
		// destination side, never by a /9 ban (issue 32).
		{"random sources in a /9", victimA, func(s uint64) func(emit) {
			return spoofed(s, netip.MustParsePrefix("10.128.0.0/9"), netip.Prefix{}, 300000, victimA, 17, 27015, 3, false)
		}, RungFlowRule, wantRule(rule.FlowRule{Dst: host(victimA), Proto: 17, DstPorts: rule.PortRange{Lo: 27015, Hi: 27015}, Action: rule.FlowRateLimit, KnownGoodBypass: true})},
		{"random sources across IPv4", victimA, func(s uint64) func(emit) {
			return spoofed(s, all4, clients, 300000, victimA, 17, 27015, 3, false)
		}, RungFlowRule, wantRule(rule.FlowRule{Dst: host(victimA), Proto: 17, DstPorts: rule.PortRange{Lo: 27015, Hi: 27015}, Action: rule.FlowRateLimit, KnownGoodBypass: true})},
		{"IPv6 random in a /48", victim6, func(s uint64) func(emit) {
			return spoofed(s, netip.MustParsePrefix("2001:db8:bad::/48"), netip.Prefix{}, 200000, victim6, 17, 27015, 3, false)
		}, RungPrefix, wantPrefix("2001:db8:bad::/48")},
		{"IPv6 random across ::/1", victim6, func(s uint64) func(emit) {
			return spoofed(s, netip.MustParsePrefix("::/1"), clients6, 200000, victim6, 17, 27015, 3, false)
		}, RungFlowRule, wantRule(rule.FlowRule{Dst: host(victim6), Proto: 17, DstPorts: rule.PortRange{Lo: 27015, Hi: 27015}, Action: rule.FlowRateLimit, KnownGoodBypass: true})},
		{"reflection from UDP 53 and 123", victimA, func(uint64) func(emit) { return reflection }, RungFlowRule,
			wantRule(rule.FlowRule{Dst: host(victimA), Proto: 17, SrcPorts: rule.PortRange{Lo: 53, Hi: 53}, Action: rule.FlowDrop, KnownGoodBypass: true},
				rule.FlowRule{Dst: host(victimA), Proto: 17, SrcPorts: rule.PortRange{Lo: 123, Hi: 123}, Action: rule.FlowDrop, KnownGoodBypass: true})},
		{"random-source SYN flood on TCP 80", victimA, func(s uint64) func(emit) {
			return spoofed(s, all4, clients, 300000, victimA, 6, 80, 2, true)
		}, RungFlowRule, wantRule(rule.FlowRule{Dst: host(victimA), Proto: 6, DstPorts: rule.PortRange{Lo: 80, Hi: 80}, Action: rule.FlowSYNCookie, KnownGoodBypass: true})},
		{"concentrated flood from one /24", victimA, func(uint64) func(emit) { return slash24([3]byte{198, 51, 100}) }, RungPrefix,
			wantPrefix("198.51.100.0/24")},
		{"flood from the clients' own /24", victimA, func(uint64) func(emit) { return slash24([3]byte{172, 16, 0}) }, RungFlowRule,
			wantRule(rule.FlowRule{Dst: host(victimA), Proto: 17, DstPorts: rule.PortRange{Lo: 9999, Hi: 9999}, Action: rule.FlowRateLimit, KnownGoodBypass: true})},
		{"a few heavy sources", victimA, func(uint64) func(emit) { return heavy }, RungSourceBans,
			wantPrefix("203.0.113.1/32", "203.0.113.2/32", "203.0.113.3/32", "203.0.113.4/32", "203.0.113.5/32")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newSim(t, VictimConfig{})
			s.warm(30)
			var first *Mitigation
			applied := 0
			for i := range 6 {
				dec := s.step(s.regularClients, tc.flood(uint64(i)))
				if len(dec.Withdraw) > 0 {
					t.Fatalf("flood interval %d: withdrawn during the flood: %+v", i+1, dec.Withdraw)
				}
				applied += len(dec.Apply)
				for _, m := range dec.Apply {
					t.Logf("flood interval %d: %s", i+1, m.Reason)
				}
				for _, m := range dec.Apply {
					if m.Victim != tc.victim {
						t.Fatalf("flood interval %d: mitigation for %s, want %s: %s", i+1, m.Victim, tc.victim, m.Reason)
					}
					if first == nil {
						first = &m
						if i >= 2 {
							t.Fatalf("detected in flood interval %d, want within 2", i+1)
						}
					}
				}
			}
			if first == nil {
				t.Fatal("flood never detected")
			}
			t.Logf("%s", first.Reason)
			if first.Rung != tc.rung {
				t.Fatalf("rung %s, want %s: %s", first.Rung, tc.rung, first.Reason)
			}
			if why := tc.check(*first); why != "" {
				t.Fatalf("%s: %s", why, first.Reason)
			}
			if applied != 1 {
				t.Fatalf("%d mitigations during the flood, want the first to hold", applied)
			}
			// The flood stops: the mitigations go after WithdrawAfter quiet
			// intervals, not before.
			n := len(s.active)
			for i := 1; i <= 8; i++ {
				dec := s.step(s.regularClients)
				if len(dec.Apply) > 0 {
					t.Fatalf("after the flood, interval %d: new mitigation %s", i, dec.Apply[0].Reason)
				}
				switch {
				case i < 5 && len(dec.Withdraw) > 0:
					t.Fatalf("withdrawn %d intervals after the flood, want 5", i)
				case i == 5 && len(dec.Withdraw) != n:
					t.Fatalf("%d of %d mitigations withdrawn 5 intervals after the flood", len(dec.Withdraw), n)
				}
			}
			if len(s.active) != 0 {
				t.Fatalf("%d mitigations left", len(s.active))
			}
		})
	}
}

func wantPrefix(ps ...string) func(Mitigation) string {
	return func(m Mitigation) string {
		want := map[string]bool{}
		for _, p := range ps {
			want[p] = true
		}
		if len(m.Prefixes) != len(ps) {
			return fmt.Sprintf("prefixes %v, want %v", m.Prefixes, ps)
		}
		for _, p := range m.Prefixes {
			if !want[p.String()] {
				return fmt.Sprintf("prefixes %v, want %v", m.Prefixes, ps)
			}
		}
		return ""
	}
}

// wantRule compares rules ignoring the rate of rate-limits, which must
// be above 0.
func wantRule(rs ...rule.FlowRule) func(Mitigation) string {
	return func(m Mitigation) string {
		if len(m.Rules) != len(rs) {
			return fmt.Sprintf("rules %v, want %v", m.Rules, rs)
		}
		for i, r := range m.Rules {
			got := r
			if got.Action == rule.FlowRateLimit && got.RatePPS > 0 {
				got.RatePPS = 0
			}
			if got != rs[i] {
				return fmt.Sprintf("rule %d: %s, want %s", i, r, rs[i])
			}
		}
		return ""
	}
}

// A flash crowd of new legitimate clients at five times the usual rate is
// an anomaly, but never dropped: the choice is a rate-limit with the
// known-good bypass, at four times the baseline.
func TestVictimFlashCrowdIsRateLimited(t *testing.T) {
	s := newSim(t, VictimConfig{})
	s.warm(30)
	base, _ := s.v.Baseline(victimA)
	crowd := func(e emit) {
		for i := range 3000 {
			src := netip.AddrFrom4([4]byte{100, 64, byte(i >> 8), byte(i)})
			e(flow{src: src, dst: victimA, proto: 6, sport: uint16(30000 + i), dport: 443, packets: 3, syns: 1, size: 600})
		}
	}
	var got []Mitigation
	for range 4 {
		got = append(got, s.step(s.regularClients, crowd).Apply...)
	}
	if len(got) == 0 {
		t.Fatal("a 5× jump in new sources and rate not judged at all")
	}
	for _, m := range got {
		if len(m.Prefixes) > 0 {
			t.Fatalf("flash crowd blocked by %s: %s", m.Rung, m.Reason)
		}
		for _, r := range m.Rules {
			if r.Action != rule.FlowRateLimit || !r.KnownGoodBypass || float64(r.RatePPS) < 3*base {
				t.Fatalf("flash crowd rule %s (baseline %.0f pps)", r, base)
			}
		}
	}
	t.Logf("%s", got[0].Reason)
}

// An attacker ramping up slowly from a tenth of the baseline, 3% more
// every interval, to poison the baseline: the mean may rise only 0.2% per
// clean interval, so the ramp crosses the threshold before it reaches
// twice the original rate, and the baseline is still near the original.
func TestVictimSlowRampCannotPoisonBaseline(t *testing.T) {
	s := newSim(t, VictimConfig{})
	s.warm(30)
	base, _ := s.v.Baseline(victimA)
	extra := 0.1 * base
	for i := range 200 {
		n := int(extra / 5)
		dec := s.step(s.regularClients, spoofed(uint64(i), netip.MustParsePrefix("0.0.0.0/0"), clients, n, victimA, 17, 27015, 5, false))
		if len(dec.Apply) > 0 {
			now, _ := s.v.Baseline(victimA)
			t.Logf("detected after %d intervals at %.0f pps over a %.0f pps baseline (originally %.0f): %s", i+1, extra, now, base, dec.Apply[0].Reason)
			if extra > base || now > 1.5*base {
				t.Fatalf("ramp reached +%.0f pps and the baseline %.0f (from %.0f) before detection", extra, now, base)
			}
			return
		}
		extra *= 1.03
	}
	t.Fatalf("ramp never detected (last +%.0f pps over %.0f)", extra, base)
}

// A flood alternating between two victims every interval: each is
// detected in its first flood interval, neither is withdrawn while the
// alternation lasts (the quiet run restarts), and neither learns from it.
func TestVictimAlternatingDestinations(t *testing.T) {
	s := newSim(t, VictimConfig{})
	s.warm(30)
	baseA, _ := s.v.Baseline(victimA)
	baseB, _ := s.v.Baseline(victimB)
	seen := map[netip.Addr]int{}
	for i := range 12 {
		dst := victimA
		if i%2 == 1 {
			dst = victimB
		}
		dec := s.step(s.regularClients, spoofed(uint64(i), netip.MustParsePrefix("0.0.0.0/0"), clients, 200000, dst, 17, 27015, 3, false))
		if len(dec.Withdraw) > 0 {
			t.Fatalf("interval %d: withdrawn while alternating: %+v", i, dec.Withdraw)
		}
		for _, m := range dec.Apply {
			if _, ok := seen[m.Victim]; !ok {
				seen[m.Victim] = i
			}
		}
	}
	if a, ok := seen[victimA]; !ok || a != 0 {
		t.Fatalf("victim A first mitigated at %v (%v)", a, ok)
	}
	if b, ok := seen[victimB]; !ok || b != 1 {
		t.Fatalf("victim B first mitigated at %v (%v)", b, ok)
	}
	if a, _ := s.v.Baseline(victimA); a != baseA {
		t.Fatalf("victim A's baseline moved during the attack: %.0f → %.0f", baseA, a)
	}
	if b, _ := s.v.Baseline(victimB); b != baseB {
		t.Fatalf("victim B's baseline moved during the attack: %.0f → %.0f", baseB, b)
	}
}

// A million distinct sources in one interval: the detector's own state
// stays within its bounds, and an Observe allocates no more than at ten
// thousand sources.
func TestVictimMemoryBounded(t *testing.T) {
	s := newSim(t, VictimConfig{})
	s.warm(30)
	entries := s.v.Good.Entries()
	build := func(n int, seed uint64) *Traffic {
		tr := NewTrafficSized(time.Second, n)
		r := rand.New(rand.NewPCG(seed, 1))
		for range n {
			tr.Add(netip.AddrFrom4([4]byte{10, byte(r.Uint32()), byte(r.Uint32()), byte(r.Uint32())}), victimA, 17, 1, 64, 0)
		}
		return tr
	}
	big := build(1_000_000, 1)
	if len(big.Sources) < 900_000 {
		t.Fatalf("only %d distinct sources", len(big.Sources))
	}
	for range 3 {
		s.v.Observe(Input{Traffic: big, Ports: s.pp})
	}
	if s.v.Tracked() > s.v.Config.MaxVictims || s.v.Good.Entries() != entries || len(s.v.idx) != s.v.Tracked() {
		t.Fatalf("state grew: %d victims, %d known-good entries (was %d)", s.v.Tracked(), s.v.Good.Entries(), entries)
	}
	if len(s.v.recent.cur) != bloomBits/64 || len(s.v.recent.prev) != bloomBits/64 || len(s.v.acc) > 2*s.v.Config.MaxVictims {
		t.Fatal("Bloom filters or scratch resized")
	}
	// The per-entry sizes the bounds in the comments are computed from.
	if sz := unsafe.Sizeof(victimState{}); sz > 320 {
		t.Fatalf("victimState is %d bytes", sz)
	}
	if sz := unsafe.Sizeof(kgEntry{}); sz > 48 {
		t.Fatalf("kgEntry is %d bytes", sz)
	}
	small := build(10_000, 2)
	aBig := testing.AllocsPerRun(3, func() { s.v.Observe(Input{Traffic: big, Ports: s.pp}) })
	aSmall := testing.AllocsPerRun(3, func() { s.v.Observe(Input{Traffic: small, Ports: s.pp}) })
	if aBig > aSmall+16 || aBig > 200 {
		t.Fatalf("allocations per Observe: %.0f at 1M sources, %.0f at 10K", aBig, aSmall)
	}
	t.Logf("allocations per Observe: %.0f at 1M sources, %.0f at 10K", aBig, aSmall)
}

// Spraying 20000 busy destinations inside the protected space neither
// grows the per-destination state past MaxVictims nor evicts the learned
// victims.
func TestVictimDestinationSprayBounded(t *testing.T) {
	s := newSim(t, VictimConfig{MaxVictims: 64})
	s.warm(30)
	spray := func(e emit) {
		for i := range 20000 {
			e(flow{src: netip.AddrFrom4([4]byte{203, 0, 113, byte(i)}), dst: netip.AddrFrom4([4]byte{192, 0, byte(100 + i>>8), byte(i)}),
				proto: 17, sport: 1, dport: 2, packets: 2000, size: 64})
		}
	}
	var unjudged int
	for range 5 {
		unjudged += s.step(spray, s.regularClients).Unjudged // the spray first in the interval's order
	}
	if s.v.Tracked() > 64 || len(s.v.idx) > 64 {
		t.Fatalf("%d destinations tracked, cap 64", s.v.Tracked())
	}
	if unjudged == 0 {
		t.Fatal("no destination reported unjudged")
	}
	for _, a := range []netip.Addr{victimA, victimB, victim6} {
		if _, ok := s.v.Baseline(a); !ok {
			t.Fatalf("%s's baseline evicted by the spray", a)
		}
	}
	// The learned victims are still judged: a flood on A is caught.
	dec := s.step(spray, s.regularClients, spoofed(9, netip.MustParsePrefix("0.0.0.0/0"), clients, 100000, victimA, 17, 27015, 3, false))
	found := false
	for _, m := range dec.Apply {
		found = found || m.Victim == victimA
	}
	if !found {
		t.Fatal("flood on A missed during the spray")
	}
}

// A flood that pauses for fewer than WithdrawAfter intervals keeps its
// mitigation (hysteresis); one quiet for longer loses it.
func TestVictimWithdrawHysteresis(t *testing.T) {
	s := newSim(t, VictimConfig{})
	s.warm(30)
	flood := spoofed(1, netip.MustParsePrefix("0.0.0.0/0"), clients, 200000, victimA, 17, 27015, 3, false)
	pattern := "FF..F...F.....F" // F: flood, .: quiet
	var withdrawn []int
	for i, c := range pattern {
		gens := []func(emit){s.regularClients}
		if c == 'F' {
			gens = append(gens, flood)
		}
		if dec := s.step(gens...); len(dec.Withdraw) > 0 {
			withdrawn = append(withdrawn, i)
		}
	}
	if len(withdrawn) != 1 || withdrawn[0] != 13 {
		t.Fatalf("withdrawn at %v of %q, want only at 13", withdrawn, pattern)
	}
}

// The ladder's reasons name the rung and the numbers.
func TestVictimReasonIsReadable(t *testing.T) {
	s := newSim(t, VictimConfig{})
	s.warm(30)
	dec := s.step(s.regularClients, spoofed(1, netip.MustParsePrefix("10.128.0.0/16"), netip.Prefix{}, 100000, victimA, 17, 27015, 3, false))
	if len(dec.Apply) != 1 || len(dec.Attacks) != 1 || !dec.Attacks[0].New {
		t.Fatalf("%+v", dec)
	}
	m := dec.Apply[0]
	for _, want := range []string{"rung prefix", "10.128.0.0/16", "192.0.2.10", "no known-good client", "new"} {
		if !strings.Contains(m.Reason, want) {
			t.Fatalf("reason %q lacks %q", m.Reason, want)
		}
	}
	if m.Evidence.Covered < 0.9 || m.Evidence.NewSources < 90000 || m.Evidence.Signals&SigNew == 0 || m.Evidence.Signals&SigPPS == 0 {
		t.Fatalf("evidence %+v", m.Evidence)
	}
}

// Source bans that no longer hold a flood (the heavy sources were joined
// by a spoofed /16) are followed, after EscalateAfter intervals, by the
// next rung; both go when the flood ends.
func TestVictimEscalates(t *testing.T) {
	s := newSim(t, VictimConfig{})
	s.warm(30)
	heavy := func(e emit) {
		for i := range 5 {
			e(flow{src: netip.AddrFrom4([4]byte{203, 0, 113, byte(i + 1)}), dst: victimA, proto: 17, sport: 4444, dport: 80, packets: 20000, size: 512})
		}
	}
	wide := func(e emit) {
		for i := range 65536 {
			e(flow{src: netip.AddrFrom4([4]byte{10, 20, byte(i >> 8), byte(i)}), dst: victimA, proto: 17, sport: 1, dport: 80, packets: 5, size: 64})
		}
	}
	var rungs []Rung
	for i := range 6 {
		gens := []func(emit){s.regularClients, heavy}
		if i >= 1 {
			gens = append(gens, wide)
		}
		for _, m := range s.step(gens...).Apply {
			rungs = append(rungs, m.Rung)
			t.Logf("interval %d: %s", i, m.Reason)
		}
	}
	if len(rungs) != 2 || rungs[0] != RungSourceBans || rungs[1] != RungPrefix {
		t.Fatalf("rungs %v, want source bans then a prefix", rungs)
	}
	var gone int
	for range 6 {
		gone += len(s.step(s.regularClients).Withdraw)
	}
	if gone != 2 || len(s.active) != 0 {
		t.Fatalf("%d withdrawn, %d left", gone, len(s.active))
	}
}

// BenchmarkVictimsObserve1M is one interval of a million spoofed sources
// toward one learned victim.
func BenchmarkVictimsObserve1M(b *testing.B) {
	v := NewVictims(VictimConfig{})
	pp := &PortProfile{}
	for i := range 30 {
		tr := NewTraffic(time.Second)
		for c := range 200 {
			tr.Add(netip.AddrFrom4([4]byte{172, 16, 0, byte(c)}), victimA, 6, uint64(5+(c+i)%7), 3000, 0)
		}
		v.Observe(Input{Traffic: tr, Ports: pp})
	}
	tr := NewTrafficSized(time.Second, 1_000_000)
	r := rand.New(rand.NewPCG(1, 2))
	for range 1_000_000 {
		tr.Add(netip.AddrFrom4([4]byte{10, byte(r.Uint32()), byte(r.Uint32()), byte(r.Uint32())}), victimA, 17, 1, 64, 0)
	}
	b.ResetTimer()
	for range b.N {
		v.Observe(Input{Traffic: tr, Ports: pp})
	}
}

// With one port profile for all traffic, a port is named only when the
// victim's traffic dominates it: here a resolver's normal UDP from port
// 53 (to another server) is most of the UDP, and the flood on A gets a
// plain UDP rate-limit, not a drop of "reflection from port 53".
func TestVictimSharedPortProfile(t *testing.T) {
	s := newSim(t, VictimConfig{})
	resolver := netip.MustParseAddr("192.0.2.53")
	answers := func(e emit) {
		for i := range 100 {
			e(flow{src: netip.AddrFrom4([4]byte{9, 9, 0, byte(i)}), dst: resolver, proto: 17, sport: 53, dport: uint16(2000 + i), packets: 400, size: 200})
		}
	}
	for range 30 {
		if dec := s.step(s.regularClients, answers); len(dec.Apply) > 0 {
			t.Fatalf("clean interval judged an attack: %s", dec.Apply[0].Reason)
		}
	}
	var got []Mitigation
	for i := range 2 {
		got = append(got, s.step(s.regularClients, answers, spoofed(uint64(i), netip.MustParsePrefix("0.0.0.0/0"), clients, 20000, victimA, 17, 27015, 3, false)).Apply...)
	}
	if len(got) != 1 {
		t.Fatalf("%d mitigations", len(got))
	}
	t.Logf("%s", got[0].Reason)
	if why := wantRule(rule.FlowRule{Dst: host(victimA), Proto: 17, Action: rule.FlowRateLimit, KnownGoodBypass: true})(got[0]); why != "" {
		t.Fatal(why)
	}
}

// A rate limit put in for a TCP surge does not end the ladder when a SYN
// flood follows on the same victim: the limit would pass its rate of
// spoofed SYNs to the stack, so SYN cookies are added on top, once.
func TestVictimSYNFloodAfterRateLimit(t *testing.T) {
	s := newSim(t, VictimConfig{})
	s.warm(30)
	all4 := netip.MustParsePrefix("0.0.0.0/0")
	acks := spoofed(3, all4, clients, 60000, victimA, 6, 443, 2, false)
	syns := spoofed(4, all4, clients, 300000, victimA, 6, 443, 2, true)
	var got []Mitigation
	for i := range 8 {
		// The SYNs first: the simulated limit admits flows in order,
		// and the real one admits packets as they come, in proportion.
		gens := []func(emit){s.regularClients}
		if i >= 2 {
			gens = append(gens, syns)
		}
		gens = append(gens, acks)
		for _, m := range s.step(gens...).Apply {
			t.Logf("interval %d: %s", i, m.Reason)
			got = append(got, m)
		}
	}
	if len(got) != 2 {
		t.Fatalf("%d mitigations, want a rate limit then SYN cookies", len(got))
	}
	if r := got[0].Rules; len(r) == 0 || r[0].Action != rule.FlowRateLimit {
		t.Fatalf("first mitigation %v, want a rate limit", r)
	}
	want := rule.FlowRule{Dst: host(victimA), Proto: 6, DstPorts: rule.PortRange{Lo: 443, Hi: 443}, Action: rule.FlowSYNCookie, KnownGoodBypass: true}
	if r := got[1].Rules; len(r) != 1 || r[0] != want {
		t.Fatalf("second mitigation %v, want only %v", r, want)
	}
	if !strings.Contains(got[1].Reason, "escalated: a SYN flood") {
		t.Errorf("reason %q does not say why", got[1].Reason)
	}
}

// A SYN flood that overflows the feature buffers still gets its port:
// the port profile counts every packet that passed, the buffers only the
// keys they had room for, so the victim's counted packets are compared
// with the counted packets of every destination, not with the profile.
// Without the port the cookie rule would cover every TCP port, the
// management port among them, and the rails would refuse it (a SYN flood
// of 0.93 Mpps went unmitigated so in make eval-spoof).
func TestVictimSYNFloodPortUnderOverflow(t *testing.T) {
	s := newSim(t, VictimConfig{})
	s.warm(30)
	all4 := netip.MustParsePrefix("0.0.0.0/0")
	syns := spoofed(4, all4, clients, 60000, victimA, 6, 443, 5, true)
	s.overflow = 0.8
	var got []Mitigation
	for range 3 {
		dec := s.step(s.regularClients, syns)
		if len(got) == 0 && len(dec.Apply) > 0 && s.tr.Overflow == 0 {
			t.Fatal("the simulated buffers did not overflow in the deciding interval")
		}
		got = append(got, dec.Apply...)
	}
	want := rule.FlowRule{Dst: host(victimA), Proto: 6, DstPorts: rule.PortRange{Lo: 443, Hi: 443}, Action: rule.FlowSYNCookie, KnownGoodBypass: true}
	if len(got) == 0 || len(got[0].Rules) == 0 || got[0].Rules[0] != want {
		t.Fatalf("mitigations %v, want SYN cookies on %v", got, want)
	}
}

// A SYN flood that is still a minority of a busy server's TCP (it began
// late in the interval, or it is modest) is all of the traffic above the
// baseline: SYN cookies at once, not a rate limit that would pass its
// rate of spoofed SYNs.
func TestVictimSYNFloodMinorityOfTCP(t *testing.T) {
	s := newSim(t, VictimConfig{})
	s.warm(30)
	syns := spoofed(5, netip.MustParsePrefix("0.0.0.0/0"), clients, 750, victimA, 6, 443, 2, true)
	var got []Mitigation
	for i := range 3 {
		for _, m := range s.step(s.regularClients, syns).Apply {
			t.Logf("interval %d: %s", i, m.Reason)
			got = append(got, m)
		}
	}
	if len(got) == 0 {
		t.Fatal("no mitigation")
	}
	// 43% of the victim's TCP is SYNs: under SYNShare of all of it, all
	// of what is above the baseline. (The port stays unnamed: the shared
	// port profile is not the victim's alone.)
	if r := got[0].Rules; len(r) != 1 || r[0].Action != rule.FlowSYNCookie || r[0].Dst != host(victimA) {
		t.Fatalf("first mitigation %v, want SYN cookies on %s", r, victimA)
	}
}

// Without a baseline (the daemon just started), a busy server's own
// keep-alive clients above the cold threshold are not an attack: no
// mitigation, no packet of theirs dropped, and they become known-good.
// The same volume as UDP from the same sources still is.
func TestVictimColdBusyClientsAreNotAnAttack(t *testing.T) {
	c := VictimConfig{}
	s := newSim(t, c)
	busy := func(proto uint8) func(emit) {
		return func(e emit) {
			for i := 0; i < 256; i++ {
				src := netip.AddrFrom4([4]byte{172, 16, 1, byte(i)})
				if proto == 6 {
					s.regular[src] = true
				}
				syn := uint64(0)
				if i%50 == 0 {
					syn = 1
				}
				// 256 × 230 = 58,880 pps, over the 50,000 cold threshold.
				e(flow{src: src, dst: victimA, proto: proto, sport: uint16(40000 + i), dport: 80, packets: 230, syns: syn, size: 200})
			}
		}
	}
	for range 6 {
		if dec := s.step(busy(6)); len(dec.Attacks) > 0 || len(dec.Apply) > 0 {
			t.Fatalf("interval %d: busy keep-alive clients judged an attack: %+v", s.n, dec.Attacks)
		}
	}
	if s.clientDrops != 0 {
		t.Fatalf("%d client packets dropped", s.clientDrops)
	}
	if !s.v.Good.Contains(netip.AddrFrom4([4]byte{172, 16, 1, 7})) {
		t.Error("a busy client is not known-good after 6 clean intervals")
	}

	u := newSim(t, c)
	s = u
	if dec := u.step(busy(17)); len(dec.Attacks) == 0 {
		t.Fatal("the same volume as UDP, cold, was not judged an attack")
	}
}

// A surge on one port draws a rate-limit (the last rung); a flood on
// another vector afterwards must still be met: the rate-limit does not
// match it, so a rule for it is added, while the rate-limit's own port,
// over threshold by design, proposes nothing new. (On the lab, a victim
// rate-limited on TCP 80 for its clients' surge then passed a 0.35 Mpps
// UDP flood whole.)
func TestVictimNewVectorAfterRateLimit(t *testing.T) {
	s := newSim(t, VictimConfig{})
	s.warm(30)
	crowd := func(e emit) {
		for i := range 3000 {
			src := netip.AddrFrom4([4]byte{100, 64, byte(i >> 8), byte(i)})
			e(flow{src: src, dst: victimA, proto: 6, sport: uint16(30000 + i), dport: 443, packets: 3, syns: 1, size: 600})
		}
	}
	udp := spoofed(5, netip.MustParsePrefix("0.0.0.0/0"), clients, 200000, victimA, 17, 9, 2, false)
	var got []Mitigation
	for i := range 12 {
		gens := []func(emit){s.regularClients, crowd}
		if i >= 4 {
			gens = append(gens, udp)
		}
		for _, m := range s.step(gens...).Apply {
			t.Logf("interval %d: %s", i, m.Reason)
			got = append(got, m)
		}
	}
	if len(got) != 2 {
		t.Fatalf("%d mitigations, want the crowd's rate-limit then one for the UDP flood", len(got))
	}
	if r := got[0].Rules; len(r) == 0 || r[0].Proto != 6 {
		t.Fatalf("first mitigation %v, want the TCP rate-limit", r)
	}
	var udpRule bool
	for _, r := range got[1].Rules {
		if matchCovers(r, rule.FlowRule{Dst: host(victimA), Proto: 6, DstPorts: rule.PortRange{Lo: 443, Hi: 443}}) {
			t.Errorf("second mitigation repeats the TCP match: %s", r)
		}
		udpRule = udpRule || r.Proto == 17 && r.DstPorts == rule.PortRange{Lo: 9, Hi: 9}
	}
	if !udpRule || !strings.Contains(got[1].Reason, "new vector") {
		t.Fatalf("second mitigation %v (%s), want a UDP port 9 rule for the new vector", got[1].Rules, got[1].Reason)
	}
}

// A flood from the first interval, before the victim's baseline is
// learned, over a victim whose clients alone are above MinPPS: once the
// flood stops, its flow rule drops nothing and is withdrawn, not held in
// force for good by the clients' own load.
func TestVictimUnlearnedWithdrawsWhenFloodGone(t *testing.T) {
	for name, flood := range map[string]func(emit){
		"random sources (flow rule)": spoofed(6, netip.MustParsePrefix("0.0.0.0/0"), clients, 100000, victimA, 17, 9, 2, false),
		"one /24 (prefix ban)":       spoofed(7, netip.MustParsePrefix("198.51.100.0/24"), clients, 20000, victimA, 17, 9, 2, false),
	} {
		t.Run(name, func(t *testing.T) {
			s := newSim(t, VictimConfig{})
			var got []Mitigation
			for range 4 {
				got = append(got, s.step(s.regularClients, flood).Apply...)
			}
			if len(got) == 0 {
				t.Fatal("the flood from the first interval was never met")
			}
			t.Logf("met by %s", got[0].Rung)
			for i := 1; i <= 12; i++ {
				if dec := s.step(s.regularClients); len(dec.Withdraw) > 0 {
					t.Logf("withdrawn %d intervals after the flood: %s", i, dec.Withdraw[0].Reason)
					if s.v.Attacks() != 0 {
						t.Fatalf("%d attacks still on", s.v.Attacks())
					}
					return
				}
			}
			t.Fatalf("the attack still on 12 intervals after the flood stopped (%d active)", s.v.Attacks())
		})
	}
}

// synSized is gen with every SYN of n bytes.
func synSized(n int, gen func(emit)) func(emit) {
	return func(e emit) {
		gen(func(f flow) {
			f.synLen = n
			e(f)
		})
	}
}

// synSizeRule is the drop of SYNs of n bytes to victim A's port 443.
func synSizeRule(lo, hi uint16) rule.FlowRule {
	return rule.FlowRule{Dst: host(victimA), Proto: 6, DstPorts: rule.PortRange{Lo: 443, Hi: 443},
		TCPFlags: rule.TCPFlagMatch{Mask: rule.TCPSyn | rule.TCPAck, Value: rule.TCPSyn},
		Length:   rule.Range16{Lo: lo, Hi: hi}, Action: rule.FlowDrop, KnownGoodBypass: true}
}

// synFloodRules runs a SYN flood of gen after warm-up intervals of
// clean traffic (with extra, if any) and returns the first mitigation's
// rules.
func synFloodRules(t *testing.T, warm int, extra func(emit), flood func(emit)) []rule.FlowRule {
	t.Helper()
	return synFloodRulesWith(t, VictimConfig{SYNSizeDrop: true}, warm, extra, flood)
}

func synFloodRulesWith(t *testing.T, c VictimConfig, warm int, extra func(emit), flood func(emit)) []rule.FlowRule {
	t.Helper()
	s := newSim(t, c)
	clean := []func(emit){s.regularClients}
	if extra != nil {
		clean = append(clean, extra)
	}
	for range warm {
		if dec := s.step(clean...); len(dec.Apply) > 0 {
			t.Fatalf("clean interval %d judged an attack: %s", s.n, dec.Apply[0].Reason)
		}
	}
	for range 3 {
		if dec := s.step(append(clean, flood)...); len(dec.Apply) > 0 {
			t.Logf("%s", dec.Apply[0].Reason)
			return dec.Apply[0].Rules
		}
	}
	t.Fatal("no mitigation")
	return nil
}

// A SYN flood of bare 40-byte SYNs, a size the clients' stacks never send,
// is dropped by its size ahead of the SYN cookies, which stay for the
// rest; a client's 60-byte SYN is never the size rule's.
func TestVictimSYNSizeRule(t *testing.T) {
	all4 := netip.MustParsePrefix("0.0.0.0/0")
	rules := synFloodRules(t, 30, nil, synSized(40, spoofed(4, all4, clients, 300000, victimA, 6, 443, 2, true)))
	want := synSizeRule(40, 40)
	if !slices.Contains(rules, want) {
		t.Fatalf("rules %v, want %v among them", rules, want)
	}
	if !slices.ContainsFunc(rules, func(r rule.FlowRule) bool { return r.Action == rule.FlowSYNCookie }) {
		t.Fatalf("rules %v have no SYN cookies for the other sizes", rules)
	}
	if want.Match(victimA, 6, 40000, 443, rule.TCPSyn, 60, rule.FragNone) ||
		want.Match(victimA, 6, 40000, 443, rule.TCPAck, 40, rule.FragNone) {
		t.Error("the size rule matches a client's SYN or a bare ACK")
	}

	// A flood of random sizes from 100 to 1,400 bytes: one range from its
	// smallest to its largest, the clients' 60 outside it.
	spread := func(e emit) {
		i := 0
		spoofed(5, all4, clients, 300000, victimA, 6, 443, 2, true)(func(f flow) {
			f.synLen = 100 + i%1301
			i++
			e(f)
		})
	}
	rules = synFloodRules(t, 30, nil, spread)
	if want := synSizeRule(100, 1400); !slices.Contains(rules, want) {
		t.Fatalf("rules %v, want %v among them", rules, want)
	}

	// Two sizes far apart: a rule each, not one over the sizes between
	// (MPTCP's 72, a Fast Open SYN with data), which the flood does not
	// send and new clients may.
	two := func(e emit) {
		i := 0
		spoofed(6, all4, clients, 300000, victimA, 6, 443, 2, true)(func(f flow) {
			f.synLen = 100 + 100*(i%2)
			i++
			e(f)
		})
	}
	rules = synFloodRules(t, 30, nil, two)
	if !slices.Contains(rules, synSizeRule(100, 100)) || !slices.Contains(rules, synSizeRule(200, 200)) {
		t.Fatalf("rules %v, want drops of 100-100 and 200-200", rules)
	}
}

// Sizes learned while the victim's clients were not seen (no interval
// clean for every destination, or a new service) do not know them: no
// size is dropped.
func TestVictimSYNSizeStaleSizes(t *testing.T) {
	all4 := netip.MustParsePrefix("0.0.0.0/0")
	s := newSim(t, VictimConfig{SYNSizeDrop: true})
	s.warm(30)
	s.v.sizes.rate = [65536]float32{} // learned, but none of the victim's family
	var got []Mitigation
	for range 3 {
		got = append(got, s.step(s.regularClients, synSized(40, spoofed(4, all4, clients, 300000, victimA, 6, 443, 2, true))).Apply...)
	}
	if len(got) == 0 {
		t.Fatal("no mitigation")
	}
	for _, r := range got[0].Rules {
		if r.Action == rule.FlowDrop {
			t.Fatalf("rules %v drop by size with sizes that do not cover the victim's clients", got[0].Rules)
		}
	}
	if !strings.Contains(got[0].Reason, "do not cover") {
		t.Errorf("reason %q does not say why no size was dropped", got[0].Reason)
	}
}

// A size the host's clean traffic sends is never dropped by size, however
// much of the flood has it: SYN cookies alone, as without syn_size_drop
// or before the sizes are learned.
func TestVictimSYNSizeCleanSizeSpared(t *testing.T) {
	all4 := netip.MustParsePrefix("0.0.0.0/0")
	// 20 clients whose stack sends bare SYNs, 5% of the host's SYNs.
	bare := func(e emit) {
		for c := range 20 {
			e(flow{src: netip.AddrFrom4([4]byte{172, 17, 0, byte(c + 1)}), dst: victimA, proto: 6, sport: 1000, dport: 443, packets: 1, syns: 1, size: 40, synLen: 40})
		}
	}
	rules := synFloodRules(t, 30, bare, synSized(40, spoofed(4, all4, clients, 300000, victimA, 6, 443, 2, true)))
	for _, r := range rules {
		if r.Action == rule.FlowDrop {
			t.Fatalf("rules %v drop SYNs of a size clean traffic sends", rules)
		}
	}
	// Off (the default): cookies alone.
	rules = synFloodRulesWith(t, VictimConfig{}, 30, nil, synSized(40, spoofed(4, all4, clients, 300000, victimA, 6, 443, 2, true)))
	for _, r := range rules {
		if r.Action == rule.FlowDrop {
			t.Fatalf("rules %v drop by size with syn_size_drop off", rules)
		}
	}
	// Too few intervals to have learned the sizes: cookies alone.
	rules = synFloodRules(t, 3, nil, synSized(40, spoofed(4, all4, clients, 300000, victimA, 6, 443, 2, true)))
	for _, r := range rules {
		if r.Action == rule.FlowDrop {
			t.Fatalf("rules %v drop by size before the sizes are learned", rules)
		}
	}
}

// A flood that begins as an interval ends, too small yet to be judged,
// does not teach its size as clean: an interval is learned only once the
// next one has no attack either.
func TestVictimSYNSizeNotLearnedFromFloodStart(t *testing.T) {
	all4 := netip.MustParsePrefix("0.0.0.0/0")
	s := newSim(t, VictimConfig{SYNSizeDrop: true})
	for range 30 {
		s.step(s.regularClients)
	}
	// 10 bare SYNs/s, under every threshold, the interval before: learned,
	// they would be 0.6 SYN/s of clean traffic, over the 0.2 (1% of the
	// victim's 20 SYN/s) that a size rule allows.
	if dec := s.step(s.regularClients, synSized(40, spoofed(6, all4, clients, 5, victimA, 6, 443, 2, true))); len(dec.Attacks) > 0 {
		t.Fatalf("the flood's start was judged an attack already: %+v", dec.Attacks)
	}
	dec := s.step(s.regularClients, synSized(40, spoofed(4, all4, clients, 300000, victimA, 6, 443, 2, true)))
	if len(dec.Apply) == 0 {
		t.Fatal("no mitigation")
	}
	if want := synSizeRule(40, 40); !slices.Contains(dec.Apply[0].Rules, want) {
		t.Fatalf("rules %v, want %v among them: the flood's start taught its size", dec.Apply[0].Rules, want)
	}
}
