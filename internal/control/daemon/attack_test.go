// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/control/detect"
)

// Attacks on the control plane itself (issue "A control plane that an
// attacker cannot switch off, poison or outgrow"), each against fakes.

func addrs(a, b byte, n int) []netip.Addr {
	out := make([]netip.Addr, n)
	for i := range out {
		out[i] = netip.AddrFrom4([4]byte{a, b, byte(i >> 8), byte(i)})
	}
	return out
}

// sendUnblocked is one interval of pps from each source through the fake
// data plane: blocked sources count on their rule (their traffic never
// reaches the features), the others are queued for the snapshot.
func (f *fakeDP) sendUnblocked(pps uint64, srcs []netip.Addr) {
	for _, a := range srcs {
		if c := f.blocked[pfx(a)]; c != nil {
			c.Packets += pps
			continue
		}
		f.send(pps, a)
	}
}

// One entry the data plane refuses, or an IPv4-mapped source, never sinks
// the other bans of the interval.
func TestOneBadEntryDoesNotSinkTheBatch(t *testing.T) {
	h := newHarness(t, testConfig(t), false)
	atk := addrs(198, 51, 12)
	h.dp.Refuse = map[netip.Prefix]bool{pfx(atk[3]): true}
	h.dp.sendUnblocked(5000, atk)
	h.dp.send(5000, netip.MustParseAddr("::ffff:203.0.113.9"))
	h.step(t)
	for i, a := range atk {
		if _, ok := h.dp.blocked[pfx(a)]; ok == (i == 3) {
			t.Errorf("%s blocked=%v", a, ok)
		}
	}
	if h.dp.blocked[netip.MustParsePrefix("203.0.113.9/32")] == nil {
		t.Errorf("IPv4-mapped attacker not banned in its IPv4 form: %v", h.dp.blocked)
	}
	if _, ok := h.d.store.Get(pfx(atk[3])); ok {
		t.Error("refused entry kept in the store")
	}
}

// 20K bots against 2K regular clients: all bots are banned at the
// per-interval pace, and the breaker never opens for them.
func TestBreakerIgnoresBotsWaitingTheirTurn(t *testing.T) {
	cfg := testConfig(t)
	cfg.Rails.MaxNewPerInterval = 1000
	cfg.Rails.MaxEstablishedShare = 0.05
	h := newHarness(t, cfg, false)
	clients, bots := addrs(10, 1, 2000), addrs(10, 200, 20000)
	for i := 0; i < 6; i++ {
		h.dp.send(10, clients...)
		h.step(t)
	}
	for i := 0; i < 25 && h.d.store.Len() < len(bots); i++ {
		h.dp.send(10, clients...)
		h.dp.sendUnblocked(5000, bots)
		h.step(t)
		if h.d.breaker {
			t.Fatalf("breaker opened after %d bans", h.d.store.Len())
		}
	}
	if h.d.store.Len() != len(bots) {
		t.Fatalf("%d of %d bots banned", h.d.store.Len(), len(bots))
	}
}

// A detector set below the clients' normal rate trips the breaker: no
// regular client is banned.
func TestBreakerTripsOnMisconfiguredDetector(t *testing.T) {
	cfg := testConfig(t)
	cfg.Rails.MaxEstablishedShare = 0.05
	h := newHarness(t, cfg, false)
	clients := addrs(10, 1, 2000)
	for i := 0; i < 6; i++ {
		h.dp.send(10, clients...)
		h.step(t)
	}
	h.d.det.rate.Static.PPS = 5 // below every client
	h.dp.send(10, clients...)
	h.step(t)
	if !h.d.breaker || h.d.store.Len() != 0 {
		t.Fatalf("breaker %v, %d clients banned", h.d.breaker, h.d.store.Len())
	}
	if !hasEvent(h.d, "breaker", "") {
		t.Fatal("no breaker event")
	}
}

