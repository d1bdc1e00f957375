// SPDX-License-Identifier: Apache-2.0

package placement

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

func src(kr ...any) []Source[string] {
	var s []Source[string]
	for i := 0; i < len(kr); i += 2 {
		s = append(s, Source[string]{kr[i].(string), float64(kr[i+1].(int))})
	}
	return s
}

func sorted(s []string) []string { s = slices.Clone(s); slices.Sort(s); return s }

func TestListing1SwapsWeakestForStrongest(t *testing.T) {
	// K=3, table holds a(100) b(5) c(1); d(50) and e(20) are blocked in
	// XDP. Saturated: threshold 2.5. Candidates by rate: d, e; evictable
	// ascending: c, b. d/c = 50 >= 2.5 swap; e/b = 4 >= 2.5 swap.
	all := src("a", 100, "b", 5, "c", 1, "d", 50, "e", 20)
	p := Params{K: 3, MaxRate: 100}
	plan := Decide(all, []string{"a", "b", "c"}, p)
	if got, want := plan.Install, []string{"d", "e"}; !slices.Equal(got, want) {
		t.Errorf("install %v, want %v", got, want)
	}
	if got, want := plan.Remove, []string{"c", "b"}; !slices.Equal(got, want) {
		t.Errorf("remove %v, want %v (weakest first)", got, want)
	}
	if plan.Threshold != 2.5 || plan.Volume != 176 {
		t.Errorf("threshold %v volume %v", plan.Threshold, plan.Volume)
	}
}

func TestListing1SkipsBelowThreshold(t *testing.T) {
	// d/c = 2 < 2.5: no swap although d is in the top-K and c is not.
	all := src("a", 100, "b", 90, "c", 10, "d", 20)
	plan := Decide(all, []string{"a", "b", "c"}, Params{K: 3, MaxRate: 100})
	if plan.Updates() != 0 {
		t.Fatalf("plan %+v, want no change", plan)
	}
	// Candidates are all tried against the same weakest entry (line 7):
	// a lighter one after a refused one is refused too.
	all = src("a", 100, "b", 90, "c", 10, "d", 20, "e", 15)
	if plan := Decide(all, []string{"a", "b", "c"}, Params{K: 3, MaxRate: 100}); plan.Updates() != 0 {
		t.Fatalf("plan %+v, want no change", plan)
	}
}

func TestHysteresisFollowsVolume(t *testing.T) {
	p := Params{MaxRate: 1000}
	if got := p.Threshold(2000); got != 2.5 {
		t.Errorf("threshold above saturation %v, want the minimum 2.5", got)
	}
	if got := p.Threshold(500); got != 5 {
		t.Errorf("threshold at half load %v, want 5", got)
	}
	if got := p.Threshold(0); got != 1000 {
		t.Errorf("threshold with no attack %v, want the cap", got)
	}
	// The same 4x gain swaps near saturation and not at 10% load.
	all := src("a", 400, "b", 100)
	hi := Decide(all, []string{"b"}, Params{K: 1, MaxRate: 500})
	lo := Decide(all, []string{"b"}, Params{K: 1, MaxRate: 5000})
	if hi.Updates() != 2 || lo.Updates() != 0 {
		t.Errorf("updates at high load %d (want 2), at low load %d (want 0)", hi.Updates(), lo.Updates())
	}
}

func TestBudgetLimitsUpdates(t *testing.T) {
	// 10 ms interval, 2 ms per update, half the interval: 2 updates.
	p := Params{K: 10, MaxRate: 1, Interval: 10 * time.Millisecond, UpdateLatency: 2 * time.Millisecond}
	if p.Budget() != 2 {
		t.Fatalf("budget %d, want 2", p.Budget())
	}
	all := src("a", 9, "b", 8, "c", 7, "d", 6)
	plan := Decide(all, nil, p)
	if !slices.Equal(plan.Install, []string{"a", "b"}) || plan.Skipped != 2 {
		t.Errorf("plan %+v, want the two heaviest and 2 skipped", plan)
	}
	// A swap costs two updates: with a budget of 3, one swap then stop.
	p.UpdateLatency = 10 * time.Millisecond / 6 // budget 3
	all = src("a", 100, "b", 90, "x", 1, "y", 1)
	plan = Decide(all, []string{"x", "y"}, Params{K: 2, MaxRate: 1, Interval: p.Interval, UpdateLatency: p.UpdateLatency})
	if plan.Updates() != 2 || plan.Skipped != 1 {
		t.Errorf("plan %+v, want one swap and one skipped", plan)
	}
}

