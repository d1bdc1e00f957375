// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"net/netip"
	"testing"
	"time"
)

// What the pinned feature buffers counted while no daemon ran is not the
// first interval's traffic: a flood that ended before the start bans
// nobody, and one that goes on is banned from the first interval.
func TestCountsFromBeforeTheStartAreDiscarded(t *testing.T) {
	cfg := testConfig(t)
	dp := newFakeDP(t0)
	old := netip.MustParseAddr("198.51.100.1")
	dp.send(37017, old) // ping -f before the start, left in the buffers
	dp.overflow = 500   // and overflow counted then
	d, err := newDaemon(cfg, "", quietLog(), dp, nil, t0)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{d: d, dp: dp, now: t0}
	h.step(t)
	if _, ok := d.store.Get(pfx(old)); ok || dp.blocked[pfx(old)] != nil {
		t.Fatalf("banned for counts from before the start: %+v", d.store.All())
	}
	if hasEvent(d, "overflow", "") {
		t.Errorf("the overflow from before the start reported as the first interval's: %+v", d.events)
	}
	// An attack going on is still caught in the first intervals.
	atk := netip.MustParseAddr("198.51.100.2")
	dp.send(5000, atk)
	dp.overflow += 70
	h.step(t)
	if _, ok := d.store.Get(pfx(atk)); !ok {
		t.Fatalf("an attack after the start not banned: %+v", d.store.All())
	}
	if !hasEvent(d, "overflow", "70 packets") {
		t.Errorf("the interval's own overflow not reported: %+v", d.events)
	}
}

// A restart with a new (or lost) state file adopts the pinned bans with
// the default TTL, logged as adopted, and they expire: it made every one
// of them permanent.
func TestBansAdoptedWithoutStateExpire(t *testing.T) {
	cfg := testConfig(t)
	cfg.Bans.TTL = time.Hour
	h := newHarness(t, cfg, false)
	atk := netip.MustParseAddr("198.51.100.7")
	h.dp.send(5000, atk)
	h.step(t)
	if _, ok := h.d.store.Get(pfx(atk)); !ok {
		t.Fatal("setup: not banned")
	}
	cli := netip.MustParsePrefix("203.0.113.0/24") // the CLI's, while no daemon ran
	if err := h.dp.Block(cli); err != nil {
		t.Fatal(err)
	}

	cfg2 := testConfig(t) // another, empty state file
	cfg2.Bans.TTL = time.Hour
	start := h.now.Add(time.Minute)
	d2, err := newDaemon(cfg2, "", quietLog(), h.dp, nil, start)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []netip.Prefix{pfx(atk), cli} {
		b, ok := d2.store.Get(p)
		if !ok {
			t.Fatalf("%s not adopted: %+v", p, d2.store.All())
		}
		if !b.Expires.Equal(start.Add(time.Hour)) {
			t.Errorf("%s adopted with expiry %v, want the default TTL from the start (%v)", p, b.Expires, start.Add(time.Hour))
		}
		if !hasEvent(d2, "adopt", "expires in 1h0m0s") {
			t.Errorf("adoption of %s not logged with its expiry: %+v", p, d2.events)
		}
	}
	h2 := &harness{d: d2, dp: h.dp, now: start.Add(time.Hour)}
	h2.step(t)
	if d2.store.Len() != 0 || len(h.dp.blocked) != 0 {
		t.Fatalf("adopted bans outlived the TTL: store %+v, data plane %v", d2.store.All(), h.dp.blocked)
	}
}

// A ban's peak survives a restart, a clean stop or a crash after an
// interval: it decides the BGP announcement (docs/BGP.md: "kept in the
// state file, so a route does not flap"). A restart within the refresh
// period brought back an older peak (10,140 pps as 3,092).
func TestPeakSurvivesARestart(t *testing.T) {
	for _, clean := range []bool{false, true} {
		name := "crash"
		if clean {
			name = "clean stop"
		}
		t.Run(name, func(t *testing.T) {
			cfg := testConfig(t)
			h := newHarness(t, cfg, false)
			atk := netip.MustParseAddr("198.51.100.7")
			h.dp.send(3092, atk)
			h.step(t)
			h.dp.hit(pfx(atk), 10140) // the flood grows after the ban
			h.step(t)
			h.dp.hit(pfx(atk), 11000) // and a little more
			h.step(t)
			h.dp.hit(pfx(atk), 3092)
			h.step(t)
			want := 10140.0 // a crash may lose a rise within a quarter
			if clean {
				if err := h.d.stop(h.now.Add(time.Second)); err != nil {
					t.Fatal(err)
				}
				want = 11000
			}
			d2, err := newDaemon(cfg, "", quietLog(), h.dp, nil, h.now.Add(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			b, ok := d2.store.Get(pfx(atk))
			if !ok {
				t.Fatal("ban lost over the restart")
			}
			if b.PeakRate < want {
				t.Fatalf("peak after the restart %.0f pps, want at least %.0f", b.PeakRate, want)
			}
		})
	}
}
