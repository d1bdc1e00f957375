// SPDX-License-Identifier: Apache-2.0

// Package network is `make eval-network`: network mode beside
// FastNetMon Community on the same sFlow, NetFlow v9 and IPFIX feed
// (detection delays, false positives, ingest on one core, memory),
// written to docs/EVALUATION-NETWORK.md and docs/eval/network.json.
package network

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"

	"github.com/tierwall/tierwall/internal/testbed/eval/evalkit"
	"github.com/tierwall/tierwall/internal/testbed/fastnetmon"
)

// Network mode's evaluation (issue 36): tierwall's collector and detector
// and FastNetMon Community read the same synthesized telemetry feed, each
// datagram sent to both, in one run. Both run as processes pinned to CPU 1
// (tierwall's is `tierwall-lab netcollect`, which runs the product's
// telemetry.Service from a tierwall.yaml telemetry section, as `tierwall
// run` does); this process synthesizes the feed from CPU 0.

// Params configure the run.
type Params struct {
	// Self is the tierwall-lab binary (its netcollect subcommand runs
	// tierwall's side); FastNetMon the fastnetmon binary.
	Self, FastNetMon string
	// Flood is each sFlow cell's flood (NetFlow and IPFIX floods last
	// 1.5 s longer: their first record comes after a second), Gap the
	// quiet after it; Repeat the repetitions of every cell.
	Flood, Gap time.Duration
	Repeat     int
	// Threshold is the per-host pps threshold, the same in both tools.
	Threshold float64
	// Only runs only the cells whose name contains it (no ingest, no
	// memory; writes nothing); "ingest" runs the ingest ladder alone.
	Only string
	Log  io.Writer
}

func (p *Params) defaults() {
	if p.Flood <= 0 {
		p.Flood = 2500 * time.Millisecond
	}
	if p.Gap <= 0 {
		p.Gap = 500 * time.Millisecond
	}
	if p.Repeat <= 0 {
		p.Repeat = 3
	}
	if p.Threshold <= 0 {
		p.Threshold = 50000
	}
	if p.FastNetMon == "" {
		p.FastNetMon = "/usr/sbin/fastnetmon"
	}
	if p.Log == nil {
		p.Log = io.Discard
	}
}

// Cell is one flood and what each tool made of it. Times are
// seconds; -1: not detected.
type Cell struct {
	Feed     string  `json:"feed"` // sflow, netflow9, ipfix
	Rep      int     `json:"rep"`  // the repetition, from 0
	Sampling int     `json:"sampling"`
	Kind     string  `json:"kind"` // udp, syn, reflection, carpet
	PPS      float64 `json:"pps"`
	Victim   string  `json:"victim"`
	// Start is the flood's first packet; First the first datagram (or
	// NetFlow/IPFIX record) that carried it.
	Start time.Time `json:"start"`
	First time.Time `json:"first"`
	// FirstDatagram is the first datagram carrying the flood, after its
	// start (seconds).
	FirstDatagram float64 `json:"first_datagram"`
	// Tierwall and FastNetMon: from the flood's start to detection.
	// The delays from First are these less FirstDatagram.
	Tierwall   float64 `json:"tierwall"`
	FastNetMon float64 `json:"fastnetmon"`
	// TierwallHow and FastNetMonHow say what was detected (kinds, or the
	// host a per-host tool named inside a carpet).
	TierwallHow   string `json:"tierwall_how,omitempty"`
	FastNetMonHow string `json:"fastnetmon_how,omitempty"`
}

// Name is the cell's name for --only and the tables.
func (c Cell) Name() string {
	if c.Feed == "sflow" {
		return fmt.Sprintf("sflow-1:%d-%s-%gM", c.Sampling, c.Kind, c.PPS/1e6)
	}
	return fmt.Sprintf("%s-%s-%gM", c.Feed, c.Kind, c.PPS/1e6)
}

