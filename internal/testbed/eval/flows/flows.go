// SPDX-License-Identifier: Apache-2.0

// Package flows is `make eval-flows`: the flow probe on the probe lab
// against Deri et al. (HPSR 2024), per cell (mode, frame size, active
// flows, offload, DPI) host CPU and exact loss against a real nfcapd,
// written to docs/EVALUATION-FLOWS.md and docs/eval/flows.*.
package flows

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tierwall/tierwall/internal/control/config"
	"github.com/tierwall/tierwall/internal/control/probed"
	"github.com/tierwall/tierwall/internal/datapath"
	"github.com/tierwall/tierwall/internal/probe/export"
	"github.com/tierwall/tierwall/internal/testbed/collector"
	"github.com/tierwall/tierwall/internal/testbed/eval/evalkit"
	"github.com/tierwall/tierwall/internal/testbed/harness"
	"github.com/tierwall/tierwall/internal/testbed/lab"
	"github.com/tierwall/tierwall/internal/testbed/trafgen"
	"github.com/tierwall/tierwall/internal/tier/nicstage"
)

// The talk's experiment (Deri et al., HPSR 2024) on the probe lab: the
// generator and the emulated NIC's stage on CPU 0 (the generator's
// frames wake the wire's NAPI on the CPU that sends them), the probe
// process confined to CPU 1. The probe's XDP program runs where the NIC
// stage's redirect wakes the host veth's NAPI, CPU 0: threaded NAPI
// pinned to CPU 1 lost packets on this kernel even at 50 Kpps (a veth
// that receives redirected frames; measured, see EVALUATION-FLOWS.md),
// so the host's XDP time is measured by BPF run-time statistics wherever
// it runs. Flows live ten seconds on average (birth rate = active ÷ 10),
// as in the authors' runs.

// FlowCell is one configuration of the experiment.
type FlowCell struct {
	Mode    string `json:"mode"` // passive or inline
	Size    int    `json:"size"` // frame size on the wire with FCS
	Active  int    `json:"active"`
	Offload bool   `json:"offload"`
	DPI     bool   `json:"dpi"`
}

func (c FlowCell) String() string {
	off, dpi := "no offload", "DPI"
	if c.Offload {
		off = "offload"
	}
	if !c.DPI {
		dpi = "no DPI"
	}
	return fmt.Sprintf("%s %dB %d flows, %s, %s", c.Mode, c.Size, c.Active, off, dpi)
}

// CPUShare is where the host's CPU went over one phase of a run, each as a
// share of one CPU.
type CPUShare struct {
	Host     float64 `json:"host"`      // XDP + Probe
	CPU1Busy float64 `json:"cpu1_busy"` // everything on CPU 1 (other load of the machine included)
	XDP      float64 `json:"xdp"`       // the probe's XDP program (BPF run-time statistics)
	Probe    float64 `json:"probe"`     // the probe process, all threads but the NIC firmware's
	NICXDP   float64 `json:"nic_xdp"`   // the emulated NIC's XDP programs (CPU 0 side)
	Firmware float64 `json:"nic_fw"`    // the emulated NIC's firmware thread (CPU 0 side)
	Seconds  float64 `json:"seconds"`   // length of the phase
	Mpps     float64 `json:"gen_mpps"`  // what the generator sent in it
}

