// SPDX-License-Identifier: Apache-2.0

package detect

import (
	"net/netip"
	"testing"
	"time"
)

// idle is one interval of a nearly idle link: five hosts at 1..5 pps,
// each to its own server.
func idle() *Traffic {
	t := NewTraffic(time.Second)
	for i := range 5 {
		t.Add(netip.AddrFrom4([4]byte{172, 16, 0, byte(i + 1)}), netip.AddrFrom4([4]byte{192, 0, 2, byte(i + 1)}),
			6, uint64(i+1), uint64(i+1)*100, 0)
	}
	return t
}

// burst adds n sources at pps each, to one server.
func burst(t *Traffic, n int, pps uint64) *Traffic {
	for i := range n {
		t.Add(netip.AddrFrom4([4]byte{198, 51, 100, byte(i + 1)}), server, 17, pps, pps*512, 0)
	}
	return t
}

// The first day: learning on an idle link taught a threshold of a
// few pps, and the entropy detector then banned 20 sources sending 50 pps
// each. With the detectors' defaults (only the learning windows set, as
// the shipped configuration does), the learned threshold stays at the
// floor and neither detector names such sources; a real flood from the
// same 20 sources is still named by both.
func TestIdleLinkDefaultsBanNothingSmall(t *testing.T) {
	r := &Rate{LearnIntervals: 30, Margin: 2}
	e := &Entropy{History: 30}
	for i := range 30 {
		tr := idle()
		if ds := append(r.Detect(tr), e.Detect(tr)...); len(ds) != 0 {
			t.Fatalf("interval %d: flagged while learning an idle link: %+v", i, ds)
		}
	}
	if l, ok := r.Learned(); !ok || l < 1000 {
		t.Fatalf("learned %v (%v) on an idle link, want at least a real link's floor, 1000", l, ok)
	}
	tr := burst(idle(), 20, 60)
	if ds := r.Detect(tr); len(ds) != 0 {
		t.Errorf("rate named %d sources at 60 pps: %+v", len(ds), ds[0])
	}
	if ds := e.Detect(tr); len(ds) != 0 {
		t.Errorf("entropy named %d sources at 60 pps: %+v", len(ds), ds[0])
	}

	tr = burst(idle(), 20, 3000)
	if ds := r.Detect(tr); len(ds) != 20 {
		t.Errorf("rate named %d of 20 sources at 3000 pps", len(ds))
	}
	if ds := e.Detect(tr); len(ds) != 20 {
		t.Errorf("entropy named %d of 20 sources at 3000 pps", len(ds))
	}
}
