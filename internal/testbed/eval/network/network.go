// SPDX-License-Identifier: Apache-2.0

// Package network is `make eval-network`: network mode beside
// FastNetMon Community on the same sFlow, NetFlow v9 and IPFIX feed
// (detection delays, false positives, ingest on one core, memory),
// written to docs/EVALUATION-NETWORK.md and docs/eval/network.json.
package network

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
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
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tierwall/tierwall/internal/control/config"
	tt "github.com/tierwall/tierwall/internal/control/telemetry/telemetrytest"
	"github.com/tierwall/tierwall/internal/testbed/eval/evalkit"
	"github.com/tierwall/tierwall/internal/testbed/harness"
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
	// memory; writes nothing).
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

// Overload is the datagrams/s processed (sent less dropped) at the step
// offered the most, if it lost any (0: no loss there).
func (n Ingest) Overload() float64 {
	var top *IngestStep
	for i := range n.Steps {
		if top == nil || n.Steps[i].Offered > top.Offered {
			top = &n.Steps[i]
		}
	}
	if top == nil || top.Dropped == 0 || top.Secs <= 0 {
		return 0
	}
	return float64(top.Sent-min(top.Dropped, top.Sent)) / top.Secs
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

// pick is the index whose cumulative share first reaches a uniform draw.
func pick(r *rand.Rand, cum []float64) int {
	i, _ := slices.BinarySearch(cum, r.Float64())
	return min(i, len(cum)-1)
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

// Addresses of the run: everything inside 198.18.0.0/18 (FastNetMon's
// networks_list: it allocates counters for every address in it).
var (
	netProtected = netip.MustParsePrefix("198.18.0.0/18")
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

	// Ingest: the same replayed feed to each in turn, interleaved by rate.
	ingTW, ingFNM := Ingest{Tool: "tierwall", RcvBuf: evalkit.RcvBuf(twAddr.Port())}, Ingest{Tool: "FastNetMon", RcvBuf: evalkit.RcvBuf(fnmSFlow.Port())}
	feed := ingestFeed(512)
	// The last rate is as fast as the sender goes: what each processes
	// when overloaded.
	for _, rate := range []float64{5e3, 10e3, 15e3, 20e3, 30e3, 40e3, 50e3, 60e3, 70e3, 80e3, 100e3, 120e3, 160e3, 240e3, evalkit.FlatOut} {
		for _, t := range []struct {
			ing  *Ingest
			addr netip.AddrPort
		}{{&ingTW, twAddr}, {&ingFNM, fnmSFlow}} {
			if n := len(t.ing.Steps); rate != evalkit.FlatOut && n >= 2 && t.ing.Steps[n-1].Dropped > 0 && t.ing.Steps[n-2].Dropped > 0 {
				continue // past its limit twice: no need to go on
			}
			s, err := ingestStep(ctx, t.addr, feed, rate, 2*time.Second)
			if err != nil {
				return res, err
			}
			t.ing.Steps = append(t.ing.Steps, s)
			fmt.Fprintf(p.Log, "eval-network: ingest %s at %.0f/s: sent %d in %.2f s, dropped %d\n", t.ing.Tool, rate, s.Sent, s.Secs, s.Dropped)
		}
	}
	res.Ingest = []Ingest{ingTW, ingFNM}
	res.LoadAfter = evalkit.LoadAvg()
	return res, ctx.Err()
}

// tee sends each datagram to tierwall and to FastNetMon's collector of
// its protocol.
type tee struct {
	conn                *net.UDPConn
	tw, fnmSFlow, fnmNF netip.AddrPort
	sent                uint64
}

func newTee(tw, sflow, nf netip.AddrPort) (*tee, error) {
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: evalkit.Loopback.AsSlice()})
	if err != nil {
		return nil, fmt.Errorf("opening the exporter's socket: %w", err)
	}
	return &tee{conn: c, tw: tw, fnmSFlow: sflow, fnmNF: nf}, nil
}

