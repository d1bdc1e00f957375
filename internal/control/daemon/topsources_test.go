// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/control/alert"
	"github.com/tierwall/tierwall/internal/control/detect"
)

// topSourcesRef is the plain ranking topSources must equal: every source's
// packets to the victim summed over its protocols, all of them sorted.
func topSourcesRef(tr *detect.Traffic, victim netip.Addr, n int) []alert.Source {
	sums := map[netip.Addr]uint64{}
	for _, p := range tr.Pairs {
		if tr.DestAddr(int(p.Dst)) == victim {
			sums[tr.SourceAddr(int(p.Src))] += p.Packets
		}
	}
	var out []alert.Source
	for a, c := range sums {
		out = append(out, alert.Source{Addr: a, PPS: tr.Rate(c)})
	}
	slices.SortFunc(out, func(x, y alert.Source) int {
		if x.PPS != y.PPS {
			if x.PPS > y.PPS {
				return -1
			}
			return 1
		}
		return x.Addr.Compare(y.Addr)
	})
	return out[:min(n, len(out))]
}

func TestTopSourcesMatchesFullRanking(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	victims := []netip.Addr{netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("198.51.100.2"), netip.MustParseAddr("2001:db8::80")}
	other := netip.MustParseAddr("198.51.100.99")
	tr := detect.NewTraffic(time.Second)
	for i := 0; i < 5000; i++ {
		src := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		// Few distinct counts, so ties are common and the address
		// decides; some sources use two protocols, whose packets
		// only rank them when summed.
		dst := victims[rng.IntN(len(victims))]
		tr.Add(src, dst, 17, uint64(1+rng.IntN(8)), 64, 0)
		if i%7 == 0 {
			tr.Add(src, dst, 6, uint64(1+rng.IntN(8)), 64, 0)
		}
		if i%11 == 0 {
			tr.Add(src, other, 17, 1000, 64, 0)
		}
	}
	want := map[netip.Addr]bool{victims[0]: true, victims[1]: true, victims[2]: true}
	for _, n := range []int{1, 10, 100000} {
		got := new(topScratch).topSources(tr, want, n)
		for _, v := range victims {
			ref := topSourcesRef(tr, v, n)
			if !slices.Equal(got[v], ref) {
				t.Fatalf("n=%d victim %v: got %d sources %v..., want %d %v...", n, v, len(got[v]), got[v][:min(3, len(got[v]))], len(ref), ref[:min(3, len(ref))])
			}
		}
		if _, ok := got[other]; ok {
			t.Fatalf("n=%d: a destination that is no victim got a list", n)
		}
	}
}

// An attack on more victims than maxTopVictims lists the top sources of
// maxTopVictims of them, and each list is still right.
func TestTopSourcesVictimsBounded(t *testing.T) {
	tr := detect.NewTraffic(time.Second)
	want := map[netip.Addr]bool{}
	for v := 0; v < 2*maxTopVictims; v++ {
		dst := netip.AddrFrom4([4]byte{198, 51, 100, byte(v)})
		want[dst] = true
		for s := 0; s < 20; s++ {
			tr.Add(netip.AddrFrom4([4]byte{10, 0, byte(v), byte(s)}), dst, 17, uint64(s+1), 64, 0)
		}
	}
	var top topScratch
	got := top.topSources(tr, want, 3)
	// The scratch is left all zero for the next interval.
	for i, c := range top.sum {
		if c != 0 {
			t.Fatalf("scratch sum[%d] = %d after the call", i, c)
		}
	}
	if len(got) != maxTopVictims {
		t.Fatalf("%d victims listed, want %d", len(got), maxTopVictims)
	}
	for v, l := range got {
		if ref := topSourcesRef(tr, v, 3); !slices.Equal(l, ref) {
			t.Fatalf("victim %v: got %v, want %v", v, l, ref)
		}
	}
}
