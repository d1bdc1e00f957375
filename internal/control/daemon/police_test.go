// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"context"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/tierwall/tierwall/internal/rule"
	"github.com/tierwall/tierwall/internal/tier"
	"github.com/tierwall/tierwall/internal/tier/tiertest"
)

// policingTable is a hardware table whose card also polices flow rules,
// in front of the flow tests' data plane: a policer drops what it
// matches beyond its rate (a whole interval's budget), the rest goes on
// to XDP.
type policingTable struct {
	*tiertest.Table
	pol    []rule.FlowRule
	ctrs   []tier.PolicerCounters
	budget []uint64
	sets   int
}

func (p *policingTable) PolicerCapacity() int { return 16 }

func (p *policingTable) SetPolicers(_ context.Context, rs []rule.FlowRule) error {
	old := map[rule.FlowRule]tier.PolicerCounters{}
	for _, c := range p.ctrs {
		old[c.Rule] = c
	}
	p.pol = slices.Clone(rs)
	p.ctrs = make([]tier.PolicerCounters, len(rs))
	for i, r := range rs {
		p.ctrs[i] = old[r]
		p.ctrs[i].Rule = r
	}
	p.sets++
	p.refill()
	return nil
}

func (p *policingTable) PolicerCounters(context.Context) ([]tier.PolicerCounters, error) {
	return slices.Clone(p.ctrs), nil
}

// refill gives every rate-limit policer one interval's budget (1 s).
func (p *policingTable) refill() {
	p.budget = make([]uint64, len(p.pol))
	for i, r := range p.pol {
		if r.Action == rule.FlowRateLimit {
			p.budget[i] = r.RatePPS
		}
	}
}

// deliver is pps packets through the card, then through XDP (fdp).
func (p *policingTable) deliver(fdp *flowDP, src, dst netip.Addr, proto uint8, pps uint64) uint64 {
	for i, r := range p.pol {
		if !r.Match(dst, proto, 1234, 80, 0, 100, rule.FragNone) {
			continue
		}
		c := &p.ctrs[i]
		c.Matched.Packets += pps
		pass := min(pps, p.budget[i])
		p.budget[i] -= pass
		c.Dropped += pps - pass
		if pass == 0 {
			return 0
		}
		return fdp.deliver(src, dst, proto, pass)
	}
	return fdp.deliver(src, dst, proto, pps)
}

