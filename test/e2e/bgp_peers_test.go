// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/control/bgp"
	"github.com/tierwall/tierwall/internal/control/config"
	rulepkg "github.com/tierwall/tierwall/internal/rule"
	"github.com/tierwall/tierwall/internal/testbed/bgppeer"
	"github.com/tierwall/tierwall/internal/testutil"
)

// The speaker against real BGP daemons (internal/testbed/bgppeer). GoBGP
// dials and listens from its own goroutines, on any OS thread, so
// entering a namespace on the test's thread would leave its sockets in
// this one: each test re-runs itself, the whole test binary, inside the
// host namespace (ip netns exec), where the speaker runs in-process as
// in the daemon, and the daemons run in the router namespace.

// bgpPairEnv carries the bgppeer.Pair (JSON) to the re-run inside the
// host namespace; set, this process is that re-run.
const bgpPairEnv = "TIERWALL_E2E_BGP_PAIR"

const (
	bgpAS       = 65001 // tierwall
	bgpRouterAS = 65002 // the daemon
	bgpUp       = 40 * time.Second
	bgpArrive   = 20 * time.Second
)

var (
	bgpNextHop4    = netip.MustParseAddr("192.0.2.1")
	bgpNextHop6    = netip.MustParseAddr("2001:db8:ffff::1")
	bgpCommunity   = "65000:666" // bgp.announce.communities: the provider's own
	bgpOwnPrefixes = []string{"10.0.0.0/16", "2001:db8:100::/48"}
)

// inHostNS runs body inside a fresh Pair's host namespace: the parent
// makes the Pair and re-runs this test there; the re-run calls body.
func inHostNS(t *testing.T, name string, body func(t *testing.T, p *bgppeer.Pair)) {
	if env := os.Getenv(bgpPairEnv); env != "" {
		var p bgppeer.Pair
		if err := json.Unmarshal([]byte(env), &p); err != nil {
			t.Fatalf("%s: %v", bgpPairEnv, err)
		}
		body(t, &p)
		return
	}
	testutil.RequireRoot(t)
	testutil.RequireCommand(t, "gobgpd", "gobgp", "bird", "birdc", "vtysh", "/usr/lib/frr/bgpd")
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
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", p.Host, os.Args[0],
		"-test.run", "^"+t.Name()+"$", "-test.v", "-test.count=1", "-test.timeout=4m")
	cmd.Env = append(os.Environ(), bgpPairEnv+"="+string(env), "TIERWALL_BIN="+bin)
	out, err := cmd.CombinedOutput()
	// The re-run's own report, indented under this test.
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

