// SPDX-License-Identifier: Apache-2.0

package modes

// The lab's part of EVALUATION.md: what the "hardware" saves the host.
// The generator, the emulated NIC stage and the HTTP clients share CPU 0
// (the internet and the card); the host's NAPI, XDP and nginx have CPU 1.
// Every number and verdict here is computed from the run's rows.

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/tierwall/tierwall/internal/testbed/eval/evalkit"
	"gonum.org/v1/plot/plotter"
)

// nsPerDrop is the host CPU (CPU 1) time per dropped packet, in ns: the
// busy share over the measurement divided by the drop rate.
func nsPerDrop(r Row) float64 {
	if r.DropMpps <= 0 {
		return math.NaN()
	}
	return r.CPUPct * 10 / r.DropMpps
}

// hwShare is the share of a row's drops made by the NIC table.
func hwShare(r Row) float64 {
	if r.DropMpps <= 0 {
		return 0
	}
	return math.Min(1, r.Extra/r.DropMpps)
}

// backgroundPct is CPU 1's busy share with the lab up and nothing sent.
func backgroundPct(rows []Row) float64 {
	for _, r := range rows {
		if r.Figure == "background" {
			return r.CPUPct
		}
	}
	return 0
}

// noLower says whether a is not below b beyond the noise: a's best
// measurement reaches b's worst (v is the row's median value).
func noLower(a, b Row, v func(Row) float64) bool {
	best := math.Max(a.Hi, v(a))
	worst := v(b)
	if b.Lo > 0 {
		worst = math.Min(b.Lo, worst)
	}
	return best >= worst
}

func dropOf(r Row) float64 { return r.DropMpps }

func requestsOf(r Row) float64 { return r.Extra }

// hostCostOK is the target on host CPU: the hybrid spends on each packet
// it drops at most (1 − the NIC's share) of what host-only spends, plus
// CPU 1's background spread over the hybrid's drops. Within noise: the
// hybrid's least busy measurement against host-only's busiest.
func hostCostOK(hybrid, host Row, bg float64) (want float64, ok bool) {
	hi := host
	hi.CPUPct = math.Max(host.CPUHi, host.CPUPct)
	lo := hybrid
	if hybrid.CPULo > 0 {
		lo.CPUPct = math.Min(hybrid.CPULo, hybrid.CPUPct)
	}
	want = (1-hwShare(hybrid))*nsPerDrop(hi) + bg*10/hybrid.DropMpps
	return want, nsPerDrop(lo) <= want
}

// labPair is host-only's and the hybrid's full-rate rows at n sources of
// dist d, when both dropped something.
func labPair(rows []Row, d string, n int) (host, hybrid Row, ok bool) {
	host, ok1 := lookup(rows, "drop-rate", "lab-host", d, n)
	hybrid, ok2 := lookup(rows, "drop-rate", "lab-hybrid", d, n)
	return host, hybrid, ok1 && ok2 && host.DropMpps > 0 && hybrid.DropMpps > 0
}

// offered lists a mode's sweep rows at n sources, by offered rate.
func offered(rows []Row, mech string, n int) []Row { return byRate(rows, "offered", mech, n) }

func sweepSizes(rows []Row) []int {
	var ns []int
	for _, r := range rows {
		if r.Figure == "offered" && !slices.Contains(ns, r.Sources) {
			ns = append(ns, r.Sources)
		}
	}
	sort.Ints(ns)
	return ns
}

