// SPDX-License-Identifier: Apache-2.0

package detect

import (
	"net/netip"
	"testing"
	"time"
)

// spoofedInto adds n one-packet sources in each of the /24s 10.50.k.0
// (k < nets) toward server.
func spoofedInto(tr *Traffic, nets, n int) {
	for k := range nets {
		for h := range n {
			tr.Add(netip.AddrFrom4([4]byte{10, 50, byte(k), byte(h + 1)}), server, 17, 1, 64, 0)
		}
	}
}

// 100 spoofed pps into each of 50 /24s is 2% of that attack per /24,
// over the 1% share, but under the per-prefix rate floor: no /24 is
// named. (Before: 50 bans, a client's /24 among them.)
func TestEntropyPrefixRateFloor(t *testing.T) {
	e := learnedEntropy(t)
	tr := normal(9)
	spoofedInto(tr, 50, 100)
	if ds := e.Detect(tr); len(ds) != 0 {
		t.Fatalf("%d prefixes named at 100 pps each, e.g. %+v", len(ds), ds[0])
	}
	// The same spread at 2,000 pps per prefix is over the floor.
	e = learnedEntropy(t)
	tr = normal(9)
	spoofed6(tr, 50, 2000)
	if ds := e.Detect(tr); len(ds) != 50 {
		t.Fatalf("%d prefixes named at 2000 pps each, want 50", len(ds))
	}
}

// spoofed6 adds n one-packet sources in each of the /48s 2001:db8:k::
// (k < nets) toward server.
func spoofed6(tr *Traffic, nets, n int) {
	for k := range nets {
		for h := range n {
			b := [16]byte{0x20, 0x01, 0x0d, 0xb8, 0, byte(k), 0, 0, 0, 0, 0, 0, 0, 0, byte(h >> 8), byte(h)}
			tr.Add(netip.AddrFrom16(b), server, 17, 1, 64, 0)
		}
	}
}

// floodInterval is normal traffic plus a spoofed flood of 20 /48s at
// 2,000 pps each.
func floodInterval(i int) *Traffic {
	tr := normal(i)
	spoofed6(tr, 20, 2000)
	return tr
}

// A flood during the first History intervals is not learned as normal:
// the same attack is detected right after. (Before: the baseline took
// the flood in and the same attack gave 0 detections.)
func TestEntropyBaselineNotLearnedFromFlood(t *testing.T) {
	e := &Entropy{History: 8, MinPPS: 100}
	for i := range 3 {
		e.Detect(normal(i))
	}
	for i := range 5 {
		e.Detect(floodInterval(3 + i))
	}
	for i := range 5 {
		e.Detect(normal(8 + i))
	}
	if _, _, _, ready := e.Baseline(); !ready {
		t.Fatal("baseline not learned after 8 normal intervals")
	}
	if ds := e.Detect(floodInterval(20)); len(ds) == 0 {
		pps, _, _, _ := e.Baseline()
		t.Fatalf("flood not detected after learning through it (baseline %.0f pps)", pps)
	}

	// Held by the caller (another detector's attack): not learned even
	// as the very first intervals.
	e = &Entropy{History: 8, MinPPS: 100}
	e.Hold = true
	for i := range 5 {
		e.Detect(floodInterval(i))
	}
	e.Hold = false
	for i := range 8 {
		e.Detect(normal(i))
	}
	if ds := e.Detect(floodInterval(20)); len(ds) == 0 {
		t.Fatal("flood not detected after held intervals")
	}
}

// What was learned survives a restart through State and Restore: the
// restored detector judges at once.
func TestEntropyStateRestore(t *testing.T) {
	e := learnedEntropy(t)
	r := &Entropy{History: 8, MinPPS: 100}
	r.Restore(e.State())
	if _, _, _, ready := r.Baseline(); !ready {
		t.Fatal("restored detector not ready")
	}
	if ds := r.Detect(floodInterval(20)); len(ds) == 0 {
		t.Fatal("restored detector missed the flood")
	}
	n := &Entropy{History: 8, MinPPS: 100}
	n.Restore(map[string]float64{})
	if _, _, _, ready := n.Baseline(); ready {
		t.Fatal("an empty state made a ready detector")
	}
}