// IngestStep is one rate offered to one tool for a few seconds.
type IngestStep struct {
	Offered float64 `json:"offered"` // datagrams/s asked for
	Sent    uint64  `json:"sent"`
	Secs    float64 `json:"secs"`
	Dropped uint64  `json:"dropped"` // the socket's drops (/proc/net/udp)
	// CPU is the seconds of CPU the tool used over the step, its queue
	// drained included (/proc/PID/stat, in 10 ms ticks).
	CPU float64 `json:"cpu_secs"`
}

// Ingest is one tool's ingest ladder.
type Ingest struct {
	Tool   string       `json:"tool"`
	RcvBuf int          `json:"rcvbuf"` // the socket's receive buffer (bytes)
	Steps  []IngestStep `json:"steps"`
}

// NoLoss is the highest rate sent with no datagram dropped at it nor at
// any lower rate offered: on a shared machine a lossless step above a
// lossy one is luck, not capacity.
func (n Ingest) NoLoss() float64 {
	steps := slices.Clone(n.Steps)
	slices.SortStableFunc(steps, func(a, b IngestStep) int { return cmp.Compare(a.Offered, b.Offered) })
	best := 0.0
	for _, s := range steps {
		if s.Dropped > 0 || s.Secs <= 0 {
			break
		}
		best = max(best, float64(s.Sent)/s.Secs)
	}
	return best
}

// Top is the datagrams/s processed (sent less dropped) at the step
// offered the most, as fast as the sender went, and what was dropped
// there.
func (n Ingest) Top() (rate float64, dropped uint64) {
	top := n.top()
	if top == nil || top.Secs <= 0 {
		return 0, 0
	}
	return float64(top.Sent-min(top.Dropped, top.Sent)) / top.Secs, top.Dropped
}

func (n Ingest) top() *IngestStep {
	var top *IngestStep
	for i := range n.Steps {
		if top == nil || n.Steps[i].Offered > top.Offered {
			top = &n.Steps[i]
		}
	}
	return top
}

// PerCPUSecond is the datagrams processed per second of the tool's CPU
// at the step offered the most: what one core would take if the sender
// could offer more (the loopback sender tops out near the tools' rates).
func (n Ingest) PerCPUSecond() float64 {
	top := n.top()
	if top == nil || top.CPU <= 0 {
		return 0
	}
	return float64(top.Sent-min(top.Dropped, top.Sent)) / top.CPU
}

// realtime puts the calling thread (locked to it) at SCHED_FIFO, so
// that the feed keeps its schedule on a CPU shared with other jobs: a
// feed that falls behind and catches up sends bursts the tools would
// read as higher rates. The feed sleeps most of every millisecond, so it
// takes little from the others. undo puts the thread back.
func realtime() (undo func(), err error) {
	attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: 20}
	if err := unix.SchedSetAttr(0, &attr, 0); err != nil {
		return nil, fmt.Errorf("setting SCHED_FIFO: %w", err)
	}
	return func() {
		other := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_NORMAL}
		_ = unix.SchedSetAttr(0, &other, 0)
	}, nil
}

// Memory is a tool's resident memory before and after the
// exporters sent their templates.
type Memory struct {
	Tool string `json:"tool"`
	// Before is the RSS (KiB) at rest after the floods, HWM the peak
	// after the last step.
	Before   uint64       `json:"before_kib"`
	LiveHeap uint64       `json:"live_heap_kib,omitempty"` // tierwall's, at rest
	Steps    []MemoryStep `json:"steps"`
	HWM      uint64       `json:"hwm_kib"`
}

// MemoryStep is the RSS after the exporters sent PerExporter templates
// each (IDs 256 on; the earlier ones again).
type MemoryStep struct {
	PerExporter int    `json:"per_exporter"`
	RSS         uint64 `json:"rss_kib"`
	// Held and Refused: tierwall's counters, LiveHeap its Go heap in use
	// after a collection, KiB (FastNetMon has none of these).
	Held     int    `json:"held,omitempty"`
	Refused  uint64 `json:"refused,omitempty"`
	LiveHeap uint64 `json:"live_heap_kib,omitempty"`
}