// labCharts draws the host's CPU per dropped packet against sources, and
// the host's CPU against the offered rate at each sweep size.
func labCharts(dir string, rows []Row, dists []string) error {
	if len(dists) == 0 {
		return nil
	}
	var lab []Row
	for _, r := range rows {
		if strings.HasPrefix(r.Mechanism, "lab-") && r.DropMpps > 0 {
			lab = append(lab, r)
		}
	}
	c := evalkit.Chart{Title: "Fig. 3 on the lab (" + dists[0] + ", full rate): host CPU per dropped packet — measured",
		XLabel: "attacking sources (log scale)", YLabel: "host CPU per dropped packet (ns)", LogX: true, YMin: evalkit.Zero(),
		Lines: evalkit.Lines(series(lab, "drop-rate", dists[0], nsPerDrop))}
	if err := c.Save(dir, "fig3-lab"); err != nil {
		return fmt.Errorf("fig3-lab: %w", err)
	}
	for _, n := range sweepSizes(rows) {
		s := map[string]plotter.XYs{}
		for _, r := range rows {
			if r.Figure == "offered" && r.Sources == n {
				s[r.Mechanism] = append(s[r.Mechanism], plotter.XY{X: r.SentMpps, Y: r.CPUPct})
			}
		}
		for m := range s {
			sort.Slice(s[m], func(i, j int) bool { return s[m][i].X < s[m][j].X })
		}
		c := evalkit.Chart{Title: fmt.Sprintf("Host CPU vs offered attack rate, %s sources (uniform) — measured", sizeName(n)),
			XLabel: "attack rate offered (Mpps)", YLabel: "host CPU busy (% of CPU 1)", YMin: evalkit.Zero(), YMax: evalkit.Hundred(), Lines: evalkit.Lines(s)}
		if err := c.Save(dir, fmt.Sprintf("fig3-offered-%d", n)); err != nil {
			return fmt.Errorf("fig3-offered-%d: %w", n, err)
		}
	}
	return nil
}

// labSections writes the lab's measured sections: the host's cost per
// dropped packet at full rate, and the sweep of offered rates.
func labSections(rows []Row, meta RunMeta, rel string) string {
	var b strings.Builder
	bg := backgroundPct(rows)
	if len(meta.Dists) > 0 {
		d := meta.Dists[0]
		if _, ok := lookup(rows, "drop-rate", "lab-host", d, firstSize(meta.Sizes)); ok {
			fmt.Fprintf(&b, "## Host CPU per dropped packet on the lab (Fig. 3, %s, full rate) — measured\n\n![](%s/fig3-lab.svg)\n\n", d, rel)
			var lab []Row
			for _, r := range rows {
				if strings.HasPrefix(r.Mechanism, "lab-") {
					lab = append(lab, r)
				}
			}
			b.WriteString(table(lab, "drop-rate", d, meta.Sizes, func(r Row) string {
				if r.DropMpps <= 0 {
					return "—"
				}
				s := fmt.Sprintf("%.0f", nsPerDrop(r))
				if sh := hwShare(r); sh > 0 {
					s += fmt.Sprintf(" (NIC %.0f%%)", 100*sh)
				}
				return s
			}))
			fmt.Fprintf(&b, "\nns of CPU 1 (the host) per packet dropped anywhere: CPU 1's busy share × the measurement ÷ the packets dropped; in brackets, the share of the drops made by the NIC table. While the generator sent at full rate into a sink the host never sees, CPU 1 was %.1f%% busy (the generator's RCU grace periods and IPIs, timers); the verdicts below allow for that background spread over the drops.\n\n", bg)
		}
	}
	for _, n := range sweepSizes(rows) {
		host := offered(rows, "lab-host", n)
		if len(host) == 0 {
			continue
		}
		fmt.Fprintf(&b, "## Offered attack rate swept, %s sources (uniform) — measured\n\n![](%s/fig3-offered-%d.svg)\n\n", sizeName(n), rel, n)
		b.WriteString("Every mode offered the same paced rates, all below what CPU 0 sends while it also runs the NIC stage. Each cell: dropped Mpps / host CPU busy / host ns per dropped packet.\n\n| mode |")
		for _, r := range host {
			fmt.Fprintf(&b, " %.2f Mpps offered |", r.SentMpps)
		}
		b.WriteString("\n|---|")
		for range host {
			b.WriteString("---:|")
		}
		b.WriteString("\n")
		for _, m := range mechanismsOf(rows, "offered") {
			rs := offered(rows, m, n)
			fmt.Fprintf(&b, "| %s |", m)
			for i := range host {
				if i < len(rs) && rs[i].DropMpps > 0 {
					fmt.Fprintf(&b, " %.3f / %.0f%% / %.0f ns |", rs[i].DropMpps, rs[i].CPUPct, nsPerDrop(rs[i]))
				} else {
					b.WriteString(" — |")
				}
			}
			b.WriteString("\n")
		}
		b.WriteString("\n")
	}
	return b.String()
}

