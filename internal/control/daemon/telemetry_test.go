// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/control/bgp"
	"github.com/tierwall/tierwall/internal/control/bgp/community"
	"github.com/tierwall/tierwall/internal/control/config"
	"github.com/tierwall/tierwall/internal/control/telemetry"
	tt "github.com/tierwall/tierwall/internal/control/telemetry/telemetrytest"
	"github.com/tierwall/tierwall/internal/rule"
	"github.com/tierwall/tierwall/internal/testbed/bgppeer"
	"github.com/tierwall/tierwall/internal/testutil"
)

// announcedNow reads what the fake speaker holds, under the merged
// speaker's lock (network mode announces from its own goroutine).
func announcedNow(d *Daemon, fs *fakeSpeaker) []string {
	d.tele.merged.mu.Lock()
	defer d.tele.merged.mu.Unlock()
	return announcedKeys(fs.announced)
}

func waitAnnounced(t *testing.T, d *Daemon, fs *fakeSpeaker, cond func([]string) bool) []string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if got := announcedNow(d, fs); cond(got) {
			return got
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("announced %q", announcedNow(d, fs))
	return nil
}

// A flood seen only in the routers' sFlow is announced as FlowSpec from
// network mode's tick, and as RTBH when over its group's uplinks; the
// loop's own announcements do not withdraw it; it is withdrawn when the
// feed shows the attack over.
func TestTelemetryAnnouncesThroughTheLoopsSpeaker(t *testing.T) {
	cfg := bgpConfig(t)
	cfg.HostGroups = []config.HostGroup{{Name: "customers", Prefixes: []string{"198.51.100.0/24"}}}
	cfg.Telemetry = config.Telemetry{Enabled: true, Listen: []string{"127.0.0.1:0"},
		Exporters:  []config.TelemetryExporter{{Address: "127.0.0.1"}},
		Thresholds: map[string]config.TelemetryLimits{"all": {PPS: 50000}},
		Groups: map[string]config.TelemetryGroup{"customers": {UplinkBPS: 1e9,
			Communities: []string{"64600:666"}, LargeCommunities: []string{"4200000000:666:7"}}},
		WithdrawAfter: 300 * time.Millisecond}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	h, fs := bgpHarness(t, cfg)
	t.Cleanup(h.d.closeTelemetry)
	conn, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(h.d.tele.svc.Addrs()[0]))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	victim := netip.MustParseAddr("198.51.100.7")
	// 40 samples at 1:10000 of 1400-byte memcached answers: 400k packets,
	// 4.5 Gbit/s over the uplinks' 1 Gbit/s.
	sf := tt.SFlow{Agent: netip.MustParseAddr("127.0.0.1")}
	for i := 0; i < 40; i++ {
		sf.Flow(10000, tt.Packet{Src: netip.MustParseAddr("203.0.113.9"), Dst: victim, Proto: 17, SrcPort: 11211, DstPort: 80, Length: 1400})
	}
	if _, err := conn.Write(sf.Bytes()); err != nil {
		t.Fatal(err)
	}
	want := []string{"flowspec dst 198.51.100.7/32 proto udp dport 80 sport 11211 length 1400-1400 drop", "rtbh 198.51.100.7/32"}
	got := waitAnnounced(t, h.d, fs, func(g []string) bool { return slices.Equal(g, want) })
	// The group's communities ride on its RTBH route, not on the FlowSpec.
	h.d.tele.merged.mu.Lock()
	for _, r := range fs.announced {
		wantStd, wantLarge := []community.Standard(nil), []community.Large(nil)
		if r.Kind == bgp.RTBH {
			wantStd, wantLarge = []community.Standard{64600<<16 | 666}, []community.Large{{Global: 4200000000, Local1: 666, Local2: 7}}
		}
		if !slices.Equal(r.Communities, wantStd) || !slices.Equal(r.LargeCommunities, wantLarge) {
			t.Errorf("%s: communities %v %v, want %v %v", r, r.Communities, r.LargeCommunities, wantStd, wantLarge)
		}
	}
	h.d.tele.merged.mu.Unlock()
	// The loop's interval announces its own set: network mode's stays.
	h.step(t)
	if g := announcedNow(h.d, fs); !slices.Equal(g, got) {
		t.Fatalf("after the loop's step: %q, before %q", g, got)
	}
	st := h.d.Telemetry(5)
	if !st.Enabled || len(st.Attacks) != 1 || len(st.Plan) != 2 || st.Exporters[0].Records != 40 {
		t.Errorf("status %+v", st)
	}
	// No more samples: over after withdraw_after, and withdrawn.
	waitAnnounced(t, h.d, fs, func(g []string) bool { return len(g) == 0 })
}

