// SPDX-License-Identifier: Apache-2.0

package modes

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/tierwall/tierwall/internal/testbed/eval/evalkit"
	"github.com/tierwall/tierwall/internal/testbed/lab"
	"github.com/tierwall/tierwall/internal/testbed/trafgen"
	"github.com/tierwall/tierwall/internal/tier"
	"github.com/tierwall/tierwall/internal/tier/nicstage"
)

// HTTP measures completed requests/s of legitimate clients against nginx
// on the lab's host while an attack of n sources runs at each rate, with
// the mitigation already in place (Fig. 4). Rates are packets/s sent; 0
// is the no-attack reference, and the last is the generator's full rate.
func HTTP(ctx context.Context, p Params, attackers []int, rates []uint64) (_ []Row, err error) {
	if err := lab.Up(); err != nil {
		return nil, err
	}
	defer func() {
		if derr := lab.Down(); derr != nil && err == nil {
			err = derr
		}
	}()
	if err := lab.StartNginx(); err != nil {
		return nil, err
	}
	// nginx is the host's: it runs on the host's CPU, beside its NAPI and
	// XDP; the clients (wrk) run on CPU 0 with the generator and the NIC
	// stage, as the internet and the card do.
	if err := evalkit.PinComm("nginx", evalkit.RxCPU); err != nil {
		return nil, err
	}
	src, dst, err := labMACs()
	if err != nil {
		return nil, err
	}
	var rows []Row
	for _, mech := range []string{"lab-host", "lab-hybrid", "lab-nic-hw", "lab-nic", "iptables"} {
		if p.Only != nil && !p.Only[mech] {
			continue
		}
		for _, n := range attackers {
			card, teardown, err := httpSetup(ctx, mech, n, src, dst, p.Duration)
			if err != nil {
				return rows, fmt.Errorf("%s: %w", mech, err)
			}
			for _, rate := range rates {
				if ctx.Err() != nil {
					break
				}
				// The median of p.Repeat: hybrid against host-only at one
				// attack rate is a difference of a few percent.
				r, err := medianBy(p.Repeat, func(r Row) float64 { return r.Extra }, func() (Row, error) {
					return httpCell(ctx, mech, n, rate, src, dst, card, p.Duration)
				})
				if err != nil {
					_ = teardown() // the measurement's error is the one to report
					return rows, err
				}
				fmt.Fprintf(p.Log, "eval: http %-12s %5d attackers at %5.2f Mpps: %.0f requests/s\n", mech, n, r.SentMpps, r.Extra)
				rows = append(rows, r)
			}
			// The next setup attaches to the same interfaces.
			if err := teardown(); err != nil {
				return rows, fmt.Errorf("%s: tearing down: %w", mech, err)
			}
		}
	}
	return rows, nil
}

