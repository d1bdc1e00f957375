// SPDX-License-Identifier: Apache-2.0

package detect

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"
)

var server = netip.MustParseAddr("192.0.2.10")

// normal is one interval of benign traffic: 200 clients to 20 servers,
// a few packets each, deterministic.
func normal(i int) *Traffic {
	t := NewTraffic(time.Second)
	for c := 0; c < 200; c++ {
		src := netip.AddrFrom4([4]byte{172, 16, byte(c / 250), byte(c%250 + 1)})
		dst := netip.AddrFrom4([4]byte{192, 0, 2, byte(c%20 + 1)})
		n := uint64(5 + (c*7+i*3)%11)
		t.Add(src, dst, 6, n, n*100, 1)
	}
	return t
}

func TestRateStaticThresholds(t *testing.T) {
	tr := normal(0)
	tr.Add(netip.MustParseAddr("203.0.113.1"), server, 17, 5000, 5000*64, 0)
	tr.Add(netip.MustParseAddr("203.0.113.2"), server, 6, 900, 900*64, 800) // SYN flood
	r := &Rate{Static: Thresholds{PPS: 1000, SYNPPS: 500}}
	ds := r.Detect(tr)
	if len(ds) != 2 || ds[0].Prefix.String() != "203.0.113.1/32" || ds[1].Prefix.String() != "203.0.113.2/32" {
		t.Fatalf("detections %+v", ds)
	}
	r = &Rate{Static: Thresholds{PerProto: map[uint8]float64{17: 100}}}
	if ds := r.Detect(tr); len(ds) != 1 || ds[0].Prefix.Addr().String() != "203.0.113.1" {
		t.Fatalf("per-protocol: %+v", ds)
	}
}

func TestRateLearnsBaseline(t *testing.T) {
	r := &Rate{LearnIntervals: 5, Margin: 2, MinPPS: 10}
	for i := 0; i < 5; i++ {
		if ds := r.Detect(normal(i)); len(ds) != 0 {
			t.Fatalf("flagged while learning: %+v", ds)
		}
	}
	l, ok := r.Learned()
	if !ok || l != 2*15 { // busiest normal source: 15 packets/s
		t.Fatalf("learned %v %v, want 30", l, ok)
	}
	tr := normal(6)
	tr.Add(netip.MustParseAddr("203.0.113.9"), server, 17, 31, 31*64, 0)
	tr.Add(netip.MustParseAddr("203.0.113.8"), server, 17, 29, 29*64, 0)
	ds := r.Detect(tr)
	if len(ds) != 1 || ds[0].Prefix.Addr().String() != "203.0.113.9" {
		t.Fatalf("after learning: %+v", ds)
	}
}

func learnedEntropy(t *testing.T) *Entropy {
	e := &Entropy{History: 8, MinPPS: 100}
	for i := 0; i < 8; i++ {
		if ds := e.Detect(normal(i)); ds != nil {
			t.Fatalf("flagged while learning")
		}
	}
	return e
}

func TestEntropyConcentratedAttack(t *testing.T) {
	e := learnedEntropy(t)
	// Normal traffic again: nothing.
	if ds := e.Detect(normal(9)); len(ds) != 0 {
		t.Fatalf("normal flagged: %+v", ds)
	}
	// 30 bots flood one server: dst entropy falls, volume jumps.
	tr := normal(10)
	for b := 0; b < 30; b++ {
		tr.Add(netip.AddrFrom4([4]byte{198, 51, 100, byte(b + 1)}), server, 17, 2000, 2000*64, 0)
	}
	ds := e.Detect(tr)
	bots := 0
	for _, d := range ds {
		if d.Prefix.Bits() != 32 {
			t.Errorf("concentrated attack escalated to %s", d.Prefix)
		}
		if d.Prefix.Addr().As4()[0] == 198 {
			bots++
		} else {
			t.Errorf("named a legitimate source: %+v", d)
		}
	}
	if bots != 30 {
		t.Fatalf("named %d of 30 bots: %+v", bots, ds)
	}
}

