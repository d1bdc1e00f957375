package eval

import (
	"encoding/csv"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/tierwall/tierwall/internal/placement"
	"github.com/tierwall/tierwall/internal/testbed/trafgen"
)

// WriteCSV writes every row.
func WriteCSV(path string, rows []Row) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	w := csv.NewWriter(f)
	w.Write([]string{"figure", "mechanism", "dist", "sources", "sent_mpps", "drop_mpps", "rx_cpu_pct", "extra", "arrived_mpps", "note"})
	for _, r := range rows {
		w.Write([]string{r.Figure, r.Mechanism, r.Dist, strconv.Itoa(r.Sources), ff(r.SentMpps), ff(r.DropMpps), ff(r.CPUPct), ff(r.Extra), ff(r.Arrived), r.Note})
	}
	w.Flush()
	return w.Error()
}

func ff(v float64) string { return strconv.FormatFloat(v, 'f', 4, 64) }

// lineChart draws y(sources) per series on a log x axis, as PNG and SVG.
func lineChart(dir, name, title, ylabel string, series map[string]plotter.XYs) error {
	return lineChartX(dir, name, title, "attacking sources", ylabel, series)
}

// lineChartX draws y(x) per series on a log x axis, as PNG and SVG.
func lineChartX(dir, name, title, xlabel, ylabel string, series map[string]plotter.XYs) error {
	if len(series) == 0 {
		return nil // nothing measured for this chart (e.g. a partial --only run)
	}
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xlabel
	p.Y.Label.Text = ylabel
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Top = true
	var names []string
	for n := range series {
		names = append(names, n)
	}
	sort.Strings(names)
	var args []any
	for _, n := range names {
		args = append(args, n, series[n])
	}
	if err := plotutil.AddLinePoints(p, args...); err != nil {
		return err
	}
	// A log axis needs a positive range, also with a single size.
	lo, hi := math.Inf(1), 0.0
	for _, s := range series {
		for _, pt := range s {
			lo, hi = math.Min(lo, pt.X), math.Max(hi, pt.X)
		}
	}
	if hi > 0 {
		p.X.Min, p.X.Max = lo/2, hi*2
	}
	for _, ext := range []string{"png", "svg"} {
		if err := p.Save(8*vg.Inch, 5*vg.Inch, filepath.Join(dir, name+"."+ext)); err != nil {
			return err
		}
	}
	return nil
}

func series(rows []Row, fig, dist string, y func(Row) float64) map[string]plotter.XYs {
	out := map[string]plotter.XYs{}
	for _, r := range rows {
		if r.Figure != fig || r.Dist != dist {
			continue
		}
		out[r.Mechanism] = append(out[r.Mechanism], plotter.XY{X: float64(max(r.Sources, 1)), Y: y(r)})
	}
	for k := range out {
		sort.Slice(out[k], func(i, j int) bool { return out[k][i].X < out[k][j].X })
	}
	return out
}

// lookup finds a row's value.
func lookup(rows []Row, fig, mech, dist string, n int) (Row, bool) {
	for _, r := range rows {
		if r.Figure == fig && r.Mechanism == mech && r.Dist == dist && r.Sources == n {
			return r, true
		}
	}
	return Row{}, false
}

// Model: a real 25G hybrid, from this run's measured per-packet cost.
const (
	ModelLineRate = 37.2e6 // 64-byte frames at 25 Gb/s
	ModelK        = 512
	ModelCores    = 4
)

// modelRows predicts, from the measured host cost per packet at each size
// (receiver CPU time / packets dropped), the drop rate of host-only XDP and
// of the hybrid on a 25G NIC at line rate.
func modelRows(rows []Row, dists []string) []Row {
	var out []Row
	for _, d := range dists {
		for _, r := range rows {
			if r.Figure != "drop-rate" || r.Mechanism != "tierwall-host" || r.Dist != d || r.DropMpps <= 0 {
				continue
			}
			nsPerPkt := (r.CPUPct / 100) * 1e3 / r.DropMpps // ns of one core per dropped packet
			host := math.Min(ModelLineRate, ModelCores*1e9/nsPerPkt)
			share := placement.OracleShare(trafgen.Weights(trafgen.Dist(d), r.Sources, 1, 1.0/6), ModelK)
			hybrid := math.Min(ModelLineRate, share*ModelLineRate+math.Min((1-share)*ModelLineRate, host))
			out = append(out,
				Row{Figure: "model", Mechanism: "model host XDP (4 cores)", Dist: d, Sources: r.Sources, DropMpps: host / 1e6, Extra: nsPerPkt},
				Row{Figure: "model", Mechanism: "model hybrid (K=512 + 4 cores)", Dist: d, Sources: r.Sources, DropMpps: hybrid / 1e6, Extra: share})
		}
	}
	return out
}

