// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"context"
	"log/slog"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/control/ban"
	"github.com/tierwall/tierwall/internal/control/bgp"
	"github.com/tierwall/tierwall/internal/control/config"
	"github.com/tierwall/tierwall/internal/control/mitigate"
	"github.com/tierwall/tierwall/internal/rule"
)

// fakeSpeaker records what the loop asks it to announce and serves what
// the test says peers sent.
type fakeSpeaker struct {
	announced []bgp.Route
	received  []bgp.Remote
	neighbors []bgp.Neighbor
	changed   chan struct{}
	stopped   bool
}

func (f *fakeSpeaker) Start(context.Context) error { return nil }
func (f *fakeSpeaker) Stop()                       { f.stopped = true }
func (f *fakeSpeaker) Announce(rs []bgp.Route) (bgp.Diff, error) {
	var d bgp.Diff
	for _, r := range rs {
		if !slices.ContainsFunc(f.announced, func(o bgp.Route) bool { return o.String() == r.String() }) {
			d.Added++
		}
	}
	f.announced = slices.Clone(rs)
	return d, nil
}
func (f *fakeSpeaker) Announced() []bgp.Route    { return f.announced }
func (f *fakeSpeaker) Neighbors() []bgp.Neighbor { return f.neighbors }
func (f *fakeSpeaker) Received() []bgp.Remote    { return f.received }
func (f *fakeSpeaker) Changed() <-chan struct{}  { return f.changed }

var (
	peerRR  = netip.MustParseAddr("198.51.100.1")
	ownNet  = netip.MustParsePrefix("192.0.2.0/24")
	bgpDest = "192.0.2.0/24"
)

func bgpConfig(t *testing.T) *config.Config {
	cfg := testConfig(t)
	cfg.BGP = config.BGP{ASN: 65001, RouterID: "10.0.0.1", ListenPort: -1,
		Neighbors: []config.BGPNeighbor{{Address: peerRR.String(), ASN: 65001, Send: []string{"rtbh", "flowspec"}, Receive: true}},
		// HostBans: these tests ban single sources to see them go up
		// (TestBGPAnnouncePolicy tests the default, off).
		Announce: config.BGPAnnounce{MinPPS: 5000, NextHop4: "192.0.2.254", Destination: bgpDest, HostBans: true},
		Accept:   config.BGPAccept{OwnPrefixes: []string{bgpDest}}}
	cfg.Rails.Protected = []string{"192.0.2.250/32"}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// bgpHarness starts a daemon whose speaker is a fake, with the peer up
// since long before t0.
func bgpHarness(t *testing.T, cfg *config.Config) (*harness, *fakeSpeaker) {
	t.Helper()
	fs := &fakeSpeaker{changed: make(chan struct{}, 1),
		neighbors: []bgp.Neighbor{{Address: peerRR, ASN: 65001, State: "established", Since: t0.Add(-time.Hour)}}}
	old := newSpeaker
	newSpeaker = func(config.BGP, *slog.Logger) (Speaker, error) { return fs, nil }
	t.Cleanup(func() { newSpeaker = old })
	return newHarness(t, cfg, false), fs
}

func announcedKeys(rs []bgp.Route) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.String())
	}
	slices.Sort(out)
	return out
}

// A ban above announce.min_pps goes upstream as RTBH and as FlowSpec (with
// the fleet's destination); one below stays local; the route is withdrawn
// in the step that lifts the ban.
func TestBGPAnnouncesHeavyBansOnlyAndWithdrawsOnUnban(t *testing.T) {
	h, fs := bgpHarness(t, bgpConfig(t))
	heavy, light := netip.MustParseAddr("203.0.113.7"), netip.MustParseAddr("203.0.113.8")
	h.dp.send(20000, heavy)
	h.dp.send(2000, light)
	h.step(t)
	if _, ok := h.d.store.Get(pfx(light)); !ok {
		t.Fatal("the light source was not banned: the test's premise fails")
	}
	// The ban's rate is what its rule counted, read in the next interval.
	h.dp.hit(pfx(heavy), 20000)
	h.dp.hit(pfx(light), 2000)
	h.step(t)
	want := []string{"flowspec src 203.0.113.7/32 dst 192.0.2.0/24 drop", "rtbh 203.0.113.7/32"}
	if got := announcedKeys(fs.announced); !slices.Equal(got, want) {
		t.Fatalf("announced %q, want %q", got, want)
	}
	if !hasEvent(h.d, "bgp", "announced rtbh 203.0.113.7/32") {
		t.Fatal("no event for the announcement")
	}
	// Both sources stop: the rate monitor lifts the bans after the hold,
	// and the routes go with them.
	for i := 0; i < 8; i++ {
		h.step(t)
	}
	if _, ok := h.d.store.Get(pfx(heavy)); ok {
		t.Fatal("the heavy source is still banned after it stopped")
	}
	if len(fs.announced) != 0 {
		t.Fatalf("still announced after the unban: %q", announcedKeys(fs.announced))
	}
	if !hasEvent(h.d, "bgp", "withdrew rtbh 203.0.113.7/32") {
		t.Fatal("no event for the withdrawal")
	}
}