// Row is one measured cell.
type Row struct {
	FlowCell
	Scheduled uint64   `json:"scheduled"` // frames the generator built
	Sent      uint64   `json:"sent"`      // frames that left the generator
	Born      uint64   `json:"born"`      // flows started
	Start     CPUShare `json:"start"`     // first half of the run
	Steady    CPUShare `json:"steady"`    // second half
	// Where each packet went (packets).
	NICSeen      uint64 `json:"nic_seen"`     // all the NIC's verdicts
	NICConsumed  uint64 `json:"nic_consumed"` // counted and dropped by the NIC (passive offload)
	NICTwin      uint64 `json:"nic_twin"`     // counted and forwarded by the NIC (inline offload)
	ToHost       uint64 `json:"to_host"`      // hit (passive forward), miss and unhandled
	HostSeen     uint64 `json:"host_seen"`    // the probe's XDP tier, every mark
	Untracked    uint64 `json:"untracked"`    // host packets of flows the software table refused
	DPILost      uint64 `json:"dpi_lost"`     // samples the ring refused (DPI went without them)
	Records      uint64 `json:"records"`      // flow records the probe made
	ExportLost   uint64 `json:"export_lost"`  // records dropped before or at sending
	SocketDrops  uint64 `json:"socket_drops"` // datagrams the collector's socket refused
	Collected    uint64 `json:"collected"`    // packets in nfcapd's file
	CollectedFl  uint64 `json:"collected_flows"`
	LearnDone    uint64 `json:"learn_done"`
	LearnFailed  uint64 `json:"learn_failed"`
	LearnQueue   uint64 `json:"learn_queue_full"`
	DPISkipped   uint64 `json:"dpi_skipped"`
	MaxRSS       uint64 `json:"probe_max_rss"` // the probe's VmHWM
	IdleRSS      uint64 `json:"probe_idle_rss"`
	PeakFlows    int    `json:"peak_flows"` // software flows at the busiest sweep seen
	DrainSeconds float64
	Note         string `json:"note,omitempty"`
}

// Loss is what the generator sent that no tier counted.
func (r Row) Loss() uint64 {
	if r.Collected >= r.Sent {
		return 0
	}
	return r.Sent - r.Collected
}

// LossPct is the loss as a percentage of what was sent.
func (r Row) LossPct() float64 {
	if r.Sent == 0 {
		return 0
	}
	return 100 * float64(r.Loss()) / float64(r.Sent)
}

// Lossless: every packet counted, every record collected.
func (r Row) Lossless() bool {
	return r.Collected == r.Sent && r.ExportLost == 0 && r.SocketDrops == 0 && r.Untracked == 0
}

// WireLoss: sent, never seen by the NIC's stage (its veth ring).
func (r Row) WireLoss() uint64 { return sub(r.Sent, r.NICSeen) }

// HostRingLoss: sent to the host by the NIC, never seen by the probe's
// XDP (the host veth's ring, a failed redirect).
func (r Row) HostRingLoss() uint64 { return sub(r.ToHost, r.HostSeen) }

func sub(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}

// Params of a run of the experiment.
type Params struct {
	Tierwall string        // the product binary
	Cells    []FlowCell    // what to run
	Duration time.Duration // of each run (flows live 10 s: ≥ 20 s shows a steady state)
	Rate     uint64        // generator packets/s (0: as fast as it goes)
	Idle     time.Duration // the probe's and the NIC's idle timeout (default 10 s)
	Header   string        // the document's first line (a rewrite from a run's rows keeps the run's)
	Log      io.Writer
}

// Cells is the experiment's matrix: every size, mode and flow count
// with and without offload, and without DPI in passive mode (as the
// authors ran it).
func Cells(actives, sizes []int, modes []string) []FlowCell {
	var cs []FlowCell
	for _, m := range modes {
		for _, s := range sizes {
			for _, a := range actives {
				for _, off := range []bool{false, true} {
					cs = append(cs, FlowCell{Mode: m, Size: s, Active: a, Offload: off, DPI: true})
					if m == "passive" {
						cs = append(cs, FlowCell{Mode: m, Size: s, Active: a, Offload: off, DPI: false})
					}
				}
			}
		}
	}
	return cs
}

// Run runs every cell; a cell that fails is logged and left out, the
// rest go on.
func Run(ctx context.Context, p Params) ([]Row, error) {
	if p.Idle == 0 {
		p.Idle = 10 * time.Second
	}
	release, err := lab.Hold(ctx, "make eval-flows", p.Log)
	if err != nil {
		return nil, err
	}
	defer release()
	stats, err := datapath.RunTimeStats()
	if err != nil {
		return nil, err
	}
	defer stats.Close()
	if err := collector.RaiseRcvbufMax(64 << 20); err != nil {
		return nil, fmt.Errorf("raising net.core.rmem_max for the collector: %w", err)
	}
	defer func() { _ = lab.ProbeDown() }()
	var rows []Row
	var errs []error
	for _, c := range p.Cells {
		if ctx.Err() != nil {
			break
		}
		r, err := runFlowCell(ctx, p, c)
		if err != nil {
			fmt.Fprintf(p.Log, "eval-flows: %s: %v\n", c, err)
			errs = append(errs, fmt.Errorf("%s: %w", c, err))
			continue
		}
		fmt.Fprintf(p.Log, "eval-flows: %-42s sent %.2f Mpps, loss %.3f%%, host CPU start %.0f%% (XDP %.0f%%, probe %.0f%%) steady %.0f%% (XDP %.0f%%, probe %.0f%%), NIC fw %.0f%%, collected %d/%d\n",
			c, r.Steady.Mpps, r.LossPct(), 100*r.Start.Host, 100*r.Start.XDP, 100*r.Start.Probe, 100*r.Steady.Host, 100*r.Steady.XDP, 100*r.Steady.Probe, 100*r.Steady.Firmware, r.Collected, r.Sent)
		rows = append(rows, r)
	}
	return rows, errors.Join(append(errs, ctx.Err())...)
}

