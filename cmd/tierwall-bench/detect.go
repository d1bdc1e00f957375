// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tierwall/tierwall/internal/datapath"
	"github.com/tierwall/tierwall/internal/netnsx"
	"github.com/tierwall/tierwall/internal/pkt"
	"github.com/tierwall/tierwall/internal/testbed/harness"
)

// Detection-to-drop latency: a fresh source starts flooding at a steady
// rate well above the daemon's per-source threshold; the clock runs from
// its first packet to the moment its ban is in the data plane (the daemon
// reports a ban only after the XDP rule is written, and every later packet
// of the source is dropped). The daemon runs as in production
// (`tierwall run`), in a network namespace behind a veth.
//
// The namespaces are named after the process: other people's benchmark
// runs on the same machine must not delete ours half-way (dtSetup clears
// leftovers of its own name only).
var dtTx, dtRx = fmt.Sprintf("twbench-tx-%d", os.Getpid()), fmt.Sprintf("twbench-rx-%d", os.Getpid())

const dtIfTx, dtIfRx = "twb-tx", "twb-rx"

// dtVictim is the address behind the veth that floods are sent to.
var dtVictim = netip.MustParseAddr("10.210.0.2")

func dtCleanup() {
	exec.Command("ip", "netns", "del", dtTx).Run()
	exec.Command("ip", "netns", "del", dtRx).Run()
	harness.RemovePins(dtRx)
}

func dtSetup() error {
	dtCleanup()
	for _, c := range [][]string{
		{"ip", "netns", "add", dtTx}, {"ip", "netns", "add", dtRx},
		{"ip", "link", "add", dtIfTx, "netns", dtTx, "type", "veth", "peer", "name", dtIfRx, "netns", dtRx},
		{"ip", "-n", dtRx, "addr", "add", "10.210.0.2/24", "dev", dtIfRx},
		{"ip", "-n", dtTx, "link", "set", dtIfTx, "up"}, {"ip", "-n", dtRx, "link", "set", dtIfRx, "up"},
		{"ip", "netns", "exec", dtTx, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"},
	} {
		if err := harness.Run(c...); err != nil {
			return err
		}
	}
	return nil
}

func inNS(name string, f func() error) error { return netnsx.Do(name, -1, f) }

type flooder struct {
	fd  int
	sa  *unix.SockaddrLinklayer
	dst [6]byte
	src [6]byte
}

func newFlooder() (*flooder, error) {
	f := &flooder{}
	var rxMAC net.HardwareAddr
	if err := inNS(dtRx, func() error {
		ifc, err := net.InterfaceByName(dtIfRx)
		if err == nil {
			rxMAC = ifc.HardwareAddr
		}
		return err
	}); err != nil {
		return nil, err
	}
	err := inNS(dtTx, func() error {
		ifc, err := net.InterfaceByName(dtIfTx)
		if err != nil {
			return err
		}
		if f.fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0); err != nil {
			return err
		}
		f.sa = &unix.SockaddrLinklayer{Ifindex: ifc.Index, Halen: 6}
		copy(f.sa.Addr[:], rxMAC)
		f.dst, f.src = [6]byte(rxMAC), [6]byte(ifc.HardwareAddr)
		return nil
	})
	return f, err
}

func benchDetection(b *bytes.Buffer, tierwall string, runs int) {
	fmt.Fprintf(os.Stderr, "bench: detection-to-drop...\n")
	fmt.Fprintf(b, "\n## Detection-to-drop latency (daemon)\n\n")
	fmt.Fprintf(b, "`tierwall run` in a network namespace behind a veth, rate detector at 1,000 pps per source; a fresh source floods at 5,000 pps (AF_PACKET, paced in 10 ms steps) and the clock runs from its first packet until its ban is in the XDP data plane (the daemon's API lists a ban only after the rule is written). %d sources per interval setting, one after the other, each starting at a different phase of the interval (with so few samples p99 is the maximum). Target: p99 ≤ 2 intervals.\n\n", runs)
	fmt.Fprintf(b, "| interval | p50 | p99 | max | p99 in intervals | target (≤ 2 intervals at p99) |\n|---:|---:|---:|---:|---:|---|\n")
	if err := dtSetup(); err != nil {
		fail(err)
	}
	defer dtCleanup()
	fl, err := newFlooder()
	if err != nil {
		fail(err)
	}
	defer unix.Close(fl.fd)
	for _, iv := range []time.Duration{time.Second, 100 * time.Millisecond} {
		lat, err := detectionRuns(tierwall, fl, iv, runs)
		if err != nil {
			fail(err)
		}
		slices.Sort(lat)
		q := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
		p99 := q(0.99)
		fmt.Fprintf(b, "| %v | %v | %v | %v | %.2f | %s |\n", iv, q(0.5).Round(time.Millisecond), p99.Round(time.Millisecond),
			lat[len(lat)-1].Round(time.Millisecond), float64(p99)/float64(iv), verdict(p99 <= 2*iv))
	}
}