// The policy: rails checked again, saturation, top-N, no remote rules,
// no SYN-cookie rules, an announced flow rule stays while it exists.
func TestBGPAnnouncePolicy(t *testing.T) {
	cfg := bgpConfig(t).BGP
	cfg.Announce.MaxRoutes = 2
	p := netip.MustParsePrefix
	bans := []ban.Ban{
		{Prefix: p("203.0.113.1/32"), Detector: "rate", PeakRate: 9000},
		{Prefix: p("203.0.113.2/32"), Detector: "rate", PeakRate: 8000},
		{Prefix: p("203.0.113.3/32"), Detector: "rate", PeakRate: 7000},                           // over N
		{Prefix: p("203.0.113.4/32"), Detector: "rate", PeakRate: 100},                            // under min_pps
		{Prefix: p("192.0.2.250/32"), Detector: "operator", PeakRate: 1e6, Forced: true},          // protected
		{Prefix: p("203.0.113.5/32"), Detector: remoteDetector, Reason: remoteReason + "1.1.1.1"}, // remote
	}
	guarded := func(q netip.Prefix) string {
		if q.Overlaps(p("192.0.2.250/32")) {
			return "protected"
		}
		return ""
	}
	web := rule.FlowRule{Dst: p("192.0.2.80/32"), Proto: 17, DstPorts: rule.PortRange{Lo: 53, Hi: 53}, Action: rule.FlowDrop}
	syn := rule.FlowRule{Dst: p("192.0.2.80/32"), Proto: 6, Action: rule.FlowSYNCookie}
	remote := rule.FlowRule{Dst: p("192.0.2.81/32"), Action: rule.FlowDrop}
	// The drop of a SYN flood's size stays here too: upstream it would
	// lose the known-good bypass.
	size := rule.FlowRule{Dst: p("192.0.2.80/32"), Proto: 6, TCPFlags: rule.TCPFlagMatch{Mask: rule.TCPSyn | rule.TCPAck, Value: rule.TCPSyn},
		Length: rule.Range16{Lo: 40, Hi: 40}, Action: rule.FlowDrop, KnownGoodBypass: true}
	flows := []mitigate.Rule{{FlowRule: web, Origin: mitigate.Ladder, MatchedPPS: 50000}, {FlowRule: syn, Origin: mitigate.Ladder, MatchedPPS: 1e6},
		{FlowRule: remote, Origin: mitigate.Remote, MatchedPPS: 1e6}, {FlowRule: size, Origin: mitigate.Ladder, Rung: mitigate.RungSYNSize, MatchedPPS: 2e6}}
	// By default a detector's ban of one address stays local: its source
	// may be spoofed. A prefix ban and an operator's host ban go up.
	cfg.Announce.HostBans = false
	wide := append(slices.Clone(bans), ban.Ban{Prefix: p("198.18.64.0/24"), Detector: "victim", PeakRate: 5e5},
		ban.Ban{Prefix: p("203.0.113.9/32"), Detector: "operator", Manual: true, PeakRate: 4e5})
	cfg.Announce.MaxRoutes = 10
	got := announcedKeys(announcePolicy(&cfg, slices.Values(wide), nil, false, nil, guarded))
	want := []string{"flowspec src 198.18.64.0/24 dst 192.0.2.0/24 drop", "flowspec src 203.0.113.9/32 dst 192.0.2.0/24 drop", "rtbh 198.18.64.0/24", "rtbh 203.0.113.9/32"}
	if !slices.Equal(got, want) {
		t.Fatalf("without host_bans: announced %q\nwant %q", got, want)
	}
	cfg.Announce.HostBans = true
	cfg.Announce.MaxRoutes = 2
	got = announcedKeys(announcePolicy(&cfg, slices.Values(bans), flows, false, nil, guarded))
	want = []string{"flowspec " + web.String(), "flowspec src 203.0.113.1/32 dst 192.0.2.0/24 drop", "rtbh 203.0.113.1/32", "rtbh 203.0.113.2/32"}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("announced %q\nwant %q", got, want)
	}
	// Saturated: the light ban is a candidate too, but top-N still holds.
	cfg.Announce.MaxRoutes = 10
	got = announcedKeys(announcePolicy(&cfg, slices.Values(bans), nil, true, nil, guarded))
	if !slices.Contains(got, "rtbh 203.0.113.4/32") || slices.Contains(got, "rtbh 192.0.2.250/32") || slices.Contains(got, "rtbh 203.0.113.5/32") {
		t.Fatalf("saturated: announced %q", got)
	}
	// A flow rule announced before stays while its rate dips.
	flows[0].MatchedPPS = 10
	prev := map[string]bgp.Route{}
	for _, r := range announcePolicy(&cfg, nil, flows[:1], false, nil, guarded) {
		prev[r.String()] = r
	}
	if len(prev) != 0 {
		t.Fatal("a quiet flow rule was announced")
	}
	prev["flowspec "+web.String()] = bgp.Route{}
	if got := announcePolicy(&cfg, nil, flows[:1], false, prev, guarded); len(got) != 1 {
		t.Fatalf("an announced flow rule was withdrawn while it exists: %v", got)
	}
}