// A community that does not parse (package config refuses it: only a
// caller that skipped validation gets here) leaves its RTBH route out,
// with the error, rather than blackholing without the provider's
// community; the FlowSpec route still goes.
func TestUpstreamRoutesRefusesBadCommunities(t *testing.T) {
	plan := []telemetry.Upstream{
		{Kind: telemetry.UpFlowSpec, Rule: rule.FlowRule{Dst: netip.MustParsePrefix("198.51.100.7/32"), Action: rule.FlowDrop}},
		{Kind: telemetry.UpRTBH, Prefix: netip.MustParsePrefix("198.51.100.7/32"), Communities: telemetry.Communities{Large: []string{"65000:666"}}},
		{Kind: telemetry.UpRTBH, Prefix: netip.MustParsePrefix("198.51.100.8/32"), Communities: telemetry.Communities{Standard: []string{"64500:666"}}},
	}
	rs, err := upstreamRoutes(plan)
	if err == nil || !strings.Contains(err.Error(), "rtbh 198.51.100.7/32") {
		t.Errorf("error %v, want one naming the route", err)
	}
	if got := announcedKeys(rs); !slices.Equal(got, []string{"flowspec dst 198.51.100.7/32 drop", "rtbh 198.51.100.8/32"}) {
		t.Errorf("routes %q", got)
	}
	if len(rs) == 2 && !slices.Equal(rs[1].Communities, []community.Standard{64500<<16 | 666}) {
		t.Errorf("communities %v", rs[1].Communities)
	}
}

// daemonPairEnv carries the bgppeer.Pair (JSON) to the re-run of a test
// inside the Pair's host namespace; set, this process is that re-run.
const daemonPairEnv = "TIERWALL_DAEMON_BGP_PAIR"

// inHostNamespace runs body in the host namespace of a fresh bgppeer.Pair.
// GoBGP dials its peers from threads of its own, so the whole process must
// be in the namespace: the parent makes the Pair and re-runs this one test
// there (under ip netns exec), and the re-run calls body.
func inHostNamespace(t *testing.T, name string, commands []string, body func(t *testing.T, p *bgppeer.Pair)) {
	if env := os.Getenv(daemonPairEnv); env != "" {
		var p bgppeer.Pair
		if err := json.Unmarshal([]byte(env), &p); err != nil {
			t.Fatalf("%s: %v", daemonPairEnv, err)
		}
		body(t, &p)
		return
	}
	testutil.RequireRoot(t)
	testutil.RequireCommand(t, commands...)
	p, err := bgppeer.NewPair(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	env, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", p.Host, os.Args[0],
		"-test.run", "^"+t.Name()+"$", "-test.v", "-test.count=1", "-test.timeout=3m")
	cmd.Env = append(os.Environ(), daemonPairEnv+"="+string(env))
	out, err := cmd.CombinedOutput()
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		t.Log(sc.Text())
	}
	if err != nil {
		t.Fatalf("the test inside namespace %s failed: %v", p.Host, err)
	}
	if !bytes.Contains(out, []byte("--- PASS: "+t.Name())) {
		t.Fatalf("the test inside namespace %s did not pass (no PASS line)", p.Host)
	}
}

