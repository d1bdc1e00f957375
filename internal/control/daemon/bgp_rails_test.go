// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/control/ban"
	"github.com/tierwall/tierwall/internal/control/bgp"
	"github.com/tierwall/tierwall/internal/control/mitigate"
	"github.com/tierwall/tierwall/internal/rule"
)

// slash8s are the 223 /8 source bans of the issue, each with dst.
func slash8s(dst netip.Prefix) []bgp.Remote {
	var out []bgp.Remote
	for i := 1; i <= 223; i++ {
		src := netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(i), 0, 0, 0}), 8)
		out = append(out, bgp.Remote{Peer: peerRR, Flow: bgp.Flow{Src: src, FlowRule: rule.FlowRule{Dst: dst, Action: rule.FlowDrop}}})
	}
	return out
}

func remoteBans(d *Daemon) int {
	n := 0
	for b := range d.store.Each {
		if b.Detector == remoteDetector {
			n++
		}
	}
	return n
}

// A peer's source bans pass the per-interval limit like a detector's,
// over every pass of the interval (applyRemote runs on each change the
// peer sends), and the rest wait for later intervals; the /8 that holds
// the host's own address is never banned.
func TestBGPRemoteBansPerIntervalLimit(t *testing.T) {
	cfg := bgpConfig(t)
	cfg.Rails.MaxNewPerInterval = 50
	fixedManagement(t, ban.Managed{Addr: netip.MustParseAddr("192.0.2.1"), What: "address of eth0"})
	h, fs := bgpHarness(t, cfg)
	fs.received = slash8s(ownNet)
	h.d.bgp.applyRemote(h.now, h.d.fleetHost())
	if n := remoteBans(h.d); n != 50 {
		t.Fatalf("%d remote bans after one pass, want the interval's 50", n)
	}
	h.d.bgp.applyRemote(h.now, h.d.fleetHost())
	h.d.bgp.applyRemote(h.now, h.d.fleetHost())
	if n := remoteBans(h.d); n != 50 {
		t.Fatalf("%d remote bans after three passes of one interval, want 50", n)
	}
	if !hasEvent(h.d, "refused", "more than 50 new remote bans this interval") {
		t.Error("the limit is not in the events")
	}
	h.step(t)
	if n := remoteBans(h.d); n != 100 {
		t.Fatalf("%d remote bans after the next interval, want 100", n)
	}
	for i := 0; i < 5; i++ {
		h.step(t)
	}
	if n := remoteBans(h.d); n != 222 {
		t.Fatalf("%d remote bans in the end, want 222 (all but the host's own /8)", n)
	}
	if _, ok := h.d.store.Get(netip.MustParsePrefix("192.0.0.0/8")); ok {
		t.Fatal("a peer banned the /8 of the host's own address")
	}
}

// The circuit breaker: remote bans that would cover the regular clients
// are refused, all of them, as a detector's would be.
func TestBGPRemoteBansCircuitBreaker(t *testing.T) {
	h, fs := bgpHarness(t, bgpConfig(t))
	var clients []netip.Addr
	for i := 0; i < 20; i++ {
		clients = append(clients, netip.AddrFrom4([4]byte{198, 51, 100, byte(10 + i)}))
	}
	for i := 0; i < establishedAfter+1; i++ {
		h.dp.send(10, clients...)
		h.step(t)
	}
	fs.received = slash8s(ownNet)
	h.d.bgp.applyRemote(h.now, h.d.fleetHost())
	if n := remoteBans(h.d); n != 0 {
		t.Fatalf("%d remote bans applied over the regular clients, want the breaker to refuse them", n)
	}
	if !hasEvent(h.d, "breaker", "remote bans") {
		t.Fatal("no breaker event")
	}
	// A ban that covers no client passes.
	fs.received = slash8s(ownNet)[:3]
	h.d.bgp.applyRemote(h.now, h.d.fleetHost())
	if n := remoteBans(h.d); n != 3 {
		t.Fatalf("%d remote bans of 1-3.0.0.0/8, want 3", n)
	}
}

