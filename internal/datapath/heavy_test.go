// SPDX-License-Identifier: Apache-2.0

package datapath

import (
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"

	"github.com/tierwall/tierwall/internal/pkt"
	"github.com/tierwall/tierwall/internal/testutil"
)

// The heavy-hitter detector through BPF_PROG_TEST_RUN: a window long
// enough that a test run's packets fall in one or two of them.
var testHeavy = HeavyHitter{Window: 1 << 28, TTL: time.Minute, PacketsPerSec: 500, SYNsPerSec: 250, Prefix6: 64}

// The thresholds per window, as the data plane counts them: the window is
// a power of two jiffies (256 ms at HZ=250, 128 and 64 packets).
var testPktThresh, testSynThresh = testPerWindow(500), testPerWindow(250)

func testPerWindow(rate uint64) int {
	return int(rate * uint64(testHeavy.EffectiveWindow()) / uint64(time.Second))
}

func heavyDatapath(t *testing.T, h HeavyHitter, o Options) *Datapath {
	t.Helper()
	testutil.RequireRoot(t)
	if o.ExactCapacity4 == 0 {
		o = Options{ExactCapacity4: 1024, ExactCapacity6: 1024, PrefixCapacity: 64, AllowCapacity: 64, FeatureCapacity: 4096, ProvisionalCapacity: o.ProvisionalCapacity}
	}
	d, err := LoadDetached(o)
	if err != nil {
		t.Fatalf("loading filter: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	if err := d.SetHeavyHitter(h); err != nil {
		t.Fatal(err)
	}
	return d
}

func udpFrom(src string) []byte {
	return flowPkt{src: src, dst: "198.18.0.1", proto: pkt.ProtoUDP, sport: 1000, dport: 53}.build()
}

func verdictDelta(t *testing.T, d *Datapath, f func()) map[string]uint64 {
	t.Helper()
	before := observe(t, d).verdicts
	f()
	after := observe(t, d).verdicts
	out := map[string]uint64{}
	for k, v := range after {
		if n := v.Packets - before[k].Packets; n > 0 {
			out[k] = n
		}
	}
	return out
}

func provisionals(t *testing.T, d *Datapath) map[string]Provisional {
	t.Helper()
	ps, err := d.Provisionals()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]Provisional{}
	for _, p := range ps {
		out[p.Prefix.String()] = p
	}
	return out
}

// A source over the threshold is dropped from soon after its crossing,
// counted on its entry, and reported; one under it never is.
func TestHeavyHitterCatchesAndReports(t *testing.T) {
	d := heavyDatapath(t, testHeavy, Options{})
	ev, err := d.HeavyHitterEvents()
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Close()

	const n = 1000
	got := verdictDelta(t, d, func() { sendN(t, d, udpFrom("10.1.1.1"), n) })
	// Caught at the first cross-CPU sum at or over the threshold (every
	// eighth packet past the per-CPU share); a window boundary inside
	// the run restarts the count once at most.
	if got["drop_provisional"] < uint64(n-3*testPktThresh) || got["drop_provisional"]+got["pass"] != n {
		t.Fatalf("10.1.1.1 at %d packets: verdicts %v", n, got)
	}
	p, ok := provisionals(t, d)["10.1.1.1/32"]
	if !ok || p.Kind != "packets" || p.Packets != got["drop_provisional"] || p.Count < uint32(testPktThresh) || p.Monitor || p.Revoked {
		t.Fatalf("entry %+v (present %v), dropped %d", p, ok, got["drop_provisional"])
	}
	if !p.Expires.After(time.Now().Add(50*time.Second)) || p.Expires.After(time.Now().Add(time.Minute)) {
		t.Errorf("entry expires %v, want in a minute", p.Expires)
	}
	es, err := ev.Read(time.Now().Add(time.Second), 16)
	if err != nil || len(es) != 1 || es[0].Prefix != netip.MustParsePrefix("10.1.1.1/32") || es[0].Kind != "packets" {
		t.Fatalf("events %+v, %v", es, err)
	}

	got = verdictDelta(t, d, func() { sendN(t, d, udpFrom("10.2.2.2"), testPktThresh/2) })
	if got["pass"] != uint64(testPktThresh/2) || len(provisionals(t, d)) != 1 {
		t.Errorf("10.2.2.2 under the threshold: verdicts %v, entries %v", got, provisionals(t, d))
	}
	st, err := d.HeavyHitterStats()
	if err != nil || st.Caught != 1 || st.TableFull != 0 {
		t.Errorf("stats %+v, %v", st, err)
	}
}