func TestEntropySpoofedEscalatesToPrefixes(t *testing.T) {
	e := learnedEntropy(t)
	e.PrefixMinPPS = 200 // each /24 below carries 256 pps (the default floor is 1000)
	// Every address of 20 IPv4 /24s sends one packet, and 40K random-ish
	// addresses of two IPv6 /48s one each: spoofed sources.
	tr := normal(11)
	for n := 0; n < 20; n++ {
		for h := 0; h < 256; h++ {
			tr.Add(netip.AddrFrom4([4]byte{10, 1, byte(n), byte(h)}), server, 17, 1, 64, 0)
		}
	}
	v6 := netip.MustParseAddr("2001:db8:77::10")
	for i := 0; i < 40000; i++ {
		b := [16]byte{0x20, 0x01, 0x0d, 0xb8, 0, byte(0x77 + i%2), 0, 0, byte(i >> 16), byte(i >> 8), byte(i), 1, 2, 3, 4, 5}
		tr.Add(netip.AddrFrom16(b), v6, 17, 1, 64, 0)
	}
	ds := e.Detect(tr)
	got := map[string]bool{}
	for _, d := range ds {
		got[d.Prefix.String()] = true
		if d.Prefix.Addr().Is4() && (d.Prefix.Bits() != 24 || !netip.MustParsePrefix("10.1.0.0/19").Contains(d.Prefix.Addr())) {
			t.Errorf("unexpected detection %+v", d)
		}
		if d.Prefix.Addr().Is6() && d.Prefix.Bits() != 48 {
			t.Errorf("unexpected detection %+v", d)
		}
	}
	if !got["2001:db8:77::/48"] || !got["2001:db8:78::/48"] || len(ds) != 22 {
		t.Errorf("%d prefixes (%v), want the 20 /24s and 2 /48s carrying the flood", len(ds), got)
	}
}

func TestEntropyUniformGrowthIsNotAnAttack(t *testing.T) {
	// Twice the usual traffic spread like usual traffic (a busy hour):
	// volume rises but neither entropy moves, so nothing is flagged.
	e := learnedEntropy(t)
	tr := NewTraffic(time.Second)
	for _, half := range []*Traffic{normal(12), normal(13)} {
		for _, p := range half.Pairs {
			tr.Add(half.SourceAddr(int(p.Src)), half.DestAddr(int(p.Dst)), 6, p.Packets, p.Packets*100, 0)
		}
	}
	if ds := e.Detect(tr); len(ds) != 0 {
		t.Fatalf("busy hour flagged: %d detections", len(ds))
	}
}

func TestListReloads(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "feed.txt")
	write := func(body string, at time.Duration) {
		t.Helper()
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, time.Now().Add(at), time.Now().Add(at)); err != nil {
			t.Fatal(err)
		}
	}
	write("# feed\n192.0.2.0/24\n2001:db8::1\n", 0)
	l := &List{Paths: []string{p}}
	if ds := l.Detect(nil); len(ds) != 2 {
		t.Fatalf("%+v", ds)
	}
	// A broken update keeps the last good contents and reports the error
	// (once it has settled: read at the second reload).
	write("not-an-address\n", time.Minute)
	l.Detect(nil)
	if ds := l.Detect(nil); len(ds) != 2 || l.Err() == nil {
		t.Fatalf("bad reload: %d detections, err %v", len(ds), l.Err())
	}
	write("198.51.100.7\n", 2*time.Minute)
	if ds := l.Detect(nil); len(ds) != 2 {
		t.Fatalf("a change was applied before it settled: %+v", ds)
	}
	if ds := l.Detect(nil); len(ds) != 1 || ds[0].Prefix.String() != "198.51.100.7/32" || l.Err() != nil {
		t.Fatalf("good reload: %+v %v", ds, l.Err())
	}
}

// A feed truncated and rewritten in place is never read half-written: the
// bans it still lists are not lifted in between.
func TestListWaitsForRewrittenFeed(t *testing.T) {
	p := filepath.Join(t.TempDir(), "feed.txt")
	full := "198.51.100.1\n198.51.100.2\n198.51.100.3\n"
	if err := os.WriteFile(p, []byte(full), 0o600); err != nil {
		t.Fatal(err)
	}
	l := &List{Paths: []string{p}}
	if ds := l.Detect(nil); len(ds) != 3 {
		t.Fatalf("%+v", ds)
	}
	for i, body := range []string{"", "198.51.100.1\n", full} { // truncated, half, whole
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, time.Now().Add(time.Duration(i+1)*time.Minute), time.Now().Add(time.Duration(i+1)*time.Minute)); err != nil {
			t.Fatal(err)
		}
		if ds := l.Detect(nil); len(ds) != 3 {
			t.Fatalf("step %d of the rewrite: %d prefixes listed", i, len(ds))
		}
	}
	if ds := l.Detect(nil); len(ds) != 3 {
		t.Fatalf("after the rewrite settled: %+v", ds)
	}
}

// interval builds one second of traffic: n sources of base from 10.x at
// pps each.
func interval(t *Traffic, base byte, n int, pps uint64) *Traffic {
	for i := 0; i < n; i++ {
		src := netip.AddrFrom4([4]byte{10, base, byte(i >> 8), byte(i)})
		t.Add(src, netip.MustParseAddr("192.0.2.1"), 17, pps, 64*pps, 0)
	}
	return t
}

