// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/tierwall/tierwall/internal/control/placement"
)

// The threshold was tuned on tuningSeeds: the report scores every case on
// seeds disjoint from them too, and a verdict that holds only on the
// tuning seeds shows as missed on the held-out row.
func TestPlacementScoredOnHeldOutSeeds(t *testing.T) {
	for _, s := range heldOutSeeds {
		if slices.Contains(tuningSeeds, s) {
			t.Fatalf("held-out seed %d is a tuning seed", s)
		}
	}
	var seen []uint64
	// A fake simulator for which Listing 1 is good only on the tuning
	// seeds (the overfitting the held-out row must expose).
	sim := func(sc placement.Scenario) (placement.Result, placement.Result, error) {
		seen = append(seen, sc.Seed)
		if sc.Sources != placementBase.Sources || sc.K != placementBase.K || sc.Load == 0 {
			t.Errorf("scenario not the benchmark's: %+v", sc)
		}
		l := placement.Result{HWShare: 0.97, OracleShare: 1, UpdatesPerSec: 20}
		if !slices.Contains(tuningSeeds, sc.Seed) {
			l.HWShare = 0.80
		}
		return l, placement.Result{HWShare: 0.99, OracleShare: 1, UpdatesPerSec: 100}, nil
	}
	var b bytes.Buffer
	if err := placementSection(&b, sim); err != nil {
		t.Fatal(err)
	}
	for _, s := range append(slices.Clone(tuningSeeds), heldOutSeeds...) {
		if n := count(seen, s); n != len(placementCases) {
			t.Errorf("seed %d simulated %d times, want once per case (%d)", s, n, len(placementCases))
		}
	}
	out := b.String()
	for _, want := range []string{
		"| bursty | 1.2 | tuning 1–5 | 97.0% [97.0–97.0] | 20.0 | 99.0% | 100.0 | 0.20 [0.20–0.20] | met |",
		"| bursty | 1.2 | held-out 1001–1005 | 80.0% [80.0–80.0] | 20.0 | 99.0% | 100.0 | 0.20 [0.20–0.20] | **missed** |",
		"threshold at saturation (2.5, `placement.Params`) was chosen on seeds 1–5; seeds 1001–1005 were not looked at",
		"20000 attacking sources, K = 512",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("want %q in:\n%s", want, out)
		}
	}
}

func count(xs []uint64, x uint64) int {
	n := 0
	for _, v := range xs {
		if v == x {
			n++
		}
	}
	return n
}