// A peer's FlowSpec for a source becomes a remote ban in XDP at once (on
// the speaker's signal, not the next interval), is never announced again,
// and is lifted when the peer withdraws it; a remote ban of protected
// space is refused.
func TestBGPRemoteBanAppliedAndLifted(t *testing.T) {
	h, fs := bgpHarness(t, bgpConfig(t))
	attacker := netip.MustParsePrefix("203.0.113.66/32")
	fs.received = []bgp.Remote{
		{Peer: peerRR, Flow: bgp.Flow{Src: attacker, FlowRule: rule.FlowRule{Dst: ownNet, Action: rule.FlowDrop}}},
		{Peer: peerRR, Flow: bgp.Flow{Src: netip.MustParsePrefix("192.0.2.250/32"), FlowRule: rule.FlowRule{Dst: ownNet, Action: rule.FlowDrop}}},
		{Peer: peerRR, Flow: bgp.Flow{Src: netip.MustParsePrefix("203.0.113.67/32")}, Refused: "no destination prefix"},
		// Half the Internet as one "source": past the rails' widest ban.
		{Peer: peerRR, Flow: bgp.Flow{Src: netip.MustParsePrefix("0.0.0.0/1"), FlowRule: rule.FlowRule{Dst: ownNet, Action: rule.FlowDrop}}},
	}
	h.d.bgp.applyRemote(h.now, h.d.fleetHost())
	b, ok := h.d.store.Get(attacker)
	if !ok || b.Detector != remoteDetector {
		t.Fatalf("remote ban %+v, %v", b, ok)
	}
	if _, ok := h.dp.blocked[attacker]; !ok {
		t.Fatal("the remote ban is not in the data plane")
	}
	for _, p := range []string{"192.0.2.250/32", "0.0.0.0/1"} {
		if _, ok := h.dp.blocked[netip.MustParsePrefix(p)]; ok {
			t.Fatalf("a peer banned %s", p)
		}
	}
	if !hasEvent(h.d, "refused", "remote ban from 198.51.100.1") || !hasEvent(h.d, "bgp", "not enforced") {
		t.Fatal("the refusals are not in the events")
	}
	// A remote ban is never announced, whatever its rate.
	h.dp.hit(attacker, 1e6)
	h.step(t)
	h.dp.hit(attacker, 1e6)
	h.step(t)
	for _, r := range fs.announced {
		if routePrefix(r) == attacker {
			t.Fatalf("re-announced a remote ban: %s", r.String())
		}
	}
	// The peer withdraws it.
	fs.received = nil
	h.d.bgp.applyRemote(h.now, h.d.fleetHost())
	if _, ok := h.d.store.Get(attacker); ok {
		t.Fatal("the remote ban outlived its route")
	}
	if _, ok := h.dp.blocked[attacker]; ok {
		t.Fatal("the remote ban is still in the data plane")
	}
}