// A spoofed UDP flood on a web server: the ladder's flow rule (with the
// known-good bypass) goes to the card once an interval in XDP shows that
// no verified client uses its shape; the card then takes the flood before
// the host, the rule stays in force on the flood the card drops, the
// clients' TCP never meets the policer. A client that starts sending on
// the shape brings the rule back to XDP; the card is empty once the flood
// is over.
func TestDaemonFlowRuleGoesToTheCardWhileNoClientUsesIt(t *testing.T) {
	hw := &policingTable{Table: tiertest.New(8)}
	h, fdp := newFlowHarnessHW(t, false, hw)
	d := h.d

	victim := flowVictim
	var clients []netip.Addr
	for i := 0; i < 50; i++ {
		clients = append(clients, netip.AddrFrom4([4]byte{198, 51, 100, byte(10 + i)}))
	}
	fakeConnections(t, victim, clients...)
	rng := rand.New(rand.NewPCG(1, 2))
	var floodSent, floodAtXDP uint64
	interval := func(flood, clientUDP bool) (clientPassed, clientSent uint64) {
		hw.refill()
		if clientUDP {
			// Before the flood in the interval: within the card's
			// budget, as a client's few packets would be in a sample.
			hw.deliver(fdp, clients[0], victim, 17, 5)
		}
		for _, c := range clients {
			clientSent += 20
			clientPassed += hw.deliver(fdp, c, victim, 6, 20)
		}
		if flood {
			before := fdp.dropped
			var passed uint64
			for i := 0; i < 20000; i++ {
				a := netip.AddrFrom4([4]byte{byte(1 + rng.IntN(223)), byte(rng.IntN(256)), byte(rng.IntN(256)), byte(rng.IntN(256))})
				floodSent += 5
				passed += hw.deliver(fdp, a, victim, 17, 5)
			}
			floodAtXDP += passed + fdp.dropped - before
		}
		h.step(t)
		return
	}
	for i := 0; i < 40; i++ {
		interval(false, false)
	}
	if hw.sets != 1 || len(hw.pol) != 0 {
		t.Fatalf("before any attack: %d pushes, policers %v; want the first push (clearing an earlier daemon's), none since", hw.sets, hw.pol)
	}
	var onCard int
	for i := 0; i < 8; i++ {
		passed, sent := interval(true, false)
		if i >= 2 && passed != sent {
			t.Fatalf("interval %d of the flood: clients passed %d of %d", i, passed, sent)
		}
		if len(hw.pol) > 0 && onCard == 0 {
			// From here on the card holds the flood: count afresh.
			onCard, floodSent, floodAtXDP = i, 0, 0
		}
	}
	if len(fdp.rules) == 0 || len(hw.pol) == 0 {
		t.Fatalf("after 8 flooded intervals: rules %v, policers %v; events %v", fdp.rules, hw.pol, d.events)
	}
	r := fdp.rules[0]
	if !r.KnownGoodBypass || r.Proto != 17 {
		t.Fatalf("rule %s: want a UDP rule with the bypass (the clients are TCP)", r)
	}
	p := hw.pol[0]
	if p.KnownGoodBypass || p.Dst != r.Dst || p.Proto != r.Proto || p.Action != rule.FlowRateLimit {
		t.Fatalf("policer %s for rule %s: want its shape, no bypass, a rate", p, r)
	}
	if !hasEvent(d, "flowrule", "to the card") {
		t.Fatal("no event for the rule going to the card")
	}
	if floodSent == 0 || floodAtXDP*20 > floodSent {
		t.Errorf("XDP met %d of the flood's %d packets once the card had its rule: the card should have taken all but its rate", floodAtXDP, floodSent)
	}
	// The card's drops count as the rule's: it stays in force.
	rs, err := d.FlowRules(t.Context())
	if err != nil || len(rs) == 0 || rs[0].DroppedPPS < 50000 {
		t.Fatalf("the rule's dropped rate with the card's drops: %+v, %v", rs, err)
	}
	if rs[0].NIC != p.String() || rs[0].NICDropped == 0 || rs[0].NICDropped > rs[0].Counters.Dropped {
		t.Errorf("the API's view: on the card %q (want %q), card drops %d of %d", rs[0].NIC, p, rs[0].NICDropped, rs[0].Counters.Dropped)
	}

	// A verified client sends on the shape: XDP sees it pass with the
	// bypass, and the rule leaves the card.
	interval(true, true)
	interval(true, true)
	if len(hw.pol) != 0 {
		t.Fatalf("policers %v still on the card after a verified client used the shape", hw.pol)
	}
	if !hasEvent(d, "flowrule", "off the card") {
		t.Fatal("no event for the rule leaving the card")
	}
	if len(fdp.rules) == 0 {
		t.Fatal("the rule left XDP too")
	}

	for i := 0; i < 14 && (len(fdp.rules) > 0 || len(hw.pol) > 0); i++ {
		interval(false, false)
	}
	if len(fdp.rules) != 0 || len(hw.pol) != 0 {
		t.Fatalf("14 intervals after the flood: rules %v, policers %v", fdp.rules, hw.pol)
	}
}