// An attack already running when the daemon starts (200 sources x 2000
// pps) is flagged from the first interval and teaches nothing.
func TestLearningSurvivesAttackFromStart(t *testing.T) {
	r := &Rate{LearnIntervals: 5, Margin: 2, MinPPS: 100, Ceiling: 1000}
	for i := 0; i < 10; i++ {
		tr := interval(interval(NewTraffic(time.Second), 1, 200, 2000), 2, 50, 10)
		if ds := r.Detect(tr); len(ds) != 200 {
			t.Fatalf("interval %d: %d detections, want the 200 attackers", i, len(ds))
		}
	}
	if l, ok := r.Learned(); ok && l > 1000 {
		t.Fatalf("learned %v from an attack", l)
	}
	if _, refused := r.Learning(); refused != 10 {
		t.Fatalf("%d anomalous intervals refused, want 10", refused)
	}
}

// A few heavy sources below the ceiling cannot lift the learned value: it
// is a quantile, not the maximum.
func TestLearningIsAQuantile(t *testing.T) {
	r := &Rate{LearnIntervals: 3, Margin: 2, MinPPS: 100, Ceiling: 1000}
	for i := 0; i < 3; i++ {
		r.Detect(interval(interval(NewTraffic(time.Second), 1, 1000, 10), 2, 2, 900))
	}
	l, ok := r.Learned()
	if !ok || l != 100 {
		t.Fatalf("learned %v (%v), want the floor 100 (p99 of 10 pps x 2)", l, ok)
	}
	if ds := r.Detect(interval(NewTraffic(time.Second), 2, 2, 900)); len(ds) != 2 {
		t.Fatalf("heavy sources after learning: %d detections", len(ds))
	}
	r2 := &Rate{LearnIntervals: 3, MinPPS: 100, Ceiling: 1000}
	r2.Restore(5e6)
	if l, ok := r2.Learned(); !ok || l != 1000 {
		t.Fatalf("restored %v, want clamped to the ceiling", l)
	}
}

// Rotating /128s inside one /64 become one /64 detection; a lone address
// and IPv4 hosts are left as they are.
func TestAggregateIPv6(t *testing.T) {
	var ds []Detection
	for i := 1; i <= 5; i++ {
		ds = append(ds, Detection{Prefix: netip.MustParsePrefix(fmt.Sprintf("2001:db8:1:2::%x/128", i)), Detector: "rate", Rate: 1000})
	}
	ds = append(ds, Detection{Prefix: netip.MustParsePrefix("2001:db8:9::1/128"), Detector: "rate", Rate: 50},
		Detection{Prefix: netip.MustParsePrefix("198.51.100.1/32"), Detector: "rate", Rate: 10})
	out := AggregateIPv6(ds, 64, 3)
	if len(out) != 3 || out[0].Prefix != netip.MustParsePrefix("2001:db8:1:2::/64") || out[0].Rate != 5000 {
		t.Fatalf("aggregated %+v", out)
	}
	if got := AggregateIPv6(ds[:2], 64, 3); len(got) != 2 {
		t.Fatalf("two addresses (below min) aggregated: %+v", got)
	}
}

// Top keeps the n heaviest, heaviest first, ties by address, and counts
// each source's destinations.
func TestTopSelectsAndOrders(t *testing.T) {
	tr := NewTraffic(time.Second)
	for i := 1; i <= 50; i++ {
		tr.Add(netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}), netip.MustParseAddr("192.0.2.1"), 17, uint64(i%10), 64, 0)
	}
	tr.Add(netip.MustParseAddr("10.0.0.9"), netip.MustParseAddr("192.0.2.2"), 6, 1, 64, 1)
	top := tr.Top(5)
	want := []string{"10.0.0.9", "10.0.0.19", "10.0.0.29", "10.0.0.39", "10.0.0.49"}
	if len(top) != 5 {
		t.Fatalf("%d talkers", len(top))
	}
	for i, w := range want {
		if top[i].Src.String() != w {
			t.Fatalf("talker %d is %s, want %s (%+v)", i, top[i].Src, w, top)
		}
	}
	if top[0].Packets != 10 || top[0].Dests != 2 || top[0].SYNPS != 1 || top[1].Dests != 1 {
		t.Fatalf("first talker %+v, second %+v", top[0], top[1])
	}
	if got := tr.Proto(tr.SourceIndex(KeyOf(netip.MustParseAddr("10.0.0.9"))), 6); got != 1 {
		t.Fatalf("TCP packets %d", got)
	}
}