// SYNs have their own threshold.
func TestHeavyHitterSYNs(t *testing.T) {
	d := heavyDatapath(t, testHeavy, Options{})
	syn := flowPkt{src: "10.9.9.9", dst: "198.18.0.1", proto: pkt.ProtoTCP, sport: 1000, dport: 80, flags: 0x02}.build()
	got := verdictDelta(t, d, func() { sendN(t, d, syn, 3*testSynThresh) })
	if got["drop_provisional"] == 0 {
		t.Fatalf("%d SYNs: verdicts %v", 3*testSynThresh, got)
	}
	if p := provisionals(t, d)["10.9.9.9/32"]; p.Kind != "syns" {
		t.Errorf("entry %+v, want caught for SYNs", p)
	}
}

// sendOnCPU runs n packets on one CPU: what RSS does with one source's
// packets when it spreads them.
func sendOnCPU(t *testing.T, d *Datapath, frame []byte, n, cpu int) {
	t.Helper()
	done := make(chan error)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		var set unix.CPUSet
		set.Set(cpu)
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			done <- err
			return
		}
		for i := 0; i < n; i++ {
			if _, err := d.Program().Run(&ebpf.RunOptions{Data: frame}); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// jiffiesProg returns the low 32 bits of jiffies, the data plane's
// clock, which user space cannot read otherwise.
var jiffiesProg = sync.OnceValues(func() (*ebpf.Program, error) {
	return ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.XDP, License: "GPL",
		Instructions: asm.Instructions{asm.FnJiffies64.Call(), asm.Return()}})
})

func jiffiesNow(t *testing.T) uint32 {
	t.Helper()
	p, err := jiffiesProg()
	if err != nil {
		t.Fatalf("loading the jiffies reader: %v", err)
	}
	j, err := p.Run(&ebpf.RunOptions{Data: make([]byte, 64)})
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// waitWindow returns just after h's next window begins in the data plane.
func waitWindow(t *testing.T, h HeavyHitter) {
	t.Helper()
	shift, _, err := h.windowTicks()
	if err != nil {
		t.Fatal(err)
	}
	w0 := jiffiesNow(t) >> shift
	for jiffiesNow(t)>>shift == w0 {
		time.Sleep(200 * time.Microsecond)
	}
}

// One source spread over every CPU, under the threshold on each, over it
// in all, is caught. Unsampled (a threshold under 2 x minSampled a window),
// the sketch sums the CPUs' counts and catches it in the window; sampled,
// the sum makes it a candidate, whose exact count, shared by the CPUs,
// catches it in the next window (a per-CPU count never would).
func TestHeavyHitterSumsCPUs(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("needs two CPUs")
	}
	for _, tc := range []struct {
		name    string
		pps     uint64
		shift   uint32
		windows int
	}{{"exact", 125, 0, 1}, {"sampled", 500, 2, 2}} {
		t.Run(tc.name, func(t *testing.T) {
			h := testHeavy
			h.PacketsPerSec = tc.pps
			d := heavyDatapath(t, h, Options{})
			var c filterTwHhConfig
			if err := d.maps.TwHhCfg.Lookup(uint32(0), &c); err != nil || c.SampleShift != tc.shift {
				t.Fatalf("sampling 1 in 2^%d (%v), want 2^%d", c.SampleShift, err, tc.shift)
			}
			frame := udpFrom("10.3.3.3")
			// Under the threshold on either CPU, over it in all,
			// inside each window: start just after one begins.
			each := testPerWindow(tc.pps)/2 + 6
			got := verdictDelta(t, d, func() {
				for w := 0; w < tc.windows; w++ {
					waitWindow(t, h)
					for i := 0; i < 2; i++ {
						sendOnCPU(t, d, frame, each/2, 0)
						sendOnCPU(t, d, frame, each-each/2, 1)
					}
				}
			})
			if got["drop_provisional"] == 0 {
				t.Fatalf("spread over two CPUs, %d a window on each: verdicts %v", each, got)
			}
		})
	}
}

