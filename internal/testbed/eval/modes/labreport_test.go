// SPDX-License-Identifier: Apache-2.0

package modes

import (
	"strings"
	"testing"
)

// labRows: host-only and hybrid at 1K sources, full rate and one offered
// rate, and HTTP at no attack and 1 Mpps. The hybrid's NIC table drops
// half the attack, and the host spends 200 ns per packet it drops.
func labRows() []Row {
	drop := func(fig, m string, drop, hw, cpu float64) Row {
		return Row{Figure: fig, Mechanism: m, Dist: "uniform", Sources: 1000, SentMpps: drop, DropMpps: drop, Extra: hw, CPUPct: cpu,
			Lo: drop * 0.99, Hi: drop * 1.01, CPULo: cpu - 1, CPUHi: cpu + 1}
	}
	http := func(m string, sent, rps float64) Row {
		return Row{Figure: "http", Mechanism: m, Dist: "uniform", Sources: 1000, SentMpps: sent, Extra: rps, Lo: rps * 0.98, Hi: rps * 1.02}
	}
	return []Row{
		{Figure: "background", Mechanism: "lab", Dist: "uniform", CPUPct: 0.5},
		drop("drop-rate", "lab-host", 2, 0, 40), drop("drop-rate", "lab-hybrid", 2, 1, 20),
		drop("offered", "lab-host", 1, 0, 20), drop("offered", "lab-hybrid", 1, 0.5, 10),
		http("lab-host", 0, 30000), http("lab-host", 1, 28000),
		http("lab-hybrid", 0, 30000), http("lab-hybrid", 1, 29000),
	}
}

func TestLabTargetsMet(t *testing.T) {
	got := labTargets(labRows(), []int{1000}, []string{"uniform"})
	for _, want := range []string{
		"hybrid drops at least as much as host-only, every size, distribution and offered rate (within the cells' min–max) | 2 of 2 cells | met",
		"≤ (1 − NIC share) × host-only's (+ CPU 1's 0.5% background) | 2 of 2 cells | met",
		"hybrid ≥ host-only at every attack rate (within the cells' min–max) | 1 of 1 attack rates | met",
		"1K attackers at 1 Mpps (1.00 sent): HTTP ≥ 80% of no attack | 29000 vs 30000 requests/s = 97% | met",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("want %q in:\n%s", want, got)
		}
	}
}

// A difference inside the measurements' ranges is not a miss; one beyond
// them is, and the cell is named.
func TestLabTargetsMissedBeyondNoise(t *testing.T) {
	rows := set(labRows(), "offered", "lab-hybrid", 1000, func(r *Row) { r.DropMpps, r.Lo, r.Hi = 0.995, 0.985, 0.999 })
	if got := labTargets(rows, []int{1000}, []string{"uniform"}); !strings.Contains(got, "2 of 2 cells | met") {
		t.Errorf("hybrid 0.995 against 1.0 with overlapping ranges: want met:\n%s", got)
	}
	rows = set(labRows(), "offered", "lab-hybrid", 1000, func(r *Row) { r.DropMpps, r.Lo, r.Hi = 0.9, 0.89, 0.91 })
	if got := labTargets(rows, []int{1000}, []string{"uniform"}); !strings.Contains(got, "1 of 2 cells; lower at 1K at 1.00 Mpps offered (0.900 vs 1.000) | **missed**") {
		t.Errorf("hybrid 0.9 against 1.0 beyond the ranges: want missed:\n%s", got)
	}
	// Half the drops in the NIC but the host as busy as host-only.
	rows = set(labRows(), "drop-rate", "lab-hybrid", 1000, func(r *Row) { r.CPUPct, r.CPULo, r.CPUHi = 40, 39, 41 })
	if got := labTargets(rows, []int{1000}, []string{"uniform"}); !strings.Contains(got, "1 of 2 cells; above at uniform 1K (200 ns vs ≤ 105) | **missed**") {
		t.Errorf("hybrid's host as busy as host-only's: want the cost target missed:\n%s", got)
	}
	rows = set(labRows(), "http", "lab-hybrid", 1000, func(r *Row) {
		if r.SentMpps > 0 {
			r.Extra, r.Lo, r.Hi = 20000, 19000, 21000
		}
	})
	got := labTargets(rows, []int{1000}, []string{"uniform"})
	if !strings.Contains(got, "0 of 1 attack rates; fewer at 1K at 1.00 Mpps (20000 vs 28000) | **missed**") || !strings.Contains(got, "= 67% | **missed**") {
		t.Errorf("hybrid serving fewer requests: want both HTTP targets missed:\n%s", got)
	}
}

func TestNsPerDrop(t *testing.T) {
	// 40% of a CPU for 2 Mpps dropped: 200 ns per packet.
	if got := nsPerDrop(Row{CPUPct: 40, DropMpps: 2}); got != 200 {
		t.Errorf("nsPerDrop = %v, want 200", got)
	}
}