// memExporters send templates in the memory experiment.
const memExporters = 100

// Result is the whole run.
type Result struct {
	Cells []Cell `json:"cells"`
	// Benign is the background mix, FalsePositives the victims either
	// tool named among its destinations.
	BenignPPS     float64    `json:"benign_pps"`
	BenignDests   int        `json:"benign_dests"`
	BenignSecs    float64    `json:"benign_secs"`
	TierwallFP    []string   `json:"tierwall_false_positives"`
	FastNetMonFP  []string   `json:"fastnetmon_false_positives"`
	Ingest        []Ingest   `json:"ingest"`
	Memory        []Memory   `json:"memory"`
	Datagrams     uint64     `json:"datagrams"` // sent to each tool in the detection part
	LoadBefore    [3]float64 `json:"load_before"`
	LoadAfter     [3]float64 `json:"load_after"`
	FastNetMonVer string     `json:"fastnetmon_version"`
	// SenderLag is the most the feed fell behind its schedule, SenderLate
	// how long it was more than 20 ms behind; SenderFIFO: it ran at
	// SCHED_FIFO.
	SenderLag time.Duration `json:"sender_lag"`
	// Stalls are the moments it was more than 100 ms behind (one a
	// second at most).
	Stalls        []Stall       `json:"stalls"`
	SenderLate    time.Duration `json:"sender_late"`
	SenderFIFO    bool          `json:"sender_fifo"`
	TierwallDrops uint64        `json:"tierwall_drops"` // socket drops during the detection part
	FNMDrops      uint64        `json:"fastnetmon_drops"`
	Threshold     float64       `json:"threshold"`
	Flood, Gap    time.Duration `json:"-"`
	Repeat        int           `json:"repeat"`
	Decode        string        `json:"tierwall_decode"` // tierwall's counters after the cells
}

// Stall is a moment the feed's sender was behind its schedule.
type Stall struct {
	At   time.Time     `json:"at"`
	Late time.Duration `json:"late"`
}

// Addresses of the run: everything inside 198.18.0.0/18, both tools'
// protected network (FastNetMon's networks_list: it allocates counters for
// every address in it; tierwall's telemetry.networks).
var (
	netProtected = evalkit.Protected
	netBenign    = netip.MustParsePrefix("198.18.1.0/24")
)

// victimOf is cell i's victim: a host in 198.18.0.0/24, or for a carpet
// bombing its own /24 from 198.18.2.0 on (a host group each).
func victimOf(i int, carpet bool) netip.Prefix {
	if carpet {
		return netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, byte(2 + i), 0}), 24)
	}
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, 0, byte(10 + i)}), 32)
}

// Cells are the run's floods, in order.
func Cells() []Cell {
	var cs []Cell
	for _, s := range []int{100, 1000} {
		for _, k := range []string{"udp", "syn", "reflection", "carpet"} {
			for _, r := range []float64{1e5, 5e5, 1e6} {
				cs = append(cs, Cell{Feed: "sflow", Sampling: s, Kind: k, PPS: r})
			}
		}
	}
	for _, f := range []string{"netflow9", "ipfix"} {
		for _, r := range []float64{1e5, 5e5, 1e6} {
			cs = append(cs, Cell{Feed: f, Sampling: 1, Kind: "udp", PPS: r})
		}
	}
	return cs
}

// planCells are the run's cells: Cells, p.Repeat times, those named by
// p.Only, each with its victim (a carpet bombing's /24 or a host).
func planCells(p Params) []Cell {
	var cells []Cell
	for r := range p.Repeat {
		for _, c := range Cells() {
			if p.Only == "" || strings.Contains(c.Name(), p.Only) {
				c.Rep = r
				cells = append(cells, c)
			}
		}
	}
	nCarpet, nHost := 0, 0
	for i := range cells {
		if cells[i].Kind == "carpet" {
			cells[i].Victim = victimOf(nCarpet, true).String()
			nCarpet++
		} else {
			cells[i].Victim = victimOf(nHost, false).String()
			nHost++
		}
	}
	return cells
}