// After a restart the remote bans come back from the state file; they are
// not lifted before the peer had time to send them again.
func TestBGPRemoteBanKeptUntilPeerSettles(t *testing.T) {
	cfg := bgpConfig(t)
	h, _ := bgpHarness(t, cfg)
	attacker := netip.MustParsePrefix("203.0.113.66/32")
	h.d.store.Put(ban.Ban{Prefix: attacker, Detector: remoteDetector, Reason: remoteReason + peerRR.String(), Manual: true})
	h.d.dirty = true
	if err := h.d.save(h.now); err != nil {
		t.Fatal(err)
	}
	// The restart: a new daemon over the same state file.
	h, fs := bgpHarness(t, cfg)
	fs.neighbors[0].State, fs.neighbors[0].Since = "active", time.Time{}
	if h.d.bgp.remote[attacker] != peerRR {
		t.Fatalf("the restarted daemon lost whose remote ban %s is: %v", attacker, h.d.bgp.remote)
	}
	h.d.bgp.applyRemote(h.now.Add(time.Second), h.d.fleetHost())
	if _, ok := h.d.store.Get(attacker); !ok {
		t.Fatal("lifted before the peer came back")
	}
	// The peer comes up and sends nothing: lifted once it settled.
	fs.neighbors[0].State, fs.neighbors[0].Since = "established", h.now.Add(time.Second)
	h.d.bgp.applyRemote(h.now.Add(2*time.Second), h.d.fleetHost())
	if _, ok := h.d.store.Get(attacker); !ok {
		t.Fatal("lifted the moment the peer came up")
	}
	h.d.bgp.applyRemote(h.now.Add(time.Second+remoteSettle), h.d.fleetHost())
	if _, ok := h.d.store.Get(attacker); ok {
		t.Fatal("a remote ban its peer no longer sends was kept")
	}
}

// A peer's destination rule becomes a flow rule of origin "bgp"; a local
// rule with the same match stays the local one when the peer withdraws.
func TestBGPRemoteFlowRule(t *testing.T) {
	h, fdp := newFlowHarness(t, false)
	cfg := bgpConfig(t)
	fs := &fakeSpeaker{neighbors: []bgp.Neighbor{{Address: peerRR, State: "established", Since: t0.Add(-time.Hour)}}}
	h.d.cfg.BGP = cfg.BGP
	fakeBGP(h.d, fs)
	fr := rule.FlowRule{Dst: netip.MustParsePrefix("192.0.2.53/32"), Proto: 17, DstPorts: rule.PortRange{Lo: 53, Hi: 53}, Action: rule.FlowDrop}
	fs.received = []bgp.Remote{{Peer: peerRR, Flow: bgp.Flow{FlowRule: fr}}}
	h.d.bgp.applyRemote(h.now, h.d.fleetHost())
	// With the known-good bypass: this host's verified clients pass a
	// peer's rule as they pass its own.
	if !slices.Contains(fdp.rules, bypassing(fr)) {
		t.Fatalf("data plane rules %v, want the remote rule with the known-good bypass", fdp.rules)
	}
	rs := h.d.flow.set.Rules()
	if len(rs) != 1 || rs[0].Origin != mitigate.Remote {
		t.Fatalf("set %+v", rs)
	}
	fs.received = nil
	h.d.bgp.applyRemote(h.now, h.d.fleetHost())
	if slices.Contains(fdp.rules, fr) {
		t.Fatal("the remote rule outlived its route")
	}
	// The operator's own copy is not lifted by a peer.
	if _, err := h.d.flow.set.Add(mitigate.Rule{FlowRule: fr, Origin: mitigate.Operator, Reason: "operator"}); err != nil {
		t.Fatal(err)
	}
	fs.received = []bgp.Remote{{Peer: peerRR, Flow: bgp.Flow{FlowRule: fr}}}
	h.d.bgp.applyRemote(h.now, h.d.fleetHost())
	fs.received = nil
	h.d.bgp.applyRemote(h.now, h.d.fleetHost())
	if rs := h.d.flow.set.Rules(); len(rs) != 1 || rs[0].Origin != mitigate.Operator {
		t.Fatalf("the operator's rule was touched: %+v", rs)
	}
}

// Monitor-only announces nothing and enforces nothing.
func TestBGPMonitorOnly(t *testing.T) {
	cfg := bgpConfig(t)
	cfg.Rails.MonitorOnly = true
	h, fs := bgpHarness(t, cfg)
	fs.received = []bgp.Remote{{Peer: peerRR, Flow: bgp.Flow{Src: netip.MustParsePrefix("203.0.113.66/32"), FlowRule: rule.FlowRule{Dst: ownNet, Action: rule.FlowDrop}}}}
	h.dp.send(20000, netip.MustParseAddr("203.0.113.7"))
	h.step(t)
	h.step(t)
	if len(fs.announced) != 0 || h.d.store.Len() != 0 && slices.ContainsFunc(h.d.store.All(), func(b ban.Ban) bool { return b.Detector == remoteDetector }) {
		t.Fatalf("monitor-only: announced %v, bans %v", fs.announced, h.d.store.All())
	}
}