func TestTiesBreakOnInputOrder(t *testing.T) {
	// Decide documents that ties break on input order: among equal rates
	// the source listed first in all wins the top-K, and among equal
	// hardware entries the one listed first in inHW is evicted first.
	p := Params{K: 2, MaxRate: 1}
	if got := Decide(src("a", 5, "b", 5, "c", 5, "d", 5), nil, p).Install; !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("install %v, want [a b] (first two in input order)", got)
	}
	if got := Decide(src("d", 5, "c", 5, "b", 5, "a", 5), nil, p).Install; !slices.Equal(got, []string{"d", "c"}) {
		t.Errorf("install %v, want [d c] (first two in input order)", got)
	}
	// More sources than an insertion sort handles, with two rates
	// interleaved, so an unstable sort would show. K cuts through the
	// rate-1 group: its first five in input order get in.
	var many []Source[string]
	var want []string
	for i := range 40 {
		many = append(many, Source[string]{fmt.Sprintf("s%02d", i), float64(2 - i%2)})
		if i%2 == 0 {
			want = append(want, fmt.Sprintf("s%02d", i))
		}
	}
	want = append(want, "s01", "s03", "s05", "s07", "s09")
	if got := Decide(many, nil, Params{K: 25, MaxRate: 1}).Install; !slices.Equal(got, want) {
		t.Errorf("install %v, want %v", got, want)
	}
	// The same on the way out: 30 evictable entries with interleaved
	// rates, budget for 5 swaps: the first five rate-1 entries in inHW
	// order go (all lists them in another order, which does not count).
	var hw []string
	var all []Source[string]
	for i := range 30 {
		hw = append(hw, fmt.Sprintf("h%02d", i))
		all = append(all, Source[string]{fmt.Sprintf("c%02d", i), 1000})
	}
	for i := 29; i >= 0; i-- {
		all = append(all, Source[string]{hw[i], float64(2 - i%2)})
	}
	budget10 := Params{K: 30, MaxRate: 1, Interval: 10 * time.Millisecond, UpdateLatency: 500 * time.Microsecond}
	plan := Decide(all, hw, budget10)
	if want := []string{"h01", "h03", "h05", "h07", "h09"}; !slices.Equal(plan.Remove, want) || len(plan.Install) != 5 || plan.Skipped != 25 {
		t.Errorf("remove %v, want %v (install %v, skipped %d)", plan.Remove, want, plan.Install, plan.Skipped)
	}
	// A tie on the way in: x and y both 1, one slot left for them: x,
	// listed first, stays; y is evicted for z.
	all = src("z", 100, "x", 1, "y", 1)
	for _, hw := range [][]string{{"x", "y"}, {"y", "x"}} {
		plan := Decide(all, hw, p)
		if !slices.Equal(plan.Remove, []string{"y"}) || !slices.Equal(plan.Install, []string{"z"}) {
			t.Errorf("hw %v: plan %+v, want y out and z in", hw, plan)
		}
	}
	// A tie on the way out: x and y both evictable, budget for one swap:
	// the one listed first in inHW goes.
	one := Params{K: 2, MaxRate: 1, Interval: 10 * time.Millisecond, UpdateLatency: 2500 * time.Microsecond} // budget 2
	all = src("z", 100, "w", 90, "x", 1, "y", 1)
	for _, hw := range [][]string{{"x", "y"}, {"y", "x"}} {
		plan := Decide(all, hw, one)
		if !slices.Equal(plan.Remove, hw[:1]) || !slices.Equal(plan.Install, []string{"z"}) || plan.Skipped != 1 {
			t.Errorf("hw %v: plan %+v, want %s out, z in, one swap skipped", hw, plan, hw[0])
		}
	}
	// Equal rates never swap: the gain is 1.
	all = src("a", 5, "b", 5, "c", 5, "d", 5)
	if plan := Decide(all, []string{"c", "d"}, p); plan.Updates() != 0 {
		t.Errorf("swapped equals: %+v", plan)
	}
}

func TestDisappearedSourcesLeaveHardware(t *testing.T) {
	// "gone" was unblocked: it leaves the table even with no budget left,
	// and its slot is refilled.
	all := src("a", 10, "b", 3)
	p := Params{K: 2, MaxRate: 1, Interval: time.Millisecond, UpdateLatency: time.Millisecond} // budget 0
	plan := Decide(all, []string{"a", "gone"}, p)
	if !slices.Equal(plan.Remove, []string{"gone"}) || len(plan.Install) != 0 {
		t.Errorf("plan %+v, want gone removed and nothing installed (no budget)", plan)
	}
	plan = Decide(all, []string{"a", "gone"}, Params{K: 2, MaxRate: 1})
	if !slices.Equal(plan.Remove, []string{"gone"}) || !slices.Equal(plan.Install, []string{"b"}) {
		t.Errorf("plan %+v, want gone out and b in", plan)
	}
}