// A source all on one CPU is caught at its threshold's packet, not at the
// next eighth count past the local threshold (which sums the CPUs): at 20
// a window (local 10 on two CPUs) those sums came at 10, 18 and 26.
func TestHeavyHitterOneCPUCaughtAtThreshold(t *testing.T) {
	h := testHeavy
	h.PacketsPerSec, h.SYNsPerSec = 80, 0
	d := heavyDatapath(t, h, Options{})
	thresh := testPerWindow(h.PacketsPerSec)
	if thresh != 20 || h.SampledOneIn() != 1 {
		t.Fatalf("threshold %d a window, sampling 1 in %d: want 20, unsampled", thresh, h.SampledOneIn())
	}
	frame := udpFrom("10.21.21.21")
	waitWindow(t, h)
	got := verdictDelta(t, d, func() {
		sendOnCPU(t, d, frame, thresh, 0)
		sendOnCPU(t, d, frame, 1, 0)
	})
	if got["pass"] != uint64(thresh) || got["drop_provisional"] != 1 {
		t.Fatalf("%d packets on one CPU, then one more: verdicts %v, want %d passed and the next dropped", thresh, got, thresh)
	}
}

// The rails in the data plane: protected and known-good sources are never
// caught, allowlisted ones never reach the detector; an IPv6 prefix is
// not caught over a protected host inside it, and a known-good client
// inside a caught prefix still passes.
func TestHeavyHitterExemptions(t *testing.T) {
	d := heavyDatapath(t, testHeavy, Options{})
	if err := d.SetProtected(mustPrefixes(t, []string{"10.4.0.0/16", "2001:db8:2::5/128"}), testHeavy.Prefix6); err != nil {
		t.Fatal(err)
	}
	if err := d.AddKnownGood(mustAddrs(t, []string{"10.5.5.5", "2001:db8:1::99"})); err != nil {
		t.Fatal(err)
	}
	if err := d.Allow(mustPrefixes(t, []string{"10.6.0.0/16"})...); err != nil {
		t.Fatal(err)
	}
	for _, src := range []string{"10.4.4.4", "10.5.5.5", "10.6.6.6", "::ffff:10.4.4.4", "2001:db8:2::7"} {
		got := verdictDelta(t, d, func() { sendN(t, d, udpFrom(src), 5*testPktThresh) })
		if got["drop_provisional"] != 0 {
			t.Errorf("%s: verdicts %v", src, got)
		}
	}
	if ps := provisionals(t, d); len(ps) != 0 {
		t.Errorf("entries for exempt sources: %v", ps)
	}
	st, _ := d.HeavyHitterStats()
	if st.ExemptProtect == 0 || st.ExemptGood == 0 {
		t.Errorf("stats %+v: want protected and known-good exemptions counted", st)
	}

	// Neighbours flood: their /64 is caught, the known-good client in it passes.
	got := verdictDelta(t, d, func() {
		sendN(t, d, udpFrom("2001:db8:1::1"), 3*testPktThresh)
		sendN(t, d, udpFrom("2001:db8:1::2"), 100)
	})
	if got["drop_provisional"] == 0 {
		t.Fatalf("2001:db8:1::/64 flood: %v", got)
	}
	if _, ok := provisionals(t, d)["2001:db8:1::/64"]; !ok {
		t.Fatalf("entries %v, want 2001:db8:1::/64", provisionals(t, d))
	}
	got = verdictDelta(t, d, func() { sendN(t, d, udpFrom("2001:db8:1::99"), 100) })
	if got["pass"] != 100 {
		t.Errorf("known-good client inside a caught prefix: %v", got)
	}

	// An IPv4 client caught before it joined (its address spoofed in the
	// moments before its handshake was verified) passes from the packet
	// after it joins, before the daemon revokes the catch.
	got = verdictDelta(t, d, func() { sendN(t, d, udpFrom("10.7.7.7"), 3*testPktThresh) })
	if got["drop_provisional"] == 0 {
		t.Fatalf("10.7.7.7 flood: %v", got)
	}
	if err := d.AddKnownGood(mustAddrs(t, []string{"10.7.7.7"})); err != nil {
		t.Fatal(err)
	}
	got = verdictDelta(t, d, func() { sendN(t, d, udpFrom("10.7.7.7"), 100) })
	if got["pass"] != 100 {
		t.Errorf("caught, then known-good: %v", got)
	}
	// A caught source that never joined stays dropped.
	got = verdictDelta(t, d, func() { sendN(t, d, udpFrom("2001:db8:1::1"), 100) })
	if got["drop_provisional"] != 100 {
		t.Errorf("caught prefix, no member: %v", got)
	}
}