// Report writes the CSV, the plots and EVALUATION.md.
func Report(dir, mdPath string, rows []Row, o Options, started time.Time) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var dists []string
	for _, d := range o.Dists {
		dists = append(dists, string(d))
	}
	model := modelRows(rows, dists)
	all := append(append([]Row{}, rows...), model...)
	if err := WriteCSV(filepath.Join(dir, "results.csv"), all); err != nil {
		return err
	}
	drop := func(r Row) float64 { return r.DropMpps }
	for _, d := range dists {
		if err := lineChart(dir, "fig2-"+d, "Drop rate vs attackers ("+d+" traffic) — measured on veth, 2 vCPUs", "dropped Mpps", series(rows, "drop-rate", d, drop)); err != nil {
			return err
		}
		if err := lineChart(dir, "model-"+d, "MODEL (not a measurement): 25G NIC, K=512, 4 host cores ("+d+")", "dropped Mpps", series(model, "model", d, drop)); err != nil {
			return err
		}
	}
	if len(dists) > 0 {
		if err := lineChart(dir, "fig3-cpu", "Receiver CPU use vs attackers ("+dists[0]+") — measured", "receiving CPU busy (%)", series(rows, "drop-rate", dists[0], func(r Row) float64 { return r.CPUPct })); err != nil {
			return err
		}
	}
	var http []Row
	for _, r := range rows {
		if r.Figure == "http" {
			http = append(http, r)
		}
	}
	if len(http) > 0 {
		for _, n := range []int{1000, 4000} {
			s := map[string]plotter.XYs{}
			for _, r := range http {
				if r.Sources == n {
					s[r.Mechanism] = append(s[r.Mechanism], plotter.XY{X: math.Max(r.SentMpps, 0.01), Y: r.Extra})
				}
			}
			if len(s) == 0 {
				continue
			}
			p := plot.New()
			p.Title.Text = fmt.Sprintf("HTTP requests/s under attack, %d attackers — measured", n)
			p.X.Label.Text = "attack rate sent (Mpps)"
			p.Y.Label.Text = "completed requests/s"
			var args []any
			var names []string
			for k := range s {
				names = append(names, k)
			}
			sort.Strings(names)
			for _, k := range names {
				sort.Slice(s[k], func(i, j int) bool { return s[k][i].X < s[k][j].X })
				args = append(args, k, s[k])
			}
			if err := plotutil.AddLinePoints(p, args...); err != nil {
				return fmt.Errorf("fig4-%d: %w", n, err)
			}
			for _, ext := range []string{"png", "svg"} {
				if err := p.Save(8*vg.Inch, 5*vg.Inch, filepath.Join(dir, fmt.Sprintf("fig4-%d.%s", n, ext))); err != nil {
					return err
				}
			}
		}
	}
	return os.WriteFile(mdPath, []byte(markdown(rows, model, http, o, dists, dir, started)), 0o644)
}