func firstSize(sizes []int) int {
	if len(sizes) == 0 {
		return 0
	}
	return sizes[0]
}

// labTargets are the rows of the targets table for the lab: the hybrid
// drops at least as much as host-only (within the cells' ranges) at every
// size and distribution at full rate and at every offered rate, spends at
// most (1 − NIC share) of host-only's CPU per dropped packet, and keeps
// HTTP clients served.
func labTargets(rows []Row, sizes []int, dists []string) string {
	var b strings.Builder
	bg := backgroundPct(rows)
	var lower, costMissed []string
	var cells, costCells int
	for _, d := range dists {
		for _, n := range sizes {
			o, h, ok := labPair(rows, d, n)
			if !ok {
				continue
			}
			cells++
			if !noLower(h, o, dropOf) {
				lower = append(lower, fmt.Sprintf("%s %s (%.3f vs %.3f)", d, sizeName(n), h.DropMpps, o.DropMpps))
			}
			costCells++
			if want, ok := hostCostOK(h, o, bg); !ok {
				costMissed = append(costMissed, fmt.Sprintf("%s %s (%.0f ns vs ≤ %.0f)", d, sizeName(n), nsPerDrop(h), want))
			}
		}
	}
	for _, n := range sweepSizes(rows) {
		hs, ho := offered(rows, "lab-hybrid", n), offered(rows, "lab-host", n)
		for i := range min(len(hs), len(ho)) {
			h, o := hs[i], ho[i]
			if h.DropMpps <= 0 || o.DropMpps <= 0 {
				continue
			}
			cells++
			if !noLower(h, o, dropOf) {
				lower = append(lower, fmt.Sprintf("%s at %.2f Mpps offered (%.3f vs %.3f)", sizeName(n), o.SentMpps, h.DropMpps, o.DropMpps))
			}
			costCells++
			if want, ok := hostCostOK(h, o, bg); !ok {
				costMissed = append(costMissed, fmt.Sprintf("%s at %.2f Mpps offered (%.0f ns vs ≤ %.0f)", sizeName(n), o.SentMpps, nsPerDrop(h), want))
			}
		}
	}
	if cells > 0 {
		got := fmt.Sprintf("%d of %d cells", cells-len(lower), cells)
		if len(lower) > 0 {
			got += "; lower at " + strings.Join(lower, ", ")
		}
		fmt.Fprintf(&b, "| lab: hybrid drops at least as much as host-only, every size, distribution and offered rate (within the cells' min–max) | %s | %s |\n", got, verdictOf(len(lower) == 0))
	}
	if costCells > 0 {
		got := fmt.Sprintf("%d of %d cells", costCells-len(costMissed), costCells)
		if len(costMissed) > 0 {
			got += "; above at " + strings.Join(costMissed, ", ")
		}
		fmt.Fprintf(&b, "| lab: hybrid's host CPU per dropped packet ≤ (1 − NIC share) × host-only's (+ CPU 1's %.1f%% background) | %s | %s |\n", bg, got, verdictOf(len(costMissed) == 0))
	}
	// HTTP: the hybrid serves at least as many requests as host-only at
	// every attack rate, and 80% of its no-attack rate at 1K attackers
	// and 1 Mpps.
	var worse []string
	var pairs int
	for _, n := range httpAttackers(httpRows(rows)) {
		hs, ho := httpSeries(rows, "lab-hybrid", n), httpSeries(rows, "lab-host", n)
		for i := range min(len(hs), len(ho)) {
			h, o := hs[i], ho[i]
			if h.SentMpps == 0 {
				continue // no attack: the same path in both modes
			}
			pairs++
			if !noLower(h, o, requestsOf) {
				worse = append(worse, fmt.Sprintf("%s at %.2f Mpps (%.0f vs %.0f)", sizeName(n), o.SentMpps, h.Extra, o.Extra))
			}
		}
	}
	if pairs > 0 {
		got := fmt.Sprintf("%d of %d attack rates", pairs-len(worse), pairs)
		if len(worse) > 0 {
			got += "; fewer at " + strings.Join(worse, ", ")
		}
		fmt.Fprintf(&b, "| lab: HTTP served, hybrid ≥ host-only at every attack rate (within the cells' min–max) | %s | %s |\n", got, verdictOf(len(worse) == 0))
	}
	if hs := httpSeries(rows, "lab-hybrid", 1000); len(hs) > 1 && hs[0].SentMpps == 0 && hs[0].Extra > 0 {
		// The attack row nearest 1 Mpps.
		at := hs[1]
		for _, r := range hs[1:] {
			if math.Abs(r.SentMpps-1) < math.Abs(at.SentMpps-1) {
				at = r
			}
		}
		fmt.Fprintf(&b, "| lab: hybrid, 1K attackers at 1 Mpps (%.2f sent): HTTP ≥ 80%% of no attack | %.0f vs %.0f requests/s = %.0f%% | %s |\n",
			at.SentMpps, at.Extra, hs[0].Extra, 100*at.Extra/hs[0].Extra, verdictOf(at.Extra >= 0.8*hs[0].Extra))
	}
	return b.String()
}