// Revoked: the source passes and is not caught again; monitor-only:
// counted, never dropped.
func TestHeavyHitterRevokeAndMonitor(t *testing.T) {
	d := heavyDatapath(t, testHeavy, Options{})
	src := udpFrom("10.7.7.7")
	sendN(t, d, src, 3*testPktThresh)
	p := netip.MustParsePrefix("10.7.7.7/32")
	if err := d.RevokeProvisional(p, time.Minute); err != nil {
		t.Fatal(err)
	}
	got := verdictDelta(t, d, func() { sendN(t, d, src, 5*testPktThresh) })
	if got["pass"] != uint64(5*testPktThresh) {
		t.Errorf("revoked: %v", got)
	}
	if e := provisionals(t, d)[p.String()]; !e.Revoked {
		t.Errorf("entry %+v, want revoked", e)
	}
	if err := d.RemoveProvisional(p); err != nil {
		t.Fatal(err)
	}
	if err := d.RemoveProvisional(p); err != nil {
		t.Errorf("removing again: %v", err)
	}

	m := testHeavy
	m.Monitor = true
	if err := d.SetHeavyHitter(m); err != nil {
		t.Fatal(err)
	}
	got = verdictDelta(t, d, func() { sendN(t, d, udpFrom("10.8.8.8"), 5*testPktThresh) })
	if got["drop_provisional"] != 0 || got["pass_provisional"] == 0 || got["pass"]+got["pass_provisional"] != uint64(5*testPktThresh) {
		t.Errorf("monitor-only: %v", got)
	}
	if e := provisionals(t, d)["10.8.8.8/32"]; !e.Monitor || e.Packets != got["pass_provisional"] {
		t.Errorf("monitor-only entry %+v", e)
	}
}

// An entry expires by itself; the detector off catches nothing.
func TestHeavyHitterExpiresAndOff(t *testing.T) {
	h := testHeavy
	h.Window, h.TTL = 200*time.Millisecond, 300*time.Millisecond
	d := heavyDatapath(t, h, Options{})
	src := udpFrom("10.10.10.10")
	sendN(t, d, src, 3*testPktThresh)
	if len(provisionals(t, d)) != 1 {
		t.Fatal("not caught")
	}
	time.Sleep(700 * time.Millisecond)
	got := verdictDelta(t, d, func() { sendN(t, d, src, 10) })
	if got["pass"] != 10 {
		t.Errorf("after expiry: %v", got)
	}
	if n, err := d.ExpireProvisionals(); err != nil || len(provisionals(t, d)) != 0 {
		t.Errorf("expired %d, %v; left %v", n, err, provisionals(t, d))
	}
	if err := d.SetHeavyHitter(HeavyHitter{}); err != nil {
		t.Fatal(err)
	}
	got = verdictDelta(t, d, func() { sendN(t, d, udpFrom("10.11.11.11"), 5*testPktThresh) })
	if got["pass"] != uint64(5*testPktThresh) {
		t.Errorf("detector off: %v", got)
	}
}

