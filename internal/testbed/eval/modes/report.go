// SPDX-License-Identifier: Apache-2.0

package modes

import (
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot/plotter"

	"github.com/tierwall/tierwall/internal/control/placement"
	"github.com/tierwall/tierwall/internal/testbed/eval/evalkit"
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
	w.Write([]string{"figure", "mechanism", "dist", "sources", "sent_mpps", "drop_mpps", "rx_cpu_pct", "extra", "arrived_mpps", "note", "lo", "hi", "cpu_lo", "cpu_hi"})
	for _, r := range rows {
		w.Write([]string{r.Figure, r.Mechanism, r.Dist, strconv.Itoa(r.Sources), evalkit.FF(r.SentMpps), evalkit.FF(r.DropMpps), evalkit.FF(r.CPUPct), evalkit.FF(r.Extra), evalkit.FF(r.Arrived), r.Note, evalkit.FF(r.Lo), evalkit.FF(r.Hi), evalkit.FF(r.CPULo), evalkit.FF(r.CPUHi)})
	}
	w.Flush()
	return w.Error()
}

func series(rows []Row, fig, dist string, y func(Row) float64) map[string]plotter.XYs {
	out := map[string]plotter.XYs{}
	for _, r := range rows {
		if r.Figure != fig || r.Dist != dist {
			continue
		}
		out[r.Mechanism] = append(out[r.Mechanism], plotter.XY{X: float64(max(r.Sources, 1)), Y: y(r)})
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

// RunMeta is what a run knows about itself that its rows do not say;
// run.json keeps it beside results.csv so the document can be written
// again from the saved results.
type RunMeta struct {
	Date    string   `json:"date"`              // UTC, 2006-01-02
	Took    string   `json:"took,omitempty"`    // the run's length
	Repeat  int      `json:"repeat"`            // measurements per drop-rate cell
	Kernel  string   `json:"kernel,omitempty"`  // uname -r of the machine that ran it
	CPUs    int      `json:"cpus,omitempty"`    // CPUs of that machine
	NICRate float64  `json:"nic_cpu_mpps"`      // the emulated NIC CPU's rate cap
	Sizes   []int    `json:"sizes"`             // attackers, in the run's order
	Dists   []string `json:"dists"`             // traffic distributions
	Comment string   `json:"comment,omitempty"` // how the file was made, if not by a run
}

// The paper's Fig. 2 values as its text states them (§V-B; the figure's
// points are not published as numbers). Each is drawn beside the series
// of ours that measures the same approach.
var paperFig2 = map[string][]evalkit.Line{
	"uniform": {
		{Name: "paper: iptables (2.5–4.5)", Like: "iptables", Paper: true, XYs: plotter.XYs{{X: 1, Y: 2.5}, {X: 1, Y: 4.5}}},
		{Name: "paper: host XDP, 4 cores", Like: "tierwall-host", Paper: true, XYs: plotter.XYs{{X: 1, Y: 26}, {X: 1000, Y: 26}, {X: 128000, Y: 10}}},
		{Name: "paper: HW + NIC-CPU XDP", Like: "lab-nic-hw", Paper: true, XYs: plotter.XYs{{X: 1, Y: 37.2}, {X: 128000, Y: 15}}},
	},
	// The text gives iptables' range for Fig. 2a and 2b alike; its other
	// numbers are not tied to a distribution.
	"gaussian": {
		{Name: "paper: iptables (2.5–4.5)", Like: "iptables", Paper: true, XYs: plotter.XYs{{X: 1, Y: 2.5}, {X: 1, Y: 4.5}}},
	},
}

// Report writes the CSV, run.json, the plots and EVALUATION.md.
func Report(dir, mdPath string, rows []Row, o Options, started time.Time) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	meta := RunMeta{Date: started.UTC().Format("2006-01-02"), Took: time.Since(started).Round(time.Second).String(),
		Repeat: max(o.Repeat, 1), CPUs: runtime.NumCPU(), NICRate: float64(NICCPURate) / 1e6, Sizes: o.Sizes}
	if k, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		meta.Kernel = strings.TrimSpace(string(k))
	}
	for _, d := range o.Dists {
		meta.Dists = append(meta.Dists, string(d))
	}
	var measured []Row
	for _, r := range rows {
		if r.Figure != "model" {
			measured = append(measured, r)
		}
	}
	all := append(append([]Row{}, measured...), modelRows(measured, meta.Dists)...)
	if err := WriteCSV(filepath.Join(dir, "results.csv"), all); err != nil {
		return fmt.Errorf("writing results: %w", err)
	}
	raw, err := json.MarshalIndent(meta, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "run.json"), append(raw, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing run.json: %w", err)
	}
	return render(dir, mdPath, measured, meta)
}