// httpSeries is a mechanism's HTTP rows at n attackers, by attack rate.
func httpSeries(rows []Row, mech string, n int) []Row { return byRate(rows, "http", mech, n) }

// byRate lists the rows of figure fig for mech at n sources, by the rate
// the generator sent.
func byRate(rows []Row, fig, mech string, n int) []Row {
	var out []Row
	for _, r := range rows {
		if r.Figure == fig && r.Mechanism == mech && r.Sources == n {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].SentMpps < out[j].SentMpps })
	return out
}

// modelCheck applies the model's two formulas to the lab's own
// parameters, measured in this run (line: what lab-host was sent at full
// rate; one host core at lab-host's cost per dropped packet; the hybrid's
// measured NIC share), and sets the predictions beside the lab's
// measurements: how far the model's premises hold where they can be
// measured.
func modelCheck(rows []Row, sizes []int, dists []string) string {
	var b strings.Builder
	for _, d := range dists {
		for _, n := range sizes {
			o, h, ok := labPair(rows, d, n)
			if !ok {
				continue
			}
			if b.Len() == 0 {
				b.WriteString("Calibration on the lab: the same formulas with the lab's parameters from this run (line: what the generator sent to lab-host at full rate; one host core at lab-host's measured cost per dropped packet; the hybrid's measured NIC share `s`), against what the lab measured.\n\n")
				b.WriteString("| dist | sources | lab line Mpps | host cost ns/pkt | s | model host-only | measured lab-host | model hybrid | measured lab-hybrid |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
			}
			line, cost, s := o.SentMpps*1e6, nsPerDrop(o), hwShare(h)
			host := math.Min(line, 1e9/cost)
			hyb := math.Min(line, s*line+math.Min((1-s)*line, 1e9/cost))
			fmt.Fprintf(&b, "| %s | %d | %.2f | %.0f | %.3f | %.2f | %.2f (%.2f×) | %.2f | %.2f (%.2f×) |\n",
				d, n, line/1e6, cost, s, host/1e6, o.DropMpps, o.DropMpps/(host/1e6), hyb/1e6, h.DropMpps, h.DropMpps/(hyb/1e6))
		}
	}
	if b.Len() > 0 {
		b.WriteString("\n")
	}
	return b.String()
}