// Bots that warm up at a client's rate and then flood are banned: a jump
// over their usual rate makes them attackers, not regular clients.
func TestBreakerIgnoresWarmedUpBots(t *testing.T) {
	cfg := testConfig(t)
	cfg.Rails.MaxEstablishedShare = 0.05
	h := newHarness(t, cfg, false)
	clients, bots := addrs(10, 1, 2000), addrs(10, 200, 500)
	for i := 0; i < 6; i++ {
		h.dp.send(10, clients...)
		h.dp.send(10, bots...)
		h.step(t)
	}
	h.dp.send(10, clients...)
	h.dp.send(5000, bots...)
	h.step(t)
	if h.d.breaker || h.d.store.Len() != len(bots) {
		t.Fatalf("breaker %v, %d of %d warmed-up bots banned", h.d.breaker, h.d.store.Len(), len(bots))
	}
}

// An attack running when the daemon starts is banned in its first
// interval (the ceiling applies while learning), teaches the detector
// nothing, and a learned value survives a restart.
func TestAttackFromStartAndBaselinePersistence(t *testing.T) {
	cfg := testConfig(t)
	cfg.Detectors.Rate.PPS = 0 // learned, the default
	cfg.Detectors.Rate.LearnIntervals = 5
	cfg.Detectors.Rate.MinPPS, cfg.Detectors.Rate.CeilingPPS = 100, 1000 // the mechanics at a small lab's bounds, not the shipped ones
	h := newHarness(t, cfg, false)
	atk, clients := addrs(198, 51, 200), addrs(10, 1, 50)
	h.dp.sendUnblocked(2000, atk)
	h.dp.send(10, clients...)
	h.step(t)
	if h.d.store.Len() != 200 {
		t.Fatalf("%d of 200 attackers banned in the first interval", h.d.store.Len())
	}
	for i := 0; i < 5; i++ {
		h.dp.send(10, clients...)
		h.step(t)
	}
	l, ok := h.d.det.rate.Learned()
	if !ok || l != cfg.Detectors.Rate.MinPPS {
		t.Fatalf("learned %v (%v), want the floor %v from clients at 10 pps", l, ok, cfg.Detectors.Rate.MinPPS)
	}
	raw, _ := stateText(cfg.StateFile)
	if !strings.Contains(string(raw), `"rate_pps"`) {
		t.Fatalf("learned baseline not in the state file:\n%s", raw)
	}
	// Restart into an attack at 500 pps: the restored threshold (100)
	// bans it at once instead of learning 500 as normal.
	h2 := &harness{dp: newFakeDP(h.now), now: h.now}
	d2, err := newDaemon(cfg, "", quietLog(), h2.dp, nil, h.now)
	if err != nil {
		t.Fatal(err)
	}
	h2.d = d2
	if l2, ok := d2.det.rate.Learned(); !ok || l2 != l {
		t.Fatalf("restored %v (%v), want %v", l2, ok, l)
	}
	h2.dp.send(500, addrs(203, 0, 20)...)
	h2.step(t)
	if d2.store.Len() < 20 {
		t.Fatalf("%d bans after restart into a 500 pps attack", d2.store.Len())
	}
}

// Rotating addresses inside one IPv6 /64 cost one ban, not one per address.
func TestIPv6RotationIsOneBan(t *testing.T) {
	h := newHarness(t, testConfig(t), false)
	for i := 1; i <= 50; i++ {
		h.dp.send(5000, netip.MustParseAddr(fmt.Sprintf("2001:db8:66:1::%x", i)))
	}
	h.step(t)
	if h.d.store.Len() != 1 || h.dp.blocked[netip.MustParsePrefix("2001:db8:66:1::/64")] == nil {
		t.Fatalf("bans %v", h.d.store.All())
	}
}

// A ban whose source sits behind hardware without counters (n-tuple) is
// not lifted while hardware drops it: placement's frozen rate stands.
func TestNoCounterHardwareDoesNotFlap(t *testing.T) {
	h := newHarness(t, testConfig(t), true)
	h.hw.NoCounters = true
	atk := netip.MustParseAddr("198.51.100.7")
	h.dp.send(5000, atk)
	h.step(t)
	for i := 0; i < 2; i++ {
		h.dp.hit(pfx(atk), 5000)
		h.step(t)
	}
	if !h.hw.Has(atk) {
		t.Fatal("setup: not offloaded")
	}
	for i := 0; i < 10; i++ { // hardware drops it all: XDP counters stand still
		h.step(t)
	}
	if _, ok := h.d.store.Get(pfx(atk)); !ok {
		t.Fatal("ban lifted while the blind hardware tier still drops the source")
	}
}

