// SPDX-License-Identifier: Apache-2.0

package modes

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/tierwall/tierwall/internal/bpffs"
	"github.com/tierwall/tierwall/internal/testbed/eval/evalkit"
	"github.com/tierwall/tierwall/internal/testbed/trafgen"
)

// The drop-rate testbed: the live-frames generator on CPU 0 in one
// namespace, the receiver's veth (threaded NAPI pinned to CPU 1) in the
// other, with the mechanism under test.
const (
	nsTx, nsRx = "twe-tx", "twe-rx"
	ifTx, ifRx = "twe-tx0", "twe-rx0"
)

// Row is one measured cell.
type Row struct {
	Figure    string  `json:"figure"`
	Mechanism string  `json:"mechanism"`
	Dist      string  `json:"dist"`
	Sources   int     `json:"sources"`
	SentMpps  float64 `json:"sent_mpps"`
	DropMpps  float64 `json:"drop_mpps"`
	CPUPct    float64 `json:"rx_cpu_pct"`   // receiver CPU busy, percent
	Extra     float64 `json:"extra"`        // figure-specific: NIC-table drops (Mpps), HTTP req/s, model values
	Arrived   float64 `json:"arrived_mpps"` // lab: attack packets that reached the NIC stage; plain pair: the receiver's ring
	// The range of the measurements the row is the median of (drop Mpps;
	// for HTTP rows, requests/s): how far a difference is noise.
	Lo float64 `json:"lo"`
	Hi float64 `json:"hi"`
	// CPUPct is the median of the measurements' CPU shares (not the CPU of
	// the median-drop one); CPULo and CPUHi their range.
	CPULo float64 `json:"cpu_lo"`
	CPUHi float64 `json:"cpu_hi"`
	Note  string  `json:"note,omitempty"`
}

func pairDown() {
	exec.Command("ip", "netns", "del", nsTx).Run()
	exec.Command("ip", "netns", "del", nsRx).Run()
	_ = bpffs.RemoveNetns(bpffs.DefaultBPFFS, nsRx)
}