func markdown(rows, model, http []Row, o Options, dists []string, dir string, started time.Time) string {
	var b strings.Builder
	rel := filepath.Base(dir)
	fmt.Fprintf(&b, "# Evaluation\n\nGenerated by `make eval` (`tierwall-lab eval --out %s`) on %s, in %v, on this machine class (2 vCPUs, kernel 6.18, veth). Every number in the *measured* tables comes from this one run (each drop-rate cell is the median of %d measurements, range in the CSV's note column); the *model* section is a prediction and is labelled so. Raw rows: [`%s/results.csv`](%s/results.csv).\n\n",
		dir, started.UTC().Format("2006-01-02"), time.Since(started).Round(time.Second), max(o.Repeat, 1), rel, rel)
	b.WriteString("## How it is measured\n\n")
	b.WriteString("- **Host mechanisms** run on a veth pair: the live-frames generator (`tierwall-lab gen`, 64-byte UDP, uniform or Gaussian over N sources, σ = N/6) transmits from CPU 0; the receiving veth uses threaded NAPI pinned to CPU 1, where the mechanism under test runs with a rule for each of the N sources. *Dropped Mpps* is the growth of the mechanism's own drop counter over the measurement divided by its length; *CPU* is CPU 1's busy share over the same window. Baselines: iptables-legacy (raw PREROUTING, one rule per source, the paper's baseline), ipset hash:ip with one iptables rule, an nftables set in prerouting and in a netdev ingress chain, xdp-filter from xdp-tools (at most 10K addresses).\n")
	fmt.Fprintf(&b, "- **tierwall's four approaches** run on the lab (internet → emulated NIC → host), all receive-side work on CPU 1: `lab-host` (the NIC stage forwards everything to the host's XDP filter), `lab-hybrid` (NIC hardware table K = 512 + host XDP), `lab-nic-hw` (table + the filter on the NIC's CPU), `lab-nic` (everything on the NIC's CPU). The NIC CPU is modelled as slower than the host by a rate cap of %.1f Mpps (the paper's card managed ~15 Mpps against ~26 on the host); packets over it are dropped unfiltered and reported as overload, not as mitigation. Placement runs the paper's Listing 1 on the counters of a first half-interval of traffic before the measurement.\n", float64(NICCPURate)/1e6)
	b.WriteString("- What a veth testbed cannot show: the emulated NIC is XDP on the same two CPUs, so its \"hardware\" drops cost host CPU here (on a real NIC they cost nothing); absolute rates are those of one receive core of a small VM against the paper's 4-core Xeon and 25G card. Ratios between mechanisms measured in the same run are what carry over.\n\n")

	for _, d := range dists {
		fmt.Fprintf(&b, "## Drop rate vs attackers, %s traffic (Fig. 2%s) — measured\n\n![](%s/fig2-%s.svg)\n\n", d, map[string]string{"uniform": "a", "gaussian": "b"}[d], rel, d)
		b.WriteString(table(rows, "drop-rate", d, o.Sizes, func(r Row) string {
			s := fmt.Sprintf("%.3f", r.DropMpps)
			if strings.Contains(r.Note, "overload") {
				s += "*"
			}
			return s
		}))
		b.WriteString("\nMpps dropped. * the NIC CPU also dropped packets unfiltered for overload (see the CSV's note column).\n\n")
	}
	if len(dists) > 0 {
		fmt.Fprintf(&b, "## Receiving CPU use (Fig. 3, %s) — measured\n\n![](%s/fig3-cpu.svg)\n\n", dists[0], rel)
		b.WriteString(table(rows, "drop-rate", dists[0], o.Sizes, func(r Row) string { return fmt.Sprintf("%.0f%%", r.CPUPct) }))
		b.WriteString("\nCPU 1 busy during each measurement (it is saturated whenever the generator outruns the mechanism, so the useful comparison is drop rate per CPU).\n\n")
	}
	b.WriteString(targets(rows, o))
	b.WriteString(`## What the numbers say

- **XDP against netfilter** reproduces the paper's ordering: tierwall's host XDP drops several times what
  nftables and ipset drop on the same core, two orders of magnitude more than linear iptables from 16K
  rules on, and at least as much as xdp-filter wherever xdp-filter can hold the rules.
- **Large attacks (128K sources)**: tierwall's rate falls to a fraction of its 1K rate. Each packet reads
  a random key slot and a random per-CPU counter line; at 128K rules (and more so at 1M, see
  BENCHMARKS.md) those no longer stay in cache. The generator itself also slows at 128K on this box. The
  ≥ 0.9× target is missed; ARCHITECTURE.md describes the layout change (the counter in the key's cache
  line) that would address it, and why per-CPU counters were kept.
- **The emulated NIC**: its "hardware" drops run as XDP on the same two vCPUs, so here they cost what a
  host XDP drop costs, plus the redirect; the lab's modes are therefore slower than the plain pair, and
  the hybrid's advantage shows in *where* the attack is dropped (the NIC table's share, measured against
  the oracle) rather than in a higher drop rate. The model section carries that share to real hardware.
- **HTTP under attack**: on 2 vCPUs the generator occupies one CPU that nginx and the clients otherwise
  use, so no mode can keep 80% of the no-attack request rate at the generator's full rate here; the
  curves' order between modes is the meaningful part. Requests are counted by wrk (200 connections,
  5 s timeout, as the paper's weighttp), with the mitigation rules in place before the attack starts.

`)
	b.WriteString("## Beside the paper's reported values\n\n| mechanism | paper (25G, 4-core Xeon, §V-B) | here (1 veth receive core) |\n|---|---|---|\n")
	pr := func(mech string, n int) string {
		if r, ok := lookup(rows, "drop-rate", mech, "uniform", n); ok {
			return fmt.Sprintf("%.2f Mpps", r.DropMpps)
		}
		return "not run"
	}
	fmt.Fprintf(&b, "| iptables | 2.5–4.5 Mpps with few sources, ~0 beyond 4K rules | %s at 1, %s at 1K, %s at 16K |\n", pr("iptables", 1), pr("iptables", 1000), pr("iptables", 16000))
	fmt.Fprintf(&b, "| XDP on the host | ~26 Mpps up to 1K sources, ~10 Mpps at 128K (4 cores, BPF hash) | tierwall %s at 1K, %s at 128K (1 core) |\n", pr("tierwall-host", 1000), pr("tierwall-host", 128000))
	b.WriteString("| SmartNIC HW + XDP on NIC CPU | 37.2 Mpps below 512 sources, falling to the NIC CPU's ~15 Mpps | see lab-nic-hw; the table drops at XDP speed here, not line rate |\n")
	b.WriteString("| Hybrid (HW + host XDP) | above HW + NIC XDP for large attacks | see lab-hybrid |\n\n")

	if len(http) > 0 {
		b.WriteString("## HTTP requests served under attack (Fig. 4) — measured\n\n")
		for _, n := range []int{1000, 4000} {
			fmt.Fprintf(&b, "![](%s/fig4-%d.svg)\n\n", rel, n)
		}
		b.WriteString("| mechanism | attackers | attack sent (Mpps) | completed requests/s |\n|---|---:|---:|---:|\n")
		for _, r := range http {
			fmt.Fprintf(&b, "| %s | %d | %.2f | %.0f |\n", r.Mechanism, r.Sources, r.SentMpps, r.Extra)
		}
		b.WriteString("\n")
	}

	b.WriteString("## Model: a 25G hybrid (prediction, not a measurement)\n\n")
	fmt.Fprintf(&b, "From this run's measured cost per dropped packet of tierwall's host XDP at each size (receiving CPU time ÷ packets dropped), a 25G NIC at line rate (%.1f Mpps of 64-byte frames) with a K = %d hardware table and %d host cores: host-only XDP drops `min(line, cores ÷ cost)`; the hybrid drops the oracle top-K share `s` of the attack in hardware and the rest in XDP, `min(line, s·line + min((1−s)·line, cores ÷ cost))`. It ignores the NIC's queueing, RSS imbalance and memory-bandwidth limits, so it is an upper bound of the shape of Fig. 2, not a figure.\n\n", ModelLineRate/1e6, ModelK, ModelCores)
	for _, d := range dists {
		fmt.Fprintf(&b, "![](%s/model-%s.svg)\n\n", rel, d)
	}
	b.WriteString("| dist | sources | cost ns/pkt (measured) | top-512 share | MODEL host XDP Mpps | MODEL hybrid Mpps |\n|---|---:|---:|---:|---:|---:|\n")
	for i := 0; i+1 < len(model); i += 2 {
		h, y := model[i], model[i+1]
		fmt.Fprintf(&b, "| %s | %d | %.0f | %.3f | %.1f | %.1f |\n", h.Dist, h.Sources, h.Extra, y.Extra, h.DropMpps, y.DropMpps)
	}
	return b.String()
}