// Run runs the evaluation.
func Run(ctx context.Context, p Params) (Result, error) {
	p.defaults()
	res := Result{Threshold: p.Threshold, Flood: p.Flood, Gap: p.Gap, Repeat: p.Repeat, LoadBefore: evalkit.LoadAvg()}
	cells := planCells(p)
	dir, err := os.MkdirTemp("", "tierwall-eval-network")
	if err != nil {
		return res, fmt.Errorf("making the run's directory: %w", err)
	}
	defer os.RemoveAll(dir)
	if out, err := exec.Command(p.FastNetMon, "--version").CombinedOutput(); err == nil {
		res.FastNetMonVer = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(out)), "Version:"))
	} else {
		return res, fmt.Errorf("running %s (scripts/deps.sh installs it): %w", p.FastNetMon, err)
	}

	// The sender runs on CPU 0, the tools on CPU 1.
	restore, err := evalkit.PinProcess(0)
	if err != nil {
		return res, err
	}
	defer restore()

	ports, err := evalkit.FreeUDPPorts(3)
	if err != nil {
		return res, err
	}
	twAddr := netip.AddrPortFrom(evalkit.Loopback, ports[0])
	fnmSFlow, fnmNetFlow := netip.AddrPortFrom(evalkit.Loopback, ports[1]), netip.AddrPortFrom(evalkit.Loopback, ports[2])

	tw, err := startTierwall(ctx, p, dir, twAddr, cells)
	if err != nil {
		return res, err
	}
	defer tw.Stop()
	fnm, err := startFastNetMon(ctx, p, dir, fnmSFlow, fnmNetFlow)
	if err != nil {
		return res, err
	}
	defer fnm.Stop()
	// FastNetMon zeroes its counters and starts its threads; tierwall is
	// ready when it listens.
	time.Sleep(3 * time.Second)

	fmt.Fprintf(p.Log, "eval-network: %d cells, tierwall on %v, FastNetMon on %v (sFlow) and %v (NetFlow/IPFIX)\n", len(cells), twAddr, fnmSFlow, fnmNetFlow)
	tx, err := newTee(twAddr, fnmSFlow, fnmNetFlow)
	if err != nil {
		return res, err
	}
	defer tx.close()
	if p.Only == ingestOnly {
		return res, ingest(ctx, p, &res, dir, tw, fnm, twAddr, fnmSFlow)
	}
	dropsTW0, dropsFNM0 := evalkit.UDPDrops(twAddr.Port()), evalkit.UDPDrops(fnmSFlow.Port())+evalkit.UDPDrops(fnmNetFlow.Port())
	if err := runCells(ctx, p, tx, cells, &res); err != nil {
		return res, err
	}
	res.TierwallDrops = evalkit.UDPDrops(twAddr.Port()) - dropsTW0
	res.FNMDrops = evalkit.UDPDrops(fnmSFlow.Port()) + evalkit.UDPDrops(fnmNetFlow.Port()) - dropsFNM0
	res.Datagrams = tx.sent
	time.Sleep(1500 * time.Millisecond) // the last detections
	twAttacks, fnmBans := tw.attacks(), fnm.bans()
	for i := range cells {
		judgeCell(&cells[i], twAttacks, fnmBans)
	}
	res.Cells = cells
	res.TierwallFP, res.FastNetMonFP = falsePositives(twAttacks, fnmBans)
	if st, err := tw.stats(); err == nil {
		res.Decode = fmt.Sprintf("%d datagrams, %d records, %d decode errors, %d sequence gaps", st.Datagrams, st.Records, st.DecodeErrors, st.SequenceGaps)
	}
	if p.Only != "" {
		res.LoadAfter = evalkit.LoadAvg()
		return res, nil
	}

	// Memory first (the ingest ladder's overload leaves queues behind).
	mTW, mFNM := Memory{Tool: "tierwall"}, Memory{Tool: "FastNetMon"}
	base, err := tw.stats()
	if err != nil {
		return res, err
	}
	mTW.Before, mFNM.Before, mTW.LiveHeap = rss(tw.Cmd.Process.Pid, "VmRSS"), rss(fnm.Cmd.Process.Pid, "VmRSS"), base.LiveHeap/1024
	for _, per := range []int{100, 2000, 5000} {
		if err := sendTemplates(twAddr, fnmNetFlow, memExporters, per); err != nil {
			return res, err
		}
		time.Sleep(2 * time.Second)
		st, err := tw.stats()
		if err != nil {
			return res, err
		}
		mTW.Steps = append(mTW.Steps, MemoryStep{PerExporter: per, RSS: rss(tw.Cmd.Process.Pid, "VmRSS"), Held: st.Templates - base.Templates,
			Refused: st.TemplatesRefused - base.TemplatesRefused, LiveHeap: st.LiveHeap / 1024})
		mFNM.Steps = append(mFNM.Steps, MemoryStep{PerExporter: per, RSS: rss(fnm.Cmd.Process.Pid, "VmRSS")})
		fmt.Fprintf(p.Log, "eval-network: memory after %d templates from each of %d exporters: tierwall %d KiB (%d held), FastNetMon %d KiB\n",
			per, memExporters, mTW.Steps[len(mTW.Steps)-1].RSS, st.Templates-base.Templates, mFNM.Steps[len(mFNM.Steps)-1].RSS)
	}
	mTW.HWM, mFNM.HWM = rss(tw.Cmd.Process.Pid, "VmHWM"), rss(fnm.Cmd.Process.Pid, "VmHWM")
	res.Memory = []Memory{mTW, mFNM}

	return res, ingest(ctx, p, &res, dir, tw, fnm, twAddr, fnmSFlow)
}

