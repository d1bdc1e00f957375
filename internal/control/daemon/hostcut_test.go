// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"errors"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tierwall/tierwall/internal/control/apiv1"
	"github.com/tierwall/tierwall/internal/control/ban"
	"github.com/tierwall/tierwall/internal/control/bgp"
	"github.com/tierwall/tierwall/internal/control/config"
	"github.com/tierwall/tierwall/internal/control/mitigate"
	"github.com/tierwall/tierwall/internal/rule"
)

// fixedLocalPorts makes this host dial from Linux's default range.
func fixedLocalPorts(t *testing.T) {
	old := localPorts
	t.Cleanup(func() { localPorts = old })
	localPorts = func() (rule.PortRange, error) { return rule.PortRange{Lo: 32768, Hi: 60999}, nil }
}

var selfAddr = netip.MustParseAddr("192.0.2.1")

func hostRule(t *testing.T, words string) rule.FlowRule {
	t.Helper()
	r, err := rule.ParseFlowRule(strings.Fields("dst " + selfAddr.String() + "/32 " + words))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Rules that match the host's own BGP keepalives by a length, a flag, a
// rate too small for a session, or the session's ports; and the SSH
// port. Each the old check let through.
var cuttingWords = []string{
	"length 61-65535 drop",
	"proto tcp flags P/P drop",
	"proto tcp rate-limit 1",
	"proto tcp sport 179 dport 32768-39999 drop",
	"proto tcp dport 22 drop",
	"proto tcp dport 1-100 flags A/A length 40-40 syn-cookie",
}

// What a peer may still ask for on this host: a service's port, a
// fragment rule, a rate limit a session fits in.
var sparingWords = []string{
	"proto udp dport 53 drop",
	"proto tcp dport 80 drop",
	"proto tcp dport 8080 drop",
	"proto tcp sport 179 dport 100-1000 drop",
	"proto tcp rate-limit 5000",
	"frag later drop",
	"length 0-39 drop",
}

// A peer cannot cut this host off whatever the rule's flags, lengths and
// ports, or with a rate limit under what a session needs (a traffic-rate
// of 500 B/s is 1 pps); rules for the host's services still apply.
func TestBGPRemoteFlowRuleCannotCutSessions(t *testing.T) {
	fixedLocalPorts(t)
	h, fdp := newFlowHarness(t, false)
	h.d.cfg.BGP = bgpConfig(t).BGP
	fs := &fakeSpeaker{neighbors: []bgp.Neighbor{{Address: peerRR, State: "established", Since: t0.Add(-time.Hour)}}}
	fakeBGP(h.d, fs)
	h.d.mgmt = []ban.Managed{{Addr: selfAddr, What: "address of eth0"}}
	want := map[rule.FlowRule]bool{}
	for _, w := range cuttingWords {
		want[hostRule(t, w)] = false
	}
	for _, w := range sparingWords {
		want[hostRule(t, w)] = true
	}
	for fr := range want {
		fs.received = append(fs.received, bgp.Remote{Peer: peerRR, Flow: bgp.Flow{FlowRule: fr}})
	}
	h.d.bgp.applyRemote(h.now, h.d.fleetHost())
	for fr, enforced := range want {
		if got := slices.Contains(fdp.rules, bypassing(fr)); got != enforced {
			t.Errorf("%s: enforced %v, want %v", fr, got, enforced)
		}
	}
}

// The 500 B/s traffic-rate a peer sends is the 1 pps rate limit above
// once decoded: the rail sees it as a drop.
func TestSmallRateLimitIsADrop(t *testing.T) {
	fr := hostRule(t, "proto tcp rate-limit 1")
	if !stops(fr) {
		t.Fatal("a 1 pps rate limit lets sessions through")
	}
	fr.RatePPS = MinSessionPPS
	if stops(fr) {
		t.Fatalf("a %d pps rate limit counts as a drop", MinSessionPPS)
	}
}

// The operator's flow rules: one that stops traffic to this host's own
// address needs force; one that can match its BGP or SSH sessions is
// refused even forced; others are taken as they were.
func TestDaemonOperatorFlowRuleCannotCutOff(t *testing.T) {
	fixedLocalPorts(t)
	h, fdp := newFlowHarness(t, false)
	h.d.cfg.BGP = bgpConfig(t).BGP
	h.d.mgmt = []ban.Managed{{Addr: selfAddr, What: "address of eth0"}}
	ctx := t.Context()
	// The rule: every packet to the host's address.
	all := hostRule(t, "drop")
	if _, err := h.d.AddFlowRule(ctx, all, "oops", 0, false); !errors.Is(err, apiv1.ErrBadRequest) {
		t.Fatalf("%s without force: %v, want refused", all, err)
	}
	if _, err := h.d.AddFlowRule(ctx, all, "oops", 0, true); !errors.Is(err, apiv1.ErrBadRequest) || !strings.Contains(err.Error(), "not even by force") {
		t.Fatalf("%s forced: %v, want refused (it stops the BGP sessions and SSH)", all, err)
	}
	for _, w := range cuttingWords {
		fr := hostRule(t, w)
		if _, err := h.d.AddFlowRule(ctx, fr, "test", 0, true); !errors.Is(err, apiv1.ErrBadRequest) {
			t.Errorf("%s forced: %v, want refused", fr, err)
		}
	}
	dns := hostRule(t, "proto udp dport 53 drop")
	if _, err := h.d.AddFlowRule(ctx, dns, "test", 0, false); !errors.Is(err, apiv1.ErrBadRequest) || !strings.Contains(err.Error(), "force") {
		t.Fatalf("%s without force: %v, want refused with a word about force", dns, err)
	}
	if _, err := h.d.AddFlowRule(ctx, dns, "test", 0, true); err != nil {
		t.Fatalf("%s forced: %v", dns, err)
	}
	limit := hostRule(t, "proto tcp rate-limit 20000")
	if _, err := h.d.AddFlowRule(ctx, limit, "test", 0, false); err != nil {
		t.Fatalf("%s: %v (a rate limit a session fits in needs no force)", limit, err)
	}
	other, _ := rule.ParseFlowRule(strings.Fields("dst 198.51.100.0/24 drop"))
	if _, err := h.d.AddFlowRule(ctx, other, "test", 0, false); err != nil {
		t.Fatalf("%s: %v (not this host)", other, err)
	}
	if got, want := fdp.rules, []rule.FlowRule{dns, limit, other}; len(got) != len(want) {
		t.Fatalf("data plane %v, want %v", got, want)
	}
	if !hasEvent(h.d, "flowrule", "forced") {
		t.Error("the forced rule's event does not say it was forced")
	}
}

// tcpFlood runs 40 clean intervals of a client's TCP at victim, then 6 of
// a TCP flood from random sources: the ladder's answer is a rate limit
// on all TCP to the victim, under what a session needs (with a
// detectors.victim.rate_floor_pps of 200 and the client's 20 pps).
func tcpFlood(t *testing.T, h *harness, fdp *flowDP, victim netip.Addr) {
	t.Helper()
	h.d.cfg.Detectors.Victim.RateFloorPPS = 200
	h.d.flow.buildVictims()
	h.d.wireHostGroups()
	rng := rand.New(rand.NewPCG(5, 6))
	client := netip.MustParseAddr("198.51.100.9")
	for i := 0; i < 40; i++ {
		fdp.deliver(client, victim, 6, 20)
		h.step(t)
	}
	for i := 0; i < 6; i++ {
		for j := 0; j < 20000; j++ {
			fdp.deliver(netip.AddrFrom4([4]byte{byte(1 + rng.IntN(223)), byte(rng.IntN(256)), byte(rng.IntN(256)), byte(rng.IntN(256))}), victim, 6, 5)
		}
		h.step(t)
	}
}

// The ladder's own flow rules pass the rail the peers' and the
// operator's do: a TCP flood at this host's own address makes the ladder
// rate-limit all TCP to it under what its SSH session needs; that rule is
// not installed, and the refusal is logged and counted. The same flood at
// another address gets the rule.
func TestDaemonLadderRuleCannotCutSessions(t *testing.T) {
	fixedLocalPorts(t)
	other, ofdp := newFlowHarness(t, false)
	tcpFlood(t, other, ofdp, flowVictim)
	if len(ofdp.rules) == 0 || ofdp.rules[0].Proto != 6 || other.d.rail().cutsSessions(ofdp.rules[0]) != "" {
		t.Fatalf("the flood at another address: rules %v, want the ladder's TCP rule (which cuts nothing there)", ofdp.rules)
	}
	ladder := ofdp.rules[0]

	fixedManagement(t, ban.Managed{Addr: flowVictim, What: "address of eth0"})
	h, fdp := newFlowHarness(t, false)
	if why := h.d.rail().cutsSessions(ladder); why == "" {
		t.Fatalf("the ladder's rule %s cuts nothing on this host: the test needs one that does", ladder)
	}
	tcpFlood(t, h, fdp, flowVictim)
	for _, r := range fdp.rules {
		if why := h.d.rail().cutsSessions(r); why != "" {
			t.Errorf("the ladder installed %s: %s", r, why)
		}
	}
	if !hasEvent(h.d, "refused", "ladder flow rule") {
		t.Error("no event for the refused ladder rule")
	}
	if n := promtest.ToFloat64(h.d.Metrics.refused.WithLabelValues("host_cutoff")); n == 0 {
		t.Error("the refusal was not counted")
	}
}

// Flow rules kept from the last run pass the rail again at start: the
// host's addresses, its management ports or its neighbors may have
// changed. One that would cut the host off now is dropped with a warning
// naming it, before the data plane gets it, and the file is rewritten
// without it; the others are restored.
func TestDaemonReloadedFlowRuleCannotCutOff(t *testing.T) {
	fixedLocalPorts(t)
	fixedManagement(t, ban.Managed{Addr: selfAddr, What: "address of eth0"})
	cfg := testConfig(t)
	cfg.Detectors.Victim.Enabled = true
	path := FlowRulesFile(cfg.StateFile)
	set := mitigate.New(config.MaxFlowRules, path)
	cutting := map[string]string{
		"drop":                                 mitigate.Remote,
		"proto tcp rate-limit 100":             mitigate.Ladder,
		"proto tcp dport 22 drop":              mitigate.Operator,
		"proto tcp flags P/P drop":             mitigate.Operator,
		"proto tcp length 61-65535 syn-cookie": mitigate.Ladder,
		"proto tcp dport 1-1000 drop":          mitigate.Remote,
		"proto tcp rate-limit 999":             mitigate.Remote,
		"proto tcp dport 22 rate-limit 5":      mitigate.Ladder,
	}
	var kept []rule.FlowRule
	for w, origin := range cutting {
		if _, err := set.Add(mitigate.Rule{FlowRule: hostRule(t, w), Origin: origin, Added: t0}); err != nil {
			t.Fatal(err)
		}
	}
	for w, origin := range map[string]string{"proto udp dport 53 drop": mitigate.Operator, "proto tcp dport 80 syn-cookie": mitigate.Ladder,
		"proto tcp rate-limit 20000": mitigate.Remote} {
		fr := hostRule(t, w)
		kept = append(kept, fr)
		if _, err := set.Add(mitigate.Rule{FlowRule: fr, Origin: origin, Added: t0}); err != nil {
			t.Fatal(err)
		}
	}
	elsewhere, _ := rule.ParseFlowRule(strings.Fields("dst 198.51.100.7/32 drop"))
	kept = append(kept, elsewhere)
	if _, err := set.Add(mitigate.Rule{FlowRule: elsewhere, Origin: mitigate.Ladder, Added: t0}); err != nil {
		t.Fatal(err)
	}
	if err := set.Save(t0); err != nil {
		t.Fatal(err)
	}

	fdp := &flowDP{fakeDP: newFakeDP(t0), good: map[netip.Addr]bool{}, rate: -1}
	d, err := newDaemon(cfg, "", quietLog(), fdp, nil, t0)
	if err != nil {
		t.Fatal(err)
	}
	serve(d)
	sameRules := func(got []rule.FlowRule) bool {
		return len(got) == len(kept) && !slices.ContainsFunc(kept, func(r rule.FlowRule) bool { return !slices.Contains(got, r) })
	}
	if !sameRules(fdp.rules) {
		t.Errorf("data plane %v, want %v", fdp.rules, kept)
	}
	for w := range cutting {
		if !hasEvent(d, "refused", hostRule(t, w).String()+" ("+cutting[w]+")") {
			t.Errorf("no warning naming %s", hostRule(t, w))
		}
	}
	again, _, err := mitigate.Load(config.MaxFlowRules, path)
	if err != nil || !sameRules(again.FlowRules()) {
		t.Errorf("the file after the start: %v, %v; want %v", again.FlowRules(), err, kept)
	}
}

// A reload that adds a management port withdraws the rule in force that
// now stops it (an operator's forced rule for port 2222, admitted while
// 2222 was no management port), with an event naming it.
func TestDaemonReloadWithdrawsRuleThatNowCutsOff(t *testing.T) {
	fixedLocalPorts(t)
	fixedManagement(t, ban.Managed{Addr: selfAddr, What: "address of eth0"})
	h, fdp := newFlowHarness(t, false)
	h.d.refreshManagement(h.now)
	fr := hostRule(t, "proto tcp dport 2222 drop")
	if _, err := h.d.AddFlowRule(t.Context(), fr, "test", 0, true); err != nil {
		t.Fatalf("%s forced, 2222 no management port: %v", fr, err)
	}
	if !slices.Contains(fdp.rules, fr) {
		t.Fatalf("data plane %v, want %s", fdp.rules, fr)
	}
	h.reloadWith(t, func(c *config.Config) { c.Rails.ManagementPorts = []uint16{22, 2222} })
	if slices.Contains(fdp.rules, fr) {
		t.Errorf("after the reload the data plane still holds %s: %v", fr, fdp.rules)
	}
	if !hasEvent(h.d, "refused", fr.String()+" (operator) withdrawn") {
		t.Errorf("no event naming the withdrawn rule: %+v", h.d.events)
	}
}
