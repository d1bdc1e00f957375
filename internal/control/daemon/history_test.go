// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/control/detect"
)

// A spoofed flood's one-packet sources are not tracked, yet clients that
// send as little become regular an interval later, and a heavy source is
// tracked from its first interval.
func TestSpoofedSourcesNotTracked(t *testing.T) {
	const spoofed = 100_000
	s := newSourceHistory()
	r := rand.New(rand.NewPCG(36, 10))
	slow := make([]netip.Addr, 10) // clients of a packet an interval
	for i := range slow {
		slow[i] = netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)})
	}
	heavy := netip.MustParseAddr("192.0.2.9")
	victim := netip.MustParseAddr("198.51.100.7")
	start := time.Unix(1_700_000_000, 0)
	for iv := range establishedAfter + 1 {
		tr := detect.NewTraffic(time.Second)
		for range spoofed {
			src := netip.AddrFrom4([4]byte{byte(11 + r.IntN(200)), byte(r.Uint32()), byte(r.Uint32()), byte(r.Uint32())})
			tr.Add(src, victim, 17, 1, 60, 0)
		}
		for _, c := range slow {
			tr.Add(c, victim, 6, 1, 60, 0)
		}
		tr.Add(heavy, victim, 17, 5000, 300000, 0)
		s.track(start.Add(time.Duration(iv)*time.Second), tr)
		if s.get(heavy) == nil {
			t.Fatalf("interval %d: the heavy source is not tracked", iv)
		}
		tracked := 0
		for _, c := range slow {
			if s.get(c) != nil {
				tracked++
			}
		}
		if want := map[bool]int{true: 0, false: len(slow)}[iv == 0]; tracked != want {
			t.Fatalf("interval %d: %d slow clients tracked, want %d", iv, tracked, want)
		}
		// Spoofed sources admitted by a bit another set: a few percent.
		if extra := len(s.hist) - 1 - tracked; extra > spoofed/20 {
			t.Fatalf("interval %d: %d spoofed sources tracked of %d", iv, extra, spoofed)
		}
	}
	share, n := s.establishedShare()
	// The slow clients and the heavy source, which no detector named.
	if n != len(slow)+1 || share(netip.PrefixFrom(slow[0], 32)) != 1/float64(n) {
		t.Fatalf("%d established, want the %d slow clients and the heavy source", n, len(slow))
	}
}
