// SPDX-License-Identifier: Apache-2.0

package telemetry_test

import (
	"fmt"
	"math"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/control/telemetry"
	"github.com/tierwall/tierwall/internal/netnsx"
	"github.com/tierwall/tierwall/internal/testutil"
)

// These tests run real exporters (scripts/deps.sh installs softflowd and
// pmacct) on a veth pair between two namespaces they create: a generator
// in the first sends a counted UDP flood to the second, where the
// exporter captures it and sends its telemetry to tierwall's collector on
// the second namespace's loopback. What tierwall derives must match what
// was sent: exactly for unsampled NetFlow, within the sampling error for
// sFlow.

var (
	genAddr  = netip.MustParseAddr("10.231.0.1")
	sinkAddr = netip.MustParseAddr("10.231.0.2")
	loop     = netip.MustParseAddr("127.0.0.1")
)

func run(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// lab makes the two namespaces and the veth between them, removed at the
// test's end.
func lab(t *testing.T) (gen, sink string) {
	t.Helper()
	testutil.RequireRoot(t)
	id := fmt.Sprintf("%d%d", os.Getpid()%100000, time.Now().UnixNano()%1000)
	gen, sink = "twtelg"+id, "twtels"+id
	run(t, "ip", "netns", "add", gen)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", gen).Run() })
	run(t, "ip", "netns", "add", sink)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", sink).Run() })
	run(t, "ip", "-n", gen, "link", "add", "tg0", "type", "veth", "peer", "name", "ts0", "netns", sink)
	run(t, "ip", "-n", gen, "addr", "add", genAddr.String()+"/24", "dev", "tg0")
	run(t, "ip", "-n", sink, "addr", "add", sinkAddr.String()+"/24", "dev", "ts0")
	for _, ns := range []string{gen, sink} {
		run(t, "ip", "-n", ns, "link", "set", "lo", "up")
	}
	run(t, "ip", "-n", gen, "link", "set", "tg0", "up")
	run(t, "ip", "-n", sink, "link", "set", "ts0", "up")
	return gen, sink
}

// tally sums what the collector derived for the flood's destination.
type tally struct {
	mu             sync.Mutex
	packets, bytes float64
	records        int
	rates          map[uint32]int
	first          time.Time
}

func (c *tally) sink(now time.Time, rs []telemetry.Record) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range rs {
		if r.Dst != sinkAddr || r.SrcPort != 5353 {
			continue
		}
		if c.first.IsZero() {
			c.first = now
		}
		c.records++
		c.packets += float64(r.Packets) * float64(r.Rate)
		c.bytes += float64(r.Bytes) * float64(r.Rate)
		c.rates[r.Rate]++
	}
}

func (c *tally) read() (float64, float64, int, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.packets, c.bytes, c.records, c.first
}