// A flood from the daemon's first interval, which the victim detector
// names (Hold) only in its third: the two intervals before its judgement
// are not learned either, and the same flood is detected once the
// baseline is learned from normal intervals. (Learned at once, they went
// into the first mean, and the variance they left hid the flood.)
func TestEntropyFloodAtStartNotLearned(t *testing.T) {
	e := &Entropy{History: 8, MinPPS: 100}
	for i := range 5 {
		e.Hold = i >= 2
		e.Detect(floodInterval(i))
	}
	e.Hold = false
	for i := range 12 {
		e.Detect(normal(5 + i))
	}
	if _, _, _, ready := e.Baseline(); !ready {
		t.Fatal("baseline not learned after 12 normal intervals")
	}
	if ds := e.Detect(floodInterval(30)); len(ds) == 0 {
		pps, _, _, _ := e.Baseline()
		t.Fatalf("the flood from the start not detected once learned (baseline %.0f pps)", pps)
	}
}

// oneServer is the lab's shape: 64 clients of one server, 300 packets
// each an interval (a little uneven), and nothing else.
func oneServer(i int) *Traffic {
	t := NewTraffic(500 * time.Millisecond)
	for c := range 64 {
		n := uint64(280 + (c*7+i*3)%41)
		t.Add(netip.AddrFrom4([4]byte{10, 70, 1, byte(c + 1)}), server, 6, n, n*100, 1)
	}
	return t
}

// A flood spread over many addresses toward the one server the clients
// use leaves both normalized entropies where they were: destinations
// were one and stay one (0), and n spoofed sources sending alike are as
// even as 64 clients were (near 1). In bits the sources go from 6 to 14:
// detected, even when the flood filled a tenth of the interval (it began
// near the interval's end; with a card the next interval no longer
// shows it to the host). Before: not detected at all (entropy-warmup
// with the card, 2026-12-06).
func TestEntropySpreadFloodOnOneDestination(t *testing.T) {
	learned := func() *Entropy {
		e := &Entropy{History: 8, MinPPS: 100}
		for i := range 10 {
			if ds := e.Detect(oneServer(i)); ds != nil {
				t.Fatalf("flagged while learning: %+v", ds)
			}
		}
		if ds := e.Detect(oneServer(11)); len(ds) != 0 {
			t.Fatalf("normal flagged: %+v", ds)
		}
		return e
	}
	for _, c := range []struct {
		name string
		per  int // one-packet sources in each of 16 /48s
	}{{"whole interval", 8000}, {"a tenth of it", 800}} {
		e := learned()
		tr := oneServer(12)
		for k := range 16 {
			for h := range c.per {
				b := [16]byte{0xfd, 0x00, 0x0b, 0xad, 0, byte(0x10 + k), 0, 0, 0, 0, 0, 0, 0, 0, byte(h >> 8), byte(h)}
				tr.Add(netip.AddrFrom16(b), server, 17, 1, 64, 0)
			}
		}
		ds := e.Detect(tr)
		if len(ds) != 16 {
			_, hs, hd := e.Last()
			_, bs, bd, _ := e.Baseline()
			t.Fatalf("%s: %d prefixes named, want the 16 /48s (src %.2f, baseline %.2f; dst %.2f, baseline %.2f)", c.name, len(ds), hs, bs, hd, bd)
		}
	}
}

// A state saved when the entropies were normalized (0 to 1) is not
// taken as bits: the baseline is learned again.
func TestEntropyNormalizedStateNotRestored(t *testing.T) {
	old := map[string]float64{"n": 30, "pps_n": 30, "pps_mean": 40000, "pps_m2": 1,
		"hsrc_n": 30, "hsrc_mean": 0.98, "hsrc_m2": 0.01, "hdst_n": 30, "hdst_mean": 0.5, "hdst_m2": 0.01}
	e := &Entropy{History: 8, MinPPS: 100}
	e.Restore(old)
	if _, _, _, ready := e.Baseline(); ready {
		t.Fatal("a normalized state was restored as bits")
	}
}