// Countless distinct sources grow nothing and catch no one; heavy ones
// beyond the table's capacity are counted, not held.
func TestHeavyHitterBounded(t *testing.T) {
	d := heavyDatapath(t, testHeavy, Options{ProvisionalCapacity: 4})
	for i := 0; i < 50000; i++ {
		sendN(t, d, udpFrom(fmt.Sprintf("10.%d.%d.%d", 20+i>>16, i>>8&255, i&255)), 1)
	}
	if ps := provisionals(t, d); len(ps) != 0 {
		t.Fatalf("50K one-packet sources caught %d: %v", len(ps), ps)
	}
	for i := 0; i < 8; i++ {
		sendN(t, d, udpFrom(fmt.Sprintf("10.99.0.%d", i)), 3*testPktThresh)
	}
	st, err := d.HeavyHitterStats()
	if err != nil || st.Caught != 4 || st.TableFull == 0 || len(provisionals(t, d)) != 4 {
		t.Errorf("8 heavy sources, room for 4: stats %+v %v, entries %d", st, err, len(provisionals(t, d)))
	}
}

// Settings the data plane cannot honour are refused and change nothing.
func TestHeavyHitterRefusesBadSettings(t *testing.T) {
	d := heavyDatapath(t, testHeavy, Options{})
	for _, h := range []HeavyHitter{
		{Window: time.Microsecond, TTL: time.Second, PacketsPerSec: 1000, Prefix6: 64},
		{Window: 10 * time.Millisecond, TTL: time.Millisecond, PacketsPerSec: 1000, Prefix6: 64},
		{Window: 10 * time.Millisecond, TTL: time.Second, PacketsPerSec: 1000, Prefix6: 16},
		{Window: 10 * time.Millisecond, TTL: time.Second, Prefix6: 64},
		{Window: 10 * time.Millisecond, TTL: time.Second, PacketsPerSec: 100, Prefix6: 64}, // one packet per window
	} {
		if err := d.SetHeavyHitter(h); err == nil {
			t.Errorf("%+v accepted", h)
		}
	}
	got := verdictDelta(t, d, func() { sendN(t, d, udpFrom("10.12.12.12"), 3*testPktThresh) })
	if got["drop_provisional"] == 0 {
		t.Errorf("the settings before the refusals were lost: %v", got)
	}
}

// sendWindows sends n packets of frame right after each of windows window
// starts.
func sendWindows(t *testing.T, d *Datapath, h HeavyHitter, frame []byte, n, windows int) {
	t.Helper()
	for w := 0; w < windows; w++ {
		waitWindow(t, h)
		sendN(t, d, frame, n)
	}
}

// Just under the threshold in every window is never caught: not by the
// sketch's windows running into each other (the data plane's window is
// the one the daemon computed, in jiffies), and not by sampling noise
// when the sketch samples (the sampled count alone would reach the
// threshold in nearly half of the windows at 97% of it; the exact count
// of a candidate never does).
func TestHeavyHitterJustUnderNeverCaught(t *testing.T) {
	for _, tc := range []struct {
		name  string
		pps   uint64
		shift uint32
	}{{"exact", 125, 0}, {"sampled", 500, 2}} {
		t.Run(tc.name, func(t *testing.T) {
			h := testHeavy
			h.PacketsPerSec, h.SYNsPerSec = tc.pps, 0
			d := heavyDatapath(t, h, Options{})
			var c filterTwHhConfig
			if err := d.maps.TwHhCfg.Lookup(uint32(0), &c); err != nil || c.SampleShift != tc.shift {
				t.Fatalf("sampling 1 in 2^%d (%v), want 2^%d", c.SampleShift, err, tc.shift)
			}
			thresh := testPerWindow(tc.pps)
			under := thresh * 97 / 100
			src := udpFrom("10.13.13.13")
			got := verdictDelta(t, d, func() { sendWindows(t, d, h, src, under, 8) })
			if got["pass"] != uint64(8*under) {
				t.Fatalf("%d a window (threshold %d), 8 windows: verdicts %v, entries %v", under, thresh, got, provisionals(t, d))
			}
			st, err := d.HeavyHitterStats()
			if err != nil || st.Caught != 0 {
				t.Fatalf("stats %+v, %v", st, err)
			}
			if tc.shift > 0 && st.Candidates == 0 {
				t.Errorf("stats %+v: at 97%% of the threshold, the sampled sketch never made it a candidate", st)
			}
			// Over it, the same way: caught, within two windows.
			got = verdictDelta(t, d, func() { sendWindows(t, d, h, src, thresh+thresh/4, 2) })
			if got["drop_provisional"] == 0 {
				st2, _ := d.HeavyHitterStats()
				t.Errorf("%d a window (threshold %d): verdicts %v, stats before %+v after %+v", thresh+thresh/4, thresh, got, st, st2)
			}
		})
	}
}