// speakerConfig is a validated BGP section with one neighbour, the
// router side of p.
func speakerConfig(t *testing.T, p *bgppeer.Pair, n config.BGPNeighbor) config.BGP {
	t.Helper()
	n.Address, n.ASN, n.LocalAddress = p.Router4.String(), bgpRouterAS, p.Host4.String()
	cfg := config.Default()
	cfg.Interface = "lo"
	cfg.BGP = config.BGP{
		ASN: bgpAS, RouterID: p.Host4.String(), ListenPort: -1,
		Neighbors: []config.BGPNeighbor{n},
		Announce: config.BGPAnnounce{
			NextHop4: bgpNextHop4.String(), NextHop6: bgpNextHop6.String(),
			Communities: []string{bgpCommunity},
		},
		Accept: config.BGPAccept{OwnPrefixes: bgpOwnPrefixes},
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg.BGP
}

func startSpeaker(t *testing.T, cfg config.BGP) *bgp.Speaker {
	t.Helper()
	log := slog.New(slog.NewTextHandler(tlogWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s, err := bgp.New(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

type tlogWriter struct{ t *testing.T }

func (w tlogWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

func speakerUp(s *bgp.Speaker) bool {
	ns := s.Neighbors()
	for _, n := range ns {
		if n.State != "established" {
			return false
		}
	}
	return len(ns) > 0
}

// bothUp waits until the speaker's and the daemon's sessions are up.
func bothUp(t *testing.T, ctx context.Context, s *bgp.Speaker, peer bgppeer.Peer) {
	t.Helper()
	err := bgppeer.WaitFor(ctx, bgpUp, "sessions established", func(ctx context.Context) (bool, error) {
		ok, err := peer.Established(ctx)
		return ok && speakerUp(s), err
	})
	if err != nil {
		ps, _ := peer.Sessions(ctx)
		t.Fatalf("%v: speaker %+v, peer %v", err, s.Neighbors(), ps)
	}
}

func startPeer(t *testing.T, kind string, o bgppeer.Options) bgppeer.Peer {
	t.Helper()
	ctx := context.Background()
	var p bgppeer.Peer
	var err error
	switch kind {
	case "gobgpd":
		p, err = bgppeer.StartGobgpd(ctx, o)
	case "bird":
		p, err = bgppeer.StartBird(ctx, o)
	case "frr":
		p, err = bgppeer.StartFRR(ctx, o)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s log:\n%s", kind, p.Log())
		}
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	return p
}

func routerOptions(p *bgppeer.Pair) bgppeer.Options {
	return bgppeer.Options{Netns: p.Router, RouterID: p.Router4, ASN: bgpRouterAS, LocalAddr: p.Router4,
		PeerAddr: p.Host4, PeerASN: bgpAS}
}

// What every test announces, and how the daemons must show it.
var (
	rtbh4 = bgp.Route{Kind: bgp.RTBH, Prefix: netip.MustParsePrefix("198.51.100.7/32")}
	rtbh6 = bgp.Route{Kind: bgp.RTBH, Prefix: netip.MustParsePrefix("2001:db8:1::7/128")}
	// A source ban: source and destination, drop.
	banFlow = bgp.Route{Kind: bgp.FlowSpec, Flow: bgp.Flow{
		Src:      netip.MustParsePrefix("203.0.113.0/24"),
		FlowRule: rulepkg.FlowRule{Dst: netip.MustParsePrefix("10.0.1.0/24"), Action: rulepkg.FlowDrop},
	}}
	// A flow rule with every numeric and bitmask kind the encoder uses.
	ruleFlow4 = bgp.Route{Kind: bgp.FlowSpec, Flow: bgp.Flow{FlowRule: rulepkg.FlowRule{
		Dst: netip.MustParsePrefix("10.0.2.0/24"), Proto: 6,
		DstPorts: rulepkg.PortRange{Lo: 80, Hi: 81},
		TCPFlags: rulepkg.TCPFlagMatch{Mask: 0x12, Value: 0x02}, // SYN without ACK
		Length:   rulepkg.Range16{Lo: 40, Hi: 60},
		Action:   rulepkg.FlowDrop,
	}}}
	// IPv6, rate-limited: 1000 pps at the default 500 bytes = 500000 B/s.
	ruleFlow6 = bgp.Route{Kind: bgp.FlowSpec, Flow: bgp.Flow{FlowRule: rulepkg.FlowRule{
		Dst: netip.MustParsePrefix("2001:db8:100::/48"), Proto: 17,
		DstPorts: rulepkg.PortRange{Lo: 53, Hi: 53},
		Fragment: rulepkg.FragAnyFrag,
		Action:   rulepkg.FlowRateLimit, RatePPS: 1000,
	}}}

	flowComms = []string{bgpCommunity, bgppeer.NoExport}
	rtbhComms = []string{bgpCommunity, bgppeer.Blackhole, bgppeer.NoExport}

	wantRTBH4 = bgppeer.Route{Family: bgppeer.IPv4Unicast, NLRI: "198.51.100.7/32", NextHop: bgpNextHop4.String(), Communities: rtbhComms}
	wantRTBH6 = bgppeer.Route{Family: bgppeer.IPv6Unicast, NLRI: "2001:db8:1::7/128", NextHop: bgpNextHop6.String(), Communities: rtbhComms}
	wantBan   = bgppeer.Route{Family: bgppeer.IPv4FlowSpec, NLRI: "dst 10.0.1.0/24 src 203.0.113.0/24",
		Communities: flowComms, ExtCommunities: []string{bgppeer.TrafficRate(0)}}
	wantRule4 = bgppeer.Route{Family: bgppeer.IPv4FlowSpec, NLRI: "dst 10.0.2.0/24 proto =6 dport >=80&<=81 tcp-flags =0x2&!0x10 len >=40&<=60",
		Communities: flowComms, ExtCommunities: []string{bgppeer.TrafficRate(0)}}
	wantRule6 = bgppeer.Route{Family: bgppeer.IPv6FlowSpec, NLRI: "dst 2001:db8:100::/48 proto =17 dport =53 frag =0x2",
		Communities: flowComms, ExtCommunities: []string{bgppeer.TrafficRate(500000)}}
)

func announce(t *testing.T, s *bgp.Speaker, rs ...bgp.Route) {
	t.Helper()
	d, err := s.Announce(rs)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Refused) > 0 {
		t.Fatalf("the speaker refused routes: %v", d.Refused)
	}
}

// expectAt waits until peer has want (same NLRI) and compares all of
// it; withoutCommunities is for daemons that do not show them (FRR's
// FlowSpec).
func expectAt(t *testing.T, ctx context.Context, peer bgppeer.Peer, want bgppeer.Route, withoutCommunities bool) {
	t.Helper()
	rs, err := bgppeer.WaitRoutes(ctx, peer, want.Family, bgpArrive, func(rs []bgppeer.Route) bool {
		_, ok := bgppeer.Find(rs, want.NLRI)
		return ok
	})
	if err != nil {
		t.Fatalf("%s not received: %v; have %v", want.NLRI, err, rs)
	}
	got, _ := bgppeer.Find(rs, want.NLRI)
	if withoutCommunities {
		want.Communities = nil
	}
	if got.String() != want.String() {
		t.Errorf("received\n got %v\nwant %v", got, want)
	}
}

// expectGone waits until peer has none of family's routes with nlris.
func expectGone(t *testing.T, ctx context.Context, peer bgppeer.Peer, f bgppeer.Family, nlris ...string) {
	t.Helper()
	rs, err := bgppeer.WaitRoutes(ctx, peer, f, bgpArrive, func(rs []bgppeer.Route) bool {
		for _, n := range nlris {
			if _, ok := bgppeer.Find(rs, n); ok {
				return false
			}
		}
		return true
	})
	if err != nil {
		t.Fatalf("not withdrawn: %v; have %v", err, rs)
	}
}

func TestBGPPeersGobgpd(t *testing.T) {
	inHostNS(t, "gobgpd", func(t *testing.T, p *bgppeer.Pair) {
		ctx := context.Background()
		peer := startPeer(t, "gobgpd", routerOptions(p))
		s := startSpeaker(t, speakerConfig(t, p, config.BGPNeighbor{Send: []string{"rtbh", "flowspec"}}))
		bothUp(t, ctx, s, peer)
		announce(t, s, rtbh4, rtbh6, banFlow, ruleFlow4, ruleFlow6)
		for _, w := range []bgppeer.Route{wantRTBH4, wantRTBH6, wantBan, wantRule4, wantRule6} {
			expectAt(t, ctx, peer, w, false)
		}
		// Announce is the desired state: what it no longer lists goes.
		announce(t, s, rtbh4)
		expectGone(t, ctx, peer, bgppeer.IPv4FlowSpec, wantBan.NLRI, wantRule4.NLRI)
		expectGone(t, ctx, peer, bgppeer.IPv6FlowSpec, wantRule6.NLRI)
		expectGone(t, ctx, peer, bgppeer.IPv6Unicast, wantRTBH6.NLRI)
		expectAt(t, ctx, peer, wantRTBH4, false)
		announce(t, s)
		expectGone(t, ctx, peer, bgppeer.IPv4Unicast, wantRTBH4.NLRI)
	})
}

func TestBGPPeersBird(t *testing.T) {
	inHostNS(t, "bird", func(t *testing.T, p *bgppeer.Pair) {
		ctx := context.Background()
		o := routerOptions(p)
		o.StaticFlowSpec = []string{
			// Within own_prefixes: enforced.
			"flow4 { dst 10.0.5.0/24; proto 17; dport 53; }",
			// Outside: refused (RFC 8955 §6).
			"flow4 { dst 192.0.2.0/24; proto 17; }",
			"flow6 { dst 2001:db8:100:5::/64; next header 6; dport 443; }",
		}
		peer := startPeer(t, "bird", o)
		s := startSpeaker(t, speakerConfig(t, p, config.BGPNeighbor{Send: []string{"flowspec"}, Receive: true}))
		bothUp(t, ctx, s, peer)
		announce(t, s, banFlow, ruleFlow4, ruleFlow6)
		for _, w := range []bgppeer.Route{wantBan, wantRule4, wantRule6} {
			expectAt(t, ctx, peer, w, false)
		}

		var rx []bgp.Remote
		err := bgppeer.WaitFor(ctx, bgpArrive, "BIRD's static FlowSpec in Received", func(context.Context) (bool, error) {
			rx = s.Received()
			return len(rx) >= 3, nil
		})
		if err != nil {
			t.Fatalf("%v: %+v", err, rx)
		}
		find := func(dst string) bgp.Remote {
			t.Helper()
			i := slices.IndexFunc(rx, func(r bgp.Remote) bool { return r.Flow.Dst == netip.MustParsePrefix(dst) })
			if i < 0 {
				t.Fatalf("no received rule for %s: %+v", dst, rx)
			}
			if rx[i].Peer != p.Router4 {
				t.Errorf("rule for %s from %v, want %v", dst, rx[i].Peer, p.Router4)
			}
			return rx[i]
		}
		in := find("10.0.5.0/24")
		if in.Refused != "" || in.Flow.Proto != 17 || in.Flow.DstPorts != (rulepkg.PortRange{Lo: 53, Hi: 53}) || in.Flow.Action != rulepkg.FlowDrop {
			t.Errorf("own-prefix rule: %+v, want enforced udp dport 53 drop", in)
		}
		in6 := find("2001:db8:100:5::/64")
		if in6.Refused != "" || in6.Flow.Proto != 6 || in6.Flow.DstPorts != (rulepkg.PortRange{Lo: 443, Hi: 443}) {
			t.Errorf("own-prefix IPv6 rule: %+v, want enforced tcp dport 443", in6)
		}
		out := find("192.0.2.0/24")
		if !strings.Contains(out.Refused, "own_prefixes") {
			t.Errorf("rule outside own_prefixes: refused %q, want a refusal naming own_prefixes", out.Refused)
		}
	})
}

func TestBGPPeersFRR(t *testing.T) {
	inHostNS(t, "frr", func(t *testing.T, p *bgppeer.Pair) {
		ctx := context.Background()
		peer := startPeer(t, "frr", routerOptions(p))
		s := startSpeaker(t, speakerConfig(t, p, config.BGPNeighbor{Send: []string{"rtbh", "flowspec"}}))
		bothUp(t, ctx, s, peer)
		announce(t, s, rtbh4, rtbh6, banFlow, ruleFlow4, ruleFlow6)
		// FRR 8.4 shows no communities of FlowSpec routes.
		for _, w := range []bgppeer.Route{wantBan, wantRule4, wantRule6} {
			expectAt(t, ctx, peer, w, true)
		}
		for _, w := range []bgppeer.Route{wantRTBH4, wantRTBH6} {
			expectAt(t, ctx, peer, w, false)
		}
		announce(t, s)
		expectGone(t, ctx, peer, bgppeer.IPv4FlowSpec, wantBan.NLRI, wantRule4.NLRI)
		expectGone(t, ctx, peer, bgppeer.IPv4Unicast, wantRTBH4.NLRI)
	})
}

func TestBGPPeersMD5(t *testing.T) {
	inHostNS(t, "md5", func(t *testing.T, p *bgppeer.Pair) {
		ctx := context.Background()
		o := routerOptions(p)
		o.Password = "tierwall-md5"
		peer := startPeer(t, "gobgpd", o)

		t.Run("same", func(t *testing.T) {
			s := startSpeaker(t, speakerConfig(t, p, config.BGPNeighbor{Send: []string{"rtbh"}, Password: o.Password}))
			bothUp(t, ctx, s, peer)
			if n := s.Neighbors(); len(n) != 1 || !n[0].MD5 {
				t.Errorf("neighbour does not report MD5: %+v", n)
			}
		})
		// The session above is gone with its speaker; a wrong key must
		// never bring one up. A negative needs a window: 15 s is three
		// of the speaker's connect retries, and the positive case above
		// came up well within it.
		t.Run("wrong", func(t *testing.T) {
			err := bgppeer.WaitFor(ctx, bgpArrive, "the first session down", func(ctx context.Context) (bool, error) {
				up, err := peer.Established(ctx)
				return !up, err
			})
			if err != nil {
				t.Fatal(err)
			}
			s := startSpeaker(t, speakerConfig(t, p, config.BGPNeighbor{Send: []string{"rtbh"}, Password: "not-" + o.Password}))
			end := time.Now().Add(15 * time.Second)
			for time.Now().Before(end) {
				up, err := peer.Established(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if up || speakerUp(s) {
					t.Fatalf("session up with a wrong MD5 key: speaker %+v", s.Neighbors())
				}
				time.Sleep(250 * time.Millisecond)
			}
		})
	})
}