const (
	flowServer = "10.80.0.1"
	hostCPU    = 1
	wireCPU    = 0
)

// flowConfig is the probe daemon of cell c: the lab's emulated NIC with
// a flow table of its own, DPI or none, offload or every packet to the
// software tier, biflow IPFIX to the collector at collectorAddr.
func flowConfig(dir string, c FlowCell, collectorAddr string, idle time.Duration) *config.Config {
	cfg := harness.DaemonConfig(lab.PIfHost, dir)
	cfg.Role = config.RoleProbe
	cfg.Log.Level = "warn"
	pr := &cfg.Probe
	hw := &pr.Hardware
	pr.Mode = "passive"
	hw.Emulated = config.EmulatedFlowNIC{Netns: lab.PNSNic, Wire: lab.PIfWire, Host: lab.PIfHPort}
	if c.Mode == "inline" {
		pr.Mode, pr.Egress = "inline", lab.PIfHost1
		hw.Emulated.Twin, hw.Emulated.Return = lab.PIfTwin, lab.PIfHRet
	}
	pr.DPI = config.ProbeDPI{Engine: "builtin", Packets: 10, SnapLen: pr.DPI.SnapLen, Timeout: 2 * time.Second, MaxFlows: 65536, Ring: 16 << 20}
	if !c.DPI {
		pr.DPI.Engine = "none"
	}
	pr.Policy = map[string]string{"default": "offload"}
	if !c.Offload {
		// The same NIC in the path, learning nothing: every packet a
		// miss for the host.
		pr.Policy["default"] = "software"
	}
	// Room for every flow alive at once: the window, and the births of
	// the time an ended flow is held (the NIC's idle timeout, its sweep,
	// the end grace, the probe's sweep), with a margin for a probe that
	// falls behind at a million flows.
	pr.Capacity = max(c.Active*4, 1<<16)
	pr.Timeouts = config.ProbeTimeouts{Idle: idle, Active: 120 * time.Second, EndGrace: time.Second}
	hw.Backend, hw.Capacity = "emulated", pr.Capacity
	hw.LearnRate, hw.LearnLatency, hw.TCPAutoUnlearn = 1000000, 50*time.Microsecond, true
	hw.IdleTimeout = idle
	pr.Export.Biflow, pr.Export.QueueLen = true, 1<<20
	pr.Export.Collectors = []export.Collector{{Address: collectorAddr, Format: "ipfix"}}
	return cfg
}

// sample is the counters a phase is measured between.
type sample struct {
	at         time.Time
	busy, tot  uint64 // CPU 1 jiffies
	probe      uint64 // ns
	fw         uint64 // ns
	xdp, nicXD uint64 // ns
}

type probes struct {
	pid      int
	firmware int // thread id
	host     *datapath.Prog
	nic      []*datapath.Prog
}

func (pr *probes) take() sample {
	s := sample{at: time.Now()}
	s.busy, s.tot = evalkit.CPUTimes(hostCPU)
	s.probe = taskNs(pr.pid)
	if pr.firmware != 0 {
		s.fw = threadNs(pr.pid, pr.firmware)
		s.probe -= min(s.fw, s.probe)
	}
	s.xdp = progNs(pr.host)
	for _, p := range pr.nic {
		s.nicXD += progNs(p)
	}
	return s
}