func (t *tee) send(b []byte, sflow bool) error {
	to := t.fnmNF
	if sflow {
		to = t.fnmSFlow
	}
	// Alternate who gets it first: a few microseconds, but the same for both.
	first, second := t.tw, to
	if t.sent%2 == 1 {
		first, second = to, t.tw
	}
	for _, a := range []netip.AddrPort{first, second} {
		if _, err := t.conn.WriteToUDPAddrPort(b, a); err != nil {
			return fmt.Errorf("sending telemetry to %v: %w", a, err)
		}
	}
	t.sent++
	return nil
}

func (t *tee) close() { t.conn.Close() }

// flood is one source of sampled packets.
type flood struct {
	pps    float64 // represented packets/s
	rate   int     // sampling rate
	packet func(r *rand.Rand) tt.Packet
}

// floodOf is a cell's flood at sampling rate.
func floodOf(c Cell) flood {
	v := netip.MustParsePrefix(c.Victim)
	f := flood{pps: c.PPS, rate: c.Sampling}
	switch c.Kind {
	case "udp":
		f.packet = func(r *rand.Rand) tt.Packet {
			return tt.Packet{Src: evalkit.RandSrc(r), Dst: v.Addr(), Proto: 17, SrcPort: uint16(1024 + r.IntN(60000)), DstPort: uint16(1 + r.IntN(65000)), Length: 512}
		}
	case "syn":
		f.packet = func(r *rand.Rand) tt.Packet {
			return tt.Packet{Src: evalkit.RandSrc(r), Dst: v.Addr(), Proto: 6, SrcPort: uint16(1024 + r.IntN(60000)), DstPort: 443, TCPFlags: 0x02, Length: 60}
		}
	case "reflection":
		ports := []struct{ port, length uint16 }{{123, 468}, {389, 1400}, {53, 1200}}
		f.packet = func(r *rand.Rand) tt.Packet {
			p := ports[r.IntN(len(ports))]
			return tt.Packet{Src: evalkit.RandSrc(r), Dst: v.Addr(), Proto: 17, SrcPort: p.port, DstPort: uint16(1024 + r.IntN(60000)), Length: p.length}
		}
	case "carpet":
		f.packet = func(r *rand.Rand) tt.Packet {
			return tt.Packet{Src: evalkit.RandSrc(r), Dst: evalkit.RandIn(r, v), Proto: 17, SrcPort: uint16(1024 + r.IntN(60000)), DstPort: 80, Length: 512}
		}
	}
	return f
}

// benignMix is the background: 200 destinations of 198.18.1.0/24 at
// rates falling as a power law from 60% of the threshold, web and QUIC
// responses, DNS, a little ICMP, sampled 1:100. Its total and the number
// of destinations go to res.
func benignMix(threshold float64) ([]flood, float64) {
	var fs []flood
	total := 0.0
	for i := range 200 {
		dst := netip.AddrFrom4([4]byte{198, 18, 1, byte(1 + i)})
		pps := 0.6 * threshold / math.Pow(float64(i+1), 0.8)
		total += pps
		fs = append(fs, flood{pps: pps, rate: 100, packet: func(r *rand.Rand) tt.Packet {
			src := netip.AddrFrom4([4]byte{93, 184, byte(r.IntN(8)), byte(1 + r.IntN(64))})
			switch x := r.IntN(100); {
			case x < 60:
				return tt.Packet{Src: src, Dst: dst, Proto: 6, SrcPort: 443, DstPort: uint16(32768 + r.IntN(28000)), TCPFlags: 0x10, Length: uint16(52 + r.IntN(1400))}
			case x < 88:
				return tt.Packet{Src: src, Dst: dst, Proto: 17, SrcPort: 443, DstPort: uint16(32768 + r.IntN(28000)), Length: uint16(80 + r.IntN(1270))}
			case x < 98:
				return tt.Packet{Src: src, Dst: dst, Proto: 17, SrcPort: 53, DstPort: uint16(32768 + r.IntN(28000)), Length: uint16(80 + r.IntN(400))}
			default:
				return tt.Packet{Src: src, Dst: dst, Proto: 1, Length: 84}
			}
		}})
	}
	return fs, total
}