func TestKLargerThanBlacklist(t *testing.T) {
	all := src("a", 1, "b", 2, "c", 0)
	plan := Decide(all, nil, Params{K: 512, MaxRate: 1})
	if got := sorted(plan.Install); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("install %v, want every source with traffic", got)
	}
	if plan := Decide(all, []string{"a", "b"}, Params{K: 512, MaxRate: 1}); plan.Updates() != 0 {
		t.Errorf("stable table changed: %+v", plan)
	}
	if plan := Decide(all, nil, Params{K: 0, MaxRate: 1}); plan.Updates() != 0 {
		t.Errorf("K=0 installed %+v", plan)
	}
}

func TestOracleShare(t *testing.T) {
	if got := OracleShare([]float64{1, 5, 3, 1}, 2); got != 0.8 {
		t.Errorf("oracle %v, want 0.8", got)
	}
	if got := OracleShare([]float64{1, 1}, 5); got != 1 {
		t.Errorf("oracle %v, want 1", got)
	}
	if got := OracleShare(nil, 5); got != 0 {
		t.Errorf("oracle of nothing %v", got)
	}
}

func TestValidate(t *testing.T) {
	for _, p := range []Params{{K: -1, MaxRate: 1}, {K: 1}, {K: 1, MaxRate: 1, MinThreshold: 0.5}, {K: 1, MaxRate: 1, BudgetShare: 2}} {
		if p.Validate() == nil {
			t.Errorf("%+v accepted", p)
		}
	}
	if err := (Params{K: 512, MaxRate: 1e6}).Validate(); err != nil {
		t.Error(err)
	}
}

func TestSimulationBeatsNaiveOnUpdates(t *testing.T) {
	// Correctness of the scoring, not speed: Listing 1 never beats the
	// oracle, and the naive policy never updates less than nothing.
	l, n, err := Simulate(Scenario{Sources: 2000, K: 64, Intervals: 30, ZipfS: 1, Load: 1, MaxRate: 1e6,
		Swing: 0.9, MinPeriod: 10, MaxPeriod: 40, Jitter: 0.25, Interval: time.Second, Latency: 2 * time.Millisecond, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	if l.HWShare > l.OracleShare+1e-9 || n.HWShare > n.OracleShare+1e-9 {
		t.Errorf("a policy beat the oracle: %+v %+v", l, n)
	}
	if l.Updates >= n.Updates || l.HWShare <= 0 {
		t.Errorf("listing-1 %+v vs naive %+v", l, n)
	}
}

func TestListing1KeepsOracleShareOnBurstyAttacks(t *testing.T) {
	// docs/BENCHMARKS.md: on bursty attacks Listing 1 with its default
	// thresholds keeps >= 95% of the oracle's hardware share with at most
	// 1/4 of the naive policy's updates. Simulate is deterministic, so
	// this is checked exactly, on the benchmark's scenario (cmd/
	// tierwall-bench) but with seeds it does not use (it uses 1-5): the
	// claim must hold beyond the seeds it was measured on.
	// About 2 s of CPU each: the runs are independent, so in parallel.
	for _, load := range []float64{1.2, 0.8, 0.3} {
		for _, seed := range []uint64{101, 202} {
			t.Run(fmt.Sprintf("load-%.1f/seed-%d", load, seed), func(t *testing.T) {
				t.Parallel()
				l, n, err := Simulate(Scenario{Sources: 20000, K: 512, Intervals: 120, ZipfS: 1, Load: load, MaxRate: 5e6,
					Swing: 0.9, MinPeriod: 20, MaxPeriod: 120, Jitter: 0.25, Interval: time.Second, Latency: 2 * time.Millisecond, Seed: seed})
				if err != nil {
					t.Fatal(err)
				}
				if q := l.Quality(); q < 0.95 {
					t.Errorf("Listing 1 keeps %.1f%% of the oracle share, want >= 95%% (%+v)", 100*q, l)
				}
				if r := float64(l.Updates) / float64(n.Updates); r > 0.25 {
					t.Errorf("Listing 1 makes %.2f of the naive policy's updates, want <= 0.25 (%d vs %d)", r, l.Updates, n.Updates)
				}
				t.Logf("quality %.4f, updates %d vs naive %d", l.Quality(), l.Updates, n.Updates)
			})
		}
	}
}