// ingestOnly is the --only that runs the ingest ladder alone.
const ingestOnly = "ingest"

// ingest offers the same replayed feed to each tool in turn, interleaved
// by rate: tierwall, FastNetMon as shipped, and a second FastNetMon
// whose socket has tierwall's receive buffer (started with
// net.core.rmem_default raised; FastNetMon has no option of its own for
// it), so that the buffer each ships with is told apart from what each
// core does.
func ingest(ctx context.Context, p Params, res *Result, dir string, tw *tierwallProc, fnm *fnmProc, twAddr, fnmSFlow netip.AddrPort) error {
	ingTW, ingFNM := Ingest{Tool: "tierwall", RcvBuf: evalkit.RcvBuf(twAddr.Port())}, Ingest{Tool: "FastNetMon", RcvBuf: evalkit.RcvBuf(fnmSFlow.Port())}
	ports, err := evalkit.FreeUDPPorts(2)
	if err != nil {
		return err
	}
	eqSFlow := netip.AddrPortFrom(evalkit.Loopback, ports[0])
	fnmEq, err := startWithRcvBuf(ingTW.RcvBuf, func() (*fnmProc, error) {
		return startFastNetMon(ctx, p, filepath.Join(dir, "equal-buffer"), eqSFlow, netip.AddrPortFrom(evalkit.Loopback, ports[1]))
	})
	if err != nil {
		return err
	}
	defer fnmEq.Stop()
	time.Sleep(3 * time.Second) // FastNetMon starts its threads
	ingEq := Ingest{Tool: FNMEqualBuffer, RcvBuf: evalkit.RcvBuf(eqSFlow.Port())}
	feed := ingestFeed(512)
	tools := []struct {
		ing  *Ingest
		addr netip.AddrPort
		pid  int
	}{{&ingTW, twAddr, tw.Cmd.Process.Pid}, {&ingFNM, fnmSFlow, fnm.Cmd.Process.Pid}, {&ingEq, eqSFlow, fnmEq.Cmd.Process.Pid}}
	// The last rate is as fast as the sender goes: what each processes
	// when overloaded.
	for _, rate := range []float64{5e3, 10e3, 15e3, 20e3, 30e3, 40e3, 50e3, 60e3, 70e3, 80e3, 100e3, 120e3, 160e3, 240e3, 320e3, 480e3, evalkit.FlatOut} {
		for _, t := range tools {
			if n := len(t.ing.Steps); rate != evalkit.FlatOut && n >= 2 && t.ing.Steps[n-1].Dropped > 0 && t.ing.Steps[n-2].Dropped > 0 {
				continue // past its limit twice: no need to go on
			}
			s, err := ingestStep(ctx, t.addr, t.pid, feed, rate, 2*time.Second)
			if err != nil {
				return err
			}
			t.ing.Steps = append(t.ing.Steps, s)
			fmt.Fprintf(p.Log, "eval-network: ingest %s at %.0f/s: sent %d in %.2f s, dropped %d, CPU %.2f s\n", t.ing.Tool, rate, s.Sent, s.Secs, s.Dropped, s.CPU)
		}
	}
	res.Ingest = []Ingest{ingTW, ingFNM, ingEq}
	res.LoadAfter = evalkit.LoadAvg()
	return ctx.Err()
}