// A peer cannot cut this host off: no drop of every packet to its own
// address, none of the BGP session; a rule for one service of the host is
// what FlowSpec is for. A refusal is reported once while the peer keeps
// sending the route.
func TestBGPRemoteFlowRuleCannotCutOff(t *testing.T) {
	h, fdp := newFlowHarness(t, false)
	h.d.cfg.BGP = bgpConfig(t).BGP
	fs := &fakeSpeaker{neighbors: []bgp.Neighbor{{Address: peerRR, State: "established", Since: t0.Add(-time.Hour)}}}
	fakeBGP(h.d, fs)
	self := netip.MustParseAddr("192.0.2.1")
	h.d.mgmt = []ban.Managed{{Addr: self, What: "address of eth0"}}
	host := netip.PrefixFrom(self, 32)
	dns := rule.FlowRule{Dst: host, Proto: 17, DstPorts: rule.PortRange{Lo: 53, Hi: 53}, Action: rule.FlowDrop}
	all := rule.FlowRule{Dst: ownNet, Action: rule.FlowDrop}
	tcp := rule.FlowRule{Dst: host, Proto: 6, Action: rule.FlowDrop}
	limit := rule.FlowRule{Dst: host, Proto: 6, Action: rule.FlowRateLimit, RatePPS: 1000}
	for _, fr := range []rule.FlowRule{dns, all, tcp, limit} {
		fs.received = append(fs.received, bgp.Remote{Peer: peerRR, Flow: bgp.Flow{FlowRule: fr}})
	}
	h.d.bgp.applyRemote(h.now, h.d.fleetHost())
	for fr, want := range map[rule.FlowRule]bool{dns: true, all: false, tcp: false, limit: true} {
		if got := slices.Contains(fdp.rules, bypassing(fr)); got != want {
			t.Errorf("%s enforced %v, want %v", fr, got, want)
		}
	}
	count := func() int {
		n := 0
		for _, e := range h.d.events {
			if e.Kind == "refused" {
				n++
			}
		}
		return n
	}
	if n := count(); n != 2 {
		t.Fatalf("%d refusals reported, want 2 (drop-all, the BGP session)", n)
	}
	h.d.bgp.applyRemote(h.now, h.d.fleetHost())
	h.d.bgp.applyRemote(h.now, h.d.fleetHost())
	if n := count(); n != 2 {
		t.Fatalf("%d refusals reported after two more passes, want each once", n)
	}
}

// Wire loss (the interface missing packets before XDP) makes every ban a
// candidate for upstream, whatever its rate.
func TestBGPWireLossAnnouncesEveryBan(t *testing.T) {
	h, fs := bgpHarness(t, bgpConfig(t))
	var lost uint64
	h.d.bgp.loss = func() (uint64, error) { return lost, nil }
	light := netip.MustParseAddr("203.0.113.8")
	h.dp.send(2000, light)
	h.step(t)
	h.dp.hit(pfx(light), 2000)
	h.step(t)
	if len(fs.announced) != 0 {
		t.Fatalf("a ban under min_pps announced without saturation: %v", fs.announced)
	}
	lost = 1000
	h.step(t)
	if got := announcedKeys(fs.announced); !slices.Contains(got, "rtbh 203.0.113.8/32") {
		t.Fatalf("announced %q while the wire lost packets, want the light ban too", got)
	}
}

func TestBGPSaturationAnnouncementStaysUntilUnban(t *testing.T) {
	h, fs := bgpHarness(t, bgpConfig(t))
	var lost uint64
	h.d.bgp.loss = func() (uint64, error) { return lost, nil }
	light := netip.MustParseAddr("203.0.113.8")
	h.dp.send(2000, light)
	h.step(t)
	lost = 10
	h.dp.hit(pfx(light), 2000)
	h.step(t)
	for i := 0; i < 2; i++ {
		h.dp.hit(pfx(light), 2000) // still flooding: not lifted
		h.step(t)
		if got := announcedKeys(fs.announced); !slices.Contains(got, "rtbh 203.0.113.8/32") {
			t.Fatalf("interval %d after the saturation: announced %q, want the ban kept upstream", i, got)
		}
	}
}

// fakeBGP gives d's BGP stage the fake speaker fs, as if opened at t0.
func fakeBGP(d *Daemon, fs *fakeSpeaker) {
	d.bgp.sp, d.bgp.started, d.bgp.announced, d.bgp.refused = fs, t0, map[string]bgp.Route{}, map[string]bool{}
}