// From the telemetry feed alone to a real FRR (8.4, bgppeer's): the
// daemon's network mode, with its real speaker, sees a memcached
// reflection flood in synthesized sFlow and announces it to FRR as the
// FlowSpec rule its samples describe; since the flood is over the
// group's uplinks, also as RTBH of the victim with BLACKHOLE, NO_EXPORT,
// bgp.announce's communities, the host group's and the neighbour's
// (standard and large). Both are withdrawn when the feed goes quiet.
func TestTelemetryFloodToFRR(t *testing.T) {
	inHostNamespace(t, "telfrr", []string{"vtysh", "/usr/lib/frr/bgpd"}, func(t *testing.T, p *bgppeer.Pair) {
		// FRR's FlowSpec JSON shows no communities (bgppeer.FRR).
		floodToPeer(t, p, "FRR", func(ctx context.Context, o bgppeer.Options) (bgppeer.Peer, error) { return bgppeer.StartFRR(ctx, o) }, nil, nil)
	})
}

// The same to BIRD (2.0.12), which also shows a FlowSpec route's
// communities: bgp.announce's and the neighbour's, not the host group's
// (those are for its RTBH routes only).
func TestTelemetryFloodToBird(t *testing.T) {
	inHostNamespace(t, "telbird", []string{"bird", "birdc"}, func(t *testing.T, p *bgppeer.Pair) {
		floodToPeer(t, p, "BIRD", func(ctx context.Context, o bgppeer.Options) (bgppeer.Peer, error) { return bgppeer.StartBird(ctx, o) },
			[]string{"65000:666", "65002:9999", bgppeer.NoExport}, []string{"65000:666:1", "4200000000:9999:1"})
	})
}