// Rerender writes the plots and EVALUATION.md again from a run's saved
// results.csv (and run.json beside it, when there is one): a change of
// text or figures needs no new run. The CSV's model rows are recomputed.
func Rerender(dir, mdPath, csvPath string) error {
	rows, err := ReadCSV(csvPath)
	if err != nil {
		return err
	}
	var measured []Row
	for _, r := range rows {
		if r.Figure != "model" {
			measured = append(measured, r)
		}
	}
	if len(measured) == 0 {
		return fmt.Errorf("reading %s: %w", csvPath, errNoRows)
	}
	var meta RunMeta
	if raw, err := os.ReadFile(filepath.Join(filepath.Dir(csvPath), "run.json")); err == nil {
		if err := json.Unmarshal(raw, &meta); err != nil {
			return fmt.Errorf("reading run.json: %w", err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("reading run.json: %w", err)
	}
	fillMeta(&meta, measured)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	return render(dir, mdPath, measured, meta)
}

var errNoRows = errors.New("no measured rows")

// fillMeta takes what run.json lacks from the rows themselves.
func fillMeta(m *RunMeta, rows []Row) {
	if len(m.Sizes) == 0 {
		seen := map[int]bool{}
		for _, r := range rows {
			if r.Figure == "drop-rate" && !seen[r.Sources] {
				seen[r.Sources] = true
				m.Sizes = append(m.Sizes, r.Sources)
			}
		}
		sort.Ints(m.Sizes)
	}
	if len(m.Dists) == 0 {
		seen := map[string]bool{}
		for _, r := range rows {
			if r.Figure == "drop-rate" && !seen[r.Dist] {
				seen[r.Dist] = true
				m.Dists = append(m.Dists, r.Dist)
			}
		}
	}
	if m.Repeat == 0 {
		for _, r := range rows {
			if _, err := fmt.Sscanf(r.Note, "median of %d", &m.Repeat); err == nil {
				break
			}
		}
	}
}

// ReadCSV reads rows written by WriteCSV.
func ReadCSV(path string) ([]Row, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading results: %w", err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	// 10 columns: a run from before the rows kept their ranges.
	if len(recs) == 0 || len(recs[0]) != 10 && len(recs[0]) != 14 || recs[0][0] != "figure" {
		return nil, fmt.Errorf("reading %s: %w", path, errNotResults)
	}
	var rows []Row
	for i, rec := range recs[1:] {
		var r Row
		var n [6]float64
		for j, k := range []int{4, 5, 6, 7, 8} {
			if n[j], err = strconv.ParseFloat(rec[k], 64); err != nil {
				return nil, fmt.Errorf("reading %s line %d: %w", path, i+2, err)
			}
		}
		if r.Sources, err = strconv.Atoi(rec[3]); err != nil {
			return nil, fmt.Errorf("reading %s line %d: %w", path, i+2, err)
		}
		r.Figure, r.Mechanism, r.Dist, r.Note = rec[0], rec[1], rec[2], rec[9]
		r.SentMpps, r.DropMpps, r.CPUPct, r.Extra, r.Arrived = n[0], n[1], n[2], n[3], n[4]
		r.Lo, r.Hi, r.CPULo, r.CPUHi = r.DropMpps, r.DropMpps, r.CPUPct, r.CPUPct
		if r.Figure == "http" {
			r.Lo, r.Hi = r.Extra, r.Extra
		}
		if len(rec) == 14 {
			for j, dst := range []*float64{&r.Lo, &r.Hi, &r.CPULo, &r.CPUHi} {
				if *dst, err = strconv.ParseFloat(rec[10+j], 64); err != nil {
					return nil, fmt.Errorf("reading %s line %d: %w", path, i+2, err)
				}
			}
		}
		rows = append(rows, r)
	}
	return rows, nil
}

var errNotResults = errors.New("not an eval results.csv (want its 14- or 10-column header)")

// render draws the figures and writes the document from measured rows.
func render(dir, mdPath string, rows []Row, meta RunMeta) error {
	dists := meta.Dists
	model := modelRows(rows, dists)
	drop := func(r Row) float64 { return r.DropMpps }
	for _, d := range dists {
		c := evalkit.Chart{Title: "Fig. 2 (" + d + " traffic): drop rate vs attacking sources — measured on veth, 1 receive core",
			XLabel: "attacking sources (log scale)", YLabel: "dropped (Mpps, log scale)", LogX: true, LogY: true,
			Lines: append(evalkit.Lines(series(rows, "drop-rate", d, drop)), paperFig2[d]...)}
		if err := c.Save(dir, "fig2-"+d); err != nil {
			return fmt.Errorf("fig2-%s: %w", d, err)
		}
		mc := evalkit.Chart{Title: "MODEL, not a measurement: 25G NIC, K=512, 4 host cores (" + d + ")",
			XLabel: "attacking sources (log scale)", YLabel: "dropped (Mpps)", LogX: true, YMin: evalkit.Zero(),
			Lines: evalkit.Lines(series(model, "model", d, drop))}
		if d == "uniform" {
			for _, l := range paperFig2[d][1:] {
				l.Like = map[string]string{"tierwall-host": "model host XDP (4 cores)", "lab-nic-hw": "lab-nic-hw"}[l.Like]
				mc.Lines = append(mc.Lines, l)
			}
		}
		if err := mc.Save(dir, "model-"+d); err != nil {
			return fmt.Errorf("model-%s: %w", d, err)
		}
	}
	if len(dists) > 0 {
		c := evalkit.Chart{Title: "Fig. 3 (" + dists[0] + "): receiving CPU busy vs attacking sources — measured",
			XLabel: "attacking sources (log scale)", YLabel: "receiving CPU busy (% of one CPU)", LogX: true, YMin: evalkit.Zero(), YMax: evalkit.Hundred(),
			Lines: evalkit.Lines(series(rows, "drop-rate", dists[0], func(r Row) float64 { return r.CPUPct }))}
		if err := c.Save(dir, "fig3-cpu"); err != nil {
			return fmt.Errorf("fig3: %w", err)
		}
	}
	if err := labCharts(dir, rows, dists); err != nil {
		return err
	}
	var http []Row
	for _, r := range rows {
		if r.Figure == "http" {
			http = append(http, r)
		}
	}
	for _, n := range httpAttackers(http) {
		s := map[string]plotter.XYs{}
		for _, r := range http {
			if r.Sources == n {
				s[r.Mechanism] = append(s[r.Mechanism], plotter.XY{X: r.SentMpps, Y: r.Extra / 1000})
			}
		}
		c := evalkit.Chart{Title: fmt.Sprintf("Fig. 4: HTTP served under attack, %d attackers — measured", n),
			XLabel: "attack rate sent (Mpps)", YLabel: "completed HTTP requests (thousands/s)", YMin: evalkit.Zero(), Lines: evalkit.Lines(s)}
		if err := c.Save(dir, fmt.Sprintf("fig4-%d", n)); err != nil {
			return fmt.Errorf("fig4-%d: %w", n, err)
		}
	}
	return os.WriteFile(mdPath, []byte(markdown(rows, model, http, meta, dir)), 0o644)
}

// httpAttackers lists the attacker counts of the HTTP rows, ascending.
func httpAttackers(http []Row) []int {
	var ns []int
	for _, r := range http {
		if !slices.Contains(ns, r.Sources) {
			ns = append(ns, r.Sources)
		}
	}
	sort.Ints(ns)
	return ns
}

func markdown(rows, model, http []Row, meta RunMeta, dir string) string {
	var b strings.Builder
	rel := filepath.Base(dir)
	when := "on " + meta.Date
	if meta.Date == "" {
		when = "(run date not recorded)"
	}
	if meta.Took != "" {
		when += ", in " + meta.Took
	}
	machine := "veth"
	if meta.CPUs > 0 {
		machine = fmt.Sprintf("%d CPUs, veth", meta.CPUs)
	}
	if meta.Kernel != "" {
		machine = "kernel " + meta.Kernel + ", " + machine
	}
	fmt.Fprintf(&b, "# Evaluation\n\nGenerated by `make eval` (`tierwall-lab eval --out %s`) %s (%s). Every number in the *measured* tables and every verdict below is computed from this one run's rows", dir, when, machine)
	if meta.Repeat > 1 {
		fmt.Fprintf(&b, " (each drop-rate cell is the median of %d measurements, range in the CSV's note column)", meta.Repeat)
	}
	fmt.Fprintf(&b, "; the *model* section is a prediction and is labelled so. Raw rows: [`%s/results.csv`](%s/results.csv); `tierwall-lab eval --from-csv %s/results.csv` writes this document and the figures again from them.\n\n", rel, rel, dir)
	b.WriteString("In the figures each mechanism keeps one colour and marker; the paper's values, where its text states them, are hollow markers on dashed lines labelled *paper*.\n\n")
	b.WriteString("## How it is measured\n\n")
	b.WriteString("- **Host mechanisms** run on a veth pair: the live-frames generator (`tierwall-lab gen`, 64-byte UDP, uniform or Gaussian over N sources, σ = N/6) transmits from CPU 0; the receiving veth uses threaded NAPI pinned to CPU 1, where the mechanism under test runs with a rule for each of the N sources. *Dropped Mpps* is the growth of the mechanism's own drop counter over the measurement divided by its length; *CPU* is CPU 1's busy share over the same window. Baselines: iptables-legacy (raw PREROUTING, one rule per source, the paper's baseline), ipset hash:ip with one iptables rule, an nftables set in prerouting and in a netdev ingress chain, xdp-filter from xdp-tools (at most 10K addresses).\n")
	b.WriteString("- **tierwall's four approaches** run on the lab (internet → emulated NIC → host): `lab-host` (the NIC stage forwards everything to the host's XDP filter), `lab-hybrid` (NIC hardware table K = 512 + host XDP), `lab-nic-hw` (table + the filter on the NIC's CPU), `lab-nic` (everything on the NIC's CPU). The lab is split as the wire and the card are from the host: CPU 0 runs the generator, the NIC stage (the wire port's NAPI) and the HTTP clients; CPU 1 runs the host: its port's NAPI, its XDP filter and nginx. The NIC stage's capacity on CPU 0 is the lab's line rate. The flood meets the card's table at the end of the wire, inside the generator's program: a frame the table drops is built, counted on its rule and never leaves, and the next frame is built in the same page (a frame dropped with XDP_DROP went back to the generator's page pool through the lock CPU 1 takes for every frame it frees, and the card's drops slowed the host). A card drop so costs CPU 0 the frame's build and the lookup, not a transmission through veth: where the table drops most of the flood, the modes with a table reach a far higher line rate (*sent*) than host-only, as a card drops at the wire's rate; the sweep of offered rates compares the modes at equal rates. Every mode looks the table up and fills it by the same placement, the modes without it ignoring its answer, as a hardware match stage costs the same whatever it holds. Frames the generator sends beyond the NIC stage's capacity are lost on the wire (*sent* against *arrived* in the CSV).")
	if meta.NICRate > 0 {
		fmt.Fprintf(&b, " The NIC CPU is modelled as slower than the host by a rate cap of %.1f Mpps (the paper's card managed ~15 Mpps against ~26 on the host); packets over it are dropped unfiltered and reported as overload, not as mitigation.", meta.NICRate)
	}
	b.WriteString(" Placement runs the paper's Listing 1 on the counters of a first half-interval of traffic before the measurement. *Host CPU* is CPU 1's busy share.\n")
	b.WriteString("- What a veth testbed cannot show: the NIC stage is XDP on a CPU of the same VM, so the line rate is what one vCPU forwards beside the generator (lab-host's *arrived* rate, under *What the numbers say*), not 25G; the table's drops cost CPU 0, not nothing, and so lower what CPU 0 can send. Absolute rates are those of one core of a small VM against the paper's 4-core Xeon and 25G card. Ratios between mechanisms measured in the same run, and the host's CPU per dropped packet, are what carry over.\n\n")

	for _, d := range meta.Dists {
		fmt.Fprintf(&b, "## Drop rate vs attackers, %s traffic (Fig. 2%s) — measured\n\n![](%s/fig2-%s.svg)\n\n", d, map[string]string{"uniform": "a", "gaussian": "b"}[d], rel, d)
		b.WriteString(table(rows, "drop-rate", d, meta.Sizes, func(r Row) string {
			s := fmt.Sprintf("%.3f", r.DropMpps)
			if strings.Contains(r.Note, "overload") {
				s += "*"
			}
			return s
		}))
		b.WriteString("\nMpps dropped. * the NIC CPU also dropped packets unfiltered for overload (see the CSV's note column).")
		if len(paperFig2[d]) > 0 {
			b.WriteString(" Dashed, hollow: the values the paper's text gives (25G, 4-core Xeon); the figure's log scale puts them beside ours.")
		}
		b.WriteString("\n\n")
	}
	if len(meta.Dists) > 0 {
		fmt.Fprintf(&b, "## Receiving CPU use (Fig. 3, %s) — measured\n\n![](%s/fig3-cpu.svg)\n\n", meta.Dists[0], rel)
		b.WriteString(table(rows, "drop-rate", meta.Dists[0], meta.Sizes, func(r Row) string { return fmt.Sprintf("%.0f%%", r.CPUPct) }))
		b.WriteString("\nCPU 1 busy during each measurement. The paper's text gives no numbers for its Fig. 3, so none are drawn.\n\n")
	}
	b.WriteString(labSections(rows, meta, rel))
	b.WriteString(targets(rows, meta.Sizes, meta.Dists))
	b.WriteString("## What the numbers say\n\n")
	b.WriteString(findings(rows, meta.Sizes))
	b.WriteString("\n")

	b.WriteString("## Beside the paper's reported values\n\n| mechanism | paper (25G, 4-core Xeon, §V-B) | here (1 veth receive core) |\n|---|---|---|\n")
	pr := func(mech string, ns ...int) string {
		var parts []string
		for _, n := range ns {
			if r, ok := lookup(rows, "drop-rate", mech, "uniform", n); ok {
				parts = append(parts, fmt.Sprintf("%.2f Mpps at %s", r.DropMpps, sizeName(n)))
			}
		}
		if len(parts) == 0 {
			return "not measured in this run"
		}
		return mech + " " + strings.Join(parts, ", ")
	}
	fmt.Fprintf(&b, "| iptables | 2.5–4.5 Mpps with few sources, ~0 beyond 4K rules | %s |\n", pr("iptables", 1, 1000, 16000))
	fmt.Fprintf(&b, "| XDP on the host | ~26 Mpps up to 1K sources, ~10 Mpps at 128K (4 cores, BPF hash) | %s (1 core) |\n", pr("tierwall-host", 1000, 128000))
	fmt.Fprintf(&b, "| SmartNIC HW + XDP on NIC CPU | 37.2 Mpps below 512 sources, falling to the NIC CPU's ~15 Mpps | %s (the table drops at XDP speed here, not line rate) |\n", pr("lab-nic-hw", 1, 128000))
	fmt.Fprintf(&b, "| Hybrid (HW + host XDP) | above HW + NIC XDP for large attacks | %s |\n\n", hybridVsNIC(rows, meta.Sizes))

	if len(http) > 0 {
		b.WriteString("## HTTP requests served under attack (Fig. 4) — measured\n\n")
		for _, n := range httpAttackers(http) {
			fmt.Fprintf(&b, "![](%s/fig4-%d.svg)\n\n", rel, n)
		}
		b.WriteString("The paper's text gives thresholds for its Fig. 4 (the NIC CPU's 15 Mpps, the host's 25 Mpps), not request rates, so no paper values are drawn. Requests are counted by wrk (200 connections, 5 s timeout, as the paper's weighttp), with the mitigation rules in place before the attack starts.\n\n")
		b.WriteString("| mechanism | attackers | attack sent (Mpps) | completed requests/s |\n|---|---:|---:|---:|\n")
		for _, r := range http {
			fmt.Fprintf(&b, "| %s | %d | %.2f | %.0f |\n", r.Mechanism, r.Sources, r.SentMpps, r.Extra)
		}
		b.WriteString("\n")
	}

	if len(model) > 0 {
		b.WriteString("## Model: a 25G hybrid (prediction, not a measurement)\n\n")
		fmt.Fprintf(&b, "From this run's measured cost per dropped packet of tierwall's host XDP at each size (receiving CPU time ÷ packets dropped), a 25G NIC at line rate (%.1f Mpps of 64-byte frames) with a K = %d hardware table and %d host cores: host-only XDP drops `min(line, cores ÷ cost)`; the hybrid drops the oracle top-K share `s` of the attack in hardware and the rest in XDP, `min(line, s·line + min((1−s)·line, cores ÷ cost))`. It ignores the NIC's queueing, RSS imbalance and memory-bandwidth limits, so it is an upper bound of the shape of Fig. 2, not a figure. The uniform chart draws the paper's measured host XDP and HW + NIC XDP values beside it.\n\n", ModelLineRate/1e6, ModelK, ModelCores)
		for _, d := range meta.Dists {
			fmt.Fprintf(&b, "![](%s/model-%s.svg)\n\n", rel, d)
		}
		b.WriteString("| dist | sources | cost ns/pkt (measured) | top-512 share | MODEL host XDP Mpps | MODEL hybrid Mpps |\n|---|---:|---:|---:|---:|---:|\n")
		for i := 0; i+1 < len(model); i += 2 {
			h, y := model[i], model[i+1]
			fmt.Fprintf(&b, "| %s | %d | %.0f | %.3f | %.1f | %.1f |\n", h.Dist, h.Sources, h.Extra, y.Extra, h.DropMpps, y.DropMpps)
		}
		b.WriteString("\n")
		b.WriteString(modelCheck(rows, meta.Sizes, meta.Dists))
	}
	return b.String()
}

// sizeName writes an attacker count the way the tables' prose does: 1K,
// 128K.
func sizeName(n int) string {
	if n >= 1000 && n%1000 == 0 {
		return fmt.Sprintf("%dK", n/1000)
	}
	return strconv.Itoa(n)
}

// hybridVsNIC says, from this run, whether the hybrid dropped more than
// HW + NIC XDP at the sizes above K, as the paper found for large attacks.
func hybridVsNIC(rows []Row, sizes []int) string {
	var above, below []string
	for _, d := range []string{"uniform", "gaussian"} {
		for _, n := range sizes {
			h, ok1 := lookup(rows, "drop-rate", "lab-hybrid", d, n)
			c, ok2 := lookup(rows, "drop-rate", "lab-nic-hw", d, n)
			if !ok1 || !ok2 || n <= ModelK || c.DropMpps <= 0 {
				continue
			}
			s := fmt.Sprintf("%s %s %.2f×", d, sizeName(n), h.DropMpps/c.DropMpps)
			if h.DropMpps > c.DropMpps {
				above = append(above, s)
			} else {
				below = append(below, s)
			}
		}
	}
	switch {
	case len(above) == 0 && len(below) == 0:
		return "not measured in this run"
	case len(below) == 0:
		return "lab-hybrid above lab-nic-hw at every size above K: " + strings.Join(above, ", ")
	case len(above) == 0:
		return "lab-hybrid **not** above lab-nic-hw at any size above K: " + strings.Join(below, ", ")
	}
	return "lab-hybrid above lab-nic-hw at " + strings.Join(above, ", ") + "; **not** above at " + strings.Join(below, ", ")
}

// findings is the discussion: every number and verdict in it is computed
// from the rows, and a point whose rows are missing is left out.
func findings(rows []Row, sizes []int) string {
	var b strings.Builder
	get := func(m string, n int) (Row, bool) { return lookup(rows, "drop-rate", m, "uniform", n) }
	netfilter := []string{"nft-netdev", "nft-prerouting", "ipset", "iptables"}

	// XDP against netfilter, at every size where both ran.
	var lo, hi float64
	var loN, hiN, nf int
	lowest := math.Inf(1)
	for _, n := range sizes {
		t, ok := get("tierwall-host", n)
		if !ok {
			continue
		}
		best := 0.0
		for _, m := range netfilter[:3] {
			if r, ok := get(m, n); ok && r.DropMpps > best {
				best = r.DropMpps
			}
		}
		if best <= 0 {
			continue
		}
		ratio := t.DropMpps / best
		if nf == 0 || ratio < lo {
			lo, loN = ratio, n
		}
		if nf == 0 || ratio > hi {
			hi, hiN = ratio, n
		}
		lowest = math.Min(lowest, ratio)
		nf++
	}
	if nf > 0 {
		verb := "drops more than"
		if lowest < 1 {
			verb = "does **not** always drop more than"
		}
		fmt.Fprintf(&b, "- **XDP against netfilter** (uniform): tierwall's host XDP %s the best of nftables and ipset on the same core at each of %d sizes: from %.1f× (%s sources) to %.1f× (%s).", verb, nf, lo, sizeName(loN), hi, sizeName(hiN))
		var big int
		for _, n := range sizes {
			if _, ok := get("iptables", n); ok {
				if _, ok := get("tierwall-host", n); ok && n > big {
					big = n
				}
			}
		}
		if ip, _ := get("iptables", big); big > 0 && ip.DropMpps > 0 {
			t, _ := get("tierwall-host", big)
			fmt.Fprintf(&b, " Linear iptables at %s rules: %.3f Mpps, %.0f× less than tierwall.", sizeName(big), ip.DropMpps, t.DropMpps/ip.DropMpps)
		}
		b.WriteString("\n")
	}

	// Against xdp-filter, wherever it could hold the rules.
	var ge, lt []string
	for _, n := range sizes {
		t, ok1 := get("tierwall-host", n)
		x, ok2 := get("xdp-filter", n)
		if !ok1 || !ok2 || x.DropMpps <= 0 {
			continue
		}
		s := fmt.Sprintf("%s (%.2f×)", sizeName(n), t.DropMpps/x.DropMpps)
		if t.DropMpps >= x.DropMpps {
			ge = append(ge, s)
		} else {
			lt = append(lt, s)
		}
	}
	switch {
	case len(ge) > 0 && len(lt) == 0:
		fmt.Fprintf(&b, "- **Against xdp-filter**: tierwall drops at least as much at every size xdp-filter can hold (%s).\n", strings.Join(ge, ", "))
	case len(lt) > 0 && len(ge) == 0:
		fmt.Fprintf(&b, "- **Against xdp-filter**: tierwall drops **less** at every size xdp-filter can hold (%s).\n", strings.Join(lt, ", "))
	case len(lt) > 0:
		fmt.Fprintf(&b, "- **Against xdp-filter**: tierwall drops at least as much at %s, and **less** at %s. The cells' ranges (CSV note column) say how much of that is run-to-run noise.\n", strings.Join(ge, ", "), strings.Join(lt, ", "))
	}

	// Large attacks.
	if a, ok1 := get("tierwall-host", 128000); ok1 {
		if c, ok2 := get("tierwall-host", 1000); ok2 && c.DropMpps > 0 {
			ratio := a.DropMpps / c.DropMpps
			fmt.Fprintf(&b, "- **Large attacks (128K sources)**: tierwall's host XDP drops %.2f× its 1K rate (%.2f against %.2f Mpps); the ≥ 0.9× target is %s.", ratio, a.DropMpps, c.DropMpps, strings.Trim(verdictOf(ratio >= 0.9), "*"))
			if c.SentMpps > 0 {
				sr := a.SentMpps / c.SentMpps
				fmt.Fprintf(&b, " The generator sent %.2f Mpps at 128K against %.2f at 1K (%.2f×)", a.SentMpps, c.SentMpps, sr)
				if sr < 0.95 {
					b.WriteString(", so part of the fall is the sender's.")
				} else {
					b.WriteString(": the sender did not slow.")
				}
			}
			if a.Arrived > 0 && c.Arrived > 0 {
				// The plain pair's receiver ring: what it took against what
				// was sent; the rest was refused while it was full.
				fmt.Fprintf(&b, " The receiver's veth ring took %.2f Mpps at 128K and %.2f at 1K (%.0f%% and %.0f%% of what was sent; the rest was refused while the ring was full) with its CPU %.0f%% and %.0f%% busy: it loses frames while its NAPI thread waits to be woken, not at the limit of its CPU.",
					a.Arrived, c.Arrived, 100*a.Arrived/a.SentMpps, 100*c.Arrived/c.SentMpps, a.CPUPct, c.CPUPct)
			}
			if a.CPUPct > 0 && c.CPUPct > 0 && c.SentMpps > 0 {
				// Were the receiver never idle: its drops at its busy
				// share, scaled to the whole CPU; the 1K cell capped by
				// what the sender sent.
				full := a.DropMpps / (a.CPUPct / 100)
				ref := min(c.DropMpps/(c.CPUPct/100), c.SentMpps)
				fr := full / ref
				fmt.Fprintf(&b, " Never idle, the receiver's CPU would drop about %.2f Mpps at 128K (drops ÷ busy share), %.2f× the %.2f Mpps the 1K cell could reach (the lesser of the same figure at 1K and what the sender sent there)", full, fr, ref)
				if fr < 0.9 {
					b.WriteString(": a receiver that never waits would still miss the target; the per-packet path at 128K has to get shorter.")
				} else {
					b.WriteString(": a receiver that never waits would meet the target.")
				}
			}
			if ratio < 0.9 {
				b.WriteString(" ARCHITECTURE.md (exact tables) discusses the per-packet memory reads behind it: a random slot, with its rule's counters, in a table that stops fitting in cache, and the locked add that counts it.")
			}
			b.WriteString("\n")
		}
	}

	// The lab's line rate: what the NIC stage forwards on CPU 0.
	var lr, arr []float64
	for _, n := range sizes {
		l, ok1 := get("lab-host", n)
		t, ok2 := get("tierwall-host", n)
		if ok1 && ok2 && t.DropMpps > 0 {
			lr = append(lr, l.DropMpps/t.DropMpps)
			arr = append(arr, l.Arrived)
		}
	}
	if len(lr) > 0 {
		fmt.Fprintf(&b, "- **The lab's line rate**: on the lab the NIC stage shares CPU 0 with the generator, and what it forwards there (%.2f–%.2f Mpps arrived in lab-host) caps every mode, so lab-host drops %.2f× to %.2f× of tierwall on the plain pair, whose receiver has a CPU of its own. What carries over to a real NIC is where the packets are dropped and what each costs the host: the host CPU per dropped packet above.\n",
			slices.Min(arr), slices.Max(arr), slices.Min(lr), slices.Max(lr))
	}

	// HTTP at the generator's full rate against no attack.
	var kept, lost []string
	for _, n := range httpAttackers(httpRows(rows)) {
		for _, m := range mechanismsOf(rows, "http") {
			base, full, ok := httpPair(rows, m, n)
			if !ok {
				continue
			}
			s := fmt.Sprintf("%s %s %.0f%%", m, sizeName(n), 100*full.Extra/base.Extra)
			if full.Extra >= 0.8*base.Extra {
				kept = append(kept, s)
			} else {
				lost = append(lost, s)
			}
		}
	}
	switch {
	case len(kept) == 0 && len(lost) > 0:
		fmt.Fprintf(&b, "- **HTTP under attack**: at the generator's full rate no mode kept 80%% of its no-attack request rate (%s). At full rate the generator fills CPU 0, which the clients share with it and with the NIC stage.\n", strings.Join(lost, ", "))
	case len(kept) > 0 && len(lost) == 0:
		fmt.Fprintf(&b, "- **HTTP under attack**: at the generator's full rate every mode kept at least 80%% of its no-attack request rate (%s).\n", strings.Join(kept, ", "))
	case len(kept) > 0:
		fmt.Fprintf(&b, "- **HTTP under attack**: at the generator's full rate these kept at least 80%% of their no-attack request rate: %s; these did not: %s.\n", strings.Join(kept, ", "), strings.Join(lost, ", "))
	}
	if b.Len() == 0 {
		return "Not measured in this run: the rows needed for a comparison are absent.\n"
	}
	return b.String()
}

func httpRows(rows []Row) []Row {
	var out []Row
	for _, r := range rows {
		if r.Figure == "http" {
			out = append(out, r)
		}
	}
	return out
}

func mechanismsOf(rows []Row, fig string) []string {
	var ms []string
	for _, r := range rows {
		if r.Figure == fig && !slices.Contains(ms, r.Mechanism) {
			ms = append(ms, r.Mechanism)
		}
	}
	return ms
}

// httpPair is a mechanism's no-attack row and its full-rate (highest
// sent) row at n attackers.
func httpPair(rows []Row, mech string, n int) (base, full Row, ok bool) {
	for _, r := range rows {
		if r.Figure != "http" || r.Mechanism != mech || r.Sources != n {
			continue
		}
		if r.SentMpps == 0 {
			base = r
		} else if r.SentMpps > full.SentMpps {
			full = r
		}
	}
	return base, full, base.Extra > 0 && full.SentMpps > 0
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
func targets(rows []Row, sizes []int, dists []string) string {
	var b strings.Builder
	b.WriteString("## Targets (ratios from this run)\n\n| target | measured | |\n|---|---|---|\n")
	get := func(m string, n int) (float64, bool) {
		r, ok := lookup(rows, "drop-rate", m, "uniform", n)
		return r.DropMpps, ok
	}
	for _, n := range sizes {
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
	for _, n := range sizes {
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
	if base, full, ok := httpPair(rows, "lab-hybrid", 1000); ok {
		fmt.Fprintf(&b, "| hybrid, 1K attackers at full rate (%.1f Mpps): HTTP ≥ 80%% of no attack | %.0f vs %.0f requests/s = %.0f%% | %s |\n",
			full.SentMpps, full.Extra, base.Extra, 100*full.Extra/base.Extra, verdictOf(full.Extra >= 0.8*base.Extra))
	}
	b.WriteString(labTargets(rows, sizes, dists))
	b.WriteString("\n")
	return b.String()
}
