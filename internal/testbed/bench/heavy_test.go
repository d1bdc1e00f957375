// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"testing"

	"github.com/tierwall/tierwall/internal/testutil"
)

// The benchmark's own checks run: clean traffic passes, the plain filter
// catches nothing at the default threshold and the live one holds its
// planted catch (BenchHeavy fails otherwise).
func TestBenchHeavyRuns(t *testing.T) {
	testutil.RequireRoot(t)
	r, err := BenchHeavy(1<<16, 2, 1<<20, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Off) != 2 || len(r.On) != 2 || len(r.Live) != 2 {
		t.Fatalf("rounds %d %d %d, want 2 each", len(r.Off), len(r.On), len(r.Live))
	}
	off, on, live := r.Median()
	t.Logf("ns/pkt off %.0f on %.0f live %.0f (not checked: a test checks no time)", off, on, live)
	for _, x := range [][]float64{r.Off, r.On, r.Live} {
		for _, ns := range x {
			if ns <= 0 {
				t.Fatalf("a round measured %v ns", ns)
			}
		}
	}
}

// The call-cost programs load and run (what they measure is logged, not
// checked: a test checks no time).
func TestBenchCallsRuns(t *testing.T) {
	testutil.RequireRoot(t)
	cs, err := BenchCalls(3, 1<<16)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 5 {
		t.Fatalf("%d costs, want 5", len(cs))
	}
	for _, c := range cs {
		t.Logf("%-26s %6.1f ns a call", c.Name, c.Ns)
	}
}
