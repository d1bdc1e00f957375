// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tierwall/tierwall/internal/datapath"
	"github.com/tierwall/tierwall/internal/testbed/fastnetmon"
	"github.com/tierwall/tierwall/internal/testbed/harness"
)

// The detect→drop comparison (issue 17's first target): one attack — a
// single fresh source at 10× the per-source threshold — against the XDP
// heavy hitter, the daemon alone, and FastNetMon CE at its shipped and at
// its shortest averaging, one after the other in one run, on the same
// namespace, veth and flooder.
const (
	ddThresh = 20000 // packets per second per source, every path
	ddFactor = 10    // the attack's rate over it
)

// fnmAverages are FastNetMon's averaging times tried (whole seconds, the
// only unit it parses): as shipped, the shortest that still averages, and
// 0, which it also takes: its smoothing factor exp(-delay/0) is then 0,
// so the "average" is the last recalculation's rate alone.
var fnmAverages = []int{5, 1, 0}

// ddPath is one row of the comparison: its samples, or why it has none.
type ddPath struct {
	name, clock, action string
	lat                 []time.Duration
	err                 error
	log                 string // the tool's log when it failed
}

// ddPhase spreads sample r's start over a period, by the golden ratio so
// that a few samples already cover it evenly (0, .62, .24, .85, .47 …).
func ddPhase(r int, period time.Duration) time.Duration {
	const golden = 0.6180339887
	x := float64(r) * golden
	return time.Duration((x - float64(int(x))) * float64(period))
}

