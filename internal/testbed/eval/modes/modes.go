// SPDX-License-Identifier: Apache-2.0

package modes

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/tierwall/tierwall/internal/control/placement"
	"github.com/tierwall/tierwall/internal/datapath"
	"github.com/tierwall/tierwall/internal/testbed/eval/evalkit"
	"github.com/tierwall/tierwall/internal/testbed/lab"
	"github.com/tierwall/tierwall/internal/testbed/trafgen"
	"github.com/tierwall/tierwall/internal/tier/nicstage"
)

// NICCPURate models the SmartNIC's CPU: the paper's NIC ran XDP slower
// than the host did. A model parameter, stated in EVALUATION.md.
const NICCPURate = 1_500_000

// Modes are tierwall's four approaches on the lab (host is also measured
// on the plain pair, as "tierwall-host").
var Modes = []nicstage.Mode{nicstage.Wire, nicstage.Hybrid, nicstage.HW, nicstage.CPU}

func modeName(m nicstage.Mode) string {
	if m == nicstage.Wire {
		return "lab-host"
	}
	return "lab-" + string(m)
}

// LabModes measures each mode's drop rate on the lab: generator and NIC
// stage on CPU 0, the host on CPU 1. Every size and distribution is
// measured at the generator's full rate (figure "drop-rate"); at
// p.SweepSizes, uniform traffic is also offered at each of p.SweepRates,
// the same for every mode (figure "offered"). The modes take turns at each
// size and distribution (host, hybrid, nic-hw, nic, host, …, p.Repeat
// rounds, medians reported): the machine's drift over minutes must not
// decide which mode drops more.
func LabModes(ctx context.Context, p Params) (_ []Row, err error) {
	if err := lab.Up(); err != nil {
		return nil, err
	}
	defer func() {
		if derr := lab.Down(); derr != nil && err == nil {
			err = derr
		}
	}()
	src, dst, err := labMACs()
	if err != nil {
		return nil, err
	}
	bg, err := background(ctx, p.Duration)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(p.Log, "eval: lab background: CPU %d busy %.1f%% while the generator sends %.2f Mpps into a sink\n", evalkit.RxCPU, bg.CPUPct, bg.SentMpps)
	rows := []Row{bg}
	sizes := slices.Clone(p.Sizes)
	for _, n := range p.SweepSizes {
		if !slices.Contains(sizes, n) {
			sizes = append(sizes, n)
		}
	}
	var modes []nicstage.Mode
	for _, mode := range Modes {
		if p.Only == nil || p.Only[modeName(mode)] {
			modes = append(modes, mode)
		}
	}
	for _, n := range sizes {
		for _, d := range p.Dists {
			var rates []uint64
			if d == trafgen.Uniform && slices.Contains(p.SweepSizes, n) {
				rates = p.SweepRates
			}
			full := slices.Contains(p.Sizes, n)
			if !full && len(rates) == 0 {
				continue
			}
			// runs[mode][i]: the i-th measurement of each round.
			runs := map[nicstage.Mode][][]Row{}
			for range max(p.Repeat, 1) {
				for _, mode := range modes {
					if ctx.Err() != nil {
						return rows, ctx.Err()
					}
					rs, err := labCell(ctx, mode, n, d, src, dst, p.Duration, full, rates)
					if err != nil {
						return rows, fmt.Errorf("%s, %d sources: %w", modeName(mode), n, err)
					}
					for i, r := range rs {
						if len(runs[mode]) <= i {
							runs[mode] = append(runs[mode], nil)
						}
						runs[mode][i] = append(runs[mode][i], r)
					}
				}
			}
			for _, mode := range modes {
				for _, rs := range runs[mode] {
					r := pickMedian(rs, func(r Row) float64 { return r.DropMpps })
					fmt.Fprintf(p.Log, "eval: %-9s %-15s %-8s %7d sources: sent %.2f Mpps, arrived %.3f Mpps, dropped %.3f Mpps (hw %.3f), rx CPU %.0f%% %s\n",
						r.Figure, r.Mechanism, r.Dist, n, r.SentMpps, r.Arrived, r.DropMpps, r.Extra, r.CPUPct, r.Note)
					rows = append(rows, r)
				}
			}
		}
	}
	return rows, nil
}

