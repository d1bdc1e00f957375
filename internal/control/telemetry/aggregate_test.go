// SPDX-License-Identifier: Apache-2.0

package telemetry

import (
	"math"
	"net/netip"
	"testing"
	"time"
)

// TestAggregatesReadAsRecords: a detector fed the aggregates of a
// Partial reads the rates of one fed the records, tick by tick.
func TestAggregatesReadAsRecords(t *testing.T) {
	cfg := DetectorConfig{Host: hostLimits(50_000)}
	direct, merged := NewDetector(cfg), NewDetector(cfg)
	var got []Aggregate
	p := NewPartial(cfg, func(_ int64, as []Aggregate) { got = append(got, as...) })
	start := time.Unix(1700000000, 0)
	for k := range 10 {
		now := start.Add(time.Duration(k)*100*time.Millisecond + 10*time.Millisecond)
		rs := []Record{
			{Dst: victim, IPProto: 17, SrcPort: 53, DstPort: 80, Packets: 1, Bytes: 1400, Rate: 1000, MinLen: 1400, MaxLen: 1400},
			{Dst: victim, IPProto: 6, TCPFlags: flagSYN, SrcPort: 1234, DstPort: 443, Packets: 1, Bytes: 60, Rate: 1000, MinLen: 60, MaxLen: 60},
		}
		direct.Add(now, rs)
		p.Add(now, rs)
		end := start.Add(time.Duration(k+1) * 100 * time.Millisecond)
		p.Flush(end)
		if n := merged.AddAggregates(got); n != 0 {
			t.Fatalf("%d aggregates refused", n)
		}
		got = got[:0]
		direct.Judge(end)
		merged.Judge(end)
	}
	want, have := direct.Rates(victim), merged.Rates(victim)
	if len(want) == 0 || len(have) != len(want) {
		t.Fatalf("merged %v, direct %v", have, want)
	}
	for k, w := range want {
		if h := have[k]; math.Abs(h.PPS-w.PPS) > 1e-9*w.PPS || math.Abs(h.BPS-w.BPS) > 1e-9*w.BPS {
			t.Errorf("%v: merged %+v, direct %+v", k, h, w)
		}
	}
}

// TestAggregateFromTheFutureRefused: an aggregate far ahead of the
// detector's clock is refused, not allowed to freeze a destination.
func TestAggregateFromTheFutureRefused(t *testing.T) {
	d := NewDetector(DetectorConfig{Host: hostLimits(50_000)})
	now := time.Unix(1700000000, 0)
	d.Judge(now)
	a := Aggregate{Dst: netip.MustParseAddr("198.51.100.9"), Tick: d.tickAt(now) + 1000, Samples: 10}
	a.Packets[KindAll] = 1e6
	bad := []Aggregate{a, {Dst: netip.MustParseAddr("198.51.100.10"), Tick: d.tickAt(now), Samples: math.NaN()}}
	if n := d.AddAggregates(bad); n != 2 {
		t.Errorf("%d refused, want 2", n)
	}
	if d.Rates(a.Dst) != nil {
		t.Error("a refused aggregate left state")
	}
}