// Overlapping allowed space: a protected /32 inside a detected /24 is
// put in the data plane's allowlist and the /24 is banned; allowlisting an
// address inside an existing /24 ban keeps the ban.
func TestOverlapWithAllowedSpace(t *testing.T) {
	cfg := testConfig(t)
	protected := netip.MustParsePrefix("198.51.100.53/32")
	cfg.Rails.ProtectedPrefixes = []netip.Prefix{protected}
	h := newHarness(t, cfg, false)
	go func() {
		for f := range h.d.reqs {
			f()
		}
	}()
	p := netip.MustParsePrefix("198.51.100.0/24")
	h.d.ban(h.now, detect.NewTraffic(time.Second), []detect.Detection{{Prefix: p, Detector: "entropy", Reason: "spoofed", Rate: 1e5}})
	if h.dp.blocked[p] == nil || !h.dp.allowed[protected] {
		t.Fatalf("blocked %v, allowed %v", h.dp.blocked, h.dp.allowed)
	}
	if err := h.d.SetAllow(context.Background(), netip.MustParsePrefix("198.51.100.7/32"), true); err != nil {
		t.Fatal(err)
	}
	if _, ok := h.d.store.Get(p); !ok || h.dp.blocked[p] == nil {
		t.Fatal("allowlisting one address lifted the /24 ban around it")
	}
	if err := h.d.SetAllow(context.Background(), netip.MustParsePrefix("198.51.0.0/16"), true); err != nil {
		t.Fatal(err)
	}
	if _, ok := h.d.store.Get(p); ok {
		t.Fatal("a ban inside newly allowlisted space stayed")
	}
}

// Refusals are counted one by one but logged once per reason per interval.
func TestRefusalsLoggedOncePerInterval(t *testing.T) {
	cfg := testConfig(t)
	cfg.Rails.AllowPrefixes = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	h := newHarness(t, cfg, false)
	h.dp.send(5000, addrs(10, 9, 50)...)
	h.step(t)
	n := 0
	for _, e := range h.d.events {
		if e.Kind == "refused" {
			n++
			if !strings.Contains(e.Detail, "and 49 more") {
				t.Errorf("refusal event %q", e.Detail)
			}
		}
	}
	if n != 1 {
		t.Fatalf("%d refusal events for 50 refusals of one kind", n)
	}
}

// Bans that expired while the daemon was down are lifted at start and not
// adopted back as permanent operator bans.
func TestReconcileDoesNotAdoptExpiredBans(t *testing.T) {
	cfg := testConfig(t)
	h := newHarness(t, cfg, false)
	atk := netip.MustParseAddr("198.51.100.7")
	h.dp.send(5000, atk)
	h.step(t)
	if _, ok := h.d.store.Get(pfx(atk)); !ok {
		t.Fatal("setup: not banned")
	}
	// The daemon is down for two hours (TTL 1h); the data plane kept the rule.
	later := h.now.Add(2 * time.Hour)
	d2, err := newDaemon(cfg, "", quietLog(), h.dp, nil, later)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := d2.store.Get(pfx(atk)); ok || h.dp.blocked[pfx(atk)] != nil {
		t.Fatalf("expired ban adopted back: store %v, data plane %v", d2.store.All(), h.dp.blocked)
	}
	// A rule only in the data plane (added by the CLI) is adopted as an
	// operator ban; one missing from the data plane is restored.
	cli := netip.MustParsePrefix("203.0.113.0/24")
	if err := h.dp.Block(cli); err != nil {
		t.Fatal(err)
	}
	d3, err := newDaemon(cfg, "", quietLog(), h.dp, nil, later)
	if err != nil {
		t.Fatal(err)
	}
	if b, ok := d3.store.Get(cli); !ok || !b.Manual {
		t.Fatalf("CLI rule not adopted: %+v", b)
	}
	delete(h.dp.blocked, cli)
	if _, err := newDaemon(cfg, "", quietLog(), h.dp, nil, later); err != nil || h.dp.blocked[cli] == nil {
		t.Fatalf("ban missing from the data plane not restored: %v", err)
	}
}