// poisson draws the number of events of mean l.
func poisson(r *rand.Rand, l float64) int {
	if l > 30 {
		return max(0, int(math.Round(l+math.Sqrt(l)*r.NormFloat64())))
	}
	k, p, e := 0, 1.0, math.Exp(-l)
	for {
		p *= r.Float64()
		if p <= e {
			return k
		}
		k++
	}
}

// sflowAgent batches samples as pmacctd's sfprobe does: a datagram when
// it holds six, or when the oldest has waited a second.
type sflowAgent struct {
	tx  *tee
	seq uint32
	// boot and due: the agent's uptime in a datagram is due - boot, due
	// being when the feed's schedule sends it. A sender that fell behind
	// (this machine's other jobs) is then a path that held the datagram,
	// as the collector sees one, not an exporter that sent it late.
	boot, due time.Time
	pending   []pendingSample
	oldest    time.Time
	// onSend is told which floods' samples went out, when.
	onSend func(ids []int, at time.Time)
}

type pendingSample struct {
	rate int
	p    tt.Packet
	id   int
}

func (a *sflowAgent) add(now time.Time, rate int, p tt.Packet, id int) error {
	if len(a.pending) == 0 {
		a.oldest = now
	}
	a.pending = append(a.pending, pendingSample{rate, p, id})
	if len(a.pending) >= 6 {
		return a.flush(now)
	}
	return nil
}

func (a *sflowAgent) tick(now time.Time) error {
	if len(a.pending) > 0 && now.Sub(a.oldest) >= time.Second {
		return a.flush(now)
	}
	return nil
}

func (a *sflowAgent) flush(now time.Time) error {
	a.seq++
	s := tt.SFlow{Agent: evalkit.Loopback, Sequence: a.seq, Uptime: uint32(a.due.Sub(a.boot).Milliseconds())}
	var ids []int
	for _, x := range a.pending {
		s.Flow(uint32(x.rate), x.p)
		ids = append(ids, x.id)
	}
	a.pending = a.pending[:0]
	if err := a.tx.send(s.Bytes(), true); err != nil {
		return err
	}
	if a.onSend != nil {
		a.onSend(ids, now)
	}
	return nil
}

// nfExporter exports a flood as an unsampled NetFlow v9 or IPFIX exporter
// with a one-second active timeout would: every second, a record per
// source for the packets of that second, 24 records a datagram, the
// template before them.
type nfExporter struct {
	tx      *tee
	version uint16
	seq     uint32 // datagrams (v9) or data records (IPFIX)
}

const nfSources = 64