// floodToPeer runs a daemon whose speaker peers with the daemon start
// starts in p's router namespace, floods it through the telemetry feed
// and checks the routes the peer receives, then their withdrawal; fsComms
// and fsLarge are the FlowSpec route's communities as the peer shows them.
func floodToPeer(t *testing.T, p *bgppeer.Pair, name string, start func(context.Context, bgppeer.Options) (bgppeer.Peer, error), fsComms, fsLarge []string) {
	ctx := t.Context()
	peer, err := start(ctx, bgppeer.Options{Netns: p.Router, RouterID: p.Router4, ASN: 65002,
		LocalAddr: p.Router4, PeerAddr: p.Host4, PeerASN: 65001})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s log:\n%s", name, peer.Log())
		}
		if err := peer.Close(); err != nil {
			t.Error(err)
		}
	})
	cfg := testConfig(t)
	cfg.BGP = config.BGP{ASN: 65001, RouterID: p.Host4.String(), ListenPort: -1,
		Neighbors: []config.BGPNeighbor{{Address: p.Router4.String(), ASN: 65002, LocalAddress: p.Host4.String(),
			Send: []string{"rtbh", "flowspec"}, HoldTime: 9 * time.Second,
			Communities: []string{"65002:9999"}, LargeCommunities: []string{"4200000000:9999:1"}}},
		Announce: config.BGPAnnounce{NextHop4: "192.0.2.1", Communities: []string{"65000:666"}, LargeCommunities: []string{"65000:666:1"}}}
	cfg.HostGroups = []config.HostGroup{{Name: "customers", Prefixes: []string{"198.51.100.0/24"}}}
	cfg.Telemetry = config.Telemetry{Enabled: true, Listen: []string{"127.0.0.1:0"},
		Exporters:  []config.TelemetryExporter{{Address: "127.0.0.1"}},
		Thresholds: map[string]config.TelemetryLimits{"all": {PPS: 50000}},
		Groups: map[string]config.TelemetryGroup{"customers": {UplinkBPS: 1e9,
			Communities: []string{"64600:666"}, LargeCommunities: []string{"4200000000:666:7"}}},
		WithdrawAfter: 500 * time.Millisecond}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, cfg, false) // the real speaker: newSpeaker is not replaced
	t.Cleanup(h.d.bgp.close)
	t.Cleanup(h.d.closeTelemetry)
	if err := bgppeer.WaitFor(ctx, 40*time.Second, "session with "+name, peer.Established); err != nil {
		t.Fatal(err)
	}

	conn, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(h.d.tele.svc.Addrs()[0]))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// 6 samples at 1:10000 every 100 ms: 600 kpps of 1400-byte
	// memcached answers, 6.7 Gbit/s against 1 Gbit/s of uplinks.
	stop := tt.Feed(conn, netip.MustParseAddr("127.0.0.1"), 10000, tt.Packet{Src: netip.MustParseAddr("203.0.113.9"),
		Dst: netip.MustParseAddr("198.51.100.7"), Proto: 17, SrcPort: 11211, DstPort: 80, Length: 1400}, 100*time.Millisecond)
	defer stop()
	begin := time.Now()
	nlri := "dst 198.51.100.7/32 proto =17 dport =80 sport =11211 len =1400"
	wantFS := bgppeer.Route{Family: bgppeer.IPv4FlowSpec, NLRI: nlri, Communities: fsComms, LargeCommunities: fsLarge,
		ExtCommunities: []string{bgppeer.TrafficRate(0)}}
	wantRTBH := bgppeer.Route{Family: bgppeer.IPv4Unicast, NLRI: "198.51.100.7/32", NextHop: "192.0.2.1",
		Communities:      []string{"64600:666", "65000:666", "65002:9999", bgppeer.Blackhole, bgppeer.NoExport},
		LargeCommunities: []string{"65000:666:1", "4200000000:666:7", "4200000000:9999:1"}}
	for _, want := range []bgppeer.Route{wantFS, wantRTBH} {
		rs, err := bgppeer.WaitRoutes(ctx, peer, want.Family, 20*time.Second, func(rs []bgppeer.Route) bool {
			_, ok := bgppeer.Find(rs, want.NLRI)
			return ok
		})
		if err != nil {
			t.Fatalf("%v; %s has %v; announced %v", err, name, rs, h.d.bgp.sp.Announced())
		}
		if got, _ := bgppeer.Find(rs, want.NLRI); got.String() != want.String() {
			t.Errorf("at %s:\n got %v\nwant %v", name, got, want)
		}
		t.Logf("%s at %s %v after the first datagram", want.Family, name, time.Since(begin).Round(time.Millisecond))
	}
	// The loop's interval announces its own set: network mode's stays.
	h.step(t)
	if rs, err := peer.Routes(ctx, bgppeer.IPv4Unicast); err != nil || len(rs) != 1 {
		t.Errorf("after the loop's step: %v, %v", rs, err)
	}

	stop()
	quiet := time.Now()
	for _, want := range []bgppeer.Route{wantFS, wantRTBH} {
		if rs, err := bgppeer.WaitRoutes(ctx, peer, want.Family, 20*time.Second, func(rs []bgppeer.Route) bool {
			_, ok := bgppeer.Find(rs, want.NLRI)
			return !ok
		}); err != nil {
			t.Fatalf("withdrawal of %s: %v; %s has %v", want.NLRI, err, name, rs)
		}
	}
	t.Logf("withdrawn at %s %v after the feed went quiet (withdraw_after 0.5 s)", name, time.Since(quiet).Round(time.Millisecond))
}

// announceSpeaker is the fake speaker that takes reloaded announce
// policies, as *bgp.Speaker does.
type announceSpeaker struct {
	*fakeSpeaker
	set []config.BGPAnnounce
}

func (a *announceSpeaker) SetAnnounce(an config.BGPAnnounce) error {
	a.set = append(a.set, an)
	return nil
}