// FNMEqualBuffer names the FastNetMon started with tierwall's receive
// buffer.
const FNMEqualBuffer = "FastNetMon, tierwall's buffer"

// startWithRcvBuf runs start with net.core.rmem_default at size bytes,
// the buffer every socket opened meanwhile gets, and puts it back.
func startWithRcvBuf[T any](size int, start func() (T, error)) (T, error) {
	const path = "/proc/sys/net/core/rmem_default"
	old, err := os.ReadFile(path)
	if err != nil {
		var zero T
		return zero, fmt.Errorf("reading net.core.rmem_default: %w", err)
	}
	if err := os.WriteFile(path, []byte(strconv.Itoa(size)), 0o644); err != nil {
		var zero T
		return zero, fmt.Errorf("raising net.core.rmem_default: %w", err)
	}
	defer os.WriteFile(path, old, 0o644) //nolint:errcheck // best effort: the value it had
	return start()
}

// runCells plays the benign mix throughout and the floods one after the
// other, each datagram to both tools.
func runCells(ctx context.Context, p Params, tx *tee, cells []Cell, res *Result) error {
	r := rand.New(rand.NewPCG(36, 1))
	benign, total := benignMix(p.Threshold)
	res.BenignPPS, res.BenignDests = total, len(benign)
	cum := make([]float64, len(benign))
	acc := 0.0
	for i, b := range benign {
		acc += b.pps
		cum[i] = acc / total
	}
	starts := make([]time.Time, len(cells))
	firsts := make([]time.Time, len(cells))
	agent := &sflowAgent{tx: tx, onSend: func(ids []int, at time.Time) {
		for _, id := range ids {
			if id >= 0 && firsts[id].IsZero() {
				firsts[id] = at
			}
		}
	}}
	nf := map[string]*nfExporter{"netflow9": {tx: tx, version: 9}, "ipfix": {tx: tx, version: 10}}
	// The benign mix alone first: false positives show here too.
	warm := 5 * time.Second
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	undo, err := realtime()
	if err == nil {
		res.SenderFIFO = true
		defer undo()
	}
	t0 := time.Now()
	agent.boot = t0.Add(-time.Hour) // an agent up for an hour
	// Cell i floods from at[i] for its length, then is quiet for p.Gap.
	at := make([]time.Duration, len(cells)+1)
	at[0] = warm
	length := func(c Cell) time.Duration {
		if c.Feed == "sflow" {
			return p.Flood
		}
		return p.Flood + 1500*time.Millisecond
	}
	// A random pause of up to a second more after each: every flood
	// starts at its own phase of tierwall's 100 ms tick and FastNetMon's
	// one-second check (with a fixed spacing each would meet every flood
	// at the same point of its cycle, always lucky or always not).
	for i, c := range cells {
		at[i+1] = at[i] + length(c) + p.Gap + time.Duration(r.Int64N(int64(time.Second)))
	}
	end := at[len(cells)]
	step := time.Millisecond
	i := 0
	var lastExport time.Time
	for ms := time.Duration(0); ms < end; ms += step {
		if err := ctx.Err(); err != nil {
			return err
		}
		due := t0.Add(ms)
		if d := time.Until(due); d > 0 {
			// In the kernel, on this thread: it wakes at its own
			// priority, not when the runtime's timer thread is run.
			ts := unix.NsecToTimespec(d.Nanoseconds())
			_ = unix.Nanosleep(&ts, nil)
		} else if -d > res.SenderLag {
			res.SenderLag = -d
		}
		if late := -time.Until(due); late > 20*time.Millisecond {
			res.SenderLate += step
			if late > 100*time.Millisecond && (len(res.Stalls) == 0 || time.Since(res.Stalls[len(res.Stalls)-1].At) > time.Second) {
				res.Stalls = append(res.Stalls, Stall{At: time.Now(), Late: late})
			}
		}
		now := time.Now()
		agent.due = due
		// One draw for the whole mix, each sample's destination by its
		// share: the same process as a draw per destination, cheaper.
		for range poisson(r, total/100*step.Seconds()) {
			b := benign[pick(r, cum)]
			if err := agent.add(now, b.rate, b.packet(r), -1); err != nil {
				return err
			}
		}
		for i < len(cells) && ms >= at[i+1] {
			i++
		}
		if i < len(cells) && ms >= at[i] && ms-at[i] < length(cells[i]) {
			c := cells[i]
			if starts[i].IsZero() {
				starts[i] = due
				lastExport = due
				fmt.Fprintf(p.Log, "eval-network: %s (repetition %d)\n", c.Name(), c.Rep+1)
			}
			if c.Feed == "sflow" {
				f := floodOf(c)
				for range poisson(r, f.pps/float64(f.rate)*step.Seconds()) {
					if err := agent.add(now, f.rate, f.packet(r), i); err != nil {
						return err
					}
				}
			} else if due.Sub(lastExport) >= time.Second {
				lastExport = due
				if firsts[i].IsZero() {
					firsts[i] = now
				}
				if err := nf[c.Feed].export(c, r); err != nil {
					return err
				}
			}
		}
		if err := agent.tick(now); err != nil {
			return err
		}
	}
	res.BenignSecs = end.Seconds()
	fmt.Fprintf(p.Log, "eval-network: the feed fell behind by at most %v, more than 20 ms behind for %v, %d stalls over 100 ms\n", res.SenderLag.Round(time.Millisecond), res.SenderLate, len(res.Stalls))
	for i := range cells {
		cells[i].Start, cells[i].First = starts[i], firsts[i]
	}
	return nil
}

