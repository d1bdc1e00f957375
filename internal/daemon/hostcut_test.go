// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/ban"
	"github.com/tierwall/tierwall/internal/bgp"
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
	h.d.bgp = bgpState{sp: fs, started: t0, announced: map[string]bgp.Route{}}
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
	h.d.applyRemote(h.now)
	for fr, enforced := range want {
		if got := slices.Contains(fdp.rules, fr); got != enforced {
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
	if _, err := h.d.AddFlowRule(ctx, all, "oops", 0, false); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("%s without force: %v, want refused", all, err)
	}
	if _, err := h.d.AddFlowRule(ctx, all, "oops", 0, true); !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), "not even by force") {
		t.Fatalf("%s forced: %v, want refused (it stops the BGP sessions and SSH)", all, err)
	}
	for _, w := range cuttingWords {
		fr := hostRule(t, w)
		if _, err := h.d.AddFlowRule(ctx, fr, "test", 0, true); !errors.Is(err, ErrBadRequest) {
			t.Errorf("%s forced: %v, want refused", fr, err)
		}
	}
	dns := hostRule(t, "proto udp dport 53 drop")
	if _, err := h.d.AddFlowRule(ctx, dns, "test", 0, false); !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), "force") {
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