// A source ban is applied only when the route's destination is this
// host's: one of its addresses, or a protected prefix.
func TestBGPRemoteBanDestinationMustBeOurs(t *testing.T) {
	fixedManagement(t, ban.Managed{Addr: netip.MustParseAddr("192.0.2.1"), What: "address of eth0"})
	h, fs := bgpHarness(t, bgpConfig(t))
	mk := func(src, dst string) bgp.Remote {
		return bgp.Remote{Peer: peerRR, Flow: bgp.Flow{Src: netip.MustParsePrefix(src), FlowRule: rule.FlowRule{Dst: netip.MustParsePrefix(dst), Action: rule.FlowDrop}}}
	}
	fs.received = []bgp.Remote{
		mk("203.0.113.1/32", "192.0.2.0/25"),   // holds the host's address
		mk("203.0.113.2/32", "192.0.2.250/32"), // protected
		mk("203.0.113.3/32", "192.0.2.64/26"),  // another host of the fleet
	}
	h.d.bgp.applyRemote(h.now, h.d.fleetHost())
	for src, want := range map[string]bool{"203.0.113.1/32": true, "203.0.113.2/32": true, "203.0.113.3/32": false} {
		if _, got := h.d.store.Get(netip.MustParsePrefix(src)); got != want {
			t.Errorf("remote ban of %s applied %v, want %v", src, got, want)
		}
	}
}

// Peers' flow rules take at most half the flow-rule table: 100 of them
// leave the rest for the host's own (here the operator's) rules.
func TestBGPRemoteFlowRulesLeaveSlots(t *testing.T) {
	h, fdp := newFlowHarness(t, false)
	h.d.cfg.BGP = bgpConfig(t).BGP
	fs := &fakeSpeaker{neighbors: []bgp.Neighbor{{Address: peerRR, State: "established", Since: t0.Add(-time.Hour)}}}
	fakeBGP(h.d, fs)
	for i := 0; i < 100; i++ {
		fr := rule.FlowRule{Dst: netip.PrefixFrom(netip.AddrFrom4([4]byte{192, 0, 2, byte(100 + i)}), 32), Proto: 17,
			DstPorts: rule.PortRange{Lo: 53, Hi: 53}, Action: rule.FlowDrop}
		fs.received = append(fs.received, bgp.Remote{Peer: peerRR, Flow: bgp.Flow{FlowRule: fr}})
	}
	h.d.bgp.applyRemote(h.now, h.d.fleetHost())
	capacity := h.d.flow.set.Cap()
	if n := len(fdp.rules); n != capacity/2 {
		t.Fatalf("%d remote rules in the %d-slot table, want %d", n, capacity, capacity/2)
	}
	syn, _ := rule.ParseFlowRule(strings.Fields("dst 192.0.2.80/32 proto tcp dport 80 flags S/SA syn-cookie"))
	for i := 0; i < capacity-capacity/2; i++ {
		fr := syn
		if i > 0 {
			fr = rule.FlowRule{Dst: netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 51, 100, byte(i)}), 32), Action: rule.FlowDrop}
		}
		if _, err := h.d.AddFlowRule(t.Context(), fr, "local", 0, false); err != nil {
			t.Fatalf("local rule %d of %d: %v", i+1, capacity-capacity/2, err)
		}
	}
	h.d.bgp.applyRemote(h.now, h.d.fleetHost())
	remote := 0
	for _, r := range h.d.flow.set.Rules() {
		if r.Origin == mitigate.Remote {
			remote++
		}
	}
	if remote != capacity/2 {
		t.Fatalf("%d remote rules after the local ones, want %d kept", remote, capacity/2)
	}
}

