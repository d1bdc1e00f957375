// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/datapath"
)

// BenchmarkIntervalMillionSources measures the daemon's memory and time
// for intervals of 1M distinct sources (a spoofed flood over a /12), with
// fakes for the data plane: `go test -run '^$' -bench MillionSources
// -benchtime 5x ./internal/control/daemon`. It reports the peak live heap.
func BenchmarkIntervalMillionSources(b *testing.B) {
	cfg := testConfig(&testing.T{})
	cfg.StateFile = b.TempDir() + "/state.json"
	cfg.Rails.MaxNewPerInterval = 1000
	dp := newFakeDP(t0)
	d, err := newDaemon(cfg, "", quietLog(), dp, nil, t0)
	if err != nil {
		b.Fatal(err)
	}
	flows := make([]datapath.Flow, 1<<20)
	now := t0
	var peak uint64
	var ms runtime.MemStats
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := range flows { // new sources every interval, 2 packets each
			a := netip.AddrFrom4([4]byte{100, byte(64 + i%16), byte(j >> 8), byte(j)})
			if j >= 1<<16 {
				a = netip.AddrFrom4([4]byte{100, byte(64 + (j >> 16)), byte(j >> 8), byte(j)})
			}
			flows[j] = datapath.Flow{Src: a, Dst: netip.MustParseAddr("192.0.2.1"), Proto: 17, Packets: 2, Bytes: 128}
		}
		dp.flows = flows
		now = now.Add(time.Second)
		dp.at = now
		if err := d.Step(now); err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&ms)
		peak = max(peak, ms.HeapAlloc)
	}
	b.ReportMetric(float64(peak)/(1<<20), "MiB-live-heap")
}

// BenchmarkInterval500KBans measures one quiet interval's work with 500K
// bans (the default max_total): counters, rates, rate monitor, tiers.
// The fake data plane answers counters from memory, so the data plane's
// own lookups are not in it. `go test -run '^$' -bench 500KBans
// -benchtime 5x ./internal/control/daemon`.
func BenchmarkInterval500KBans(b *testing.B) {
	cfg := testConfig(&testing.T{})
	cfg.StateFile = b.TempDir() + "/state.json"
	dp := newFakeDP(t0)
	d, err := newDaemon(cfg, "", quietLog(), dp, nil, t0)
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < 500_000; i++ {
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{100, byte(i >> 16), byte(i >> 8), byte(i)}), 32)
		if _, err := d.store.Add(t0, p, "bench", 0); err != nil {
			b.Fatal(err)
		}
		dp.blocked[p] = &datapath.Counter{}
	}
	now := t0
	for i := 0; i < 2; i++ { // first readings
		now = now.Add(time.Second)
		dp.at = now
		if err := d.Step(now); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		now = now.Add(time.Second)
		dp.at = now
		if err := d.Step(now); err != nil {
			b.Fatal(err)
		}
	}
}
