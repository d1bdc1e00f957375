// SPDX-License-Identifier: Apache-2.0

package bgppeer

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/testutil"
)

const (
	asHost   = 65001
	asRouter = 65002
	up       = 30 * time.Second // a session's deadline (connect retry is 2 s)
	arrive   = 15 * time.Second // a route's deadline once sessions are up
)

var (
	rtbhNextHop = "192.0.2.1"
	// What gobgpd originates in every test, and its canonical form at
	// the receiver.
	gobgpStatic = []string{
		"ipv4-flowspec match destination 10.0.1.0/24 source 192.0.2.0/24 protocol tcp destination-port >=80&<=81 then discard",
		"ipv6-flowspec match destination 2001:db8::/64 protocol udp destination-port ==53 then rate-limit 1000",
	}
	wantFlow4 = "dst 10.0.1.0/24 src 192.0.2.0/24 proto =6 dport >=80&<=81"
	wantFlow6 = "dst 2001:db8::/64 proto =17 dport =53"
	wantLarge = []string{"65000:666:1", "4200000000:1:2"}
)

func pair(t *testing.T, name string) *Pair {
	t.Helper()
	testutil.RequireRoot(t)
	testutil.RequireCommand(t, "gobgpd", "gobgp", "bird", "birdc", "vtysh", frrBgpd)
	p, err := NewPair(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	return p
}

// closeWithLog stops a daemon at cleanup and shows its log when the
// test failed.
func closeWithLog(t *testing.T, name string, p Peer) {
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s log:\n%s", name, p.Log())
		}
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
}

// hostGobgpd runs gobgpd on the host side, originating gobgpStatic and
// one RTBH route per family.
func hostGobgpd(t *testing.T, ctx context.Context, p *Pair) *Gobgpd {
	t.Helper()
	g, err := StartGobgpd(ctx, Options{
		Netns: p.Host, RouterID: p.Host4, ASN: asHost, LocalAddr: p.Host4,
		PeerAddr: p.Router4, PeerASN: asRouter, StaticFlowSpec: gobgpStatic,
	})
	if err != nil {
		t.Fatal(err)
	}
	closeWithLog(t, "gobgpd", g)
	for _, args := range [][]string{
		// Large communities (RFC 8092) out of order: each daemon's decoder
		// sorts them.
		{"global", "rib", "-a", "ipv4", "add", "198.51.100.7/32", "nexthop", rtbhNextHop, "community", "65535:666,no-export",
			"large-community", "4200000000:1:2,65000:666:1"},
		{"global", "rib", "-a", "ipv6", "add", "2001:db8:1::7/128", "nexthop", "fd77::1", "community", "65535:666,no-export"},
	} {
		if out, err := g.CLI(ctx, args...); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}
	return g
}

func waitUp(t *testing.T, ctx context.Context, ps ...Peer) {
	t.Helper()
	for _, p := range ps {
		if err := WaitFor(ctx, up, "session established", p.Established); err != nil {
			s, _ := p.Sessions(ctx)
			t.Fatalf("%v (sessions %v)", err, s)
		}
	}
}

// expectRoute waits for the route with nlri at p and checks it.
func expectRoute(t *testing.T, ctx context.Context, p Peer, f Family, want Route) {
	t.Helper()
	rs, err := WaitRoutes(ctx, p, f, arrive, func(rs []Route) bool { _, ok := Find(rs, want.NLRI); return ok })
	if err != nil {
		t.Fatalf("%v; have %v", err, rs)
	}
	got, _ := Find(rs, want.NLRI)
	want.Family = f
	if got.String() != want.String() {
		t.Errorf("%s:\n got %v\nwant %v", f, got, want)
	}
}

