// SPDX-License-Identifier: Apache-2.0

package bgp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	api "github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/osrg/gobgp/v4/pkg/server"

	"github.com/tierwall/tierwall/internal/control/bgp/community"
	"github.com/tierwall/tierwall/internal/rule"
)

const (
	speakerAS = 65000
	routerAS  = 65001
)

// router is an in-process GoBGP standing in for the upstream router or a
// fleet's route reflector, listening on its own loopback address.
type router struct {
	srv  *server.BgpServer
	addr string
	port int
	asn  uint32
}

func freePort(t *testing.T, addr string) int {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func newRouter(t *testing.T, addr, id string) *router {
	t.Helper()
	return newRouterAS(t, addr, id, routerAS)
}

func newRouterAS(t *testing.T, addr, id string, asn uint32) *router {
	t.Helper()
	port := freePort(t, addr)
	srv := server.NewBgpServer()
	go srv.Serve()
	if err := srv.StartBgp(t.Context(), &api.StartBgpRequest{Global: &api.Global{
		Asn: asn, RouterId: id, ListenPort: int32(port), ListenAddresses: []string{addr},
	}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	var afs []*api.AfiSafi
	for _, f := range []bgp.Family{bgp.RF_IPv4_UC, bgp.RF_IPv6_UC, bgp.RF_FS_IPv4_UC, bgp.RF_FS_IPv6_UC} {
		afs = append(afs, &api.AfiSafi{
			Config:            &api.AfiSafiConfig{Family: apiutil.ToApiFamily(f.Afi(), f.Safi()), Enabled: true},
			MpGracefulRestart: &api.MpGracefulRestart{Config: &api.MpGracefulRestartConfig{Enabled: true}},
		})
	}
	// The speaker dials from 127.0.0.1. Graceful restart as a real
	// upstream has it; GoBGP sends End-of-RIB only with it.
	if err := srv.AddPeer(t.Context(), &api.AddPeerRequest{Peer: &api.Peer{
		Conf:            &api.PeerConf{NeighborAddress: "127.0.0.1", PeerAsn: speakerAS},
		Transport:       &api.Transport{PassiveMode: true},
		GracefulRestart: &api.GracefulRestart{Enabled: true, RestartTime: 30},
		AfiSafis:        afs,
	}}); err != nil {
		t.Fatal(err)
	}
	return &router{srv: srv, addr: addr, port: port, asn: asn}
}

func (r *router) neighbor(send []string, receive bool) NeighborConfig {
	return NeighborConfig{Address: r.addr, ASN: r.asn, Port: uint16(r.port), LocalAddress: "127.0.0.1", Send: send, Receive: receive, HoldTime: 9 * time.Second}
}

// rib is the router's Loc-RIB of one family, by NLRI string.
func (r *router) rib(t *testing.T, f bgp.Family) map[string]*apiutil.Path {
	t.Helper()
	out := map[string]*apiutil.Path{}
	err := r.srv.ListPath(apiutil.ListPathRequest{TableType: api.TableType_TABLE_TYPE_GLOBAL, Family: f}, func(n bgp.NLRI, ps []*apiutil.Path) {
		for _, p := range ps {
			if p.Best {
				out[n.String()] = p
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// announce has the router originate a FlowSpec route; ecs nil: drop.
func (r *router) announce(t *testing.T, f Flow, ecs ...bgp.ExtendedCommunityInterface) *apiutil.Path {
	t.Helper()
	w, err := (&encoder{asn: routerAS}).encodeFlow(f)
	if err != nil {
		t.Fatal(err)
	}
	p := &apiutil.Path{Family: w.family, Nlri: w.nlri, Attrs: w.attrs}
	if ecs != nil {
		p.Attrs = slices.DeleteFunc(slices.Clone(p.Attrs), func(a bgp.PathAttributeInterface) bool {
			return a.GetType() == bgp.BGP_ATTR_TYPE_EXTENDED_COMMUNITIES
		})
		p.Attrs = append(p.Attrs, bgp.NewPathAttributeExtendedCommunities(ecs))
	}
	r.add(t, p)
	return p
}

func (r *router) add(t *testing.T, p *apiutil.Path) {
	t.Helper()
	if _, err := r.srv.AddPath(apiutil.AddPathRequest{Paths: []*apiutil.Path{p}}); err != nil {
		t.Fatal(err)
	}
}

func (r *router) withdraw(t *testing.T, p *apiutil.Path) {
	t.Helper()
	if err := r.srv.DeletePath(apiutil.DeletePathRequest{Paths: []*apiutil.Path{p}}); err != nil {
		t.Fatal(err)
	}
}

func validated(t *testing.T, c Config) Config {
	t.Helper()
	if err := c.Resolve(); err != nil {
		t.Fatalf("config: %v", err)
	}
	return c
}

func baseConfig(neighbors ...NeighborConfig) Config {
	return Config{
		ASN: speakerAS, RouterID: "192.0.2.100", ListenPort: -1,
		Neighbors: neighbors,
		Announce: AnnounceConfig{
			NextHop4: "192.0.2.1", NextHop6: "2001:db8:ffff::1",
			Communities: []string{"65001:666"},
		},
		Accept: AcceptConfig{OwnPrefixes: []string{"198.51.100.0/24", "2001:db8:100::/48"}},
	}
}

func startSpeaker(t *testing.T, c Config) *Speaker {
	t.Helper()
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s, err := New(validated(t, c), log)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func established(t *testing.T, s *Speaker) {
	t.Helper()
	eventually(t, "sessions established", func() bool {
		for _, n := range s.Neighbors() {
			if n.State != "established" {
				return false
			}
		}
		return true
	})
}

func flow(t *testing.T, src, r string) Flow {
	f := Flow{FlowRule: mustRule(t, r)}
	if src != "" {
		f.Src = netip.MustParsePrefix(src)
	}
	return f
}

func communities(p *apiutil.Path) []uint32 {
	for _, a := range p.Attrs {
		if c, ok := a.(*bgp.PathAttributeCommunities); ok {
			return c.Value
		}
	}
	return nil
}

func nextHop(p *apiutil.Path) netip.Addr {
	for _, a := range p.Attrs {
		switch a := a.(type) {
		case *bgp.PathAttributeNextHop:
			return a.Value
		case *bgp.PathAttributeMpReachNLRI:
			return a.Nexthop
		}
	}
	return netip.Addr{}
}

func trafficRateOf(p *apiutil.Path) (float32, bool) {
	for _, a := range p.Attrs {
		if ec, ok := a.(*bgp.PathAttributeExtendedCommunities); ok {
			for _, c := range ec.Value {
				if tr, ok := c.(*bgp.TrafficRateExtended); ok {
					return tr.Rate, true
				}
			}
		}
	}
	return 0, false
}

func TestAnnounce(t *testing.T) {
	r := newRouter(t, "127.0.0.2", "10.0.0.2")
	s := startSpeaker(t, baseConfig(r.neighbor([]string{"rtbh", "flowspec"}, false)))
	established(t, s)
	n := s.Neighbors()[0]
	if !slices.Equal(n.Families, []string{"ipv4-unicast", "ipv6-unicast", "ipv4-flowspec", "ipv6-flowspec"}) || n.Since.IsZero() {
		t.Errorf("neighbour %+v: want all four families and a since", n)
	}

	rtbh4 := Route{Kind: RTBH, Prefix: netip.MustParsePrefix("203.0.113.9/32"), Reason: "ban"}
	rtbh6 := Route{Kind: RTBH, Prefix: netip.MustParsePrefix("2001:db8:bad::1/128")}
	drop4 := Route{Kind: FlowSpec, Flow: flow(t, "", "dst 198.51.100.7/32 proto udp dport 1000-2000 drop")}
	limit4 := Route{Kind: FlowSpec, Flow: flow(t, "", "dst 198.51.100.8/32 proto udp sport 53 length 100-300 rate-limit 1000")}
	drop6 := Route{Kind: FlowSpec, Flow: flow(t, "", "dst 2001:db8:100::7/128 proto tcp flags S/SA drop")}
	limit6 := Route{Kind: FlowSpec, Flow: flow(t, "", "dst 2001:db8:100::/64 proto udp rate-limit 20")}
	ban := Route{Kind: FlowSpec, Flow: flow(t, "203.0.113.0/24", "dst 198.51.100.0/24 drop")}
	synCookie := Route{Kind: FlowSpec, Flow: flow(t, "", "dst 198.51.100.9/32 proto tcp flags S/SA syn-cookie")}

	all := []Route{rtbh4, rtbh6, drop4, limit4, drop6, limit6, ban, synCookie}
	d, err := s.Announce(all)
	if err != nil {
		t.Fatal(err)
	}
	if d.Added != 7 || d.Withdrawn != 0 || len(d.Refused) != 1 || !strings.Contains(d.Refused[0], "syn-cookie") {
		t.Fatalf("diff %+v: want 7 added and the syn-cookie refused", d)
	}
	if got := s.Announced(); len(got) != 7 {
		t.Errorf("Announced: %d routes, want 7", len(got))
	}

	eventually(t, "RTBH routes at the router", func() bool {
		return len(r.rib(t, bgp.RF_IPv4_UC)) == 1 && len(r.rib(t, bgp.RF_IPv6_UC)) == 1
	})
	for f, want := range map[bgp.Family]struct{ prefix, nh string }{
		bgp.RF_IPv4_UC: {"203.0.113.9/32", "192.0.2.1"},
		bgp.RF_IPv6_UC: {"2001:db8:bad::1/128", "2001:db8:ffff::1"},
	} {
		p, ok := r.rib(t, f)[want.prefix]
		if !ok {
			t.Fatalf("%s: %s not at the router: %v", f, want.prefix, r.rib(t, f))
		}
		if nh := nextHop(p); nh.String() != want.nh {
			t.Errorf("%s next hop %s, want %s", want.prefix, nh, want.nh)
		}
		c := communities(p)
		if !slices.Contains(c, 65535<<16|666) || !slices.Contains(c, uint32(bgp.COMMUNITY_NO_EXPORT)) || !slices.Contains(c, 65001<<16|666) {
			t.Errorf("%s communities %v: want 65535:666, NO_EXPORT and 65001:666", want.prefix, c)
		}
	}

	eventually(t, "FlowSpec routes at the router", func() bool {
		return len(r.rib(t, bgp.RF_FS_IPv4_UC)) == 3 && len(r.rib(t, bgp.RF_FS_IPv6_UC)) == 2
	})
	got := map[Flow]float32{}
	for _, f := range []bgp.Family{bgp.RF_FS_IPv4_UC, bgp.RF_FS_IPv6_UC} {
		for _, p := range r.rib(t, f) {
			fl, err := decodeFlow(p.Nlri, p.Attrs)
			if err != nil {
				t.Errorf("%s at the router: %v", p.Nlri, err)
				continue
			}
			rate, _ := trafficRateOf(p)
			got[fl] = rate
			if c := communities(p); !slices.Contains(c, uint32(bgp.COMMUNITY_NO_EXPORT)) || slices.Contains(c, 65535<<16|666) {
				t.Errorf("%s communities %v: want NO_EXPORT, not BLACKHOLE", p.Nlri, c)
			}
		}
	}
	for _, tc := range []struct {
		r    Route
		rate float32
	}{{drop4, 0}, {limit4, 1000 * 200}, {drop6, 0}, {limit6, 20 * DefaultBytesPerPacket}, {ban, 0}} {
		rate, ok := got[tc.r.Flow]
		if !ok {
			t.Errorf("%s (src %s) not at the router; it has %v", tc.r.Flow.FlowRule, tc.r.Flow.Src, got)
		} else if rate != tc.rate {
			t.Errorf("%s: traffic-rate %v, want %v", tc.r.Flow.FlowRule, rate, tc.rate)
		}
	}

	// The same set again sends nothing.
	if d, err := s.Announce(all); err != nil || d.Added != 0 || d.Withdrawn != 0 {
		t.Errorf("re-announce: %+v, %v; want no change", d, err)
	}
	// Without the IPv4 RTBH and the IPv4 drop rule: both withdrawn.
	d, err = s.Announce([]Route{rtbh6, limit4, drop6, limit6, ban})
	if err != nil || d.Added != 0 || d.Withdrawn != 2 {
		t.Fatalf("withdraw: %+v, %v", d, err)
	}
	eventually(t, "withdrawals at the router", func() bool {
		return len(r.rib(t, bgp.RF_IPv4_UC)) == 0 && len(r.rib(t, bgp.RF_FS_IPv4_UC)) == 2
	})
	// A changed action is re-sent.
	limit4b := limit4
	limit4b.Flow.RatePPS = 2000
	d, err = s.Announce([]Route{rtbh6, limit4b, drop6, limit6, ban})
	if err != nil || d.Added != 1 || d.Withdrawn != 0 {
		t.Fatalf("rate change: %+v, %v", d, err)
	}
	eventually(t, "new rate at the router", func() bool {
		for _, p := range r.rib(t, bgp.RF_FS_IPv4_UC) {
			if rate, _ := trafficRateOf(p); rate == 2000*200 {
				return true
			}
		}
		return false
	})
	eventually(t, "announced count", func() bool { return s.Neighbors()[0].Announced == 5 })
}

// An RTBH route of a family without a next hop is refused; the others
// still go out.
func TestAnnounceRefusedFamily(t *testing.T) {
	r := newRouter(t, "127.0.0.2", "10.0.0.2")
	c := baseConfig(r.neighbor([]string{"rtbh"}, false))
	c.Announce.NextHop6 = ""
	s := startSpeaker(t, c)
	established(t, s)
	d, err := s.Announce([]Route{
		{Kind: RTBH, Prefix: netip.MustParsePrefix("2001:db8:bad::1/128")},
		{Kind: RTBH, Prefix: netip.MustParsePrefix("203.0.113.9/32")},
	})
	if err != nil || d.Added != 1 || len(d.Refused) != 1 || !strings.Contains(d.Refused[0], "next hop") {
		t.Fatalf("diff %+v, %v: want one added, the IPv6 one refused", d, err)
	}
	eventually(t, "the IPv4 RTBH route", func() bool { return len(r.rib(t, bgp.RF_IPv4_UC)) == 1 })
	if n := s.Neighbors()[0]; slices.Contains(n.Families, "ipv4-flowspec") {
		t.Errorf("a neighbour sent only rtbh negotiated %v", n.Families)
	}
}

// Each neighbour gets only what its send lists, and none gets what
// another sent us.
func TestPerNeighbourSendAndNoTransit(t *testing.T) {
	a := newRouter(t, "127.0.0.2", "10.0.0.2") // sent flowspec, sends us FlowSpec
	// Another AS than A's: GoBGP's AS-path loop check must not be what
	// keeps B's routes from A.
	b := newRouterAS(t, "127.0.0.3", "10.0.0.3", 65002) // sent rtbh; receives: FlowSpec negotiated but not ours
	s := startSpeaker(t, baseConfig(a.neighbor([]string{"flowspec"}, true), b.neighbor([]string{"rtbh"}, true)))
	established(t, s)

	// A's route reaches us...
	theirs := flow(t, "", "dst 198.51.100.50/32 proto udp dport 123 drop")
	a.announce(t, theirs)
	eventually(t, "A's route received", func() bool { return len(s.Received()) == 1 })
	// A's unicast route is not even negotiated with us; B's too.
	ours := Route{Kind: FlowSpec, Flow: flow(t, "", "dst 198.51.100.7/32 proto udp dport 53 drop")}
	rtbh := Route{Kind: RTBH, Prefix: netip.MustParsePrefix("203.0.113.9/32")}
	if d, err := s.Announce([]Route{ours, rtbh}); err != nil || d.Added != 2 {
		t.Fatalf("announce: %+v, %v", d, err)
	}
	// FlowSpec is added before RTBH (sorted keys): once B has the RTBH
	// route it would have had our FlowSpec, and A's.
	eventually(t, "RTBH at B", func() bool { return len(b.rib(t, bgp.RF_IPv4_UC)) == 1 })
	eventually(t, "our FlowSpec at A", func() bool { return len(a.rib(t, bgp.RF_FS_IPv4_UC)) == 2 })
	if got := b.rib(t, bgp.RF_FS_IPv4_UC); len(got) != 0 {
		t.Errorf("B (receive-only for FlowSpec) got FlowSpec: %v", got)
	}
	if got := a.rib(t, bgp.RF_IPv4_UC); len(got) != 0 {
		t.Errorf("A (not sent rtbh) got unicast: %v", got)
	}
	// A's RIB: its own route and ours, ours from us.
	for k, p := range a.rib(t, bgp.RF_FS_IPv4_UC) {
		if strings.Contains(k, "198.51.100.50") && p.PeerAddress.IsValid() {
			t.Errorf("A's own route came back from us: %v", p)
		}
	}

	// Now B sends a FlowSpec too: it must not reach A.
	fromB := flow(t, "", "dst 198.51.100.60/32 drop")
	b.announce(t, fromB)
	eventually(t, "B's route received", func() bool { return len(s.Received()) == 2 })
	// Barrier: a new announcement of ours reaches A after B's arrived.
	ours2 := Route{Kind: FlowSpec, Flow: flow(t, "", "dst 198.51.100.8/32 drop")}
	if _, err := s.Announce([]Route{ours, rtbh, ours2}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "second FlowSpec at A", func() bool { return len(a.rib(t, bgp.RF_FS_IPv4_UC)) == 3 })
	for k := range a.rib(t, bgp.RF_FS_IPv4_UC) {
		if strings.Contains(k, "198.51.100.60") {
			t.Errorf("B's route re-advertised to A: %s", k)
		}
	}
}

func TestReceiveValidation(t *testing.T) {
	r := newRouter(t, "127.0.0.2", "10.0.0.2")
	s := startSpeaker(t, baseConfig(r.neighbor(nil, true)))
	established(t, s)
	drain(s)

	good := flow(t, "", "dst 198.51.100.7/32 proto udp dport 53 drop")
	limit := flow(t, "", "dst 2001:db8:100::7/128 proto udp length 0-100 rate-limit 300")
	ban := flow(t, "203.0.113.0/24", "dst 198.51.100.0/24 drop")
	outside := flow(t, "", "dst 203.0.113.7/32 drop")
	goodPath := r.announce(t, good)
	r.announce(t, limit)
	r.announce(t, ban)
	r.announce(t, outside)
	r.announce(t, flow(t, "", "dst 198.51.100.9/32 drop"), bgp.NewRedirectTwoOctetAsSpecificExtended(65001, 7))
	r.announce(t, flow(t, "", "dst 198.51.100.10/32 drop"), bgp.NewTrafficRemarkExtended(1))
	// An ICMP type test: the data plane has none.
	n, err := bgp.NewFlowSpecUnicast(bgp.RF_FS_IPv4_UC, []bgp.FlowSpecComponentInterface{
		bgp.NewFlowSpecDestinationPrefix(must(bgp.NewIPAddrPrefix(netip.MustParsePrefix("198.51.100.11/32")))),
		bgp.NewFlowSpecComponent(bgp.FLOW_SPEC_TYPE_ICMP_TYPE, []*bgp.FlowSpecComponentItem{bgp.NewFlowSpecComponentItem(bgp.DEC_NUM_OP_EQ, 8)}),
	})
	if err != nil {
		t.Fatal(err)
	}
	mp := must(bgp.NewPathAttributeMpReachNLRI(bgp.RF_FS_IPv4_UC, []bgp.PathNLRI{{NLRI: n}}))
	r.add(t, &apiutil.Path{Family: bgp.RF_FS_IPv4_UC, Nlri: n, Attrs: []bgp.PathAttributeInterface{
		bgp.NewPathAttributeOrigin(0), mp,
		bgp.NewPathAttributeExtendedCommunities([]bgp.ExtendedCommunityInterface{bgp.NewTrafficRateExtended(0, 0)}),
	}})

	waitChanged(t, s)
	eventually(t, "seven routes received", func() bool { return len(s.Received()) == 7 })
	byDst := map[string]Remote{}
	for _, rm := range s.Received() {
		if rm.Peer != netip.MustParseAddr("127.0.0.2") || rm.Received.IsZero() || !rm.Lost.IsZero() {
			t.Errorf("remote %+v: want peer 127.0.0.2, received set, not lost", rm)
		}
		byDst[rm.Flow.Dst.String()] = rm
	}
	for dst, want := range map[string]string{
		"198.51.100.7/32":     "",
		"2001:db8:100::7/128": "",
		"198.51.100.0/24":     "",
		"203.0.113.7/32":      "not within",
		"198.51.100.9/32":     "redirect",
		"198.51.100.10/32":    "marking",
		"198.51.100.11/32":    "icmp",
	} {
		rm, ok := byDst[dst]
		switch {
		case !ok:
			t.Errorf("%s not received", dst)
		case want == "" && rm.Refused != "":
			t.Errorf("%s refused: %s", dst, rm.Refused)
		case want != "" && !strings.Contains(rm.Refused, want):
			t.Errorf("%s: refused %q, want %q", dst, rm.Refused, want)
		}
	}
	if got := byDst["198.51.100.7/32"].Flow; got != good {
		t.Errorf("decoded %+v, want %+v", got, good)
	}
	if got := byDst["2001:db8:100::7/128"].Flow; got != limit {
		t.Errorf("decoded %+v, want %+v (rate round trip)", got, limit)
	}
	if got := byDst["198.51.100.0/24"].Flow; got != ban {
		t.Errorf("decoded source ban %+v, want %+v", got, ban)
	}
	if nb := s.Neighbors()[0]; nb.Received != 7 || nb.Accepted != 3 || nb.Announced != 0 {
		t.Errorf("neighbour counts %+v: want 7 received, 3 accepted", nb)
	}

	drain(s)
	r.withdraw(t, goodPath)
	waitChanged(t, s)
	eventually(t, "withdrawal", func() bool {
		for _, rm := range s.Received() {
			if rm.Flow.Dst.String() == "198.51.100.7/32" {
				return false
			}
		}
		return true
	})
}

func TestReceiveMaxRules(t *testing.T) {
	r := newRouter(t, "127.0.0.2", "10.0.0.2")
	c := baseConfig(r.neighbor(nil, true))
	c.Accept.MaxRules = 10
	s := startSpeaker(t, c)
	established(t, s)
	// The first three are older: they must be among those kept.
	for i := range 3 {
		r.announce(t, flow(t, "", fmt.Sprintf("dst 198.51.100.%d/32 drop", 200+i)))
	}
	eventually(t, "three received", func() bool { return len(s.Received()) == 3 })
	for i := range 97 {
		r.announce(t, flow(t, "", fmt.Sprintf("dst 198.51.100.%d/32 proto udp drop", i)))
	}
	eventually(t, "100 received", func() bool { return len(s.Received()) == 100 })
	accepted, over := 0, 0
	for _, rm := range s.Received() {
		switch {
		case rm.Refused == "":
			accepted++
			if rm.Flow.Proto == 0 {
				continue
			}
		case strings.Contains(rm.Refused, "max_rules"):
			over++
			if rm.Flow.Proto == 0 {
				t.Errorf("an older rule was pushed out: %+v", rm)
			}
		default:
			t.Errorf("unexpected refusal %q", rm.Refused)
		}
	}
	if accepted != 10 || over != 90 {
		t.Errorf("accepted %d, over max_rules %d; want 10 and 90", accepted, over)
	}
	// Sorted stably: the same order twice.
	a, b := s.Received(), s.Received()
	if !slices.EqualFunc(a, b, func(x, y Remote) bool { return x == y }) {
		t.Error("Received is not stable")
	}
}

func TestReceiveHold(t *testing.T) {
	r := newRouter(t, "127.0.0.2", "10.0.0.2")
	c := baseConfig(r.neighbor(nil, true))
	c.Accept.Hold = 2 * time.Second
	s := startSpeaker(t, c)
	established(t, s)
	r.announce(t, flow(t, "", "dst 198.51.100.7/32 drop"))
	eventually(t, "route received", func() bool { return len(s.Received()) == 1 })

	drain(s)
	if err := r.srv.DisablePeer(t.Context(), &api.DisablePeerRequest{Address: "127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	waitChanged(t, s)
	eventually(t, "route held as lost", func() bool {
		rs := s.Received()
		return len(rs) == 1 && !rs[0].Lost.IsZero() && rs[0].Refused == ""
	})
	lost := s.Received()[0].Lost
	eventually(t, "route dropped after the hold", func() bool { return len(s.Received()) == 0 })
	if since := time.Since(lost); since < 2*time.Second {
		t.Errorf("dropped %v after the loss, before the 2s hold", since)
	}
}

// A session that comes back replaces its held routes with what it
// sends.
func TestReceiveComeback(t *testing.T) {
	r := newRouter(t, "127.0.0.2", "10.0.0.2")
	c := baseConfig(r.neighbor(nil, true))
	c.Accept.Hold = time.Minute
	s := startSpeaker(t, c)
	established(t, s)
	r.announce(t, flow(t, "", "dst 198.51.100.7/32 drop"))
	gone := r.announce(t, flow(t, "", "dst 198.51.100.8/32 drop"))
	eventually(t, "routes received", func() bool { return len(s.Received()) == 2 })

	if err := r.srv.DisablePeer(t.Context(), &api.DisablePeerRequest{Address: "127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "routes held", func() bool {
		rs := s.Received()
		return len(rs) == 2 && !rs[0].Lost.IsZero() && !rs[1].Lost.IsZero()
	})
	r.withdraw(t, gone)
	if err := r.srv.EnablePeer(t.Context(), &api.EnablePeerRequest{Address: "127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "only the route still sent, live again", func() bool {
		rs := s.Received()
		return len(rs) == 1 && rs[0].Lost.IsZero() && rs[0].Flow.Dst.String() == "198.51.100.7/32"
	})
}

func TestStopIdempotent(t *testing.T) {
	s, err := New(validated(t, baseConfig()), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Announce(nil); err == nil {
		t.Error("Announce before Start succeeded")
	}
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	s.Stop()
	s.Stop()
	if _, err := s.Announce(nil); err == nil {
		t.Error("Announce after Stop succeeded")
	}
}

func TestNewRefuses(t *testing.T) {
	if _, err := New(Config{}, nil); !errors.Is(err, rule.ErrInvalid) {
		t.Errorf("asn 0: %v, want rule.ErrInvalid", err)
	}
	c := validated(t, baseConfig())
	c.Announce.Communities = []string{"x"}
	if _, err := New(c, nil); !errors.Is(err, rule.ErrInvalid) || !strings.Contains(err.Error(), "communities") {
		t.Errorf("bad community: %v, want rule.ErrInvalid", err)
	}
}

func drain(s *Speaker) {
	select {
	case <-s.Changed():
	default:
	}
}

func waitChanged(t *testing.T, s *Speaker) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	select {
	case <-s.Changed():
	case <-ctx.Done():
		t.Fatal("Changed did not fire")
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// A peer that sent more than max_prefixes is taken down, and comes back
// by itself after the idle hold once it sends few enough (GoBGP alone
// leaves it down until a restart); the next hold would be longer.
func TestPrefixLimitComesBack(t *testing.T) {
	r := newRouter(t, "127.0.0.2", "10.0.0.2")
	n := r.neighbor(nil, true)
	n.MaxPrefixes = 2
	// Without graceful restart: with it, the hold also waits out the
	// restart time the router announces (30 s), so that its routes,
	// kept stale by GoBGP, are gone.
	n.GracefulRestart = new(bool)
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s, err := New(validated(t, baseConfig(n)), log)
	if err != nil {
		t.Fatal(err)
	}
	s.pfxIdle = time.Second
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	established(t, s)
	var last *apiutil.Path
	for i := range 3 {
		last = r.announce(t, flow(t, "", fmt.Sprintf("dst 198.51.100.%d/32 drop", i+1)))
	}
	eventually(t, "the session taken down past max_prefixes", func() bool { return s.Neighbors()[0].State != "established" })
	down := time.Now()
	s.mu.Lock()
	next := s.peers[s.order[0]].pfxHold
	s.mu.Unlock()
	if next != 2*time.Second {
		t.Errorf("next idle hold %v, want 2s (doubled)", next)
	}
	// The peer's operator fixes it: two routes, within the limit.
	r.withdraw(t, last)
	eventually(t, "the session back after the idle hold, with the two routes", func() bool {
		return s.Neighbors()[0].State == "established" && len(s.Received()) == 2
	})
	if since := time.Since(down); since < time.Second {
		t.Errorf("back %v after the teardown, before the idle hold", since)
	}
}

func largeCommunities(p *apiutil.Path) []string {
	var out []string
	for _, a := range p.Attrs {
		if c, ok := a.(*bgp.PathAttributeLargeCommunities); ok {
			for _, l := range c.Values {
				out = append(out, l.String())
			}
		}
	}
	return out
}

func communityText(cs []uint32) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = community.Standard(c).String()
	}
	return out
}

// Communities reach real peers where they belong: bgp.announce's
// (standard and large) on every route to every neighbour; a neighbour's
// own only on the routes sent to it, by GoBGP's export policy; a route's
// own (network mode's host group) on that route only, and a changed list
// re-sends the route.
func TestCommunitiesPerNeighbourAndRoute(t *testing.T) {
	a := newRouter(t, "127.0.0.2", "10.0.0.2")
	b := newRouterAS(t, "127.0.0.3", "10.0.0.3", 65002)
	na := a.neighbor([]string{"rtbh", "flowspec"}, false)
	na.Communities, na.LargeCommunities = []string{"65002:9999"}, []string{"4200000000:666:7"}
	nb := b.neighbor([]string{"rtbh", "flowspec"}, false)
	cfg := baseConfig(na, nb)
	cfg.Announce.LargeCommunities = []string{"65000:666:1"}
	s := startSpeaker(t, cfg)
	established(t, s)

	plain := Route{Kind: RTBH, Prefix: netip.MustParsePrefix("203.0.113.9/32")}
	grouped := Route{Kind: RTBH, Prefix: netip.MustParsePrefix("198.51.100.7/32"),
		Communities: []community.Standard{64600<<16 | 666}, LargeCommunities: []community.Large{{Global: 4200000001, Local1: 666, Local2: 2}}}
	fs := Route{Kind: FlowSpec, Flow: flow(t, "", "dst 198.51.100.7/32 proto udp dport 53 drop")}
	if d, err := s.Announce([]Route{plain, grouped, fs}); err != nil || d.Added != 3 {
		t.Fatalf("announce: %+v, %v", d, err)
	}
	for _, r := range []*router{a, b} {
		eventually(t, "routes at "+r.addr, func() bool {
			return len(r.rib(t, bgp.RF_IPv4_UC)) == 2 && len(r.rib(t, bgp.RF_FS_IPv4_UC)) == 1
		})
	}
	type want struct{ comms, large []string }
	check := func(r *router, f bgp.Family, match string, w want) {
		t.Helper()
		for k, p := range r.rib(t, f) {
			if !strings.Contains(k, match) {
				continue
			}
			if got := communityText(communities(p)); !slices.Equal(got, w.comms) {
				t.Errorf("%s at %s: communities %v, want %v", k, r.addr, got, w.comms)
			}
			if got := largeCommunities(p); !slices.Equal(got, w.large) {
				t.Errorf("%s at %s: large communities %v, want %v", k, r.addr, got, w.large)
			}
			return
		}
		t.Errorf("%s: no route %s", r.addr, match)
	}
	// A: the neighbour's own after ours (GoBGP appends them).
	check(a, bgp.RF_IPv4_UC, "203.0.113.9", want{[]string{"65535:666", "65535:65281", "65001:666", "65002:9999"}, []string{"65000:666:1", "4200000000:666:7"}})
	check(a, bgp.RF_IPv4_UC, "198.51.100.7", want{[]string{"65535:666", "65535:65281", "65001:666", "64600:666", "65002:9999"}, []string{"65000:666:1", "4200000001:666:2", "4200000000:666:7"}})
	check(a, bgp.RF_FS_IPv4_UC, "198.51.100.7", want{[]string{"65535:65281", "65001:666", "65002:9999"}, []string{"65000:666:1", "4200000000:666:7"}})
	// B: none of A's.
	check(b, bgp.RF_IPv4_UC, "203.0.113.9", want{[]string{"65535:666", "65535:65281", "65001:666"}, []string{"65000:666:1"}})
	check(b, bgp.RF_IPv4_UC, "198.51.100.7", want{[]string{"65535:666", "65535:65281", "65001:666", "64600:666"}, []string{"65000:666:1", "4200000001:666:2"}})
	check(b, bgp.RF_FS_IPv4_UC, "198.51.100.7", want{[]string{"65535:65281", "65001:666"}, []string{"65000:666:1"}})

	// The group's communities change: the route is sent again.
	grouped.LargeCommunities = nil
	if d, err := s.Announce([]Route{plain, grouped, fs}); err != nil || d.Added != 1 || d.Withdrawn != 0 {
		t.Fatalf("re-announce: %+v, %v", d, err)
	}
	eventually(t, "the changed route at B", func() bool {
		for k, p := range b.rib(t, bgp.RF_IPv4_UC) {
			if strings.Contains(k, "198.51.100.7") {
				return len(largeCommunities(p)) == 1
			}
		}
		return false
	})
	check(b, bgp.RF_IPv4_UC, "198.51.100.7", want{[]string{"65535:666", "65535:65281", "65001:666", "64600:666"}, []string{"65000:666:1"}})

	// A reloaded announce policy: every route is sent again with its
	// communities.
	an := cfg.Announce
	an.Communities, an.LargeCommunities = nil, []string{"65000:667:1"}
	an.NextHop4Addr = netip.MustParseAddr("192.0.2.1")
	if err := s.SetAnnounce(an); err != nil {
		t.Fatal(err)
	}
	if d, err := s.Announce([]Route{plain, grouped, fs}); err != nil || d.Added != 3 || d.Withdrawn != 0 {
		t.Fatalf("after SetAnnounce: %+v, %v", d, err)
	}
	eventually(t, "the reloaded communities at B", func() bool {
		n := 0
		for _, f := range []bgp.Family{bgp.RF_IPv4_UC, bgp.RF_FS_IPv4_UC} {
			for _, p := range b.rib(t, f) {
				if slices.Contains(largeCommunities(p), "65000:667:1") {
					n++
				}
			}
		}
		return n == 3
	})
	check(b, bgp.RF_IPv4_UC, "203.0.113.9", want{[]string{"65535:666", "65535:65281"}, []string{"65000:667:1"}})
	if err := s.SetAnnounce(AnnounceConfig{LargeCommunities: []string{"1:2"}}); !errors.Is(err, community.ErrSyntax) {
		t.Errorf("SetAnnounce of a bad large community: %v", err)
	}
}

// New refuses communities it cannot encode, whatever let them through.
func TestNewRefusesBadCommunities(t *testing.T) {
	for _, c := range []Config{
		{ASN: speakerAS, RouterID: "192.0.2.100", Announce: AnnounceConfig{LargeCommunities: []string{"65000:666"}}},
		{ASN: speakerAS, RouterID: "192.0.2.100", Announce: AnnounceConfig{Communities: []string{"65000:666:1"}}},
		{ASN: speakerAS, RouterID: "192.0.2.100", Neighbors: []NeighborConfig{{Address: "127.0.0.2", ASN: 1, Communities: []string{"x"}}}},
		{ASN: speakerAS, RouterID: "192.0.2.100", Neighbors: []NeighborConfig{{Address: "127.0.0.2", ASN: 1, LargeCommunities: []string{"1:2:3:4"}}}},
	} {
		if _, err := New(c, nil); !errors.Is(err, rule.ErrInvalid) || !errors.Is(err, community.ErrSyntax) {
			t.Errorf("%+v: %v, want rule.ErrInvalid and community.ErrSyntax", c, err)
		}
	}
}
