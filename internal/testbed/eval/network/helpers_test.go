// SPDX-License-Identifier: Apache-2.0

package network

import (
	"math"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
)

// The run's cells: every carpet bombing its own /24 (a host group each),
// every other flood its own host, all inside the protected network and
// outside the benign one.
func TestPlanCells(t *testing.T) {
	p := Params{Repeat: 2}
	p.defaults()
	cells := planCells(p)
	if len(cells) != 2*len(Cells()) {
		t.Fatalf("%d cells for %d repeats of %d", len(cells), p.Repeat, len(Cells()))
	}
	seen := map[string]bool{}
	for _, c := range cells {
		v := netip.MustParsePrefix(c.Victim)
		if seen[c.Victim] {
			t.Errorf("victim %s twice", c.Victim)
		}
		seen[c.Victim] = true
		if !netProtected.Overlaps(v) || netBenign.Overlaps(v) {
			t.Errorf("victim %s outside %v or inside %v", v, netProtected, netBenign)
		}
		if (c.Kind == "carpet") != (v.Bits() == 24) {
			t.Errorf("%s: victim %v", c.Kind, v)
		}
	}
	p.Only = "carpet"
	for _, c := range planCells(p) {
		if c.Kind != "carpet" && !strings.Contains(c.Name(), "carpet") {
			t.Errorf("--only carpet ran %s", c.Name())
		}
	}
}

func TestIngestNoLoss(t *testing.T) {
	n := Ingest{Steps: []IngestStep{
		{Offered: 2e5, Sent: 400, Secs: 2, Dropped: 1},
		{Offered: 1e5, Sent: 300, Secs: 1},
		{Offered: 3e5, Sent: 900, Secs: 1}, // lossless above a lossy step: not counted
	}}
	if got := n.NoLoss(); got != 300 {
		t.Errorf("NoLoss = %v, want 300", got)
	}
	if (Ingest{}).NoLoss() != 0 {
		t.Error("no steps, a rate")
	}
}

func TestRandomHelpers(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	cum := []float64{0.5, 0.75, 1}
	counts := make([]int, len(cum))
	for range 10000 {
		counts[pick(r, cum)]++
	}
	if counts[0] < 4500 || counts[0] > 5500 || counts[2] < 2000 || counts[2] > 3000 {
		t.Errorf("pick's shares %v of 10000, want about 5000/2500/2500", counts)
	}
	for _, l := range []float64{0.5, 4, 100} {
		sum := 0
		for range 4000 {
			k := poisson(r, l)
			if k < 0 {
				t.Fatalf("poisson(%v) = %d", l, k)
			}
			sum += k
		}
		if mean := float64(sum) / 4000; math.Abs(mean-l) > 0.1*l+0.1 {
			t.Errorf("poisson(%v)'s mean %v", l, mean)
		}
	}
}

func TestReportText(t *testing.T) {
	for in, want := range map[float64]string{-1: "never", 0.5: "0.50 s", math.Inf(1): "never (in at least one)"} {
		if got := secsInf(in); got != want {
			t.Errorf("secsInf(%v) = %q, want %q", in, got, want)
		}
	}
	if got := dist([]float64{0.3, -1, 0.1, 0.2}); got != "0.20 (0.10–0.30), never in 1 of 4" {
		t.Errorf("dist = %q", got)
	}
	if got := dist([]float64{-1}); got != "never" {
		t.Errorf("dist = %q", got)
	}
	if kcount(5000) != "5K" || kcount(1500) != "1500" || orDash("") != "—" || orDash("x") != "x" || listOrNone(nil) != "none" || listOrNone([]string{"a", "b"}) != "a, b" {
		t.Error("kcount, orDash or listOrNone")
	}
}