func share(a, b sample, sent uint64) CPUShare {
	el := b.at.Sub(a.at).Seconds()
	if el <= 0 {
		return CPUShare{}
	}
	ns := func(x, y uint64) float64 { return float64(sub(y, x)) / 1e9 / el }
	c := CPUShare{Probe: ns(a.probe, b.probe), XDP: ns(a.xdp, b.xdp), NICXDP: ns(a.nicXD, b.nicXD),
		Firmware: ns(a.fw, b.fw), Seconds: el, Mpps: float64(sent) / el / 1e6}
	c.Host = c.XDP + c.Probe
	if b.tot > a.tot {
		c.CPU1Busy = float64(b.busy-a.busy) / float64(b.tot-a.tot)
	}
	return c
}

// taskNs is the CPU time of a process, all its threads (schedstat: ns on
// the CPU), or of one kernel thread.
func taskNs(pid int) uint64 {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0
	}
	var sum uint64
	for _, e := range ents {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, e.Name()))
		if err != nil {
			continue
		}
		if f := strings.Fields(string(b)); len(f) > 0 {
			v, _ := strconv.ParseUint(f[0], 10, 64)
			sum += v
		}
	}
	return sum
}

func threadNs(pid, tid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/schedstat", pid, tid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseUint(f[0], 10, 64)
	return v
}

// firmwareThread finds the emulated NIC's firmware thread in the probe
// and pins it to the NIC's CPU.
func firmwareThread(pid, cpu int) (int, error) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0, err
	}
	for _, e := range ents {
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/comm", pid, e.Name()))
		if strings.TrimSpace(string(comm)) != nicstage.FirmwareThread {
			continue
		}
		tid, _ := strconv.Atoi(e.Name())
		var set unix.CPUSet
		set.Set(cpu)
		if err := unix.SchedSetaffinity(tid, &set); err != nil {
			return 0, fmt.Errorf("pinning the NIC firmware thread: %w", err)
		}
		return tid, nil
	}
	return 0, fmt.Errorf("no thread %q in the probe", nicstage.FirmwareThread)
}

func progNs(p *datapath.Prog) uint64 {
	if p == nil {
		return 0
	}
	rt, err := p.RunTime()
	if err != nil {
		return 0
	}
	return uint64(rt)
}

// xdpProg opens the XDP program attached to an interface.
func xdpProg(ns, iface string) (*datapath.Prog, error) {
	out, err := exec.Command("ip", "-n", ns, "-j", "link", "show", "dev", iface).Output()
	if err != nil {
		return nil, fmt.Errorf("ip link show %s in %s: %w", iface, ns, err)
	}
	var links []struct {
		XDP struct {
			Prog struct {
				ID int `json:"id"`
			} `json:"prog"`
		} `json:"xdp"`
	}
	if err := json.Unmarshal(out, &links); err != nil || len(links) != 1 || links[0].XDP.Prog.ID == 0 {
		return nil, fmt.Errorf("no XDP program on %s in %s (%s)", iface, ns, out)
	}
	return datapath.OpenProg(uint32(links[0].XDP.Prog.ID))
}

func procStatus(pid int, key string) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, key+":") {
			f := strings.Fields(l)
			if len(f) >= 2 {
				v, _ := strconv.ParseUint(f[1], 10, 64)
				return v << 10 // kB
			}
		}
	}
	return 0
}

// udpRcvbufErrors reads a namespace's UDP receive-buffer drops.
func udpRcvbufErrors(ns string) uint64 {
	out, err := exec.Command("ip", "netns", "exec", ns, "cat", "/proc/net/snmp").Output()
	if err != nil {
		return 0
	}
	var names []string
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 || f[0] != "Udp:" {
			continue
		}
		if names == nil {
			names = f
			continue
		}
		for i := range f {
			if i < len(names) && names[i] == "RcvbufErrors" {
				v, _ := strconv.ParseUint(f[i], 10, 64)
				return v
			}
		}
	}
	return 0
}