// background is CPU 1's busy share while the generator sends at full
// rate into a veth pair inside the internet namespace, which the host
// never sees: the part of every cell's host CPU that is not the packets'
// (the generator's RCU grace periods and IPIs, timers). The verdicts on
// host CPU allow for it.
func background(ctx context.Context, dur time.Duration) (Row, error) {
	const sink = lab.Prefix + "bgsink0"
	for _, c := range [][]string{
		{"ip", "-n", lab.NSInet, "link", "add", sink, "type", "veth", "peer", "name", sink + "p"},
		{"ip", "-n", lab.NSInet, "link", "set", sink, "up"},
		{"ip", "-n", lab.NSInet, "link", "set", sink + "p", "up"},
	} {
		if _, err := evalkit.Sh(c...); err != nil {
			return Row{}, err
		}
	}
	// A sink left behind goes with the lab's namespace at lab.Down.
	defer func() { _, _ = evalkit.Sh("ip", "-n", lab.NSInet, "link", "del", sink) }()
	var b0, t0 uint64
	var start time.Time
	spec := trafgen.Spec{Iface: sink, Dst: lab.Host4, Sources: 1000, Dist: trafgen.Uniform, Duration: dur, Seed: 1,
		Started: func(t time.Time) { b0, t0 = evalkit.CPUTimes(evalkit.RxCPU); start = t }}
	var rep *trafgen.Report
	if err := evalkit.InNS(lab.NSInet, evalkit.GenCPU, func() error { var e error; rep, e = trafgen.Run(ctx, spec); return e }); err != nil {
		return Row{}, fmt.Errorf("the background's generator: %w", err)
	}
	b1, t1 := evalkit.CPUTimes(evalkit.RxCPU)
	r := Row{Figure: "background", Mechanism: "lab", Dist: string(trafgen.Uniform), SentMpps: float64(rep.Sent) / time.Since(start).Seconds() / 1e6}
	if t1 > t0 {
		r.CPUPct = 100 * float64(b1-b0) / float64(t1-t0)
	}
	r.CPULo, r.CPUHi = r.CPUPct, r.CPUPct
	return r, nil
}

// labCell attaches mode with rules for n sources, runs placement, then
// measures once at the generator's full rate (when full) and at each of
// rates.
func labCell(ctx context.Context, mode nicstage.Mode, n int, d trafgen.Dist, src, dst [6]byte, dur time.Duration, full bool, rates []uint64) (_ []Row, err error) {
	srcs, err := trafgen.Addresses(lab.AttackNet4, n)
	if err != nil {
		return nil, err
	}
	nic, dp, detach, err := labMode(mode, srcs)
	if err != nil {
		return nil, err
	}
	// The next cell attaches to the same interfaces: a failed detach
	// must not pass unnoticed.
	defer func() {
		if derr := detach(); derr != nil && err == nil {
			err = derr
		}
	}()

	// The flood meets the card's table at the end of the wire, in the
	// generator, in every mode (the lookup runs whether or not the mode
	// uses its answer); the wire's NIC program sees only what it passes.
	spec := trafgen.Spec{Iface: lab.IfInet, SrcMAC: src, DstMAC: dst, Dst: lab.Host4, Sources: n, Dist: d, Seed: uint64(n), Card: nic.Stage().MatchTable()}
	flood := func(t time.Duration, rate uint64) (*trafgen.Report, error) {
		spec.Duration, spec.Rate = t, rate
		var rep *trafgen.Report
		err := evalkit.InNS(lab.NSInet, evalkit.GenCPU, func() error { var e error; rep, e = trafgen.Run(ctx, spec); return e })
		return rep, err
	}
	counters := func() (hw, sw, overload, arrived uint64, err error) {
		st, err := nic.Stage().Stats()
		if err != nil {
			return 0, 0, 0, 0, err
		}
		s, err := dp.Stats()
		if err != nil {
			return 0, 0, 0, 0, err
		}
		for _, v := range nicstage.Verdicts {
			if v != "to_nic_cpu" { // a second count of what went to the NIC CPU
				arrived += st[v].Packets
			}
		}
		return st["hit_drop"].Packets, s.Verdicts["drop_exact"].Packets, st["nic_cpu_overload"].Packets, arrived, nil
	}
	// Placement with the paper's algorithm: one interval of traffic, then
	// the heaviest sources move to the NIC table. Every mode fills the
	// table, and the modes without it (host, nic) ignore its answers: a
	// match stage costs the same per frame whatever it holds, and a
	// table of K rules costs more to search than an empty one here, so
	// an empty table would give those modes a faster card, a higher line
	// rate, than the others.
	off := &placement.Offloader{Table: nic, Params: placement.Params{MaxRate: 1}}
	counted := func() ([]placement.Counted, error) {
		ctrs, err := dp.RuleCounters(hostPrefixes(srcs))
		if err != nil {
			return nil, err
		}
		out := make([]placement.Counted, 0, len(ctrs))
		for p, c := range ctrs {
			out = append(out, placement.Counted{Src: p.Addr(), Packets: c.Packets})
		}
		return out, nil
	}
	// Two steps after an interval of traffic each: the second ranks
	// the sources by their rates between the two.
	for range 2 {
		if _, err := flood(dur/2, 0); err != nil {
			return nil, err
		}
		c, err := counted()
		if err != nil {
			return nil, err
		}
		if _, err := off.Step(ctx, time.Now(), c); err != nil {
			return nil, err
		}
	}
	measure := func(fig string, rate uint64) (Row, error) {
		return func() (Row, error) {
			// The window opens when the first frame goes, not before the
			// generator's set-up (loading its program, writing up to 2^21
			// samples: longer at 128K sources than at 1K), which sends
			// nothing and would dilute the rates.
			var hw0, sw0, ov0, ar0, b0, t0 uint64
			var start time.Time
			var cerr error
			spec.Started = func(t time.Time) {
				hw0, sw0, ov0, ar0, cerr = counters()
				b0, t0 = evalkit.CPUTimes(evalkit.RxCPU)
				start = t
			}
			defer func() { spec.Started = nil }()
			rep, err := flood(dur, rate)
			if err != nil {
				return Row{}, err
			}
			if cerr != nil {
				return Row{}, cerr
			}
			time.Sleep(20 * time.Millisecond) // the host's queue drains
			el := time.Since(start).Seconds()
			b1, t1 := evalkit.CPUTimes(evalkit.RxCPU)
			hw1, sw1, ov1, ar1, err := counters()
			if err != nil {
				return Row{}, err
			}
			r := Row{Figure: fig, Mechanism: modeName(mode), Dist: string(d), Sources: n, SentMpps: rep.PPS / 1e6,
				DropMpps: float64(hw1-hw0+sw1-sw0) / el / 1e6, Extra: float64(hw1-hw0) / el / 1e6, Arrived: float64(ar1-ar0) / el / 1e6}
			if t1 > t0 {
				r.CPUPct = 100 * float64(b1-b0) / float64(t1-t0)
			}
			if ov := ov1 - ov0; ov > 0 {
				r.Note = fmt.Sprintf("NIC CPU overload drops %.3f Mpps;", float64(ov)/el/1e6)
			}
			return r, nil
		}()
	}
	var rows []Row
	if full {
		r, err := measure("drop-rate", 0)
		if err != nil {
			return rows, err
		}
		rows = append(rows, r)
	}
	for _, rate := range rates {
		r, err := measure("offered", rate)
		if err != nil {
			return rows, err
		}
		rows = append(rows, r)
	}
	return rows, nil
}