// A route the loop refused is shown refused, with why, not enforced, and
// the accepted count leaves it out.
func TestBGPStatusShowsLoopRefusals(t *testing.T) {
	fixedLocalPorts(t)
	fixedManagement(t, ban.Managed{Addr: selfAddr, What: "address of eth0"})
	h, _ := newFlowHarness(t, false)
	h.d.cfg.BGP = bgpConfig(t).BGP
	fs := &fakeSpeaker{neighbors: []bgp.Neighbor{{Address: peerRR, State: "established", Since: t0.Add(-time.Hour), Received: 3, Accepted: 3}}}
	fakeBGP(h.d, fs)
	cut := bgp.Flow{FlowRule: hostRule(t, "length 61-65535 drop")}
	guarded := bgp.Flow{Src: netip.PrefixFrom(selfAddr, 32), FlowRule: rule.FlowRule{Dst: ownNet, Action: rule.FlowDrop}}
	good := bgp.Flow{Src: netip.MustParsePrefix("203.0.113.66/32"), FlowRule: rule.FlowRule{Dst: ownNet, Action: rule.FlowDrop}}
	fs.received = []bgp.Remote{{Peer: peerRR, Flow: cut}, {Peer: peerRR, Flow: guarded}, {Peer: peerRR, Flow: good}}
	h.d.bgp.applyRemote(h.now, h.d.fleetHost())
	if _, ok := h.d.store.Get(good.Src); !ok {
		t.Fatal("the good remote ban was not applied: the test's premise fails")
	}
	st := h.d.BGP()
	for _, r := range st.Received {
		switch r.Flow {
		case cut, guarded:
			if r.Refused == "" {
				t.Errorf("%s shown enforced; the loop refused it", r.Flow)
			} else {
				t.Logf("%s: refused: %s", r.Flow, r.Refused)
			}
		case good:
			if r.Refused != "" {
				t.Errorf("%s shown refused: %s", r.Flow, r.Refused)
			}
		}
	}
	if got := st.Neighbors[0].Accepted; got != 1 {
		t.Errorf("status: %d accepted, want 1", got)
	}
	for _, s := range scrape(t, h.d)["tierwall_bgp_routes"] {
		if s.labels["direction"] == "accepted" && s.value != 1 {
			t.Errorf("tierwall_bgp_routes{direction=accepted} %v, want 1", s.value)
		}
	}
}

// A peer's source ban that covers one of this host's known-good clients
// is refused: the peer judged from its own clients, and a flood spoofed
// from the prefix where this host's clients live would otherwise cut them
// off here. A ban of a prefix without them passes.
func TestBGPRemoteBanSparesKnownGood(t *testing.T) {
	h, _ := newFlowHarness(t, false)
	h.d.cfg.BGP = bgpConfig(t).BGP
	fs := &fakeSpeaker{neighbors: []bgp.Neighbor{{Address: peerRR, State: "established", Since: t0.Add(-time.Hour)}}}
	fakeBGP(h.d, fs)
	fdp := h.d.dp.(*flowDP)
	client := netip.MustParseAddr("203.0.113.20")
	fakeConnections(t, flowVictim, client)
	fdp.deliver(client, flowVictim, 6, 20)
	h.step(t)
	if !h.d.flow.victims.Good.Contains(client) {
		t.Fatal("the client did not become known-good")
	}
	mk := func(src string) bgp.Remote {
		return bgp.Remote{Peer: peerRR, Flow: bgp.Flow{Src: netip.MustParsePrefix(src), FlowRule: rule.FlowRule{Dst: netip.PrefixFrom(flowVictim, 32), Action: rule.FlowDrop}}}
	}
	fs.received = []bgp.Remote{mk("203.0.113.0/24"), mk("203.0.113.20/32"), mk("198.18.7.0/24")}
	h.d.bgp.applyRemote(h.now, h.d.fleetHost())
	for src, want := range map[string]bool{"203.0.113.0/24": false, "203.0.113.20/32": false, "198.18.7.0/24": true} {
		if _, got := h.d.store.Get(netip.MustParsePrefix(src)); got != want {
			t.Errorf("remote ban of %s applied %v, want %v", src, got, want)
		}
	}
	if !hasEvent(h.d, "refused", "known-good clients") {
		t.Error("the refusal is not in the events")
	}
}
