// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/tierwall/tierwall/internal/control/config"
	"github.com/tierwall/tierwall/internal/control/mitigate"
	"github.com/tierwall/tierwall/internal/datapath"
	"github.com/tierwall/tierwall/internal/rule"
	"github.com/tierwall/tierwall/internal/tier"
)

// flowDP is the fake data plane with flow rules and a known-good list,
// applied to the traffic sent through it as the XDP program would: first
// match wins, known-good sources pass a rule with the bypass, a
// rate-limit passes its rate.
type flowDP struct {
	*fakeDP
	rules   []rule.FlowRule
	ctrs    []mitigate.Counters
	good    map[netip.Addr]bool
	sets    int
	refuse  bool
	dropped uint64
	rate    int64    // SetKnownGoodRate's, -1 before
	guard   []uint32 // SetSynGuard's, in order
}

func (f *flowDP) SetKnownGoodRate(pps uint32) error {
	f.rate = int64(pps)
	return nil
}

func (f *flowDP) SetSynGuard(pps uint32) error {
	f.guard = append(f.guard, pps)
	return nil
}

func (f *flowDP) SetFlowRules(rs []rule.FlowRule) error {
	if f.refuse {
		return rule.ErrInvalid
	}
	old := map[rule.FlowRule]mitigate.Counters{}
	for i, r := range f.rules {
		old[r] = f.ctrs[i]
	}
	f.rules = append([]rule.FlowRule(nil), rs...)
	f.ctrs = make([]mitigate.Counters, len(rs))
	for i, r := range rs {
		f.ctrs[i] = old[r]
	}
	f.sets++
	return nil
}

func (f *flowDP) FlowRuleCounters() ([]datapath.FlowRuleCounters, error) {
	out := make([]datapath.FlowRuleCounters, len(f.rules))
	for i, r := range f.rules {
		c := f.ctrs[i]
		out[i] = datapath.FlowRuleCounters{Rule: r, Index: i, Matched: datapath.Counter{Packets: c.Packets, Bytes: c.Bytes},
			Dropped: c.Dropped, PassedKnownGood: c.PassedKnownGood}
	}
	return out, nil
}

func (f *flowDP) AddKnownGood(as []netip.Addr) error {
	for _, a := range as {
		f.good[a] = true
	}
	return nil
}

func (f *flowDP) RemoveKnownGood(as []netip.Addr) error {
	for _, a := range as {
		delete(f.good, a)
	}
	return nil
}

// deliver sends pps packets of proto from src to dst through blocks,
// flow rules and into the features; it returns what passed.
func (f *flowDP) deliver(src, dst netip.Addr, proto uint8, pps uint64) uint64 {
	for p, c := range f.blocked {
		if p.Contains(src) {
			c.Packets += pps
			f.dropped += pps
			return 0
		}
	}
	for i, r := range f.rules {
		if !r.Match(dst, proto, 1234, 80, 0, 100, rule.FragNone) {
			continue
		}
		c := &f.ctrs[i]
		c.Packets += pps
		if r.KnownGoodBypass && f.good[src] {
			c.PassedKnownGood += pps
			break
		}
		switch r.Action {
		case rule.FlowDrop:
			c.Dropped += pps
			f.dropped += pps
			return 0
		case rule.FlowRateLimit:
			// The whole interval's budget is shared: the test's sources
			// send in a fixed order, so give each at most its share.
			c.Dropped += pps
			f.dropped += pps
			return 0
		}
		break
	}
	f.flows = append(f.flows, datapath.Flow{Src: src, Dst: dst, Proto: proto, Packets: pps, Bytes: 100 * pps})
	return pps
}

// serve runs the daemon's requests (the API's Do) while a test calls it
// between steps.
func serve(d *Daemon) {
	go func() {
		for f := range d.reqs {
			f()
		}
	}()
}

func newFlowHarness(t *testing.T, monitorOnly bool) (*harness, *flowDP) {
	return newFlowHarnessHW(t, monitorOnly, nil)
}

// newFlowHarnessHW is newFlowHarness with a hardware tier (nil: none).
func newFlowHarnessHW(t *testing.T, monitorOnly bool, hw tier.Table) (*harness, *flowDP) {
	cfg := testConfig(t)
	cfg.Detectors.Rate.Enabled = false
	cfg.Detectors.Victim.Enabled = true
	cfg.Detectors.Victim.WithdrawAfter = 3
	cfg.Rails.MonitorOnly = monitorOnly
	if hw != nil {
		cfg.Hardware.Capacity = hw.Caps().Capacity
	}
	fdp := &flowDP{fakeDP: newFakeDP(t0), good: map[netip.Addr]bool{}, rate: -1}
	h := &harness{dp: fdp.fakeDP, now: t0}
	protect(cfg, flowVictim)
	d, err := newDaemon(cfg, "", quietLog(), fdp, hw, t0)
	if err != nil {
		t.Fatal(err)
	}
	h.d = d
	serve(d)
	return h, fdp
}