// At start, restored and adopted bans pass today's rails: one inside space
// allowlisted since is lifted from the data plane and logged as refused,
// never left enforced and unmanaged; one the data plane refuses does not
// keep the daemon from starting.
func TestReconcileAppliesTheRails(t *testing.T) {
	cfg := testConfig(t)
	h := newHarness(t, cfg, false)
	kept, nowAllowed := netip.MustParsePrefix("198.51.100.0/24"), netip.MustParsePrefix("203.0.113.0/24")
	for _, p := range []netip.Prefix{kept, nowAllowed} {
		if _, err := h.d.store.Add(h.now, p, "operator", 0); err != nil {
			t.Fatal(err)
		}
	}
	h.d.dirty = true
	if err := h.d.save(h.now); err != nil {
		t.Fatal(err)
	}
	cli := netip.MustParsePrefix("10.20.0.0/16") // added by the CLI, inside the new allowlist
	if err := h.dp.Block(cli); err != nil {
		t.Fatal(err)
	}
	missing := netip.MustParsePrefix("192.0.2.0/24")
	if _, err := h.d.store.Add(h.now, missing, "operator", 0); err != nil {
		t.Fatal(err)
	}
	if err := h.d.save(h.now); err != nil {
		t.Fatal(err)
	}
	h.dp.Refuse = map[netip.Prefix]bool{missing: true} // cannot be restored
	cfg2 := *cfg
	cfg2.Rails.AllowPrefixes = []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24"), netip.MustParsePrefix("10.0.0.0/8")}
	d2, err := newDaemon(&cfg2, "", quietLog(), h.dp, nil, h.now)
	if err != nil {
		t.Fatalf("one ban the data plane refuses kept the daemon from starting: %v", err)
	}
	if _, ok := d2.store.Get(nowAllowed); ok || h.dp.blocked[nowAllowed] != nil {
		t.Error("restored ban inside allowlisted space still enforced")
	}
	if _, ok := d2.store.Get(cli); ok || h.dp.blocked[cli] != nil {
		t.Error("CLI rule inside allowlisted space left enforced and unmanaged")
	}
	if _, ok := d2.store.Get(kept); !ok || h.dp.blocked[kept] == nil {
		t.Error("a ban the rails allow was lost")
	}
	if !hasEvent(d2, "refused", "lifted") {
		t.Errorf("no refusal logged: %+v", d2.events)
	}
}

// A flood of new keys that overflows the feature buffers is reported, does
// not push the regular clients out of the breaker's denominator, and does
// not grow the daemon's per-source state beyond a bound.
func TestOverflowKeepsClientsAndStaysBounded(t *testing.T) {
	h := newHarness(t, testConfig(t), false)
	clients := addrs(10, 1, 100)
	for i := 0; i < 6; i++ {
		h.dp.send(10, clients...)
		h.step(t)
	}
	for i := 0; i < 6; i++ { // clients crowded out; 1000 new sources each interval
		h.dp.overflow += 50_000
		h.dp.send(10, addrs(172, byte(16+i), 1000)...)
		h.step(t)
		if i < maxMissed && len(h.d.src.hist) < 100+1000 {
			t.Fatalf("overflow interval %d: %d sources tracked, the 100 clients dropped out", i, len(h.d.src.hist))
		}
		if len(h.d.src.hist) > 100+1000 {
			t.Fatalf("overflow interval %d: %d sources tracked, state grows with the flood", i, len(h.d.src.hist))
		}
	}
	if len(h.d.src.hist) != 1000 {
		t.Fatalf("%d sources tracked after the clients were gone for good", len(h.d.src.hist))
	}
	if !hasEvent(h.d, "overflow", "50000 packets") {
		t.Fatalf("overflow not reported: %+v", h.d.events[len(h.d.events)-3:])
	}
}