func benchDetectDrop(b *bytes.Buffer, tierwall string, xdpRuns, slowRuns int) {
	fmt.Fprintf(os.Stderr, "bench: detect→drop, side by side...\n")
	if err := dtSetup(); err != nil {
		fail(err)
	}
	defer dtCleanup()
	fl, err := newFlooder()
	if err != nil {
		fail(err)
	}
	defer unix.Close(fl.fd)
	rate := ddFactor * ddThresh

	var paths []ddPath
	fmt.Fprintf(os.Stderr, "bench: detect→drop, XDP heavy hitter (%d samples)...\n", xdpRuns)
	lat, err := heavyDetectionRuns(tierwall, fl, xdpRuns, ddThresh)
	paths = append(paths, ddPath{name: "tierwall, XDP heavy hitter (10 ms windows)", lat: lat, err: err,
		clock: "first send → the kernel's timestamp of the catch (provisional entry)", action: "drops from the next packet"})

	fmt.Fprintf(os.Stderr, "bench: detect→drop, daemon only (%d samples)...\n", slowRuns)
	lat, err = daemonDropRuns(tierwall, fl, slowRuns, ddThresh)
	paths = append(paths, ddPath{name: "tierwall, daemon only (rate detector, 1 s interval)", lat: lat, err: err,
		clock: "first send → the ban rule's first hit (its `last_hit`, coarse clock)", action: "drops (an XDP ban)"})

	version, verr := fastnetmon.Ensure(os.Stderr)
	for _, avg := range fnmAverages {
		p := ddPath{name: fmt.Sprintf("FastNetMon CE %s, `average_calculation_time = %d`", version, avg),
			clock: "first send → the notify script's `date +%s.%N`", action: "flags the victim; drops nothing itself"}
		switch avg {
		case 5:
			p.name += " (as shipped)"
		case 1:
			p.name += " (the shortest that averages)"
		case 0:
			p.name += " (no averaging: the last second's rate)"
		}
		if verr != nil {
			// One row says why for all of them.
			p.name, p.err = "FastNetMon CE", verr
			paths = append(paths, p)
			break
		}
		fmt.Fprintf(os.Stderr, "bench: detect→drop, FastNetMon, averaging %d s (%d samples)...\n", avg, slowRuns)
		p.lat, p.log, p.err = fastnetmonRuns(fl, slowRuns, ddThresh, avg)
		paths = append(paths, p)
	}

	fmt.Fprintf(b, "\n## Detect→drop: tierwall's XDP heavy hitter, its daemon alone, and FastNetMon, on the same attack\n\n")
	fmt.Fprintf(b, "One attack for every path: a single fresh source floods a victim behind a veth at %d pps, %d× the per-source threshold of %d pps that every path is given (UDP, 64 bytes, AF_PACKET paced in 1 ms steps on the clock from the other namespace). The paths run one after the other in this one run, on the same namespaces, veth and flooder; each sample starts a fresh source (and, for FastNetMon, which keys its state on the victim, a fresh victim), at a different phase of the path's own clock. ", rate, ddFactor, ddThresh)
	fmt.Fprintf(b, "*XDP heavy hitter*: `tierwall run` with `heavy: {window: 10ms, pps: %d}`, the rate and entropy detectors off and a 5 s interval, so only the data plane can act; the clock stops at the kernel's timestamp of the catch in the source's provisional entry (the next packet is dropped; each sample checks that the entry counted drops). ", ddThresh)
	fmt.Fprintf(b, "*Daemon only*: `tierwall run` with the heavy hitter, entropy and victim detectors off and the rate detector at a static %d pps per source (no learning), at its default 1 s interval; the clock stops at the first hit of the source's ban rule in XDP, the rule's `last_hit` (written by its first hit, on `CLOCK_MONOTONIC_COARSE`, so up to one %v tick early), read while the flood is still on and stopped at once. ", ddThresh, time.Second/time.Duration(clockTicks()))
	fmt.Fprintf(b, "*FastNetMon CE* (Debian's package, installed by the benchmark when missing; its system service disabled): its own instance in the victim's namespace, AF_PACKET capture on the same veth (`mirror_afpacket = on`), the victims' /24 in `networks_list`, `ban_for_pps = on` with `threshold_pps = %d` and every other trigger off, `notify_script_path` a script whose first line appends `date +%%s.%%N`; run with its averaging as shipped (`average_calculation_time = 5`, an exponential moving average over 5 s), at the shortest that still averages (1 s; it parses whole seconds) and at 0, which it accepts too and which leaves the rate of the last recalculation alone (its smoothing factor exp(−delay/0) is 0); `speed_calculation_delay`, how often it recalculates rates and so the floor under its reaction, stays at its default and minimum of 1 s. The clock stops at the script's first timestamp for the victim with action `ban`. FastNetMon only calls the script: it drops nothing itself. No tierwall filter is attached during its runs. ", ddThresh)
	fmt.Fprintf(b, "p99 of so few samples is the maximum. Target: the XDP path's p99 ≤ 10 ms.\n\n")
	var xdp50, xdp99 time.Duration
	fmt.Fprintf(b, "| path | clock stops at | what it does | samples | p50 | p99 | max | ÷ XDP's, p50 / p99 | target |\n|---|---|---|---:|---:|---:|---:|---:|---|\n")
	for i, p := range paths {
		if p.err != nil {
			fmt.Fprintf(b, "| %s | %s | %s | 0 | — | — | — | — | not measured: %s |\n", p.name, p.clock, p.action, mdCell(p.err.Error()))
			continue
		}
		s := slices.Clone(p.lat)
		slices.Sort(s)
		q := func(f float64) time.Duration { return s[min(len(s)-1, int(f*float64(len(s))))] }
		p50, p99, mx := q(0.5), q(0.99), s[len(s)-1]
		target, ratio := "", "—"
		if i == 0 {
			xdp50, xdp99 = p50, p99
			target = fmt.Sprintf("p99 ≤ 10 ms %s", verdict(p99 <= 10*time.Millisecond))
		} else if xdp50 > 0 {
			ratio = fmt.Sprintf("%.0f× / %.0f×", float64(p50)/float64(xdp50), float64(p99)/float64(xdp99))
		}
		fmt.Fprintf(b, "| %s | %s | %s | %d | %s | %s | %s | %s | %s |\n", p.name, p.clock, p.action, len(s), ms(p50), ms(p99), ms(mx), ratio, target)
	}
	for _, p := range paths {
		if p.err != nil && p.log != "" {
			fmt.Fprintf(b, "\n%s failed; its log:\n\n```\n%s\n```\n", p.name, tail(p.log, 40))
		}
	}
	for _, p := range paths[:2] {
		if p.err != nil {
			// The tierwall rows are the point of the section: without
			// them the report would only say FastNetMon is slow.
			fail(fmt.Errorf("%s: %w", p.name, p.err))
		}
	}
}

// why is the flooder's error, if any, as a suffix for the caller's.
func why(err error) string {
	if err == nil {
		return ""
	}
	return " (" + err.Error() + ")"
}

// ms formats a latency in milliseconds, to 0.01 ms.
func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/1e6) }

func mdCell(s string) string {
	s = strings.ReplaceAll(s, "|", "\\|")
	return strings.ReplaceAll(strings.TrimSpace(s), "\n", " ")
}

func tail(s string, lines int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(ls[max(0, len(ls)-lines):], "\n")
}

// clockTicks is the kernel's CONFIG_HZ as the coarse clock's resolution
// shows it (its tick).
func clockTicks() int64 {
	var ts unix.Timespec
	if err := unix.ClockGetres(unix.CLOCK_MONOTONIC_COARSE, &ts); err != nil || ts.Nano() <= 0 {
		return 1000
	}
	return int64(time.Second) / ts.Nano()
}