func detectionRuns(tierwall string, fl *flooder, iv time.Duration, runs int) ([]time.Duration, error) {
	dmn, done, err := startDetectionDaemon(tierwall, iv, "  rate: {enabled: true, pps: 1000, learn_intervals: 0}\n  entropy: {enabled: false}\n")
	if err != nil {
		return nil, err
	}
	defer done()
	banned := func(p netip.Prefix) bool {
		rs, err := dmn.Client.Rules(context.Background())
		if err != nil {
			return false
		}
		for _, r := range rs {
			if r.Prefix == p {
				return true
			}
		}
		return false
	}
	var out []time.Duration
	for r := 0; r < runs; r++ {
		src := netip.AddrFrom4([4]byte{10, 211, byte(r >> 8), byte(r + 1)})
		// Start at a random phase of the interval, as real attacks do.
		time.Sleep(time.Duration(r*7919%1000) * iv / 1000)
		stop, flooded := make(chan struct{}), make(chan error, 1)
		start := time.Now()
		go func() { flooded <- fl.flood(src, 5000, 10*time.Millisecond, stop, nil) }()
		limit := start.Add(20 * iv)
		for !banned(netip.PrefixFrom(src, 32)) {
			if time.Now().After(limit) {
				close(stop)
				why := ""
				if err := <-flooded; err != nil {
					why = " (" + err.Error() + ")"
				}
				return nil, fmt.Errorf("%s not banned within 20 intervals%s:\n%s", src, why, dmn.Output())
			}
			time.Sleep(2 * time.Millisecond)
		}
		out = append(out, time.Since(start))
		close(stop)
		if err := <-flooded; err != nil {
			// Banned all the same: a few failed sends at 5x the threshold
			// barely move the sample; say so rather than fail the run.
			fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		}
	}
	return out, nil
}

// startDetectionDaemon runs `tierwall run` on a fresh filter behind the
// detection benchmark's veth with the given interval and detectors (YAML
// lines under "detectors:"); done stops it and removes its files.
func startDetectionDaemon(tierwall string, iv time.Duration, detectors string) (_ *harness.Daemon, done func(), err error) {
	dir, err := os.MkdirTemp("", "tierwall-bench")
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	sock := filepath.Join(dir, "api.sock")
	cfg := fmt.Sprintf("interface: %s\ninterval: %v\nstate_file: %s\ncapacity: {exact4: 4096, exact6: 256, prefix: 64, allow: 64, features: 4096}\n"+
		"detectors:\n%sbans: {hold: 10m}\napi: {socket: %s}\n", dtIfRx, iv, filepath.Join(dir, "state.json"), detectors, sock)
	cfgPath := filepath.Join(dir, "tierwall.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return nil, nil, err
	}
	harness.RemovePins(dtRx) // a fresh filter each time
	dmn, err := harness.StartDaemon(harness.Options{Tierwall: tierwall, Netns: dtRx, Config: cfgPath, Socket: sock, Timeout: 10 * time.Second})
	if err != nil {
		return nil, nil, err
	}
	return dmn, func() { dmn.Stop(); os.RemoveAll(dir) }, nil
}

// flood sends pps packets per second from src, in steps of step paced on
// the clock (a late step sends at once), until stop closes; first, if not
// nil, gets the time just before the first packet's send. It keeps going
// when sends fail (a few ENOBUFS leave the source far above the
// detector's threshold) and returns, if any did, how many and the first
// error, for the caller to report.
func (f *flooder) flood(src netip.Addr, pps int, step time.Duration, stop <-chan struct{}, first chan<- time.Time) error {
	return f.floodTo(src, dtVictim, pps, step, stop, first)
}

