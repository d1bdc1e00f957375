// SPDX-License-Identifier: Apache-2.0

package placement

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/tier/tiertest"
)

func TestOffloaderMergesTiersAndRetires(t *testing.T) {
	a, b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	tb := tiertest.New(1)
	o := &Offloader{Table: tb, Params: Params{MaxRate: 1}}
	t0 := time.Unix(0, 0)
	ctx := context.Background()
	if _, err := o.Step(ctx, t0, []Counted{{a, 0}, {b, 0}}); err != nil {
		t.Fatal(err)
	}
	// a sent 1000 in software, b 10: a goes to hardware.
	rep, err := o.Step(ctx, t0.Add(time.Second), []Counted{{a, 1000}, {b, 10}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Rates[a] != 1000 || len(rep.Plan.Install) != 1 || rep.Plan.Install[0] != a {
		t.Fatalf("step 2: %+v", rep)
	}
	// a now drops 500 in hardware (none in software): its rate is the sum.
	tb.Hit(a, 500)
	if rep, err = o.Step(ctx, t0.Add(2*time.Second), []Counted{{a, 1000}, {b, 2000}}); err != nil {
		t.Fatal(err)
	}
	if rep.Rates[a] != 500 || rep.Rates[b] != 1990 {
		t.Fatalf("merged rates %v", rep.Rates)
	}
	// b beats a by 3.98x >= 2.5: swapped; a's 500 hardware packets retire.
	if len(rep.Plan.Remove) != 1 || o.Retired(a) != 500 {
		t.Fatalf("swap %+v, retired %d", rep.Plan, o.Retired(a))
	}
}

func TestOffloaderFreezesRatesWithoutCounters(t *testing.T) {
	a, b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	tb := tiertest.New(1)
	tb.NoCounters = true
	o := &Offloader{Table: tb, Params: Params{MaxRate: 1}}
	t0 := time.Unix(0, 0)
	ctx := context.Background()
	if _, err := o.Step(ctx, t0, []Counted{{a, 0}, {b, 0}}); err != nil {
		t.Fatal(err)
	}
	// a offloaded at 1000 pps.
	if _, err := o.Step(ctx, t0.Add(time.Second), []Counted{{a, 1000}, {b, 10}}); err != nil {
		t.Fatal(err)
	}
	// a is invisible now (hardware drops it, no counters); b grows a bit.
	rep, err := o.Step(ctx, t0.Add(2*time.Second), []Counted{{a, 1000}, {b, 600}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Rates[a] != 1000 {
		t.Fatalf("rate of a blind hardware entry %v, want the frozen 1000", rep.Rates[a])
	}
	if rep.Plan.Updates() != 0 {
		t.Fatalf("evicted on a measured 0 rate: %+v", rep.Plan)
	}
}

func TestOffloaderEvictKeepsCountersAndReadsOnce(t *testing.T) {
	a, b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	tb := tiertest.New(2)
	o := &Offloader{Table: tb, Params: Params{MaxRate: 1}}
	t0 := time.Unix(0, 0)
	ctx := context.Background()
	if _, err := o.Step(ctx, t0, []Counted{{a, 0}, {b, 0}}); err != nil {
		t.Fatal(err)
	}
	if _, err := o.Step(ctx, t0.Add(time.Second), []Counted{{a, 1000}, {b, 900}}); err != nil {
		t.Fatal(err)
	}
	if !tb.Has(a) || !tb.Has(b) {
		t.Fatalf("both should be in hardware: %v", tb.Rules)
	}
	tb.Hit(a, 300)
	lists := tb.Lists
	rates, err := o.Measure(ctx, t0.Add(2*time.Second), []Counted{{a, 1000}, {b, 900}})
	if err != nil || rates[a] != 300 {
		t.Fatalf("rate of a %v (%v), want 300 from hardware", rates[a], err)
	}
	// The ban on a is lifted: its rule leaves, its 300 packets are kept.
	if err := o.Evict(ctx, a); err != nil || tb.Has(a) || o.Retired(a) != 300 || o.HWPackets(a) != 300 {
		t.Fatalf("evict: err %v, in table %v, retired %d", err, tb.Has(a), o.Retired(a))
	}
	rep, err := o.Place(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range rep.Plan.Install {
		if k == a {
			t.Fatalf("evicted source re-installed in the same round: %+v", rep.Plan)
		}
	}
	if tb.Lists != lists+1 {
		t.Fatalf("the table was listed %d times in one interval, want once", tb.Lists-lists)
	}
	o.Forget(a)
	if o.HWPackets(a) != 0 {
		t.Fatalf("forgotten source still has %d hardware packets", o.HWPackets(a))
	}
}