// httpSetup installs the mitigation for n attackers: rules, NIC mode and
// (hybrid, nic-hw) the heaviest sources in the NIC table. With uniform
// attackers any K of them are the top-K; the first K are installed.
// card is the NIC's table, which the flood meets in the generator.
func httpSetup(ctx context.Context, mech string, n int, src, dst [6]byte, dur time.Duration) (card *nicstage.MatchTable, teardown func() error, err error) {
	srcs, err := trafgen.Addresses(lab.AttackNet4, n)
	if err != nil {
		return nil, nil, err
	}
	mode := map[string]nicstage.Mode{"lab-host": nicstage.Wire, "lab-hybrid": nicstage.Hybrid,
		"lab-nic-hw": nicstage.HW, "lab-nic": nicstage.CPU, "iptables": nicstage.Wire}[mech]
	if mech == "iptables" {
		// The NIC forwards everything; xdp_frames redirected to a host
		// without XDP need GRO there.
		var nic *nicstage.Table
		if err := evalkit.InNS(lab.NSNic, -1, func() error {
			var e error
			nic, e = nicstage.AttachTable(lab.IfWire, lab.IfHPort, nicstage.Options{Mode: nicstage.Wire})
			return e
		}); err != nil {
			return nil, nil, err
		}
		m := iptablesRaw{}
		teardown = func() error {
			err := evalkit.InNS(lab.NSHost, -1, m.Teardown)
			nic.Close()
			return errors.Join(err, evalkit.InNS(lab.NSNic, -1, func() error { return nicstage.Detach(lab.IfWire, "") }))
		}
		// On the error paths the setup's error is the one to report.
		if _, err := evalkit.Sh("ip", "netns", "exec", lab.NSHost, "ethtool", "-K", lab.IfHost, "gro", "on"); err != nil {
			_ = teardown()
			return nil, nil, err
		}
		if err := evalkit.InNS(lab.NSHost, -1, func() error { return m.Setup(lab.IfHost, srcs) }); err != nil {
			_ = teardown()
			return nil, nil, err
		}
		if err := evalkit.PinNAPI(lab.NSHost, lab.IfHost, evalkit.RxCPU); err != nil {
			_ = teardown()
			return nil, nil, err
		}
		if err := evalkit.PinNIC(); err != nil {
			_ = teardown()
			return nil, nil, err
		}
		return nic.Stage().MatchTable(), teardown, nil
	}
	nic, _, teardown, err := labMode(mode, srcs)
	if err != nil {
		return nil, nil, err
	}
	if mode == nicstage.Hybrid || mode == nicstage.HW {
		for _, a := range srcs[:min(len(srcs), nic.Caps().Capacity)] {
			if _, err := nic.Install(ctx, tier.Rule{Match: tier.SourceMatch(a), Action: tier.Drop}); err != nil {
				_ = teardown() // the install error is the one to report
				return nil, nil, err
			}
		}
	}
	return nic.Stage().MatchTable(), teardown, nil
}

// wrkRate runs wrk from the internet namespace (200 connections, 5 s
// timeout: the paper's weighttp setup) and returns completed requests/s.
func wrkRate(ctx context.Context, dur time.Duration) (float64, error) {
	secs := max(1, int(dur.Seconds()+0.5))
	out, err := exec.CommandContext(ctx, "ip", "netns", "exec", lab.NSInet, "taskset", "-c", strconv.Itoa(evalkit.GenCPU), "wrk", "-t2", "-c200",
		fmt.Sprintf("-d%ds", secs), "--timeout", "5s", "http://"+lab.Host4.String()+"/").CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("wrk: %v: %s", err, out)
	}
	m := wrkRPS.FindStringSubmatch(string(out))
	if m == nil {
		return 0, fmt.Errorf("wrk: no Requests/sec in %q", out)
	}
	return strconv.ParseFloat(m[1], 64)
}

var wrkRPS = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)

func httpCell(ctx context.Context, mech string, n int, rate uint64, src, dst [6]byte, card *nicstage.MatchTable, dur time.Duration) (Row, error) {
	lctx, cancel := context.WithTimeout(ctx, dur+10*time.Second)
	defer cancel()
	var rps float64
	var werr error
	done := make(chan struct{})
	go func() { rps, werr = wrkRate(lctx, dur); close(done) }()
	var rep *trafgen.Report
	var gerr error
	if rate != 0 {
		spec := trafgen.Spec{Iface: lab.IfInet, SrcMAC: src, DstMAC: dst, Dst: lab.Host4, Sources: n, Dist: trafgen.Uniform, Duration: dur, Seed: 3, Card: card}
		if rate != ^uint64(0) {
			spec.Rate = rate
		}
		gerr = evalkit.InNS(lab.NSInet, evalkit.GenCPU, func() error { var e error; rep, e = trafgen.Run(lctx, spec); return e })
	}
	<-done
	if gerr != nil && !strings.Contains(gerr.Error(), "context") {
		return Row{}, gerr
	}
	if werr != nil {
		return Row{}, werr
	}
	r := Row{Figure: "http", Mechanism: mech, Dist: "uniform", Sources: n, Extra: rps}
	if rep != nil {
		r.SentMpps = rep.PPS / 1e6
	}
	return r, nil
}