// A live catch costs the other sources no provisional-table lookup (their
// marks say they cannot have an entry), and the caught source is dropped
// on every CPU, not only the one that caught it.
func TestHeavyHitterMarks(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("needs two CPUs")
	}
	d := heavyDatapath(t, testHeavy, Options{})
	caught := udpFrom("10.14.14.14")
	sendOnCPU(t, d, caught, 4*testPktThresh, 0)
	if _, ok := provisionals(t, d)["10.14.14.14/32"]; !ok {
		t.Fatal("not caught")
	}
	got := verdictDelta(t, d, func() { sendOnCPU(t, d, caught, 10, 1) })
	if got["drop_provisional"] != 10 {
		t.Errorf("the caught source on the other CPU: verdicts %v", got)
	}
	before, _ := d.HeavyHitterStats()
	const others = 4096
	for i := 0; i < others; i++ {
		sendN(t, d, udpFrom(fmt.Sprintf("10.15.%d.%d", i>>8, i&255)), 1)
	}
	after, _ := d.HeavyHitterStats()
	// Each other source shares both marks of the one catch with
	// probability 1/(512 x 120).
	if n := after.Marked - before.Marked; n > others/100 {
		t.Errorf("%d of %d other sources looked the provisional table up", n, others)
	}
	got = verdictDelta(t, d, func() { sendN(t, d, caught, 10) })
	if got["drop_provisional"] != 10 {
		t.Errorf("the caught source after the others: verdicts %v", got)
	}
}

// The sampling the data plane is given: as coarse as keeps the packet
// threshold at 32 sampled packets a window or more, none under 64, and
// the sums and per-CPU shares in sampled units.
func TestHeavyHitterSampling(t *testing.T) {
	for _, tc := range []struct{ all, shift uint32 }{
		{^uint32(0), 0}, {32, 0}, {63, 0}, {64, 1}, {127, 1}, {128, 2},
		{800, 4}, // 100,000 pps over 8 ms
		{1 << 30, maxSampleShift},
	} {
		if got := sampleShift(tc.all); got != tc.shift {
			t.Errorf("sampleShift(%d) = %d, want %d", tc.all, got, tc.shift)
		}
	}
	d := heavyDatapath(t, HeavyHitter{Window: 10 * time.Millisecond, TTL: time.Minute, PacketsPerSec: 100000, Prefix6: 64}, Options{})
	var c filterTwHhConfig
	if err := d.maps.TwHhCfg.Lookup(uint32(0), &c); err != nil {
		t.Fatal(err)
	}
	win := (HeavyHitter{Window: 10 * time.Millisecond}).EffectiveWindow()
	thresh := uint32(100000 * win / time.Second)
	shift := sampleShift(thresh)
	if c.PktThresh != thresh || c.SampleShift != shift || c.PktSum != (thresh>>shift)/2 || c.PktLocal != max(c.PktSum/d.sizes.ncpu, 1) {
		t.Errorf("config %+v for %d a window", c, thresh)
	}
}