// floodTo is flood towards dst: a fresh victim per sample for detectors
// that keep state per destination (FastNetMon).
func (f *flooder) floodTo(src, dst netip.Addr, pps int, step time.Duration, stop <-chan struct{}, first chan<- time.Time) error {
	frame := pkt.Frame{DstMAC: f.dst, SrcMAC: f.src, Src: src, Dst: dst,
		Proto: pkt.ProtoUDP, SrcPort: 4000, DstPort: 9, Payload: make([]byte, 18)}.Build()
	per := max(1, int(int64(pps)*int64(step)/int64(time.Second)))
	start := time.Now()
	if first != nil {
		first <- start
	}
	var sent, failed int
	var firstErr error
	for n := 1; ; n++ {
		for i := 0; i < per; i++ {
			sent++
			if err := unix.Sendto(f.fd, frame, 0, f.sa); err != nil {
				failed++
				if firstErr == nil {
					firstErr = err
				}
			}
		}
		select {
		case <-stop:
			if firstErr != nil {
				return fmt.Errorf("%d of %d sends from %s failed, the first with %w", failed, sent, src, firstErr)
			}
			return nil
		default:
		}
		// Paced on the clock, not on a ticker: a late step sends at once.
		time.Sleep(time.Until(start.Add(time.Duration(n) * step)))
	}
}

// heavyDetectionRuns measures the XDP heavy-hitter detector's
// detect→drop: a fresh source floods at 10× the detector's threshold; the
// clock runs from its first packet to the kernel's timestamp of its
// catch (the next packet is dropped), read from the provisional entry in
// the pinned maps; the entry must also count drops, checked.
func heavyDetectionRuns(tierwall string, fl *flooder, runs, thresh int) ([]time.Duration, error) {
	// The daemon's interval is long and its other detectors off: only the
	// data plane can act within the measurement.
	dmn, done, err := startDetectionDaemon(tierwall, 5*time.Second, fmt.Sprintf(
		"  rate: {enabled: false}\n  entropy: {enabled: false}\n  heavy: {enabled: true, window: 10ms, pps: %d, syn_pps: 0, ttl: 10m}\n", thresh))
	if err != nil {
		return nil, err
	}
	defer done()
	var dp *datapath.Datapath
	if err := inNS(dtRx, func() error { var e error; dp, e = datapath.Open(dtIfRx, ""); return e }); err != nil {
		return nil, err
	}
	defer dp.Close()
	caught := func(p netip.Prefix) (datapath.Provisional, bool) {
		ps, err := dp.Provisionals()
		if err != nil {
			return datapath.Provisional{}, false
		}
		for _, x := range ps {
			if x.Prefix == p && x.Packets > 0 {
				return x, true
			}
		}
		return datapath.Provisional{}, false
	}
	var out []time.Duration
	for r := 0; r < runs; r++ {
		src := netip.AddrFrom4([4]byte{10, 212, byte(r >> 8), byte(r + 1)})
		// A random phase of the detector's window.
		time.Sleep(time.Duration(r*7919%1000) * 10 * time.Millisecond / 1000)
		stop, flooded, first := make(chan struct{}), make(chan error, 1), make(chan time.Time, 1)
		go func() { flooded <- fl.flood(src, 10*thresh, time.Millisecond, stop, first) }()
		start := <-first
		var p datapath.Provisional
		for ok := false; !ok; p, ok = caught(netip.PrefixFrom(src, 32)) {
			if time.Since(start) > 2*time.Second {
				close(stop)
				why := ""
				if err := <-flooded; err != nil {
					why = " (" + err.Error() + ")"
				}
				return nil, fmt.Errorf("%s not caught in XDP within 2 s at %d pps%s:\n%s", src, 10*thresh, why, dmn.Output())
			}
			time.Sleep(time.Millisecond)
		}
		close(stop)
		if err := <-flooded; err != nil {
			fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		}
		out = append(out, p.Added.Sub(start))
	}
	return out, nil
}
