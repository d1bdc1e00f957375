// SPDX-License-Identifier: Apache-2.0

package flows

import (
	"encoding/csv"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tierwall/tierwall/internal/testbed/eval/evalkit"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// The authors' published values (../shared/papers/deri2024-artefact-results.md),
// per active-flow count (1K, 10K, 100K, 1M), as printed there.
var deriActives = []int{1000, 10000, 100000, 1000000}

type deriRow struct {
	what          string
	none, offload [4]string
}

var deriValues = []deriRow{
	{"passive, 10 Mpps × 970 B, CPU load per core", [4]string{"2", "2.5", "4.5", "28"}, [4]string{"<1", "<1", "<1", "10"}},
	{"passive, 89 Mpps × 60 B, packet loss", [4]string{"0", "0", "0", "24"}, [4]string{"0", "0", "0", "0"}},
	{"passive, 89 Mpps × 60 B, CPU load per core", [4]string{"32", "35", "58", "100"}, [4]string{"<1", "<1", "17", "82"}},
	{"passive, 89 Mpps, without nDPI, packet loss", [4]string{"0", "0", "0", "0"}, [4]string{"0", "0", "0", "0"}},
	{"passive, 89 Mpps, without nDPI, CPU load", [4]string{"33", "31", "36", "87"}, [4]string{"<1", "<1", "23", "46"}},
	{"inline, 10 Mpps, CPU load (start → steady)", [4]string{"16→11", "20→15", "27→24", "42→32"}, [4]string{"<1", "<1", "<1", "13→6"}},
	{"inline, 89 Mpps, packet loss", [4]string{"0", "0", "<1", "32"}, [4]string{"0", "0", "0", "0"}},
}

// cell is the measured cell an authors' row compares with: mode, frame
// size (970 for their 10 Mpps runs, 64 for 89 Mpps), DPI, and whether it
// is a loss row (else CPU).
func (d deriRow) cell() (mode string, size int, dpi, isLoss bool) {
	mode, size, dpi, isLoss = "passive", 64, true, strings.Contains(d.what, "loss")
	if strings.HasPrefix(d.what, "inline") {
		mode = "inline"
	}
	if strings.Contains(d.what, "970") || strings.Contains(d.what, "10 Mpps") {
		size = 970
	}
	if strings.Contains(d.what, "without nDPI") {
		dpi = false
	}
	return mode, size, dpi, isLoss
}

// deriLines are the authors' values as chart series beside the cells of
// ours they compare with; values given as "<1" are not drawn, and an
// inline "start→steady" pair is drawn at steady (our figure's phase).
func deriLines(loss bool) []evalkit.Line {
	var out []evalkit.Line
	for _, d := range deriValues {
		mode, size, dpi, isLoss := d.cell()
		if isLoss != loss {
			continue
		}
		for _, offload := range []bool{false, true} {
			vals := d.none
			if offload {
				vals = d.offload
			}
			like := label(Row{FlowCell: FlowCell{Mode: mode, Size: size, Offload: offload, DPI: dpi}})
			l := evalkit.Line{Like: like, Paper: true}
			rate := strings.TrimSpace(strings.SplitN(d.what, ",", 3)[1])
			rate, _, _ = strings.Cut(rate, " ×")
			l.Name = fmt.Sprintf("paper %s: %s", rate, like)
			for i, v := range vals {
				if k := strings.LastIndex(v, "→"); k >= 0 {
					v = v[k+len("→"):]
				}
				if f, err := strconv.ParseFloat(v, 64); err == nil {
					l.XYs = append(l.XYs, plotter.XY{X: float64(deriActives[i]), Y: f})
				}
			}
			if len(l.XYs) > 0 {
				out = append(out, l)
			}
		}
	}
	return out
}

// ours is the measured row matching one of the authors' rows: mode, size
// (970 for their 10 Mpps runs, 64 for 89 Mpps), DPI, and what to show.
func ours(rows []Row, mode string, size int, dpi, offload bool, active int, f func(Row) string) string {
	for _, r := range rows {
		if r.Mode == mode && r.Size == size && r.DPI == dpi && r.Offload == offload && r.Active == active {
			return f(r)
		}
	}
	return "–"
}

func pct(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v < 0.01:
		return "<0.01"
	case v < 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

func cpuPct(c CPUShare) string { return pct(100 * c.Host) }

// WriteCSV writes one line per cell.
func WriteCSV(path string, rows []Row) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	w := csv.NewWriter(f)
	w.Write([]string{"mode", "size", "active", "offload", "dpi", "sent", "born", "gen_mpps",
		"host_cpu_start", "xdp_start", "probe_start", "host_cpu_steady", "xdp_steady", "probe_steady",
		"nic_xdp_steady", "nic_fw_steady", "cpu1_busy_steady",
		"nic_seen", "nic_consumed", "nic_twin", "to_host", "host_seen", "untracked", "dpi_lost_samples",
		"records", "export_lost", "socket_drops", "collected", "collected_flows", "loss_pct",
		"wire_loss", "host_ring_loss", "learn_done", "learn_failed", "learn_queue_full", "dpi_skipped",
		"probe_idle_rss", "probe_max_rss", "peak_flows"})
	u := func(v uint64) string { return strconv.FormatUint(v, 10) }
	for _, r := range rows {
		w.Write([]string{r.Mode, strconv.Itoa(r.Size), strconv.Itoa(r.Active), strconv.FormatBool(r.Offload), strconv.FormatBool(r.DPI),
			u(r.Sent), u(r.Born), evalkit.FF(r.Steady.Mpps),
			evalkit.FF(r.Start.Host), evalkit.FF(r.Start.XDP), evalkit.FF(r.Start.Probe),
			evalkit.FF(r.Steady.Host), evalkit.FF(r.Steady.XDP), evalkit.FF(r.Steady.Probe),
			evalkit.FF(r.Steady.NICXDP), evalkit.FF(r.Steady.Firmware), evalkit.FF(r.Steady.CPU1Busy),
			u(r.NICSeen), u(r.NICConsumed), u(r.NICTwin), u(r.ToHost), u(r.HostSeen), u(r.Untracked), u(r.DPILost),
			u(r.Records), u(r.ExportLost), u(r.SocketDrops), u(r.Collected), u(r.CollectedFl), evalkit.FF(r.LossPct()),
			u(r.WireLoss()), u(r.HostRingLoss()), u(r.LearnDone), u(r.LearnFailed), u(r.LearnQueue), u(r.DPISkipped),
			u(r.IdleRSS), u(r.MaxRSS), strconv.Itoa(r.PeakFlows)})
	}
	w.Flush()
	return w.Error()
}

func label(r Row) string {
	s := fmt.Sprintf("%s %dB", r.Mode, r.Size)
	if r.Offload {
		s += " offload"
	} else {
		s += " no offload"
	}
	if !r.DPI {
		s += " no DPI"
	}
	return s
}

// The flows figures' looks: colour by mode and frame, marker by offload and
// DPI, so that "filled circle" reads as "offload, DPI" in every line.
func init() {
	n := len(evalkit.Styles)
	for i, mode := range []string{"passive", "inline"} {
		for j, size := range []int{64, 970} {
			for k, cell := range []struct{ offload, dpi bool }{{true, true}, {true, false}, {false, true}, {false, false}} {
				name := label(Row{FlowCell: FlowCell{Mode: mode, Size: size, Offload: cell.offload, DPI: cell.dpi}})
				evalkit.Styles[name] = evalkit.Style{Order: n, Color: evalkit.Palette[2*i+j], Glyph: []draw.GlyphDrawer{draw.CircleGlyph{}, draw.BoxGlyph{}, draw.CrossGlyph{}, draw.PlusGlyph{}}[k]}
				n++
			}
		}
	}
}

// Report writes flows.csv, the plots and the evaluation document.
func Report(dir, mdPath string, rows []Row, p Params, started time.Time) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := WriteCSV(filepath.Join(dir, "flows.csv"), rows); err != nil {
		return err
	}
	cpu, loss := map[string]plotter.XYs{}, map[string]plotter.XYs{}
	for _, r := range rows {
		cpu[label(r)] = append(cpu[label(r)], plotter.XY{X: float64(r.Active), Y: 100 * r.Steady.Host})
		loss[label(r)] = append(loss[label(r)], plotter.XY{X: float64(r.Active), Y: r.LossPct()})
	}
	for _, m := range []map[string]plotter.XYs{cpu, loss} {
		for k := range m {
			sort.Slice(m[k], func(i, j int) bool { return m[k][i].X < m[k][j].X })
		}
	}
	c := evalkit.Chart{Title: "Host CPU (steady state) vs active flows — measured, 2 vCPUs", XLabel: "active flows (log scale)",
		YLabel: "host CPU (% of one CPU; authors: % per core)", LogX: true, YMin: evalkit.Zero(), Lines: append(evalkit.Lines(cpu), deriLines(false)...), LegendW: 3.9 * vg.Inch}
	if err := c.Save(dir, "flows-cpu"); err != nil {
		return fmt.Errorf("flows-cpu: %w", err)
	}
	c = evalkit.Chart{Title: "Packet loss vs active flows — measured, 2 vCPUs", XLabel: "active flows (log scale)",
		YLabel: "packets lost (% of packets sent)", LogX: true, YMin: evalkit.Zero(), Lines: append(evalkit.Lines(loss), deriLines(true)...), LegendW: 3.9 * vg.Inch}
	if err := c.Save(dir, "flows-loss"); err != nil {
		return fmt.Errorf("flows-loss: %w", err)
	}
	return os.WriteFile(mdPath, []byte(flowsMarkdown(rows, p, dir, started)), 0o644)
}

