// SPDX-License-Identifier: Apache-2.0

package datapath

import (
	"net/netip"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/testutil"
)

// BenchmarkRuleCounters500K reads the counters of 500K exact bans (the
// default bans.max_total) in a table of the default capacity: what the
// daemon does every interval. `go test -run '^$' -bench RuleCounters
// -benchtime 3x ./internal/datapath` (root).
func BenchmarkRuleCounters500K(b *testing.B) {
	testutil.RequireRoot(b)
	d, err := LoadDetached(Options{PrefixCapacity: 64, AllowCapacity: 64, FeatureCapacity: 4096})
	if err != nil {
		b.Fatalf("loading filter: %v", err)
	}
	defer d.Close()
	const n = 500_000
	addrs := make([]netip.Addr, n)
	ps := make([]netip.Prefix, n)
	for i := range addrs {
		addrs[i] = netip.AddrFrom4([4]byte{100, byte(i >> 16), byte(i >> 8), byte(i)})
		ps[i] = netip.PrefixFrom(addrs[i], 32)
	}
	if err := d.BlockBulk(addrs); err != nil {
		b.Fatal(err)
	}
	b.Run("map", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			cs, err := d.RuleCounters(ps)
			if err != nil {
				b.Fatal(err)
			}
			if len(cs) != n {
				b.Fatalf("%d counters, want %d", len(cs), n)
			}
		}
	})
	// into: the same slice every interval, as the daemon calls it (quiet
	// rules are checked, not read); cold: fresh readings every time.
	b.Run("into", func(b *testing.B) {
		rs := make([]Reading, n)
		for i := 0; i < b.N; i++ {
			if err := d.RuleCountersInto(ps, rs); err != nil {
				b.Fatal(err)
			}
			for _, r := range rs {
				if !r.Found {
					b.Fatal("a blocked rule not found")
				}
			}
		}
	})
	b.Run("cold", func(b *testing.B) {
		rs := make([]Reading, n)
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			clear(rs)
			b.StartTimer()
			if err := d.RuleCountersInto(ps, rs); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// RuleCountersInto skips the counters of a rule that has not been hit
// since its last reading, but a rule that is hit again is always seen,
// and a reading made for another rule (the caller's slice reordered, the
// rule moved or re-added) is never taken for this one.
func TestRuleCountersSkipOnlyQuiet(t *testing.T) {
	d := loadTestDatapath(t)
	a, b := netip.MustParseAddr("192.0.2.7"), netip.MustParseAddr("2001:db8::7")
	ps := []netip.Prefix{netip.PrefixFrom(a, 32), netip.PrefixFrom(b, 128), netip.MustParsePrefix("198.51.100.0/24")}
	if err := d.Block(ps...); err != nil {
		t.Fatal(err)
	}
	hit := func(src netip.Addr) {
		if ret := verdictOf(t, d, src); ret != xdpDrop {
			t.Fatalf("%s not dropped", src)
		}
	}
	rs := make([]Reading, len(ps))
	read := func(want ...uint64) {
		t.Helper()
		if err := d.RuleCountersInto(ps, rs); err != nil {
			t.Fatal(err)
		}
		for i, w := range want {
			if !rs[i].Found || rs[i].Packets != w {
				t.Fatalf("%s: %+v, want %d packets", ps[i], rs[i], w)
			}
		}
	}
	read(0, 0, 0) // never hit: quiet from the start
	if !rs[0].quiet || !rs[1].quiet {
		t.Fatalf("rules never hit are not quiet: %+v", rs)
	}
	hit(a)
	hit(b)
	hit(netip.MustParseAddr("198.51.100.9"))
	read(1, 1, 1) // last_hit changed
	if rs[0].quiet {
		t.Fatal("a rule hit just now is quiet")
	}
	hit(a) // within last_hit's resolution: last_hit does not move
	read(2, 1, 1)
	time.Sleep(2*lastHitRes*time.Nanosecond + 100*time.Millisecond)
	read(2, 1, 1)
	if !rs[0].quiet || !rs[1].quiet {
		t.Fatalf("rules idle for twice last_hit's resolution are not quiet: %+v", rs)
	}
	read(2, 1, 1) // skipped: nothing moved
	hit(a)
	hit(b)
	read(3, 2, 1) // quiet rules hit again are seen

	// Readings made for other rules: the slice reordered.
	ps[0], ps[1] = ps[1], ps[0]
	read(2, 3, 1)
	// The rule re-added (same slot, counters zeroed) behind a quiet reading.
	time.Sleep(2*lastHitRes*time.Nanosecond + 100*time.Millisecond)
	read(2, 3, 1)
	read(2, 3, 1)
	if err := d.Unblock(ps[1]); err != nil {
		t.Fatal(err)
	}
	if err := d.Block(ps[1]); err != nil {
		t.Fatal(err)
	}
	read(2, 0, 1)
	hit(a)
	read(2, 1, 1)
}