func hostPrefixes(as []netip.Addr) []netip.Prefix {
	out := make([]netip.Prefix, len(as))
	for i, a := range as {
		out[i] = netip.PrefixFrom(a, 32)
	}
	return out
}

// labMode attaches the emulated NIC in mode and tierwall's filter where
// that mode runs it (the host, or the NIC's CPU) with srcs blocked.
// detach removes both; the NIC table is left empty for the caller.
func labMode(mode nicstage.Mode, srcs []netip.Addr) (nic *nicstage.Table, dp *datapath.Datapath, detach func() error, err error) {
	if err := evalkit.InNS(lab.NSNic, -1, func() error {
		var e error
		nic, e = nicstage.AttachTable(lab.IfWire, lab.IfHPort, nicstage.Options{Mode: mode, CPURate: NICCPURate})
		return e
	}); err != nil {
		return nil, nil, nil, err
	}
	detachNIC := func() error {
		nic.Close()
		return evalkit.InNS(lab.NSNic, -1, func() error { return nicstage.Detach(lab.IfWire, "") })
	}
	fns, fif, opts := lab.NSHost, lab.IfHost, datapath.Options{}
	if mode == nicstage.HW || mode == nicstage.CPU {
		fns, fif, opts.Mode = lab.NSNic, lab.IfWire, datapath.ModeNIC
	}
	opts.ExactCapacity4, opts.ExactCapacity6, opts.PrefixCapacity, opts.AllowCapacity, opts.FeatureCapacity = max(len(srcs), 1024), 1024, 64, 64, 1<<14
	if err := evalkit.InNS(fns, -1, func() error {
		var e error
		if dp, e = datapath.Attach(fif, opts); e != nil {
			return e
		}
		return dp.BlockBulk(srcs)
	}); err != nil {
		_ = detachNIC() // the attach error is the one to report
		return nil, nil, nil, err
	}
	detach = func() error {
		dp.Close()
		err := evalkit.InNS(fns, -1, func() error { return datapath.Detach(fif, "") })
		return errors.Join(err, detachNIC())
	}
	// The NIC stage's XDP gives the wire a NAPI to pin. The host's veth
	// has one only with XDP on it, i.e. with the filter (host, hybrid):
	// in the NIC modes there may be nothing to pin there.
	if err := evalkit.PinNIC(); err != nil {
		_ = detach() // the pinning error is the one to report
		return nil, nil, nil, err
	}
	if err := evalkit.PinNAPI(lab.NSHost, lab.IfHost, evalkit.RxCPU); err != nil && fns == lab.NSHost {
		_ = detach() // the pinning error is the one to report
		return nil, nil, nil, err
	}
	return nic, dp, detach, nil
}

// labMACs are the generator's source and destination MACs on the lab:
// the internet side's port and the host's.
func labMACs() (src, dst [6]byte, err error) {
	if src, err = evalkit.MACOf(lab.NSInet, lab.IfInet); err != nil {
		return src, dst, err
	}
	dst, err = evalkit.MACOf(lab.NSHost, lab.IfHost)
	return src, dst, err
}