// Rules the card must not take: SYN cookies; and a rule after one that
// stays in XDP, where it could match the same packets (the first match
// decides there).
func TestPolicersKeepXDPOrder(t *testing.T) {
	mk := func(s string) rule.FlowRule {
		r, err := rule.ParseFlowRule(strings.Fields(s))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	busy := mk("dst 192.0.2.80/32 rate-limit 30000 bypass-known-good")       // clients pass on it
	udp9 := mk("dst 192.0.2.80/32 proto udp dport 9 drop bypass-known-good") // after busy, overlaps it
	other := mk("dst 192.0.2.81/32 proto udp dport 9 rate-limit 500")        // no overlap with busy
	v6 := mk("dst ::/16 proto udp drop")                                     // covers mapped IPv4 destinations
	syn := mk("dst 192.0.2.82/32 proto tcp dport 80 syn-cookie bypass-known-good")
	n := &nicPolicing{p: &policingTable{}, clean: map[rule.FlowRule]int{udp9: 3}}
	ps, of := n.choose([]rule.FlowRule{busy, udp9, other, syn})
	if len(ps) != 1 || of[ps[0]] != other || ps[0].RatePPS != 500 {
		t.Fatalf("policers %v: want only %s, at its own rate (no bypass)", ps, other)
	}
	n.clean[busy] = 2
	ps, of = n.choose([]rule.FlowRule{busy, udp9, other, syn})
	if len(ps) != 3 || of[ps[1]] != udp9 || ps[1].Action != rule.FlowRateLimit || ps[1].RatePPS != polSamplePPS {
		t.Fatalf("policers %v: want all three but the SYN cookie, the bypass drop as a %d pps sample", ps, polSamplePPS)
	}
	if ps[0].RatePPS != 60000 {
		t.Errorf("the bypass rate-limit's policer at %d pps, want twice its rate", ps[0].RatePPS)
	}
	if !overlap(v6, other) || overlap(udp9, other) {
		t.Error("overlap: an IPv6 ::/16 rule may meet IPv4 rules; two /32s apart never do")
	}
}

// A ban that only XDP holds, while the card polices: the card may drop
// the source's packets first (a policer matches the destination), so the
// ban's quiet counters do not lift it; once the card polices nothing,
// the ban is judged on its counters again and lifts when quiet.
func TestBansHeldWhileTheCardPolices(t *testing.T) {
	hw := &policingTable{Table: tiertest.New(1)}
	h, fdp := newFlowHarnessHW(t, false, hw)
	h.d.cfg.Detectors.Rate.Enabled = true
	h.d.det = newDetectorSet(h.d.cfg)
	atk := []netip.Addr{netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("198.51.100.8")}
	fdp.send(5000, atk...)
	h.step(t)
	for range 2 {
		fdp.hit(pfx(atk[0]), 6000)
		fdp.hit(pfx(atk[1]), 5000)
		h.step(t)
	}
	var xdpOnly netip.Addr
	for _, a := range atk {
		if _, ok := h.d.store.Get(pfx(a)); !ok {
			t.Fatalf("setup: %s not banned; events %v", a, h.d.events)
		}
		if !hw.Has(a) {
			xdpOnly = a
		}
	}
	if !xdpOnly.IsValid() {
		t.Fatal("setup: both bans in a table of one")
	}
	fr := mustFlowRule(t, "dst 192.0.2.0/24 proto udp drop")
	if _, err := h.d.AddFlowRule(t.Context(), fr, "test", 0, false); err != nil {
		t.Fatal(err)
	}
	// The flood goes on in XDP until the card has the rule.
	fdp.hit(pfx(atk[1]), 5000)
	fdp.hit(pfx(atk[0]), 5000)
	h.step(t)
	if len(hw.pol) != 1 {
		t.Fatalf("policers %v, want the operator's rule on the card", hw.pol)
	}
	for range 8 { // hold is 3 s: the card drops it all, XDP's counters stand still
		h.step(t)
	}
	if _, ok := h.d.store.Get(pfx(xdpOnly)); !ok {
		t.Fatalf("ban on %s lifted while the card polices and may hide its traffic; events %v", xdpOnly, h.d.events)
	}
	if err := h.d.DeleteFlowRule(t.Context(), fr); err != nil {
		t.Fatal(err)
	}
	for range 8 {
		h.step(t)
	}
	if len(hw.pol) != 0 {
		t.Fatalf("policers %v after the rule went", hw.pol)
	}
	if _, ok := h.d.store.Get(pfx(xdpOnly)); ok {
		t.Fatalf("ban on %s still in force 8 quiet intervals after the card stopped policing", xdpOnly)
	}
}

func mustFlowRule(t *testing.T, s string) rule.FlowRule {
	t.Helper()
	r, err := rule.ParseFlowRule(strings.Fields(s))
	if err != nil {
		t.Fatal(err)
	}
	return r
}