func pairUp() error {
	pairDown()
	for _, c := range [][]string{
		{"ip", "netns", "add", nsTx}, {"ip", "netns", "add", nsRx},
		{"ip", "netns", "exec", nsTx, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1"},
		{"ip", "link", "add", ifTx, "netns", nsTx, "type", "veth", "peer", "name", ifRx, "netns", nsRx},
		{"ip", "-n", nsRx, "addr", "add", "10.220.0.2/24", "dev", ifRx},
		{"ip", "-n", nsTx, "link", "set", ifTx, "up"}, {"ip", "-n", nsRx, "link", "set", ifRx, "up"},
		{"ip", "-n", nsRx, "link", "set", "lo", "up"},
		// xdp_frames need NAPI at the receiver: XDP attached, or GRO on
		// for the netfilter baselines.
		{"ip", "netns", "exec", nsRx, "ethtool", "-K", ifRx, "gro", "on"},
		{"ip", "netns", "exec", nsRx, "sysctl", "-qw", "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf." + ifRx + ".rp_filter=0"},
	} {
		if _, err := evalkit.Sh(c...); err != nil {
			pairDown()
			return err
		}
	}
	return nil
}

// Params of a drop-rate sweep.
type Params struct {
	Sizes    []int
	Dists    []trafgen.Dist
	Duration time.Duration // of each measurement
	Repeat   int           // measurements per cell; the median is reported (default 1)
	// The lab's sweep of offered attack rates (packets/s, uniform traffic)
	// at each of SweepSizes, every mode at the same rates.
	SweepRates []uint64
	SweepSizes []int
	Only       map[string]bool
	Log        io.Writer
}

// DropRate measures every host mechanism at every size and distribution
// (the paper's Fig. 2a/2b and, from the same runs, Fig. 3).
func DropRate(ctx context.Context, p Params) ([]Row, error) {
	if err := pairUp(); err != nil {
		return nil, err
	}
	defer pairDown()
	src, err := evalkit.MACOf(nsTx, ifTx)
	if err != nil {
		return nil, err
	}
	dst, err := evalkit.MACOf(nsRx, ifRx)
	if err != nil {
		return nil, err
	}
	// One sample table for every size: the generator walks the table of
	// the largest, so what it costs to send (a 4 MiB table at 128K
	// sources against 1 MiB at 1K, beyond this CPU's L2) is the same in
	// every cell, and the rates compare the receivers alone.
	slots := trafgen.SampleSlots(slices.Max(p.Sizes))
	var rows []Row
	for _, m := range HostMechanisms() {
		if p.Only != nil && !p.Only[m.Name()] {
			continue
		}
		for _, n := range p.Sizes {
			if max := m.MaxRules(); max > 0 && n > max {
				fmt.Fprintf(p.Log, "eval: %s holds at most %d rules: skipping %d\n", m.Name(), max, n)
				continue
			}
			srcs, err := trafgen.Addresses(netip.MustParsePrefix("10.128.0.0/9"), n)
			if err != nil {
				return rows, err
			}
			// On the error paths the first error is the one to report; the
			// teardown of a partial setup fails on what was never made.
			if err := evalkit.InNS(nsRx, -1, func() error { return m.Setup(ifRx, srcs) }); err != nil {
				_ = evalkit.InNS(nsRx, -1, m.Teardown)
				return rows, fmt.Errorf("%s with %d rules: %w", m.Name(), n, err)
			}
			if err := evalkit.PinNAPI(nsRx, ifRx, evalkit.RxCPU); err != nil {
				_ = evalkit.InNS(nsRx, -1, m.Teardown)
				return rows, err
			}
			for _, d := range p.Dists {
				if ctx.Err() != nil {
					break
				}
				r, err := medianOf(p.Repeat, func() (Row, error) { return measure(ctx, m, n, d, slots, src, dst, p.Duration) })
				if err != nil {
					_ = evalkit.InNS(nsRx, -1, m.Teardown)
					return rows, err
				}
				r.Figure = "drop-rate"
				fmt.Fprintf(p.Log, "eval: %-15s %-8s %7d sources: sent %.2f Mpps, dropped %.3f Mpps, rx CPU %.0f%%\n", r.Mechanism, r.Dist, n, r.SentMpps, r.DropMpps, r.CPUPct)
				rows = append(rows, r)
			}
			if err := evalkit.InNS(nsRx, -1, m.Teardown); err != nil {
				return rows, fmt.Errorf("tearing down %s: %w", m.Name(), err)
			}
		}
	}
	return rows, ctx.Err()
}

func measure(ctx context.Context, m Mechanism, n int, d trafgen.Dist, slots int, src, dst [6]byte, dur time.Duration) (Row, error) {
	spec := trafgen.Spec{Iface: ifTx, SrcMAC: src, DstMAC: dst, Dst: netip.MustParseAddr("10.220.0.2"),
		Sources: n, Dist: d, Seed: uint64(n), Slots: slots}
	// Warm up (caches, NAPI thread placement), then measure.
	spec.Duration = dur / 4
	if err := evalkit.InNS(nsTx, evalkit.GenCPU, func() error { _, err := trafgen.Run(ctx, spec); return err }); err != nil {
		return Row{}, err
	}
	var d0, d1, b0, t0 uint64
	var derr error
	var start time.Time
	get := func(v *uint64) error {
		return evalkit.InNS(nsRx, -1, func() error { var err error; *v, err = m.Dropped(); return err })
	}
	// The window opens at the first frame, after the generator's set-up
	// (its program, up to 2^21 samples), which grows with the sources.
	var x0, x1 uint64
	spec.Started = func(t time.Time) {
		derr = get(&d0)
		var xerr error
		if x0, xerr = vethXmit(nsTx, ifTx); xerr != nil && derr == nil {
			derr = xerr
		}
		b0, t0 = evalkit.CPUTimes(evalkit.RxCPU)
		start = t
	}
	spec.Duration = dur
	var rep *trafgen.Report
	if err := evalkit.InNS(nsTx, evalkit.GenCPU, func() error { var err error; rep, err = trafgen.Run(ctx, spec); return err }); err != nil {
		return Row{}, err
	}
	if derr != nil {
		return Row{}, derr
	}
	time.Sleep(20 * time.Millisecond) // let the receiver finish its queue
	el := time.Since(start)
	b1, t1 := evalkit.CPUTimes(evalkit.RxCPU)
	if err := get(&d1); err != nil {
		return Row{}, err
	}
	x1, err := vethXmit(nsTx, ifTx)
	if err != nil {
		return Row{}, err
	}
	cpu := 0.0
	if t1 > t0 {
		cpu = 100 * float64(b1-b0) / float64(t1-t0)
	}
	return Row{Mechanism: m.Name(), Dist: string(d), Sources: n, SentMpps: rep.PPS / 1e6,
		DropMpps: float64(d1-d0) / el.Seconds() / 1e6, CPUPct: cpu, Arrived: float64(x1-x0) / el.Seconds() / 1e6}, nil
}

// vethXmit is how many XDP frames iface (a veth, in namespace ns) has
// put in its peer's ring: what the generator sent less what the ring,
// full while the receiver's NAPI was not running, refused.
func vethXmit(ns, iface string) (uint64, error) {
	return evalkit.VethStat(ns, iface, "tx_queue_", "_xdp_xmit")
}

// medianOf runs f n times (at least once) and returns the run with the
// median drop rate: one slow or fast moment of this shared machine must
// not decide a cell.
func medianOf(n int, f func() (Row, error)) (Row, error) {
	return medianBy(n, func(r Row) float64 { return r.DropMpps }, f)
}

// medianBy is medianOf on the value v of a row; Lo and Hi keep the range.
func medianBy(n int, v func(Row) float64, f func() (Row, error)) (Row, error) {
	var rs []Row
	for i := 0; i < max(n, 1); i++ {
		r, err := f()
		if err != nil {
			return r, err
		}
		rs = append(rs, r)
	}
	return pickMedian(rs, v), nil
}

// pickMedian returns the row with the median v, with the range of v in
// Lo and Hi and the median and range of the CPU shares (measured apart
// from the drops: the median-drop run's CPU is not the median CPU).
func pickMedian(rs []Row, v func(Row) float64) Row {
	cpu := make([]float64, len(rs))
	for i, r := range rs {
		cpu[i] = r.CPUPct
	}
	sort.Float64s(cpu)
	rs = slices.Clone(rs)
	sort.Slice(rs, func(i, j int) bool { return v(rs[i]) < v(rs[j]) })
	m := rs[len(rs)/2]
	m.Lo, m.Hi = v(rs[0]), v(rs[len(rs)-1])
	m.CPUPct, m.CPULo, m.CPUHi = cpu[len(cpu)/2], cpu[0], cpu[len(cpu)-1]
	if len(rs) > 1 {
		m.Note = strings.TrimSpace(fmt.Sprintf("%s median of %d (%.3f–%.3f)", m.Note, len(rs), m.Lo, m.Hi))
	}
	return m
}