// collect starts a decoder and a collector on the sink namespace's
// loopback; its records go to the tally and to a detector.
func collect(t *testing.T, sink string, det *telemetry.Detector, c *tally) (*telemetry.Decoder, netip.AddrPort) {
	t.Helper()
	dec, err := telemetry.NewDecoder(telemetry.DecoderConfig{Exporters: []telemetry.ExporterConfig{{Address: loop, Name: "exporter"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var col *telemetry.Collector
	if err := netnsx.Do(sink, -1, func() (err error) {
		col, err = telemetry.Listen([]string{"127.0.0.1:0"}, dec, func(now time.Time, rs []telemetry.Record) {
			c.sink(now, rs)
			det.Add(now, rs)
		}, nil)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { col.Close() })
	// A socket that takes the flood, so that the sink does not answer it
	// with port unreachables.
	if err := netnsx.Do(sink, -1, func() error {
		l, err := net.ListenUDP("udp", &net.UDPAddr{IP: sinkAddr.AsSlice(), Port: 9})
		if err == nil {
			t.Cleanup(func() { l.Close() })
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return dec, col.Addrs()[0]
}

// flood sends n datagrams of size bytes of payload from genAddr:5353 at
// about pps, and returns when it started.
func flood(t *testing.T, gen string, n, size int, pps float64) time.Time {
	return floodFrom(t, gen, 5353, n, size, pps)
}

func floodFrom(t *testing.T, gen string, sport, n, size int, pps float64) time.Time {
	t.Helper()
	var conn *net.UDPConn
	if err := netnsx.Do(gen, -1, func() (err error) {
		conn, err = net.DialUDP("udp", &net.UDPAddr{IP: genAddr.AsSlice(), Port: sport}, &net.UDPAddr{IP: sinkAddr.AsSlice(), Port: 9})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	b := make([]byte, size)
	start := time.Now()
	for i := 0; i < n; i++ {
		if _, err := conn.Write(b); err != nil {
			t.Fatalf("sending datagram %d: %v", i, err)
		}
		if i%100 == 99 {
			if ahead := time.Duration(float64(i+1)/pps*float64(time.Second)) - time.Since(start); ahead > 0 {
				time.Sleep(ahead)
			}
		}
	}
	return start
}

// judge runs the detector's tick until stop, and records the first
// attack.
func judge(det *telemetry.Detector, stop <-chan struct{}) <-chan telemetry.Attack {
	got := make(chan telemetry.Attack, 1)
	go func() {
		tk := time.NewTicker(100 * time.Millisecond)
		defer tk.Stop()
		sent := false
		for {
			select {
			case <-stop:
				return
			case now := <-tk.C:
				if s, _ := det.Judge(now); len(s) > 0 && !sent {
					got <- s[0]
					sent = true
				}
			}
		}
	}()
	return got
}

func waitFor(t *testing.T, what string, d time.Duration, ok func() bool, state ...func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			for _, f := range state {
				what += "; " + f()
			}
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// start runs an exporter in its own process group, killed whole at the
// test's end: pmacctd forks its plugins, which would otherwise outlive it
// holding the output pipe (and Wait with it).
func start(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
	})
}

func floodThresholds() telemetry.DetectorConfig {
	var th telemetry.Thresholds
	th[telemetry.KindUDP].PPS = 5000
	return telemetry.DetectorConfig{Host: th}
}

// softflowd exports every packet it captures (no sampling): the packets
// and bytes tierwall derives from its NetFlow v9 or IPFIX records are
// what the generator sent, and the flood is detected on the tick after
// its first record.
func TestSoftflowdNetFlow9AndIPFIX(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireCommand(t, "softflowd", "softflowctl")
	for _, v := range []string{"9", "10"} {
		t.Run("v"+v, func(t *testing.T) {
			gen, sink := lab(t)
			c := &tally{rates: map[uint32]int{}}
			det := telemetry.NewDetector(floodThresholds())
			dec, addr := collect(t, sink, det, c)
			dir := t.TempDir()
			ctl := filepath.Join(dir, "ctl")
			// Flows expire after a second of life, checked every second:
			// softflowd's timeouts are whole seconds.
			sf := exec.Command("ip", "netns", "exec", sink, "softflowd", "-d", "-i", "ts0", "-n", addr.String(), "-v", v,
				"-c", ctl, "-p", filepath.Join(dir, "pid"), "-t", "maxlife=1", "-t", "expint=1", "-t", "udp=1")
			var out strings.Builder
			sf.Stdout, sf.Stderr = &out, &out
			start(t, sf)
			waitFor(t, "softflowd's control socket", 10*time.Second, func() bool { _, err := os.Stat(ctl); return err == nil })
			stop := make(chan struct{})
			defer close(stop)
			attacks := judge(det, stop)
			const n, size = 40000, 472
			flood(t, gen, n, size, 20000)
			// libpcap hands softflowd its ring's blocks when they fill: the
			// flood's tail waits in the last one until other traffic (from
			// another port, not counted) fills it.
			floodFrom(t, gen, 7777, 5000, size, 20000)
			time.Sleep(500 * time.Millisecond)
			// softflowd does not export pending flows when it stops.
			run(t, "ip", "netns", "exec", sink, "softflowctl", "-c", ctl, "expire-all")
			wantBytes := float64(n * (size + 28))
			waitFor(t, "every packet in the records", 10*time.Second, func() bool { p, _, _, _ := c.read(); return p >= n }, func() string {
				p, b, r, _ := c.read()
				return fmt.Sprintf("%.0f packets, %.0f bytes in %d records; exporter %+v; softflowd: %s", p, b, r, dec.Exporters()[0], out.String())
			})
			time.Sleep(300 * time.Millisecond)
			p, b, recs, first := c.read()
			st := dec.Exporters()[0]
			t.Logf("softflowd v%s: %d records, %.0f packets (sent %d), %.0f bytes (sent %.0f); exporter %+v", v, recs, p, n, b, wantBytes, st)
			if p != n || b != wantBytes {
				t.Errorf("derived %.0f packets, %.0f bytes; sent %d, %.0f", p, b, n, wantBytes)
			}
			if st.DecodeErrors != 0 || st.SequenceGaps != 0 {
				t.Errorf("decode errors %d, gaps %d", st.DecodeErrors, st.SequenceGaps)
			}
			select {
			case a := <-attacks:
				lag := a.Detected.Sub(first)
				t.Logf("softflowd v%s: detected %v after the first record (%v on %v, %.0f pps)", v, lag, a.Kinds, a.Dst, a.PPS)
				if lag > 300*time.Millisecond {
					t.Errorf("detected %v after the first record, want ≤ 0.3 s", lag)
				}
			case <-time.After(5 * time.Second):
				t.Error("the flood was not detected")
			}
		})
	}
}

// pmacctd's sfprobe samples 1 in 10 and says so in its flow samples: the
// packets tierwall derives are what was sent within the sampling error
// (four standard deviations of the binomial), and the flood is detected
// within 0.5 s of its start.
func TestPmacctSFlow(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireCommand(t, "pmacctd")
	gen, sink := lab(t)
	c := &tally{rates: map[uint32]int{}}
	det := telemetry.NewDetector(floodThresholds())
	dec, addr := collect(t, sink, det, c)
	const rate = 10
	conf := filepath.Join(t.TempDir(), "pmacctd.conf")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(`daemonize: false
pcap_interface: ts0
plugins: sfprobe
sfprobe_receiver: %s
sfprobe_agentip: 127.0.0.1
sampling_rate: %d
`, addr, rate)), 0o600); err != nil {
		t.Fatal(err)
	}
	pm := exec.Command("ip", "netns", "exec", sink, "pmacctd", "-f", conf)
	var out strings.Builder
	pm.Stdout, pm.Stderr = &out, &out
	start(t, pm)
	// pmacctd captures once its plugin is up; a trickle tells when.
	waitFor(t, "pmacctd's first sample ("+out.String()+")", 20*time.Second, func() bool {
		flood(t, gen, 50, 472, 1000)
		_, _, r, _ := c.read()
		return r > 0
	})
	time.Sleep(1500 * time.Millisecond) // what the trickle left in pmacctd is sent
	p0, _, _, _ := c.read()
	stop := make(chan struct{})
	defer close(stop)
	time.Sleep(3 * time.Second) // the trickle's rate decays out of the detector
	attacks := judge(det, stop)
	const n, size = 40000, 472
	start := flood(t, gen, n, size, 20000)
	waitFor(t, "the samples", 10*time.Second, func() bool { p, _, _, _ := c.read(); return p-p0 > 0.9*n })
	time.Sleep(2 * time.Second) // sfprobe sends what it holds after about a second
	p, _, recs, _ := c.read()
	p -= p0
	st := dec.Exporters()[0]
	sd := math.Sqrt(n*(1.0/rate)*(1-1.0/rate)) * rate
	t.Logf("pmacctd sfprobe 1:%d: %d samples in all, %.0f packets derived for %d sent (σ %.0f, %.1f%%); rates %v; exporter %+v",
		rate, recs, p, n, sd, 100*(p-n)/n, c.rates, st)
	if math.Abs(p-n) > 4*sd {
		t.Errorf("derived %.0f packets, sent %d: off by more than 4σ (%.0f)", p, n, 4*sd)
	}
	if st.SamplingRate != rate || st.DecodeErrors != 0 {
		t.Errorf("sampling rate %d, decode errors %d", st.SamplingRate, st.DecodeErrors)
	}
	select {
	case a := <-attacks:
		lag := a.Detected.Sub(start)
		t.Logf("pmacctd sfprobe: detected %v after the flood's start (%v, %.0f pps)", lag, a.Kinds, a.PPS)
		if lag > 500*time.Millisecond {
			t.Errorf("detected %v after the flood's start, want ≤ 0.5 s", lag)
		}
	case <-time.After(5 * time.Second):
		t.Error("the flood was not detected")
	}
}

// pmacctd's sfprobe also sends counter samples, every 20 s: a generic
// interface record of what it captured, at the ifSpeed it is configured
// with (it reads no ifTable), under ifIndex 0x3fffffff (sFlow's
// "internal": sfprobe_ifindex goes in its flow samples only). They reach
// the interface table, and its rates are what was sent: 514-byte frames
// (472 bytes of payload, UDP, IPv4, Ethernet) at the generator's rate.
// (pmacct 1.7.7; an exporter without counter samples leaves the table
// empty, and a group's uplinks on it unknown.)
func TestPmacctSFlowCounters(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireCommand(t, "pmacctd")
	if testing.Short() {
		t.Skip("waits for sfprobe's counter polling")
	}
	gen, sink := lab(t)
	c := &tally{rates: map[uint32]int{}}
	dec, addr := collect(t, sink, telemetry.NewDetector(floodThresholds()), c)
	conf := filepath.Join(t.TempDir(), "pmacctd.conf")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(`daemonize: false
pcap_interface: ts0
plugins: sfprobe
sfprobe_receiver: %s
sfprobe_agentip: 127.0.0.1
sfprobe_ifindex: 5
sfprobe_ifspeed: 1000000000
sampling_rate: 10
`, addr)), 0o600); err != nil {
		t.Fatal(err)
	}
	pm := exec.Command("ip", "netns", "exec", sink, "pmacctd", "-f", conf)
	var out strings.Builder
	pm.Stdout, pm.Stderr = &out, &out
	start(t, pm)
	var ifs []telemetry.Interface
	waitFor(t, "two counter samples from sfprobe", 90*time.Second, func() bool {
		flood(t, gen, 200, 472, 2000) // traffic all along, for the counters to count
		ifs = dec.Exporters()[0].Interfaces
		return len(ifs) > 0 && ifs[0].Samples >= 2
	}, func() string { return fmt.Sprintf("exporter %+v; pmacctd: %s", dec.Exporters()[0], out.String()) })
	st := dec.Exporters()[0]
	t.Logf("pmacctd sfprobe: %d counter samples, interfaces %+v", st.Counters, ifs)
	x := ifs[0]
	if len(ifs) != 1 || x.SpeedBPS != 1e9 || !x.OperUp || x.Resets != 0 || st.InterfacesRefused != 0 || st.DecodeErrors != 0 {
		t.Errorf("interfaces %+v, exporter %+v", ifs, st)
	}
	// The generator sends 200 datagrams at 2 kpps, then waitFor's 50 ms:
	// about 1.3 kpps over a counter interval.
	// (A few other frames, ARP's 42 bytes, pull the mean below 514.)
	if mean := float64(x.InOctets) / float64(x.InPackets); x.InPackets == 0 || mean < 505 || mean > 514 || x.InPPS < 500 || x.InPPS > 2000 ||
		math.Abs(x.InBPS-x.InPPS*514*8) > 0.02*x.InBPS || math.Abs(x.InUtilisation-x.InBPS/1e9) > 1e-9 {
		t.Errorf("counters and rates %+v", x)
	}
}