func TestBGPPeerGobgpdBird(t *testing.T) {
	p := pair(t, "gb")
	ctx := context.Background()
	g := hostGobgpd(t, ctx, p)
	b, err := StartBird(ctx, Options{
		Netns: p.Router, RouterID: p.Router4, ASN: asRouter, LocalAddr: p.Router4,
		PeerAddr: p.Host4, PeerASN: asHost,
		StaticFlowSpec: []string{
			"flow4 { dst 10.0.0.0/24; proto = 17; dport = 53; }",
			"flow6 { dst 2001:db8:2::/48; next header 6; tcp flags 0x2/0x2; } { bgp_ext_community.add((generic, 0x80060000, 0x447a0000)); }",
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	closeWithLog(t, "bird", b)
	waitUp(t, ctx, g, b)

	// gobgpd -> BIRD: FlowSpec both families and RTBH.
	expectRoute(t, ctx, b, IPv4FlowSpec, Route{NLRI: wantFlow4, ExtCommunities: []string{TrafficRate(0)}})
	expectRoute(t, ctx, b, IPv6FlowSpec, Route{NLRI: wantFlow6, ExtCommunities: []string{TrafficRate(1000)}})
	expectRoute(t, ctx, b, IPv4Unicast, Route{NLRI: "198.51.100.7/32", NextHop: rtbhNextHop, Communities: []string{Blackhole, NoExport}, LargeCommunities: wantLarge})
	expectRoute(t, ctx, b, IPv6Unicast, Route{NLRI: "2001:db8:1::7/128", NextHop: "fd77::1", Communities: []string{Blackhole, NoExport}})

	// BIRD -> gobgpd: its static FlowSpec, with the action the filter or
	// the route's own block set.
	expectRoute(t, ctx, g, IPv4FlowSpec, Route{NLRI: "dst 10.0.0.0/24 proto =17 dport =53", ExtCommunities: []string{TrafficRate(0)}})
	expectRoute(t, ctx, g, IPv6FlowSpec, Route{NLRI: "dst 2001:db8:2::/48 proto =6 tcp-flags =0x2", ExtCommunities: []string{TrafficRate(1000)}})

	// Its own static routes are not in what BIRD received.
	rs, err := b.Routes(ctx, IPv4FlowSpec)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := Find(rs, "dst 10.0.0.0/24 proto =17 dport =53"); ok {
		t.Errorf("BIRD's own static route listed as received: %v", rs)
	}

	// A withdrawal reaches BIRD.
	if out, err := g.CLI(ctx, "global", "rib", "-a", "ipv4", "del", "198.51.100.7/32"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if rs, err := WaitRoutes(ctx, b, IPv4Unicast, arrive, func(rs []Route) bool { _, ok := Find(rs, "198.51.100.7/32"); return !ok }); err != nil {
		t.Fatalf("withdrawal: %v; have %v", err, rs)
	}
}

func TestBGPPeerGobgpdFRR(t *testing.T) {
	p := pair(t, "gf")
	ctx := context.Background()
	g := hostGobgpd(t, ctx, p)
	f, err := StartFRR(ctx, Options{
		Netns: p.Router, RouterID: p.Router4, ASN: asRouter, LocalAddr: p.Router4,
		PeerAddr: p.Host4, PeerASN: asHost,
	})
	if err != nil {
		t.Fatal(err)
	}
	closeWithLog(t, "frr", f)
	waitUp(t, ctx, g, f)
	expectRoute(t, ctx, f, IPv4FlowSpec, Route{NLRI: wantFlow4, ExtCommunities: []string{TrafficRate(0)}})
	expectRoute(t, ctx, f, IPv6FlowSpec, Route{NLRI: wantFlow6, ExtCommunities: []string{TrafficRate(1000)}})
	expectRoute(t, ctx, f, IPv4Unicast, Route{NLRI: "198.51.100.7/32", NextHop: rtbhNextHop, Communities: []string{Blackhole, NoExport}, LargeCommunities: wantLarge})
	expectRoute(t, ctx, f, IPv6Unicast, Route{NLRI: "2001:db8:1::7/128", NextHop: "fd77::1", Communities: []string{Blackhole, NoExport}})
}

// TestBGPPeerMD5 checks that the harness's password reaches the daemons'
// TCP MD5: the same password on both sides comes up, a different one
// does not.
func TestBGPPeerMD5(t *testing.T) {
	p := pair(t, "md5")
	ctx := context.Background()
	g, err := StartGobgpd(ctx, Options{Netns: p.Host, RouterID: p.Host4, ASN: asHost, LocalAddr: p.Host4,
		PeerAddr: p.Router4, PeerASN: asRouter, Password: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	closeWithLog(t, "gobgpd", g)
	f, err := StartFRR(ctx, Options{Netns: p.Router, RouterID: p.Router4, ASN: asRouter, LocalAddr: p.Router4,
		PeerAddr: p.Host4, PeerASN: asHost, Password: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	closeWithLog(t, "frr", f)
	waitUp(t, ctx, g, f)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := StartBird(ctx, Options{Netns: p.Router, RouterID: p.Router4, ASN: asRouter, LocalAddr: p.Router4,
		PeerAddr: p.Host4, PeerASN: asHost, Password: "wrong"})
	if err != nil {
		t.Fatal(err)
	}
	closeWithLog(t, "bird", b)
	// Not up within several connect retries (2 s each): the negative
	// needs a window, and the positive above shows one this long is
	// enough.
	err = WaitFor(ctx, 10*time.Second, "session", b.Established)
	if err == nil {
		t.Fatal("session came up with a wrong MD5 password")
	}
	s, _ := g.Sessions(ctx)
	if s[p.Router4] == "established" {
		t.Fatalf("gobgpd's session is up with a wrong password: %v", s)
	}
}

func TestBGPPeerRouteReflector(t *testing.T) {
	// gobgpd as a fleet's route reflector, BIRD its iBGP client: the
	// session comes up with route-reflector-client set, and what the
	// reflector holds reaches the client.
	p := pair(t, "rr")
	ctx := context.Background()
	rr, err := StartGobgpd(ctx, Options{Netns: p.Router, RouterID: p.Router4, ASN: asRouter, LocalAddr: p.Router4,
		RouteReflectorClients: []netip.Addr{p.Host4}})
	if err != nil {
		t.Fatal(err)
	}
	closeWithLog(t, "gobgpd", rr)
	b, err := StartBird(ctx, Options{Netns: p.Host, RouterID: p.Host4, ASN: asRouter, LocalAddr: p.Host4,
		PeerAddr: p.Router4, PeerASN: asRouter})
	if err != nil {
		t.Fatal(err)
	}
	closeWithLog(t, "bird", b)
	waitUp(t, ctx, rr, b)
	if out, err := rr.CLI(ctx, "global", "rib", "-a", "ipv4-flowspec", "add", "match", "destination", "10.0.9.0/24", "then", "discard"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	expectRoute(t, ctx, b, IPv4FlowSpec, Route{NLRI: "dst 10.0.9.0/24", ExtCommunities: []string{TrafficRate(0)}})
}

func TestBGPPeerCanonical(t *testing.T) {
	for _, c := range []struct{ bird, want string }{
		{"flow4 { dst 10.1.0.0/24; src 192.0.2.0/24; proto 6; dport 80..81; tcp flags !0x0/0x2; length 60; fragment is_fragment; }",
			"dst 10.1.0.0/24 src 192.0.2.0/24 proto =6 dport >=80&<=81 tcp-flags 0x2 len =60 frag =0x2"},
		{"flow4 { dst 10.4.0.0/24; tcp flags !0x2/0x2 && 0x10/0x10; length < 100; fragment !!is_fragment || !!first_fragment; }",
			"dst 10.4.0.0/24 tcp-flags !=0x2&=0x10 len <100 frag 0x2,0x4"},
		{"flow4 { dst 10.2.0.0/24; dport 53,123; sport > 1024; tcp flags 0x0/0x2; fragment !dont_fragment; }",
			"dst 10.2.0.0/24 dport =53,=123 sport >1024 tcp-flags !0x2 frag !=0x1"}, // gobgp's !=dont-fragment
		{"flow6 { dst 2001:db8::/64 offset 8; next header 17; }", "dst 2001:db8::/64/off 8 proto =17"},
	} {
		got, err := birdFlowNLRI(c.bird)
		if err != nil || got != c.want {
			t.Errorf("bird %q:\n got %q, %v\nwant %q", c.bird, got, err, c.want)
		}
	}
	frr := `[{"to":"10.1.0.0/24","from":"192.0.2.0/24","proto":"= 6 ","dstp":">= 80 , <= 81 ","tcp":"∋ 2","pktlen":"= 60 ","pktfrag":"= 2"},{"ecomlist":"FS:rate 1000.000000"},{"time":"00:00:33"}]
[{"to":"2001:db8::/64/off 0","proto":"= 17 "},{"ecomlist":"FS:rate 0.000000"},{"time":"00:00:33"}]
[{"to":"10.0.2.0/24","tcp":"= 2,&∋ ! 16","pktfrag":"= 2,&= ! 4"},{"ecomlist":"FS:rate 0.000000"}]`
	rs, err := decodeFRRFlowSpec(IPv4FlowSpec, frr)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rs {
		got = append(got, r.String())
	}
	want := []string{
		"ipv4-flowspec dst 10.0.2.0/24 tcp-flags =0x2&!0x10 frag =0x2&!=0x4 ext traffic-rate:0",
		"ipv4-flowspec dst 10.1.0.0/24 src 192.0.2.0/24 proto =6 dport >=80&<=81 tcp-flags 0x2 len =60 frag =0x2 ext traffic-rate:1000",
		"ipv4-flowspec dst 2001:db8::/64 proto =17 ext traffic-rate:0",
	}
	if !slices.Equal(got, want) {
		t.Errorf("frr:\n got %q\nwant %q", got, want)
	}
}

// Large communities (RFC 8092) as gobgp and BIRD print them (captured
// from gobgpd 3.10 and BIRD 2.0.12) come out canonical and sorted.
func TestBGPPeerLargeCommunities(t *testing.T) {
	gobgp := `{"198.51.100.9/32":[{"nlri":{"prefix":"198.51.100.9/32"},"attrs":[{"type":3,"nexthop":"192.0.2.1"},{"type":8,"communities":[4294902426]},{"type":32,"value":[{"ASN":4200000000,"LocalData1":1,"LocalData2":2},{"ASN":65000,"LocalData1":666,"LocalData2":1}]}],"neighbor-ip":"10.77.0.1"}]}`
	rs, err := decodeGobgpRIB(IPv4Unicast, []byte(gobgp))
	if err != nil {
		t.Fatal(err)
	}
	want := "ipv4-unicast 198.51.100.9/32 via 192.0.2.1 comm 65535:666 large 65000:666:1,4200000000:1:2"
	if len(rs) != 1 || rs[0].String() != want {
		t.Errorf("gobgp: %v, want %s", rs, want)
	}
	bird := "Table master4:\n198.51.100.9/32     unicast [peer1 16:35:51.000] * (100) [AS65001i]\n\tvia 10.77.0.1 on bgpr0\n\tType: BGP univ\n\tBGP.next_hop: 192.0.2.1\n" +
		"\tBGP.community: (65535,666)\n\tBGP.large_community: (4200000000, 1, 2) (65000, 666, 1)\n"
	if rs, err = decodeBirdRoutes(IPv4Unicast, bird); err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 || rs[0].String() != want {
		t.Errorf("bird: %v, want %s", rs, want)
	}
}