// twAttack is an attack tierwall reported.
type twAttack struct {
	Dst         []netip.Prefix `json:"dst"`
	Carpet      bool           `json:"carpet"`
	Kinds       []string       `json:"kinds"`
	PPS         float64        `json:"pps"`
	FirstRecord time.Time      `json:"first_record"`
	Detected    time.Time      `json:"detected"`
	Reported    time.Time      `json:"-"`
}

// judgeCell finds each tool's first detection of the cell's victim after
// its start.
func judgeCell(c *Cell, tw []twAttack, fnm []fastnetmon.Ban) {
	start := c.Start
	c.Tierwall, c.FastNetMon = -1, -1
	if start.IsZero() {
		return
	}
	if !c.First.IsZero() {
		c.FirstDatagram = c.First.Sub(start).Seconds()
	}
	v := netip.MustParsePrefix(c.Victim)
	for _, a := range tw {
		if a.Reported.Before(start) {
			continue
		}
		hit := slices.ContainsFunc(a.Dst, v.Overlaps)
		if !hit {
			continue
		}
		if d := a.Reported.Sub(start).Seconds(); c.Tierwall < 0 || d < c.Tierwall {
			c.Tierwall = d
			how := strings.Join(a.Kinds, ",")
			if a.Carpet {
				how = "group total: " + how
			}
			c.TierwallHow = fmt.Sprintf("%s at %.0f kpps", how, a.PPS/1e3)
		}
	}
	for _, b := range fnm {
		if b.At.Before(start) || !v.Contains(b.IP) {
			continue
		}
		if d := b.At.Sub(start).Seconds(); c.FastNetMon < 0 || d < c.FastNetMon {
			c.FastNetMon = d
			c.FastNetMonHow = fmt.Sprintf("%s at %s pps", b.IP, b.PPS)
			if v.Bits() < 32 {
				c.FastNetMonHow = "one host: " + c.FastNetMonHow
			}
		}
	}
}

