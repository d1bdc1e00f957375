// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"math/rand/v2"
	"net"
	"net/netip"
	"testing"

	"github.com/tierwall/tierwall/internal/control/config"
	"github.com/tierwall/tierwall/internal/control/detect"
	"github.com/tierwall/tierwall/internal/datapath"
)

// fakeConnections makes this host's TCP stack hold a connection from each
// client to server, and nothing else.
func fakeConnections(t *testing.T, server netip.Addr, clients ...netip.Addr) {
	t.Helper()
	conns := Connections{}
	for _, c := range clients {
		conns[[2]netip.Addr{c, server}] = struct{}{}
	}
	old := dumpConnections
	t.Cleanup(func() { dumpConnections = old })
	dumpConnections = func() (Connections, error) { return conns, nil }
}

// protect makes the daemon protect a (rails.protected): its clients can
// become known-good.
func protect(cfg *config.Config, a netip.Addr) {
	cfg.Rails.Protected = append(cfg.Rails.Protected, a.String())
	cfg.Rails.ProtectedPrefixes = append(cfg.Rails.ProtectedPrefixes, netip.PrefixFrom(a, a.BitLen()))
}

// KnownGood lists the fake's known-good list, as the datapath does.
func (f *flowDP) KnownGood() ([]netip.Addr, error) {
	var out []netip.Addr
	for a := range f.good {
		out = append(out, a)
	}
	return out, nil
}

// Spoofed ACKs from 2,000 addresses to this host's server, for 40
// intervals, put none of them on the data plane's known-good list; the
// clients with connections are on it. (Before: any TCP without SYN was
// taken for a handshake, and 2,000 of 2,000 joined.)
func TestDaemonSpoofedACKsBuyNoMembership(t *testing.T) {
	h, fdp := newFlowHarness(t, false)
	client := netip.MustParseAddr("198.51.100.20")
	fakeConnections(t, flowVictim, client)
	for range 40 {
		fdp.deliver(client, flowVictim, 6, 20)
		for i := range 2000 {
			fdp.deliver(netip.AddrFrom4([4]byte{172, 20, byte(i >> 8), byte(i)}), flowVictim, 6, 3)
		}
		h.step(t)
	}
	if len(fdp.good) != 1 || !fdp.good[client] {
		t.Fatalf("known-good list holds %d sources, want only %s", len(fdp.good), client)
	}
}

// Clients of a destination this host does not protect (traffic it
// forwards, an address it does not own) never become known-good, even
// with a connection the stack holds.
func TestDaemonLearnsOnlyForProtectedDestinations(t *testing.T) {
	h, fdp := newFlowHarness(t, false)
	elsewhere := netip.MustParseAddr("192.0.2.99")
	client := netip.MustParseAddr("198.51.100.20")
	fakeConnections(t, elsewhere, client)
	for range 40 {
		fdp.deliver(client, elsewhere, 6, 20)
		h.step(t)
	}
	if len(fdp.good) != 0 {
		t.Fatalf("known-good list holds %v for an unprotected destination", fdp.good)
	}
}

// The data plane's known-good list is rebuilt from the daemon's state at
// start: an earlier run's entries that no one vouches for now leave it
// before any rule is pushed. (Before: 60,391 poisoned entries stayed
// while the daemon reported 30.)
func TestDaemonRebuildsKnownGoodListAtStart(t *testing.T) {
	cfg := testConfig(t)
	cfg.Detectors.Victim.Enabled = true
	fdp := &flowDP{fakeDP: newFakeDP(t0), good: map[netip.Addr]bool{}, rate: -1}
	for i := range 5000 {
		fdp.good[netip.AddrFrom4([4]byte{10, 66, byte(i >> 8), byte(i)})] = true
	}
	protect(cfg, flowVictim)
	d, err := newDaemon(cfg, "", quietLog(), fdp, nil, t0)
	if err != nil {
		t.Fatal(err)
	}
	if len(fdp.good) != 0 {
		t.Fatalf("%d entries of an earlier run kept on the known-good list", len(fdp.good))
	}
	h := &harness{d: d, dp: fdp.fakeDP, now: t0}
	client := netip.MustParseAddr("198.51.100.20")
	fakeConnections(t, flowVictim, client)
	fdp.deliver(client, flowVictim, 6, 20)
	h.step(t)
	if len(fdp.good) != 1 || !fdp.good[client] {
		t.Fatalf("known-good list %v, want %s", fdp.good, client)
	}
}