// metric reads the sum of a counter's series from the probe's /metrics.
func metric(text, name string) uint64 {
	var sum float64
	for _, l := range strings.Split(text, "\n") {
		if !strings.HasPrefix(l, name) || (len(l) > len(name) && l[len(name)] != ' ' && l[len(name)] != '{') {
			continue
		}
		f := strings.Fields(l)
		v, _ := strconv.ParseFloat(f[len(f)-1], 64)
		sum += v
	}
	return uint64(sum)
}

func runFlowCell(ctx context.Context, p Params, c FlowCell) (Row, error) {
	row := Row{FlowCell: c}
	if err := lab.ProbeUp(); err != nil {
		return row, err
	}
	defer func() { _ = lab.ProbeDown() }()
	dir, err := os.MkdirTemp("", "tierwall-flows")
	if err != nil {
		return row, err
	}
	defer os.RemoveAll(dir)
	nf, err := collector.Start(collector.Options{Netns: lab.PNSHost, Dir: dir, Bufsize: 64 << 20})
	if err != nil {
		return row, err
	}
	defer nf.Kill()
	cfg := filepath.Join(dir, "probe.yaml")
	if err := harness.WriteConfig(cfg, flowConfig(dir, c, nf.Addr, p.Idle)); err != nil {
		return row, err
	}
	d, err := harness.StartDaemon(harness.Options{Tierwall: p.Tierwall, Netns: lab.PNSHost, Config: cfg,
		Socket: filepath.Join(dir, "api.sock"), Timeout: time.Minute, CPUs: strconv.Itoa(hostCPU),
		// Go sizes GOMAXPROCS by the affinity (one CPU): the NIC
		// firmware's locked thread, moved to CPU 0 below, would then
		// share the one P with the probe and hand it back and forth.
		Env: []string{"GOMAXPROCS=2"}})
	if err != nil {
		return row, err
	}
	defer func() {
		if !d.Exited() {
			d.Stop()
		}
	}()
	fail := func(err error) (Row, error) {
		return row, fmt.Errorf("%w\nprobe log:\n%s", err, tail(d.Output(), 20))
	}
	pr := &probes{pid: d.Cmd.Process.Pid}
	if pr.firmware, err = firmwareThread(pr.pid, wireCPU); err != nil {
		return fail(err)
	}
	if pr.host, err = xdpProg(lab.PNSHost, lab.PIfHost); err != nil {
		return fail(err)
	}
	defer pr.host.Close()
	nicIfs := []string{lab.PIfWire}
	if c.Mode == "inline" {
		nicIfs = append(nicIfs, lab.PIfHRet)
	}
	for _, ifn := range nicIfs {
		prog, err := xdpProg(lab.PNSNic, ifn)
		if err != nil {
			return fail(err)
		}
		defer prog.Close()
		pr.nic = append(pr.nic, prog)
	}
	cl := d.Client
	row.IdleRSS = procStatus(pr.pid, "VmRSS")
	drops0 := udpRcvbufErrors(lab.PNSHost)

	var src, dst [6]byte
	if src, err = evalkit.MACOf(lab.PNSInet, lab.PIfInet); err != nil {
		return fail(err)
	}
	if dst, err = evalkit.MACOf(lab.PNSNic, lab.PIfWire); err != nil {
		return fail(err)
	}
	spec := trafgen.Spec{Iface: lab.PIfInet, SrcMAC: src, DstMAC: dst, Dst: netip.MustParseAddr(flowServer),
		Flows: c.Active, BirthRate: float64(c.Active) / 10, PacketSize: c.Size, Proto: "tcp",
		Apps: []string{trafgen.AppHTTP, trafgen.AppTLS}, Duration: p.Duration, NoFlowReport: true, Rate: p.Rate,
		Clients: netip.MustParsePrefix("10.128.0.0/10"), Seed: uint64(c.Active)}
	type result struct {
		rep *trafgen.Report
		err error
	}
	done := make(chan result, 1)
	s0 := pr.take()
	go func() {
		var res result
		res.err = evalkit.InNS(lab.PNSInet, wireCPU, func() error { var err error; res.rep, err = trafgen.Run(ctx, spec); return err })
		done <- res
	}()
	// Sweeps report the software table's size; watch it for the peak.
	var s1 sample
	var st probed.Status
	half := time.After(p.Duration / 2)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var res result
wait:
	for {
		select {
		case <-half:
			s1 = pr.take()
		case <-tick.C:
			if st, err := cl.FlowStatus(ctx); err == nil {
				row.PeakFlows = max(row.PeakFlows, st.Engine.SoftwareFlows)
			}
		case res = <-done:
			break wait
		}
	}
	s2 := pr.take()
	if res.err != nil {
		return fail(fmt.Errorf("generator: %w", res.err))
	}
	if s1.at.IsZero() {
		s1 = s2
	}
	rep := res.rep
	row.Scheduled, row.Sent, row.Born = rep.Scheduled, rep.Sent, rep.Born
	// The generator's rate over each half: the flow mode sends at a
	// steady pace, so the halves split it by time.
	total := s2.at.Sub(s0.at).Seconds()
	firstHalf := uint64(float64(rep.Sent) * s1.at.Sub(s0.at).Seconds() / total)
	row.Start, row.Steady = share(s0, s1, firstHalf), share(s1, s2, rep.Sent-firstHalf)
	row.MaxRSS = procStatus(pr.pid, "VmHWM")

	// Drain: every flow ends (idle timeout, end grace, the NIC's own
	// ageing), is recorded and exported.
	drainStart := time.Now()
	for deadline := time.Now().Add(p.Idle + 2*time.Minute + time.Duration(c.Active/10_000)*time.Second); ; {
		st, err = cl.FlowStatus(ctx)
		if err != nil {
			return fail(err)
		}
		row.PeakFlows = max(row.PeakFlows, st.Engine.SoftwareFlows)
		if st.Software.Flows == 0 && st.Engine.Offloaded == 0 && st.Engine.InDPI == 0 && time.Since(drainStart) > 4*time.Second {
			break
		}
		if time.Now().After(deadline) {
			return fail(fmt.Errorf("flows left after the drain: %d in software, %d in the NIC, %d in DPI",
				st.Software.Flows, st.Engine.Offloaded, st.Engine.InDPI))
		}
		time.Sleep(500 * time.Millisecond)
	}
	row.DrainSeconds = time.Since(drainStart).Seconds()
	mt, err := cl.Metrics(ctx)
	if err != nil {
		return fail(err)
	}
	e := st.Engine
	row.Records, row.LearnDone, row.LearnFailed, row.LearnQueue, row.DPISkipped = e.Records, e.LearnDone, e.LearnFailed, e.LearnQueueFull, e.DPISkipped
	row.ExportLost = metric(mt, "tierwall_export_records_dropped_total") + metric(mt, "tierwall_export_data_records_lost_total")
	for _, v := range st.Software.Packets {
		row.HostSeen += v
	}
	row.Untracked, row.DPILost = st.Software.Untracked, st.Software.DPILost
	if st.NIC != nil {
		for name, v := range st.NIC.Verdicts {
			switch {
			case name == "hit_discard":
				row.NICConsumed += v.Packets
			case name == "hit_twin":
				row.NICTwin += v.Packets
			case name == "hit_host" || name == "miss" || strings.HasPrefix(name, "unhandled_"):
				row.ToHost += v.Packets
			default:
				continue // return, errors and notes: not a packet's one verdict
			}
			row.NICSeen += v.Packets
		}
	}
	files, err := nf.Stop(2 * time.Second)
	if err != nil {
		return fail(err)
	}
	row.SocketDrops = udpRcvbufErrors(lab.PNSHost) - drops0
	tot, err := collector.ReadTotals(files...)
	if err != nil {
		return fail(err)
	}
	row.Collected, row.CollectedFl = tot.Packets, tot.Flows
	return row, nil
}

func tail(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// Smoke checks a smoke run (CI): every cell ran, and in each the
// collector's totals equal what the generator sent, packet for packet.
func Smoke(rows []Row, err error) error {
	if err != nil {
		return err
	}
	for _, r := range rows {
		if r.Sent == 0 || r.Collected != r.Sent {
			return fmt.Errorf("eval-flows smoke: %s: sent %d packets, the collector counted %d (wire %d, host ring %d, untracked %d, export lost %d records, socket drops %d)",
				r.FlowCell, r.Sent, r.Collected, r.WireLoss(), r.HostRingLoss(), r.Untracked, r.ExportLost, r.SocketDrops)
		}
	}
	return nil
}