func table(rows []Row, fig, dist string, sizes []int, cell func(Row) string) string {
	var mechs []string
	seen := map[string]bool{}
	for _, r := range rows {
		if r.Figure == fig && r.Dist == dist && !seen[r.Mechanism] {
			seen[r.Mechanism] = true
			mechs = append(mechs, r.Mechanism)
		}
	}
	var b strings.Builder
	b.WriteString("| mechanism |")
	for _, n := range sizes {
		fmt.Fprintf(&b, " %d |", n)
	}
	b.WriteString("\n|---|")
	for range sizes {
		b.WriteString("---:|")
	}
	b.WriteString("\n")
	for _, m := range mechs {
		fmt.Fprintf(&b, "| %s |", m)
		for _, n := range sizes {
			if r, ok := lookup(rows, fig, m, dist, n); ok {
				fmt.Fprintf(&b, " %s |", cell(r))
			} else {
				b.WriteString(" — |")
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

func verdictOf(ok bool) string {
	if ok {
		return "met"
	}
	return "**missed**"
}

// targets checks the targets on this run's ratios.
func targets(rows []Row, o Options) string {
	var b strings.Builder
	b.WriteString("## Targets (ratios from this run)\n\n| target | measured | |\n|---|---|---|\n")
	get := func(m string, n int) (float64, bool) {
		r, ok := lookup(rows, "drop-rate", m, "uniform", n)
		return r.DropMpps, ok
	}
	for _, n := range o.Sizes {
		if n > 10000 {
			continue
		}
		t, ok1 := get("tierwall-host", n)
		x, ok2 := get("xdp-filter", n)
		if ok1 && ok2 && x > 0 {
			fmt.Fprintf(&b, "| tierwall host ≥ 1.0× xdp-filter at %d | %.2f× | %s |\n", n, t/x, verdictOf(t/x >= 1))
		}
	}
	if t, ok := get("tierwall-host", 16000); ok {
		best := 0.0
		for _, m := range []string{"nft-netdev", "nft-prerouting", "ipset", "iptables"} {
			if v, ok := get(m, 16000); ok && v > best {
				best = v
			}
		}
		if best > 0 {
			fmt.Fprintf(&b, "| ≥ 4× the best netfilter baseline at 16K | %.1f× | %s |\n", t/best, verdictOf(t/best >= 4))
		}
		if ip, ok := get("iptables", 16000); ok && ip > 0 {
			fmt.Fprintf(&b, "| ≥ 100× iptables at 16K | %.0f× | %s |\n", t/ip, verdictOf(t/ip >= 100))
		}
	}
	if a, ok1 := get("tierwall-host", 128000); ok1 {
		if c, ok2 := get("tierwall-host", 1000); ok2 && c > 0 {
			fmt.Fprintf(&b, "| drop rate at 128K ≥ 0.9× at 1K | %.2f× | %s |\n", a/c, verdictOf(a/c >= 0.9))
		}
	}
	for _, n := range o.Sizes {
		r, ok := lookup(rows, "drop-rate", "lab-hybrid", "gaussian", n)
		if !ok || n <= ModelK || r.Arrived <= 0 {
			continue
		}
		// The NIC table's share of the attack that reached it, against the
		// share the ideal top-K of the generated distribution would take.
		oracle := placement.OracleShare(trafgen.Weights(trafgen.Gaussian, n, 1, 1.0/6), ModelK)
		got := r.Extra / r.Arrived
		fmt.Fprintf(&b, "| hybrid, Gaussian, %d sources: NIC table absorbs ≥ 95%% of the oracle top-K share | %.1f%% of arriving attack packets vs oracle %.1f%% = %.0f%% | %s |\n", n, 100*got, 100*oracle, 100*got/oracle, verdictOf(got >= 0.95*oracle))
	}
	// Legitimate HTTP under a 1K-source attack at the generator's full
	// rate, in hybrid mode, against no attack.
	var base, full Row
	for _, r := range rows {
		if r.Figure != "http" || r.Mechanism != "lab-hybrid" || r.Sources != 1000 {
			continue
		}
		if r.SentMpps == 0 {
			base = r
		} else if r.SentMpps > full.SentMpps {
			full = r
		}
	}
	if base.Extra > 0 && full.SentMpps > 0 {
		fmt.Fprintf(&b, "| hybrid, 1K attackers at full rate (%.1f Mpps): HTTP ≥ 80%% of no attack | %.0f vs %.0f requests/s = %.0f%% | %s |\n",
			full.SentMpps, full.Extra, base.Extra, 100*full.Extra/base.Extra, verdictOf(full.Extra >= 0.8*base.Extra))
	}
	b.WriteString("\n")
	return b.String()
}