// No automatic ban is wider than /16 under the default configuration: a
// detection of a /8 is refused and counted. (Before: the default widest
// automatic ban was /8.)
func TestDaemonAutomaticBansNoWiderThan16(t *testing.T) {
	h := newHarness(t, testConfig(t), false)
	wide := detect.Detection{Prefix: netip.MustParsePrefix("172.0.0.0/8"), Detector: "entropy", Reason: "test", Rate: 2e4}
	narrow := detect.Detection{Prefix: netip.MustParsePrefix("172.16.0.0/16"), Detector: "entropy", Reason: "test", Rate: 2e4}
	h.d.ban(h.now, detect.NewTraffic(0), []detect.Detection{wide, narrow})
	if _, ok := h.dp.blocked[wide.Prefix]; ok {
		t.Fatal("a /8 was banned automatically")
	}
	if _, ok := h.dp.blocked[narrow.Prefix]; !ok {
		t.Fatal("the /16 was not banned")
	}
	if !hasEvent(h.d, "refused", "widest automatic ban") {
		t.Fatal("no event for the refused /8")
	}
}

// The entropy detector's baseline survives a restart through the state
// file: the restarted daemon judges at once instead of learning blind.
func TestDaemonKeepsEntropyBaseline(t *testing.T) {
	cfg := testConfig(t)
	cfg.Detectors.Entropy.Enabled = true
	cfg.Detectors.Entropy.History = 5
	h := newHarness(t, cfg, false)
	rng := rand.New(rand.NewPCG(5, 6))
	for range 10 {
		for c := range 50 {
			h.dp.flows = append(h.dp.flows, datapath.Flow{Src: netip.AddrFrom4([4]byte{198, 51, 100, byte(c + 1)}),
				Dst: netip.AddrFrom4([4]byte{192, 0, 2, byte(1 + rng.IntN(20))}), Proto: 6, Packets: 20, Bytes: 2000})
		}
		h.step(t)
	}
	h.now = h.now.Add(refreshEvery) // the periodic save
	h.step(t)
	d2, err := newDaemon(cfg, "", quietLog(), h.dp, nil, h.now)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, ready := d2.det.entropy.Baseline(); !ready {
		t.Fatalf("restarted daemon's entropy baseline not ready; state %v", d2.store.Baselines)
	}
}

// SockDiagConnections finds a real connection on loopback, by (remote,
// local), and no connection that does not exist.
func TestSockDiagFindsConnection(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Skip("no loopback:", err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	conns, err := SockDiagConnections()
	if err != nil {
		t.Fatal(err)
	}
	lo := netip.MustParseAddr("127.0.0.1")
	if !conns.Has(lo, lo) {
		t.Fatalf("loopback connection not found in %d connections", len(conns))
	}
	if conns.Has(netip.MustParseAddr("198.51.100.1"), lo) {
		t.Fatal("a connection that does not exist was found")
	}
}

// A random-source flood fills the feature buffers within milliseconds of
// each interval, and the traffic then holds only its first packets'
// sources: a client that connected during the flood was never asked about
// and could not join. In an interval that overflowed, the remote ends of
// this host's connections to what it protects join from the kernel's
// table; a connection to an address it does not protect teaches nothing,
// and without overflow the table is not read for it.
func TestKnownGoodJoinsFromConnectionsWhenBuffersOverflow(t *testing.T) {
	h, fdp := newFlowHarness(t, false)
	client := netip.MustParseAddr("198.51.100.20")
	elsewhere := netip.MustParseAddr("198.51.100.21")
	conns := Connections{{client, flowVictim}: {}, {elsewhere, netip.MustParseAddr("203.0.113.1")}: {}}
	old := dumpConnections
	dumpConnections = func() (Connections, error) { return conns, nil }
	t.Cleanup(func() { dumpConnections = old })
	h.step(t)
	if h.d.flow.victims.Good.Contains(client) {
		t.Fatal("a client with no traffic joined in a complete interval")
	}
	fdp.overflow += 350_885 // the feature buffers full
	h.step(t)
	if !h.d.flow.victims.Good.Contains(client) {
		t.Fatal("the connected client did not join in an interval whose buffers overflowed")
	}
	if h.d.flow.victims.Good.Contains(elsewhere) {
		t.Fatal("a connection to an address this host does not protect made its client known-good")
	}
	if !fdp.good[client] {
		t.Fatal("the client is not on the data plane's known-good list")
	}
}
