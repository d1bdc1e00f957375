// SPDX-License-Identifier: Apache-2.0

package detect

import (
	"net/netip"
	"testing"
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