// A reloaded bgp.announce whose communities or next hops changed reaches
// the speaker (through network mode's merged speaker) before the next
// announcement; one that changed only the loop's policy does not.
func TestBGPReloadedCommunitiesReachTheSpeaker(t *testing.T) {
	cfg := bgpConfig(t)
	cfg.HostGroups = []config.HostGroup{{Name: "customers", Prefixes: []string{"198.51.100.0/24"}}}
	cfg.Telemetry = config.Telemetry{Enabled: true, Listen: []string{"127.0.0.1:0"},
		Exporters: []config.TelemetryExporter{{Address: "127.0.0.1"}}, Thresholds: map[string]config.TelemetryLimits{"all": {PPS: 50000}}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	as := &announceSpeaker{fakeSpeaker: &fakeSpeaker{changed: make(chan struct{}, 1)}}
	old := newSpeaker
	newSpeaker = func(config.BGP, *slog.Logger) (Speaker, error) { return as, nil }
	t.Cleanup(func() { newSpeaker = old })
	h := newHarness(t, cfg, false)
	t.Cleanup(h.d.closeTelemetry)
	if h.d.tele.merged == nil {
		t.Fatal("network mode did not wrap the speaker")
	}
	h.step(t)
	if len(as.set) != 0 {
		t.Fatalf("the policy at start was given again: %+v", as.set)
	}
	reloaded := *h.d.cfg
	reloaded.BGP.Announce.MinPPS = 1 // the loop's policy only
	h.d.cfg = &reloaded
	h.step(t)
	if len(as.set) != 0 {
		t.Fatalf("min_pps alone reached the speaker: %+v", as.set)
	}
	again := reloaded
	again.BGP.Announce.LargeCommunities = []string{"65000:666:1"}
	h.d.cfg = &again
	h.step(t)
	h.step(t)
	if len(as.set) != 1 || !slices.Equal(as.set[0].LargeCommunities, []string{"65000:666:1"}) {
		t.Errorf("given %+v, want the reloaded large community once", as.set)
	}
}

// Network mode's routes are capped as the loop's are: the heaviest
// bgp.announce.max_routes per kind and family, the rest refused and
// reported. A flood over thousands of the network's addresses must not
// trip the upstream's maximum-prefix limit, which tears the session down
// and withdraws every mitigation with it.
func TestTelemetryRoutesCapped(t *testing.T) {
	cfg := bgpConfig(t)
	cfg.BGP.Announce.MaxRoutes = 3
	cfg.HostGroups = []config.HostGroup{{Name: "customers", Prefixes: []string{"198.51.100.0/24"}}}
	cfg.Telemetry = config.Telemetry{Enabled: true, Listen: []string{"127.0.0.1:0"},
		Exporters:     []config.TelemetryExporter{{Address: "127.0.0.1"}},
		Thresholds:    map[string]config.TelemetryLimits{"all": {PPS: 50000}},
		WithdrawAfter: 300 * time.Millisecond}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	h, fs := bgpHarness(t, cfg)
	t.Cleanup(h.d.closeTelemetry)
	serve(h.d) // network mode reports through the loop
	conn, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(h.d.tele.svc.Addrs()[0]))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Ten victims, each heavier than the last.
	sf := tt.SFlow{Agent: netip.MustParseAddr("127.0.0.1")}
	for i := range 10 {
		for range 20 + 2*i {
			sf.Flow(10000, tt.Packet{Src: netip.MustParseAddr("203.0.113.9"), Dst: netip.AddrFrom4([4]byte{198, 51, 100, byte(10 + i)}),
				Proto: 17, SrcPort: 11211, DstPort: 80, Length: 1400})
		}
	}
	if _, err := conn.Write(sf.Bytes()); err != nil {
		t.Fatal(err)
	}
	want := []string{"flowspec dst 198.51.100.17/32 proto udp dport 80 sport 11211 length 1400-1400 drop",
		"flowspec dst 198.51.100.18/32 proto udp dport 80 sport 11211 length 1400-1400 drop",
		"flowspec dst 198.51.100.19/32 proto udp dport 80 sport 11211 length 1400-1400 drop"}
	waitAnnounced(t, h.d, fs, func(g []string) bool { return slices.Equal(g, want) })
	// Events are the loop's: read on it.
	cut := func() (found bool) {
		_ = h.d.Do(t.Context(), func() {
			found = hasEvent(h.d, "refused", "routes of network attacks not announced: past bgp.announce.max_routes (3 per kind")
		})
		return found
	}
	deadline := time.Now().Add(5 * time.Second)
	for !cut() {
		if time.Now().After(deadline) {
			t.Fatal("the cut routes are not in the events")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