// daemonDropRuns measures the daemon's detect→drop on the attack: the rate
// detector alone at a static thresh pps per source, 1 s interval (the
// default); the clock runs from the first send to the first packet its ban
// dropped in XDP.
func daemonDropRuns(tierwall string, fl *flooder, runs, thresh int) ([]time.Duration, error) {
	dmn, done, err := startDetectionDaemon(tierwall, time.Second, fmt.Sprintf(
		"  rate: {enabled: true, pps: %d, learn_intervals: 0}\n  entropy: {enabled: false}\n  victim: {enabled: false}\n  heavy: {enabled: false}\n", thresh))
	if err != nil {
		return nil, err
	}
	defer done()
	var dp *datapath.Datapath
	if err := inNS(dtRx, func() error { var e error; dp, e = datapath.Open(dtIfRx, ""); return e }); err != nil {
		return nil, fmt.Errorf("opening the daemon's filter: %w", err)
	}
	defer dp.Close()
	// firstDrop is the ban's first hit: last_hit is 0 until then and the
	// first hit writes it; later hits rewrite it only once it is 250 ms
	// old, so read within that it is the first drop's time.
	firstDrop := func(p netip.Prefix) (time.Time, bool) {
		rs, err := dp.Blocked()
		if err != nil {
			return time.Time{}, false
		}
		for _, r := range rs {
			if r.Prefix == p && r.Packets > 0 && r.LastHit != nil {
				return *r.LastHit, true
			}
		}
		return time.Time{}, false
	}
	var out []time.Duration
	for r := 0; r < runs; r++ {
		src := netip.AddrFrom4([4]byte{10, 213, byte(r >> 8), byte(r + 1)})
		time.Sleep(ddPhase(r, time.Second))
		stop, flooded, first := make(chan struct{}), make(chan error, 1), make(chan time.Time, 1)
		go func() { flooded <- fl.flood(src, ddFactor*thresh, time.Millisecond, stop, first) }()
		start := <-first
		var at time.Time
		for ok := false; !ok; at, ok = firstDrop(netip.PrefixFrom(src, 32)) {
			if time.Since(start) > 10*time.Second {
				close(stop)
				return nil, fmt.Errorf("%s not dropped within 10 s at %d pps%s:\n%s", src, ddFactor*thresh, why(<-flooded), dmn.Output())
			}
			time.Sleep(time.Millisecond)
		}
		// Read later than 250 ms after the first hit, last_hit could be
		// a later hit's: then the sample would be wrong, not slow.
		if seen := time.Since(at); seen > 200*time.Millisecond {
			close(stop)
			return nil, fmt.Errorf("%s's first drop read %v after it (the machine stalled?): its last_hit may be a later hit's%s", src, seen, why(<-flooded))
		}
		close(stop)
		if err := <-flooded; err != nil {
			fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		}
		out = append(out, at.Sub(start))
	}
	return out, nil
}

// fastnetmonRuns measures FastNetMon's detection of the attack: one
// instance at the given averaging, a fresh victim and source per sample;
// the clock runs from the first send to the notify script's timestamp for
// the victim. On failure it also returns FastNetMon's log.
func fastnetmonRuns(fl *flooder, runs, thresh, average int) ([]time.Duration, string, error) {
	// The tierwall filter of the previous paths must not be in the way.
	harness.RemovePins(dtRx)
	victims := netip.MustParsePrefix("10.210.0.0/24")
	fnm, err := startFastNetMon(dtRx, dtIfRx, victims, thresh, average)
	if err != nil {
		return nil, "", err
	}
	defer fnm.Stop()
	var out []time.Duration
	for r := 0; r < runs; r++ {
		victim := netip.AddrFrom4([4]byte{10, 210, 0, byte(10 + 10*average + r)})
		src := netip.AddrFrom4([4]byte{10, 214, byte(average), byte(r + 1)})
		// A phase of FastNetMon's 1 s speed recalculation.
		time.Sleep(ddPhase(r, time.Second))
		stop, flooded, first := make(chan struct{}), make(chan error, 1), make(chan time.Time, 1)
		go func() { flooded <- fl.floodTo(src, victim, ddFactor*thresh, time.Millisecond, stop, first) }()
		start := <-first
		var at time.Time
		for ok := false; !ok; at, ok = fnm.Banned(victim) {
			if time.Since(start) > 30*time.Second {
				close(stop)
				return nil, fnm.Log(), fmt.Errorf("FastNetMon did not flag %s within 30 s at %d pps%s", victim, ddFactor*thresh, why(<-flooded))
			}
			time.Sleep(5 * time.Millisecond)
		}
		close(stop)
		if err := <-flooded; err != nil {
			fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		}
		// The script's clock is the wall clock: compare without the
		// monotonic reading.
		out = append(out, at.Sub(start.Round(0)))
	}
	return out, "", nil
}