// An entry that expired and was not removed (no packet of its source met
// it, and the daemon sweeps once an interval) does not keep its source
// from being caught: a revocation that ran out, here.
func TestHeavyHitterExpiredEntryReplaced(t *testing.T) {
	d := heavyDatapath(t, testHeavy, Options{})
	p := netip.MustParsePrefix("10.16.16.16/32")
	if err := d.RevokeProvisional(p, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	got := verdictDelta(t, d, func() { sendN(t, d, udpFrom("10.16.16.16"), 4*testPktThresh) })
	if got["drop_provisional"] == 0 {
		t.Fatalf("flooding after its revocation expired: verdicts %v, entries %v", got, provisionals(t, d))
	}
	if e := provisionals(t, d)[p.String()]; e.Revoked || e.Packets == 0 {
		t.Errorf("entry %+v, want a fresh catch", e)
	}
}

// With flow rules in place the detector counts after them (the filter's
// second call): a source a flow rule drops is never counted, so never
// caught, and one no rule decides is.
func TestHeavyHitterAfterFlowRules(t *testing.T) {
	d := heavyDatapath(t, testHeavy, Options{})
	if err := d.SetFlowRules(mustFlowRules(t, []string{"dst 198.18.9.0/24 drop"})); err != nil {
		t.Fatal(err)
	}
	dropped := flowPkt{src: "10.17.17.17", dst: "198.18.9.1", proto: pkt.ProtoUDP, sport: 1000, dport: 53}.build()
	got := verdictDelta(t, d, func() { sendN(t, d, dropped, 5*testPktThresh) })
	if got["drop_flow"] != uint64(5*testPktThresh) || len(provisionals(t, d)) != 0 {
		t.Errorf("a source the flow rule drops: verdicts %v, entries %v", got, provisionals(t, d))
	}
	got = verdictDelta(t, d, func() { sendN(t, d, udpFrom("10.18.18.18"), 5*testPktThresh) })
	if got["drop_provisional"] == 0 {
		t.Errorf("a source no rule decides: verdicts %v", got)
	}
}

// jiffies reads the kernel's tick counter (/proc/timer_list), as the
// program's bpf_jiffies64 sees it.
func jiffies(t *testing.T) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/timer_list")
	if err != nil {
		t.Fatalf("reading the tick counter: %v", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "jiffies: "); ok {
			j, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			if err != nil {
				t.Fatalf("parsing jiffies %q: %v", v, err)
			}
			return j
		}
	}
	t.Fatal("no jiffies line in /proc/timer_list")
	return 0
}

// A mark slot that holds no live mark sends no packet to the provisional
// table, at any uptime: one never set (0) and one far from now in either
// direction of the 32-bit wrap. A signed comparison alone took 0 as live
// whenever the low 32 bits of jiffies were at or past 2^31 (the first five
// minutes after boot, then half of every cycle), and a mark 2^31 ticks
// old as live at any uptime; every packet then paid the lookup.
func TestHeavyHitterStaleMarksNotLive(t *testing.T) {
	d := heavyDatapath(t, testHeavy, Options{})
	// A catch makes the shared word say a mark may be live.
	caught := udpFrom("10.14.14.14")
	sendN(t, d, caught, 4*testPktThresh)
	if _, ok := provisionals(t, d)["10.14.14.14/32"]; !ok {
		t.Fatal("not caught")
	}
	for _, tc := range []struct {
		name  string
		value func(j uint32) uint32
	}{
		{"never set", func(uint32) uint32 { return 0 }},
		{"2^31 ticks away", func(j uint32) uint32 { return j + 1<<31 - 1000 }},
		{"just past the span", func(j uint32) uint32 { return j + 1<<30 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m filterTwHhMarks
			v := tc.value(uint32(jiffies(t)))
			for i := range m.Until {
				m.Until[i] = v
			}
			for line := uint32(0); line < 512; line++ {
				if err := d.maps.TwHhLive.Put(line, &m); err != nil {
					t.Fatal(err)
				}
			}
			before, _ := d.HeavyHitterStats()
			const others = 256
			for i := 0; i < others; i++ {
				sendN(t, d, udpFrom(fmt.Sprintf("10.16.%d.%d", i>>8, i&255)), 1)
			}
			after, _ := d.HeavyHitterStats()
			if n := after.Marked - before.Marked; n != 0 {
				t.Errorf("%d of %d sources with no live mark looked the provisional table up", n, others)
			}
		})
	}
}