// falsePositives are the benign destinations either tool named.
func falsePositives(tw []twAttack, fnm []fastnetmon.Ban) (a, b []string) {
	for _, x := range tw {
		for _, p := range x.Dst {
			if netBenign.Overlaps(p) || !netProtected.Overlaps(p) {
				a = append(a, fmt.Sprintf("%v at %s (%.0f pps)", p, x.Reported.UTC().Format("15:04:05.000"), x.PPS))
			}
		}
	}
	for _, x := range fnm {
		if netBenign.Contains(x.IP) || !netProtected.Contains(x.IP) {
			b = append(b, fmt.Sprintf("%v at %s (%s pps)", x.IP, x.At.UTC().Format("15:04:05.000"), x.PPS))
		}
	}
	return a, b
}

// ingestStep offers rate datagrams/s of feed to addr for d, then waits
// for the socket's queue to drain and reads its drops.
func ingestStep(ctx context.Context, addr netip.AddrPort, pid int, feed [][]byte, rate float64, d time.Duration) (IngestStep, error) {
	s := IngestStep{Offered: rate}
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: evalkit.Loopback.AsSlice()})
	if err != nil {
		return s, fmt.Errorf("opening the replay socket: %w", err)
	}
	defer c.Close()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// sendmmsg(2), 64 datagrams a call: the sender's system calls would
	// otherwise cap the offered rate below what a tool takes (one
	// datagram a call went no faster than 137,000/s here).
	pc := ipv4.NewPacketConn(c)
	batch := make([]ipv4.Message, 64)
	for i := range batch {
		batch[i] = ipv4.Message{Buffers: make([][]byte, 1), Addr: net.UDPAddrFromAddrPort(addr)}
	}
	before, cpu0 := evalkit.UDPDrops(addr.Port()), evalkit.ProcCPU(pid)
	t0 := time.Now()
	per := rate / 1000
	due := 0.0
	for ms := 1; time.Since(t0) < d; ms++ {
		if err := ctx.Err(); err != nil {
			return s, err
		}
		due += per
		for due >= 1 {
			k := min(int(due), len(batch))
			for i := range batch[:k] {
				batch[i].Buffers[0] = feed[(s.Sent+uint64(i))%uint64(len(feed))]
			}
			n, err := pc.WriteBatch(batch[:k], 0)
			if err != nil {
				return s, fmt.Errorf("replaying to %v: %w", addr, err)
			}
			s.Sent += uint64(n)
			due -= float64(n)
		}
		if w := time.Until(t0.Add(time.Duration(ms) * time.Millisecond)); w > 0 {
			time.Sleep(w)
		}
	}
	s.Secs = time.Since(t0).Seconds()
	for i := 0; i < 50 && evalkit.UDPQueued(addr.Port()) > 0; i++ {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	s.Dropped = evalkit.UDPDrops(addr.Port()) - before
	s.CPU = evalkit.ProcCPU(pid) - cpu0
	return s, nil
}