// find returns the row of a cell.
func find(rows []Row, c FlowCell) (Row, bool) {
	for _, r := range rows {
		if r.FlowCell == c {
			return r, true
		}
	}
	return Row{}, false
}

func flowsMarkdown(rows []Row, p Params, dir string, started time.Time) string {
	var b strings.Builder
	rel := filepath.Base(dir)
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Fprintf(&b, "# Hardware flow offload on this machine (Deri et al., HPSR 2024)\n\n")
	if p.Header != "" {
		b.WriteString(p.Header + "\n\n")
	} else {
		fmt.Fprintf(&b, "Generated by `make eval-flows` (`bin/tierwall-lab eval-flows`) on %s in %s; %d CPUs, load average at the end %s. "+
			"Raw rows: [`%s/flows.csv`](%s/flows.csv), [`%s/flows.json`](%s/flows.json). Every number below was measured in this one run.\n\n",
			started.UTC().Format("2006-01-02 15:04 MST"), time.Since(started).Round(time.Second), runtime.NumCPU(), strings.Join(strings.Fields(string(load))[:3], " "),
			rel, rel, rel, rel)
	}

	b.WriteString("## The experiment\n\n")
	b.WriteString("The talk's experiment, scaled to a 2-vCPU VM. The probe lab (`internal/testbed/lab/probe.go`): the flow generator " +
		"(`tierwall-lab gen --flows N`, XDP live frames) transmits into the wire veth; the emulated NIC's flow stage (`bpf/nic/xdp_nicflow.c`) " +
		"runs on the wire's NAPI and either handles a packet (a learned flow: counted per direction, then consumed in passive mode or " +
		"sent out of the twin port inline) or hands it to the host marked miss/unhandled; the host runs `tierwall run` in the probe role " +
		"(XDP flow tier, DPI on the first 10 packets, learning into the NIC, IPFIX export to a real nfcapd on the host's loopback).\n\n")
	b.WriteString("- **CPU placement.** The generator and the NIC stage share CPU 0 (the generator's frames wake the wire's NAPI on the CPU that sends them); " +
		"the emulated NIC's firmware thread (`tw-nic-firmware`) is pinned there too. The probe process is confined to CPU 1 (`taskset`). " +
		"The probe's XDP program runs where the NIC stage's redirect wakes the host veth, which is CPU 0: the issue asked for the host on CPU 1, " +
		"but threaded NAPI pinned to CPU 1 on the host veth (a veth receiving redirected frames) lost packets on this kernel even at a paced " +
		"50 Kpps when the lab was built (a check outside these runs, not repeated here), so the lab does not use it, and the host's XDP time is " +
		"measured by BPF run-time statistics wherever it runs. What this changes: a busy host slows the generator (same CPU) instead of " +
		"dropping at its ring, so compare the *sent Mpps* column too.\n")
	fmt.Fprintf(&b, "- **Traffic.** TCP flows with handshakes and FINs, HTTP and TLS alternating (so DPI has something to identify), "+
		"a sliding window of *active* flows with a birth rate of active ÷ 10 per second (flows live 10 s on average, as in the authors' runs), "+
		"64-byte and 970-byte frames, as fast as the generator goes on its CPU, %v per run.\n", p.Duration)
	b.WriteString("- **Host CPU** is the probe's XDP program (its run time from BPF run-time statistics) plus the probe process " +
		"(every thread but the NIC firmware's, from `/proc/<pid>/task/*/schedstat`), as a share of one CPU. The veth's own receive work " +
		"around the program is not in it (it cannot be told apart from the NIC stage's on CPU 0). " +
		"*Start* is the first half of a run (the window's flows are all new), *steady* the second half.\n")
	b.WriteString("- **Loss** is exact: the generator's count of frames that left against the packets in nfcapd's file (read back with `nfdump`). " +
		"Each place a packet can be lost is counted apart: the wire's ring (sent, never seen by the NIC stage), the host's ring (sent to the host " +
		"by the NIC, never seen by the probe's XDP), the software table full (untracked), records dropped by the exporter, datagrams " +
		"the collector's socket refused.\n")
	b.WriteString("- **Offload off** is the same path with the policy `default: software`: the NIC learns nothing and every packet is the host's. " +
		"**DPI off** is `dpi.engine: none`: flows are decided (and learned) at their first packet.\n\n")

	b.WriteString("## Results\n\n")
	fmt.Fprintf(&b, "![host CPU](%s/flows-cpu.png) ![loss](%s/flows-loss.png)\n\n", rel, rel)
	b.WriteString("| mode | frame | active flows | offload | DPI | sent Mpps | pkts/flow | host CPU start % | host CPU steady % | XDP % | probe % | NIC fw % | loss % | collector = generator | probe RSS MB |\n")
	b.WriteString("|---|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|\n")
	yn := func(v bool) string {
		if v {
			return "yes"
		}
		return "no"
	}
	for _, r := range rows {
		ppf := 0.0
		if r.Born > 0 {
			ppf = float64(r.Sent) / float64(r.Born)
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %s | %s | %.2f | %.0f | %s | %s | %s | %s | %s | %s | %s | %d |\n",
			r.Mode, r.Size, r.Active, yn(r.Offload), yn(r.DPI), r.Steady.Mpps, ppf, cpuPct(r.Start), cpuPct(r.Steady),
			pct(100*r.Steady.XDP), pct(100*r.Steady.Probe), pct(100*r.Steady.Firmware), pct(r.LossPct()), yn(r.Collected == r.Sent), r.MaxRSS>>20)
	}
	b.WriteString("\n")

	b.WriteString("### Where packets were lost\n\n")
	b.WriteString("| cell | sent | collected | wire ring | host ring | untracked (table full) | records dropped by the exporter | collector socket drops | DPI samples the ring refused |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	any := false
	for _, r := range rows {
		if r.Collected == r.Sent && r.ExportLost == 0 && r.SocketDrops == 0 && r.DPILost == 0 {
			continue
		}
		any = true
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %d | %d | %d |\n", r.FlowCell, r.Sent, r.Collected, r.WireLoss(), r.HostRingLoss(),
			r.Untracked, r.ExportLost, r.SocketDrops, r.DPILost)
	}
	if !any {
		b.WriteString("| (none: every run was lossless) | | | | | | | | |\n")
	}
	b.WriteString("\nThe host ring is where a host that cannot keep up loses packets: the NIC stage's redirect into the host veth finds its ring full. " +
		"A lost DPI sample loses no packet (the flow is counted in XDP); DPI decides without it.\n\n")

	b.WriteString("## Targets\n\n")
	flowsTargets(&b, rows)

	b.WriteString("\n## Beside the authors' values\n\n")
	b.WriteString("The authors' columns are a 16-core Xeon with a Napatech NT200A02 at 10 Mpps (970 B) and 89 Mpps (60 B), from " +
		"`deri2024-artefact-results.md`; ours are this VM at the rates in the table above (one host CPU, a generator sharing a CPU with the NIC). " +
		"Absolute values cannot compare (CPU per core of 16 against one CPU; 89 Mpps against about one); the shapes can: how CPU and loss move with the " +
		"number of flows, and what offload changes. Ours: 970-byte frames for their 10 Mpps rows, 64-byte frames for their 89 Mpps rows; *steady* CPU.\n\n")
	b.WriteString("| case | active flows | authors: no offload | ours: no offload | authors: offload | ours: offload |\n|---|---:|---:|---:|---:|---:|\n")
	for _, d := range deriValues {
		mode, size, dpi, isLoss := d.cell()
		f := func(r Row) string {
			if isLoss {
				return pct(r.LossPct())
			}
			if mode == "inline" {
				return cpuPct(r.Start) + "→" + cpuPct(r.Steady)
			}
			return cpuPct(r.Steady)
		}
		for i, a := range deriActives {
			fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s |\n", d.what, a, d.none[i], ours(rows, mode, size, dpi, false, a, f), d.offload[i], ours(rows, mode, size, dpi, true, a, f))
		}
	}
	b.WriteString("\n## Memory of the probe per flow\n\n")
	b.WriteString("The probe's peak RSS less its RSS before traffic, over the most flows its sweep saw at once (software flows, offloaded ones included). " +
		"The XDP flow table and the NIC's table are BPF maps sized by configuration (capacity, preallocated for the software tier), outside RSS. " +
		"With few flows fixed allocations dominate (the 16 MB sample ring, the export queue, indexes sized by capacity), so only the " +
		"largest rows say what a flow costs; the authors' probe grew from 0.5 GB at 1K flows to 17.1 GB at 10M, about 1.7 KB per flow.\n\n")
	b.WriteString("| cell | peak software flows | RSS before MB | peak RSS MB | bytes per flow |\n|---|---:|---:|---:|---:|\n")
	for _, r := range rows {
		if r.PeakFlows == 0 {
			continue
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d |\n", r.FlowCell, r.PeakFlows, r.IdleRSS>>20, r.MaxRSS>>20, sub(r.MaxRSS, r.IdleRSS)/uint64(r.PeakFlows))
	}
	b.WriteString("\n## What two vCPUs can and cannot show\n\n")
	b.WriteString(flowsFindings(rows))
	return b.String()
}

// flowsFindings is the discussion: every number and verdict in it comes
// from the rows; a point whose rows are missing is left out.
func flowsFindings(rows []Row) string {
	var b strings.Builder
	if len(rows) == 0 {
		return "Not measured in this run: no cells.\n"
	}
	var sent []float64
	for _, r := range rows {
		sent = append(sent, r.Steady.Mpps)
	}
	lo, hi := slices.Min(sent), slices.Max(sent)
	fmt.Fprintf(&b, "- **Rates.** One CPU generates and runs the NIC stage, so the offered load was %.2f–%.2f Mpps (steady half, per cell), "+
		"not the authors' 89 Mpps: the host is loaded by the number of packets it must see, and with offload it sees only each flow's first packets. "+
		"The shape of the authors' result (offload takes the host's per-packet cost away; it cannot take away the per-flow cost) "+
		"is what this machine can show, not their absolute numbers.\n", lo, hi)
	b.WriteString("- **The emulated NIC is software.** Its work (the flow stage's XDP and the firmware thread) runs on CPU 0 and is reported apart (NIC fw, " +
		"and the NIC XDP share in the CSV). A real NIC does it in hardware, where it costs the host nothing; here it competes with the generator, " +
		"so the offered rate differs between cells (the *sent Mpps* column); CPU shares are per run, loss is per packet sent.\n")

	// Flow churn at the largest window: packets per flow against DPI's 10.
	most := 0
	for _, r := range rows {
		most = max(most, r.Active)
	}
	var ppf []float64
	for _, r := range rows {
		if r.Active == most && r.Born > 0 {
			ppf = append(ppf, float64(r.Sent)/float64(r.Born))
		}
	}
	if len(ppf) > 0 {
		fmt.Fprintf(&b, "- **Flow churn.** With %d active flows each flow got %.1f–%.1f packets (sent ÷ flows born, per cell)", most, slices.Min(ppf), slices.Max(ppf))
		if slices.Max(ppf) < 10 {
			b.WriteString(", fewer than DPI's 10, so DPI outlives most flows and few packets remain to offload: the probe's cost is per flow " +
				"(a table entry, a sweep visit, a record), which offload cannot remove")
		}
		b.WriteString(".\n")
	}

	// The long-flow target: what offload removed at 10K flows.
	var xdpRatio, perPacket []float64
	for _, r := range rows {
		if r.Active != 10000 || !r.Offload {
			continue
		}
		base, ok := find(rows, FlowCell{Mode: r.Mode, Size: r.Size, Active: r.Active, Offload: false, DPI: r.DPI})
		if !ok || base.Steady.XDP <= 0 || base.Steady.Host <= 0 {
			continue
		}
		xdpRatio = append(xdpRatio, r.Steady.XDP/base.Steady.XDP)
		perPacket = append(perPacket, base.Steady.XDP/base.Steady.Host)
	}
	if len(xdpRatio) > 0 {
		fmt.Fprintf(&b, "- **The long-flow target.** At 10K flows offload cut the host's per-packet work (XDP with offload ÷ without: %.2f×–%.2f×), "+
			"but the probe process does not shrink with it: its costs are per flow (DPI samples, state changes, the NIC's events, records and export) "+
			"and per table (the sweep reads every flow each pass, the Go runtime's wake-ups). Without offload the per-packet part (XDP) was "+
			"%.0f%%–%.0f%% of the host's load in these cells; the larger that part, the more offload can take away, and at the authors' rates "+
			"it is the larger part (their 89 Mpps row at 10K flows: %s%% CPU per core with offload against %s%% without).\n",
			slices.Min(xdpRatio), slices.Max(xdpRatio), 100*slices.Min(perPacket), 100*slices.Max(perPacket), deriValues[2].offload[1], deriValues[2].none[1])
	}

	// Host CPU above one CPU, and where loss went.
	over, cells := map[int]int{}, map[int]int{}
	var actives []int
	nover, lossy := 0, 0
	for _, r := range rows {
		if cells[r.Active] == 0 {
			actives = append(actives, r.Active)
		}
		cells[r.Active]++
		if r.Steady.Host > 1 {
			over[r.Active]++
			nover++
		}
		if r.LossPct() > 0 {
			lossy++
		}
	}
	if nover > 0 {
		sort.Ints(actives)
		var where []string
		for _, a := range actives {
			if over[a] > 0 {
				where = append(where, fmt.Sprintf("%d of %d at %d flows", over[a], cells[a], a))
			}
		}
		fmt.Fprintf(&b, "- **Host CPU above 100%%** in %d of %d cells (%s): the host column adds the probe's XDP (run on CPU 0, see above) and the probe process (CPU 1).\n",
			nover, len(rows), strings.Join(where, ", "))
	}
	if lossy == 0 {
		fmt.Fprintf(&b, "- **No loss in any of the %d cells.** A host that cannot keep up slows the generator that shares its CPU (the *sent Mpps* column ranges from %.2f to %.2f) instead of dropping at a ring.\n", len(rows), lo, hi)
	} else {
		fmt.Fprintf(&b, "- **Loss in %d of %d cells**: where each was lost is in the table above.\n", lossy, len(rows))
	}
	b.WriteString("- **Noise.** A VM, one run per cell; the CSV keeps every counter for a re-check.\n")
	return b.String()
}

func flowsTargets(b *strings.Builder, rows []Row) {
	b.WriteString("| target | cell | measured | result |\n|---|---|---|---|\n")
	// Long flows: 10K active, host CPU with offload ≤ 0.2× without.
	for _, r := range rows {
		if r.Active != 10000 || !r.Offload {
			continue
		}
		base, ok := find(rows, FlowCell{Mode: r.Mode, Size: r.Size, Active: r.Active, Offload: false, DPI: r.DPI})
		if !ok || base.Steady.Host == 0 {
			continue
		}
		ratio := r.Steady.Host / base.Steady.Host
		res := "met"
		if ratio > 0.2 {
			res = "**missed**"
		}
		xdp := 0.0
		if base.Steady.XDP > 0 {
			xdp = r.Steady.XDP / base.Steady.XDP
		}
		fmt.Fprintf(b, "| long flows: host CPU with offload ≤ 0.2× without (steady) | %s | %.1f%% ÷ %.1f%% = %.2f× (%.0f packets per flow); the per-packet part, XDP alone: %.1f%% ÷ %.1f%% = %.2f×; the probe process: %.1f%% ÷ %.1f%% | %s |\n",
			r.FlowCell, 100*r.Steady.Host, 100*base.Steady.Host, ratio, float64(r.Sent)/float64(max(r.Born, 1)),
			100*r.Steady.XDP, 100*base.Steady.XDP, xdp, 100*r.Steady.Probe, 100*base.Steady.Probe, res)
	}
	// Loss with offload never above loss without.
	worse := 0
	compared := 0
	for _, r := range rows {
		if !r.Offload {
			continue
		}
		base, ok := find(rows, FlowCell{Mode: r.Mode, Size: r.Size, Active: r.Active, Offload: false, DPI: r.DPI})
		if !ok {
			continue
		}
		compared++
		if r.LossPct() > base.LossPct() {
			worse++
			fmt.Fprintf(b, "| loss with offload ≤ loss without | %s | %s%% with, %s%% without | **missed** |\n", r.FlowCell, pct(r.LossPct()), pct(base.LossPct()))
		}
	}
	if worse == 0 {
		fmt.Fprintf(b, "| loss with offload ≤ loss without | all %d pairs | no pair where offload lost more | met |\n", compared)
	}
	// Where offload cannot help.
	for _, r := range rows {
		if r.Active != 1000000 || !r.Offload || !r.DPI {
			continue
		}
		base, ok := find(rows, FlowCell{Mode: r.Mode, Size: r.Size, Active: r.Active, Offload: false, DPI: r.DPI})
		if !ok || base.Steady.Host == 0 {
			continue
		}
		hw := 0.0
		if r.Sent > 0 {
			hw = 100 * float64(r.NICConsumed+r.NICTwin) / float64(r.Sent)
		}
		fmt.Fprintf(b, "| where offload cannot help, say so | %s | %.0f packets per flow; %.0f%% of packets handled by the NIC; host CPU %.2f× of no offload; loss %s%% against %s%% | stated |\n",
			r.FlowCell, float64(r.Sent)/float64(max(r.Born, 1)), hw, r.Steady.Host/base.Steady.Host, pct(r.LossPct()), pct(base.LossPct()))
	}
	// Lossless runs: the collector's totals equal the generator's.
	lossless, equal := 0, 0
	for _, r := range rows {
		if r.WireLoss() == 0 && r.HostRingLoss() == 0 && r.Untracked == 0 && r.ExportLost == 0 && r.SocketDrops == 0 {
			lossless++
			if r.Collected == r.Sent {
				equal++
			} else {
				fmt.Fprintf(b, "| lossless run: collector = generator | %s | collector %d, generator %d | **missed** |\n", r.FlowCell, r.Collected, r.Sent)
			}
		}
	}
	res := "met"
	if equal != lossless {
		res = "**missed**"
	}
	fmt.Fprintf(b, "| every lossless run: collector's totals = generator's, packet for packet | %d runs with no loss counted anywhere | %d of %d equal | %s |\n", lossless, equal, lossless, res)
}