func (e *nfExporter) export(c Cell, r *rand.Rand) error {
	v := netip.MustParsePrefix(c.Victim).Addr()
	per := uint32(c.PPS / nfSources)
	var recs [][]byte
	for range nfSources {
		recs = append(recs, tt.Record(tt.Flow{Src: evalkit.RandSrc(r), Dst: v, Proto: 17, SrcPort: uint16(1024 + r.IntN(60000)), DstPort: 80,
			Packets: per, Bytes: per * 512, Start: 99000, End: 100000}))
	}
	for i := 0; i < len(recs); i += 24 {
		chunk := recs[i:min(i+24, len(recs))]
		m := tt.NF{Version: e.version, Sequence: e.seq}
		if i == 0 {
			m.Template(256, tt.FlowFields)
		}
		m.Data(256, chunk...)
		if e.version == 10 {
			e.seq += uint32(len(chunk))
		} else {
			e.seq++
		}
		if err := e.tx.send(m.Bytes(), false); err != nil {
			return err
		}
	}
	return nil
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

// fnmBan is a ban FastNetMon's notify script recorded.
type fnmBan struct {
	At  time.Time
	IP  netip.Addr
	PPS string
}

// judgeCell finds each tool's first detection of the cell's victim after
// its start.
func judgeCell(c *Cell, tw []twAttack, fnm []fnmBan) {
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
func falsePositives(tw []twAttack, fnm []fnmBan) (a, b []string) {
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

type tierwallProc struct{ *evalkit.Proc }

// tierwallConfig is netcollect's configuration: 101 exporters
// (127.0.0.1 on, the run's and the memory steps'), the run's threshold
// per host, and a host group per carpet bombing's /24 with its total at
// the same threshold.
func tierwallConfig(p Params, addr netip.AddrPort, cells []Cell) *config.Config {
	exporters := make([]config.TelemetryExporter, 101)
	for i := range exporters {
		exporters[i] = config.TelemetryExporter{Address: fmt.Sprintf("127.0.0.%d", 1+i), Name: fmt.Sprintf("r%d", i)}
	}
	c := evalkit.CollectorConfig(addr.String(), exporters, p.Threshold)
	var groups []config.HostGroup
	for _, cell := range cells {
		if cell.Kind == "carpet" {
			name := "carpet-" + strings.NewReplacer(".", "-", "/", "-").Replace(cell.Victim)
			groups = append(groups, config.HostGroup{Name: name, Prefixes: []string{cell.Victim}})
		}
	}
	if len(groups) > 0 {
		c.HostGroups = groups
		c.Telemetry.Groups = map[string]config.TelemetryGroup{}
		for _, g := range groups {
			c.Telemetry.Groups[g.Name] = config.TelemetryGroup{Total: map[string]config.TelemetryLimits{"all": {PPS: p.Threshold}}}
		}
	}
	return c
}

// startTierwall writes a tierwall.yaml with the run's thresholds (a host
// group per carpet bombing's /24, its total at the same threshold) and
// runs netcollect on it.
func startTierwall(ctx context.Context, p Params, dir string, addr netip.AddrPort, cells []Cell) (*tierwallProc, error) {
	cfg := filepath.Join(dir, "tierwall.yaml")
	if err := harness.WriteConfig(cfg, tierwallConfig(p, addr, cells)); err != nil {
		return nil, fmt.Errorf("writing tierwall's configuration: %w", err)
	}
	pr, err := evalkit.Start(ctx, p.Self, []string{"netcollect", "--config", cfg}, p.Log)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(10 * time.Second)
	for evalkit.UDPDrops(addr.Port()) == math.MaxUint64 || !evalkit.Listening(addr.Port()) {
		if time.Now().After(deadline) {
			pr.Stop()
			return nil, fmt.Errorf("tierwall's collector did not listen on %v", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return &tierwallProc{pr}, nil
}

// NetcollectLine is what netcollect prints: an attack as it starts, or
// its counters when asked (SIGUSR1).
type NetcollectLine struct {
	Attack *json.RawMessage `json:"attack,omitempty"`
	// Reported is when netcollect printed the attack: the time it fired,
	// as FastNetMon's notify script records its own.
	Reported time.Time        `json:"reported,omitzero"`
	Stats    *NetcollectStats `json:"stats,omitempty"`
}

// NetcollectStats sum tierwall's exporter counters.
type NetcollectStats struct {
	Datagrams, Records, DecodeErrors, SequenceGaps, TemplatesRefused uint64
	Templates                                                        int
	// LiveHeap is the Go heap in use after a collection (bytes).
	LiveHeap uint64
}

func (t *tierwallProc) attacks() []twAttack {
	var out []twAttack
	for _, l := range t.Lines() {
		var x NetcollectLine
		if json.Unmarshal([]byte(l), &x) != nil || x.Attack == nil {
			continue
		}
		var a twAttack
		if json.Unmarshal(*x.Attack, &a) == nil {
			a.Reported = x.Reported
			out = append(out, a)
		}
	}
	return out
}

func (t *tierwallProc) stats() (NetcollectStats, error) {
	n := len(t.Lines())
	if err := t.Cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		return NetcollectStats{}, fmt.Errorf("asking tierwall for its counters: %w", err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		ls := t.Lines()
		for _, l := range ls[min(n, len(ls)):] {
			var x NetcollectLine
			if json.Unmarshal([]byte(l), &x) == nil && x.Stats != nil {
				return *x.Stats, nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return NetcollectStats{}, errors.New("tierwall did not print its counters")
}

type fnmProc struct {
	*evalkit.Proc
	notify string
}

// fastnetmonConf is FastNetMon's configuration for the run: its sFlow
// and NetFlow collectors on the addresses given, the per-host pps
// threshold, its shortest averaging (1 s) and checks every second, the
// notify script recording when it fires; nothing else on.
func fastnetmonConf(dir string, sflow, nf netip.AddrPort, threshold float64) string {
	return fmt.Sprintf(`logging_level = info
logging_local_syslog_logging = off
logging_remote_syslog_logging = off
disable_usage_report = on
enable_ban = on
enable_ban_ipv6 = off
process_incoming_traffic = on
process_outgoing_traffic = off
ban_details_records_count = 20
ban_time = 1900
unban_only_if_attack_finished = on
networks_list_path = %[1]s/networks_list
white_list_path = %[1]s/networks_whitelist
check_period = 1
enable_connection_tracking = off
ban_for_pps = on
ban_for_bandwidth = off
ban_for_flows = off
threshold_pps = %[6]d
threshold_mbps = 1000000
threshold_flows = 100000000
mirror_afpacket = off
mirror_afxdp = off
mirror_netmap = off
pcap = off
sflow = on
sflow_host = %[2]s
sflow_port = %[3]d
netflow = on
netflow_host = %[4]s
netflow_port = %[5]d
netflow_sampling_ratio = 1
average_calculation_time = 1
speed_calculation_delay = 1
notify_script_path = %[1]s/notify.sh
collect_attack_pcap_dumps = off
redis_enabled = off
mongodb_enabled = off
exabgp = off
gobgp = off
influxdb = off
graphite = off
monitor_local_ip_addresses = off
monitor_openvz_vps_ip_addresses = off
pid_path = %[1]s/fastnetmon.pid
cli_stats_file_path = %[1]s/fastnetmon.dat
cli_stats_ipv6_file_path = %[1]s/fastnetmon_ipv6.dat
enable_api = off
kafka_traffic_export = off
prometheus = off
`, dir, sflow.Addr(), sflow.Port(), nf.Addr(), nf.Port(), int(threshold))
}

func startFastNetMon(ctx context.Context, p Params, dir string, sflow, nf netip.AddrPort) (*fnmProc, error) {
	fdir := filepath.Join(dir, "fastnetmon")
	if err := os.MkdirAll(fdir, 0o755); err != nil {
		return nil, fmt.Errorf("making FastNetMon's directory: %w", err)
	}
	notify := filepath.Join(fdir, "notify.log")
	files := map[string]string{
		"networks_list":      netProtected.String() + "\n",
		"networks_whitelist": "",
		"fastnetmon.conf":    fastnetmonConf(fdir, sflow, nf, p.Threshold),
		// FastNetMon CE calls it with IP, direction, pps and action, the
		// attack's details on standard input.
		"notify.sh": "#!/bin/sh\necho \"$(date +%s.%N) $*\" >> " + notify + "\ncat >/dev/null\n",
	}
	for n, s := range files {
		mode := os.FileMode(0o644)
		if strings.HasSuffix(n, ".sh") {
			mode = 0o755
		}
		if err := os.WriteFile(filepath.Join(fdir, n), []byte(s), mode); err != nil {
			return nil, fmt.Errorf("writing FastNetMon's %s: %w", n, err)
		}
	}
	pr, err := evalkit.Start(ctx, p.FastNetMon, []string{"--configuration_file", filepath.Join(fdir, "fastnetmon.conf"),
		"--log_file", filepath.Join(fdir, "fastnetmon.log"), "--disable_pid_logic"}, p.Log)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(15 * time.Second)
	for !evalkit.Listening(sflow.Port()) || !evalkit.Listening(nf.Port()) {
		if time.Now().After(deadline) {
			pr.Stop()
			return nil, fmt.Errorf("FastNetMon did not listen on %v and %v", sflow, nf)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return &fnmProc{Proc: pr, notify: notify}, nil
}

// bans parses the notify script's log: "SECONDS.NANOS IP DIRECTION PPS
// ACTION".
func (f *fnmProc) bans() []fnmBan {
	raw, err := os.ReadFile(f.notify)
	if err != nil {
		return nil
	}
	return ParseNotify(string(raw))
}

// ParseNotify reads the notify script's log; lines that are not a ban
// are skipped.
func ParseNotify(s string) []fnmBan {
	var out []fnmBan
	for _, l := range strings.Split(s, "\n") {
		f := strings.Fields(l)
		if len(f) < 5 || f[4] != "ban" {
			continue
		}
		ip, err := netip.ParseAddr(f[1])
		if err != nil {
			continue
		}
		sec, nsec, _ := strings.Cut(f[0], ".")
		si, err1 := strconv.ParseInt(sec, 10, 64)
		ni, err2 := strconv.ParseInt((nsec + "000000000")[:9], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		out = append(out, fnmBan{At: time.Unix(si, ni), IP: ip, PPS: f[3]})
	}
	return out
}

// rss reads a Vm* field of /proc/PID/status in KiB.
func rss(pid int, field string) uint64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(raw), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && k == field {
			n, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

// sendTemplates has n exporters (127.0.0.2 on) send per NetFlow v9
// templates each to both tools, 100 to a datagram.
func sendTemplates(tw, fnm netip.AddrPort, n, per int) error {
	for e := range n {
		src := netip.AddrFrom4([4]byte{127, 0, 0, byte(2 + e)})
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: src.AsSlice()})
		if err != nil {
			return fmt.Errorf("opening exporter %v: %w", src, err)
		}
		for i := 0; i < per; i += 100 {
			m := tt.NF{Version: 9, Domain: 1, Sequence: uint32(i / 100)}
			for id := i; id < min(i+100, per); id++ {
				m.Template(uint16(256+id), tt.FlowFields)
			}
			b := m.Bytes()
			for _, a := range []netip.AddrPort{tw, fnm} {
				if _, err := c.WriteToUDPAddrPort(b, a); err != nil {
					c.Close()
					return fmt.Errorf("sending templates from %v: %w", src, err)
				}
			}
			time.Sleep(200 * time.Microsecond)
		}
		c.Close()
	}
	return nil
}

// ingestFeed is n sFlow datagrams of six samples each (sampling 1: the
// rates they stand for stay under the thresholds), to 4,096 destinations.
func ingestFeed(n int) [][]byte {
	r := rand.New(rand.NewPCG(36, 2))
	var out [][]byte
	for i := range n {
		s := tt.SFlow{Agent: evalkit.Loopback, Sequence: uint32(i + 1)}
		for range 6 {
			s.Flow(1, tt.Packet{Src: evalkit.RandSrc(r), Dst: evalkit.RandIn(r, evalkit.IngestPrefix), Proto: 17, SrcPort: 443, DstPort: uint16(1024 + r.IntN(60000)), Length: uint16(64 + r.IntN(1400))})
		}
		out = append(out, s.Bytes())
	}
	return out
}

// ingestStep offers rate datagrams/s of feed to addr for d, then waits
// for the socket's queue to drain and reads its drops.
func ingestStep(ctx context.Context, addr netip.AddrPort, feed [][]byte, rate float64, d time.Duration) (IngestStep, error) {
	s := IngestStep{Offered: rate}
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: evalkit.Loopback.AsSlice()})
	if err != nil {
		return s, fmt.Errorf("opening the replay socket: %w", err)
	}
	defer c.Close()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before := evalkit.UDPDrops(addr.Port())
	t0 := time.Now()
	per := rate / 1000
	due := 0.0
	for ms := 1; time.Since(t0) < d; ms++ {
		if err := ctx.Err(); err != nil {
			return s, err
		}
		due += per
		for ; due >= 1; due-- {
			if _, err := c.WriteToUDPAddrPort(feed[s.Sent%uint64(len(feed))], addr); err != nil {
				return s, fmt.Errorf("replaying to %v: %w", addr, err)
			}
			s.Sent++
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
	return s, nil
}