// flowVictim is the flow tests' server, protected, so its clients can
// become known-good.
var flowVictim = netip.MustParseAddr("192.0.2.80")

// A flood from random sources all over IPv4 at a web server: no source
// ban or prefix can stop it without its clients, so the ladder puts a
// rate-limit with the known-good bypass on the victim; the clients (steady
// before the flood) keep passing, and the rule goes once the flood ends.
func TestDaemonSpoofedFloodGetsFlowRuleClientsPass(t *testing.T) {
	h, fdp := newFlowHarness(t, false)
	victim := flowVictim
	var clients []netip.Addr
	for i := 0; i < 50; i++ {
		clients = append(clients, netip.AddrFrom4([4]byte{198, 51, 100, byte(10 + i)}))
	}
	fakeConnections(t, victim, clients...)
	interval := func(flood bool, rng *rand.Rand) (clientPassed, clientSent uint64) {
		for _, c := range clients {
			clientSent += 20
			clientPassed += fdp.deliver(c, victim, 6, 20)
		}
		if flood {
			for i := 0; i < 20000; i++ {
				a := netip.AddrFrom4([4]byte{byte(1 + rng.IntN(223)), byte(rng.IntN(256)), byte(rng.IntN(256)), byte(rng.IntN(256))})
				fdp.deliver(a, victim, 17, 5)
			}
		}
		h.step(t)
		return
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 40; i++ {
		interval(false, rng)
	}
	if len(fdp.good) == 0 {
		t.Fatal("no known-good clients pushed to the data plane after 40 clean intervals")
	}
	if fdp.rate != datapath.DefaultKnownGoodPPS {
		t.Fatalf("known-good rate %d in the data plane, want the default %d", fdp.rate, datapath.DefaultKnownGoodPPS)
	}
	for i := 0; i < 6; i++ {
		passed, sent := interval(true, rng)
		if i >= 2 && passed != sent {
			t.Fatalf("interval %d of the flood: clients passed %d of %d", i, passed, sent)
		}
	}
	if len(fdp.rules) == 0 {
		t.Fatalf("no flow rule after 6 flooded intervals; events %v", h.d.events)
	}
	r := fdp.rules[0]
	if !r.KnownGoodBypass || r.Dst != netip.PrefixFrom(victim, 32) {
		t.Fatalf("rule %s: want one on the victim with the known-good bypass", r)
	}
	if !hasEvent(h.d, "mitigation", "flow-rule") {
		t.Fatal("no mitigation event naming the rung")
	}
	for p := range fdp.blocked {
		for _, c := range clients {
			if p.Contains(c) {
				t.Fatalf("ban %s covers client %s", p, c)
			}
		}
	}
	rs, err := h.d.FlowRules(t.Context())
	if err != nil || len(rs) != len(fdp.rules) || rs[0].Counters.Dropped == 0 || rs[0].Origin != mitigate.Ladder {
		t.Fatalf("FlowRules: %+v, %v", rs, err)
	}
	for i := 0; i < 12 && len(fdp.rules) > 0; i++ {
		interval(false, rng)
	}
	if len(fdp.rules) != 0 {
		t.Fatalf("rules %v still in force 12 intervals after the flood", fdp.rules)
	}
	if !hasEvent(h.d, "withdraw", "") {
		t.Fatal("no withdraw event")
	}
}

// Monitor-only logs the ladder's choice and pushes nothing.
func TestDaemonFlowRulesMonitorOnly(t *testing.T) {
	h, fdp := newFlowHarness(t, true)
	victim := netip.MustParseAddr("192.0.2.80")
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 40; i++ {
		fdp.deliver(netip.MustParseAddr("198.51.100.9"), victim, 17, 20)
		h.step(t)
	}
	for i := 0; i < 4; i++ {
		for j := 0; j < 20000; j++ {
			fdp.deliver(netip.AddrFrom4([4]byte{byte(1 + rng.IntN(223)), byte(rng.IntN(256)), byte(rng.IntN(256)), 1}), victim, 17, 5)
		}
		h.step(t)
	}
	if fdp.sets != 0 || len(fdp.good) != 0 {
		t.Fatalf("monitor-only pushed %d rule sets and %d known-good sources", fdp.sets, len(fdp.good))
	}
	if !hasEvent(h.d, "mitigation", "monitor-only") {
		t.Fatal("no monitor-only mitigation event")
	}
}

// The operator's rules: a bad one or one the data plane refuses changes
// nothing; they survive a restart through the flow-rules file.
func TestDaemonOperatorFlowRules(t *testing.T) {
	h, fdp := newFlowHarness(t, false)
	ctx := t.Context()
	good, _ := rule.ParseFlowRule([]string{"dst", "192.0.2.0/24", "proto", "udp", "sport", "53", "drop"})
	if _, err := h.d.AddFlowRule(ctx, good, "reflection", 0, false); err != nil {
		t.Fatal(err)
	}
	if _, err := h.d.AddFlowRule(ctx, rule.FlowRule{Dst: netip.MustParsePrefix("0.0.0.0/0"), Action: rule.FlowDrop}, "typo", 0, false); err == nil {
		t.Fatal("a rule wider than /8 was accepted")
	}
	fdp.refuse = true
	other, _ := rule.ParseFlowRule([]string{"dst", "192.0.2.7/32", "proto", "tcp", "dport", "80", "syn-cookie"})
	if _, err := h.d.AddFlowRule(ctx, other, "syn", 0, false); err == nil {
		t.Fatal("a rule the data plane refused was reported added")
	}
	fdp.refuse = false
	if rs, _ := h.d.FlowRules(ctx); len(rs) != 1 || len(fdp.rules) != 1 || fdp.rules[0] != good {
		t.Fatalf("after a refused add: daemon %v, data plane %v", rs, fdp.rules)
	}
	// A restart reads the rules back and gives them to the data plane.
	fdp2 := &flowDP{fakeDP: newFakeDP(t0), good: map[netip.Addr]bool{}, rate: -1}
	d2, err := newDaemon(h.d.cfg, "", quietLog(), fdp2, nil, t0)
	if err != nil {
		t.Fatal(err)
	}
	serve(d2)
	if len(fdp2.rules) != 1 || fdp2.rules[0] != good {
		t.Fatalf("after restart the data plane holds %v", fdp2.rules)
	}
	if err := d2.DeleteFlowRule(ctx, good); err != nil || len(fdp2.rules) != 0 {
		t.Fatalf("delete: %v, %v left", err, fdp2.rules)
	}
}

// A known-good client a little over the rate detector's threshold is the
// per-victim detector's to judge, not banned by the per-source one.
func TestDaemonSparesKnownGoodFromRateDetector(t *testing.T) {
	cfg := testConfig(t)
	cfg.Detectors.Victim.Enabled = true
	cfg.Detectors.Rate.PPS = 1000
	fdp := &flowDP{fakeDP: newFakeDP(t0), good: map[netip.Addr]bool{}, rate: -1}
	h := &harness{dp: fdp.fakeDP, now: t0}
	protect(cfg, flowVictim)
	d, err := newDaemon(cfg, "", quietLog(), fdp, nil, t0)
	if err != nil {
		t.Fatal(err)
	}
	h.d = d
	victim := flowVictim
	client := netip.MustParseAddr("198.51.100.20")
	stranger := netip.MustParseAddr("203.0.113.5")
	fakeConnections(t, victim, client)
	for i := 0; i < 40; i++ {
		fdp.deliver(client, victim, 6, 600)
		h.step(t)
	}
	if !fdp.good[client] {
		t.Fatal("the steady client is not on the known-good list")
	}
	fdp.deliver(client, victim, 6, 1500)   // over the rate detector's 1000 pps
	fdp.deliver(stranger, victim, 6, 1500) // the same, unknown
	h.step(t)
	if _, ok := fdp.blocked[pfx(client)]; ok {
		t.Fatal("known-good client banned by the rate detector")
	}
	if _, ok := fdp.blocked[pfx(stranger)]; !ok {
		t.Fatal("the unknown source at the same rate was not banned")
	}
	if !hasEvent(h.d, "refused", "spared known-good") {
		t.Fatal("no event for the spared detection")
	}
}

// The configuration's bound is the data plane's table.
func TestFlowRuleCapacityMatchesDataPlane(t *testing.T) {
	if config.MaxFlowRules != datapath.FlowRuleCapacity {
		t.Fatalf("config.MaxFlowRules %d, datapath.FlowRuleCapacity %d", config.MaxFlowRules, datapath.FlowRuleCapacity)
	}
}
