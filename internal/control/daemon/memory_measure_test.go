// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"net/netip"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/control/ban"
	"github.com/tierwall/tierwall/internal/control/detect"
	"github.com/tierwall/tierwall/internal/datapath"
)

func heapNow() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// banHeapBytes and trafficKeyBytes, the budget's per-ban and per-key
// costs, are what the heap measures, give or take.
func TestMemoryBudgetPerItemCosts(t *testing.T) {
	const n = 100_000
	before := heapNow()
	s := ban.NewStore(ban.Rails{}, time.Hour)
	now := time.Now()
	for i := 0; i < n; i++ {
		a := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		if _, err := s.Add(now, netip.PrefixFrom(a, 32), "rate 5000 pps > 1000", time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	perBan := float64(heapNow()-before) / n
	runtime.KeepAlive(s)

	before = heapNow()
	flows := make([]datapath.Flow, n)
	tr := detect.NewTrafficSized(time.Second, n)
	dst := netip.MustParseAddr("192.0.2.1")
	for i := range flows {
		a := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		flows[i] = datapath.Flow{Src: a, Dst: dst, Proto: 17, Packets: 10, Bytes: 1000}
		tr.Add(a, dst, 17, 10, 1000, 0)
	}
	perKey := float64(heapNow()-before) / n
	runtime.KeepAlive(flows)
	runtime.KeepAlive(tr)
	t.Logf("%.0f B per ban (banHeapBytes %d), %.0f B per interval key (trafficKeyBytes %d)", perBan, banHeapBytes, perKey, trafficKeyBytes)
	if perBan > banHeapBytes || perKey > trafficKeyBytes {
		t.Errorf("the budget's per-item costs are under what the heap measures")
	}
}

// Reading the state file at start must fit in what the budget holds for
// the bans: a restart with 500K bans filled the unit's 1536 MiB cgroup
// to its limit while the whole file, the decoded slice of bans, a map of
// them and the store were all live at once (~2.3 KB a ban). With the
// collector off, what Load allocates is an upper bound on what it can
// add to the heap at its peak; so is what the first Save after it (a
// whole snapshot) allocates beyond a small constant.
func TestStateLoadWithinBanBudget(t *testing.T) {
	const n = 100_000
	path := t.TempDir() + "/state.json"
	s := ban.NewStore(ban.Rails{}, time.Hour)
	now := time.Now()
	for i := 0; i < n; i++ {
		a := netip.AddrFrom4([4]byte{100, 64 + byte(i>>16), byte(i >> 8), byte(i)})
		b := ban.Ban{Prefix: netip.PrefixFrom(a, 32), Detector: "rate", Reason: "5000 pps > 1000", FirstSeen: now, LastSeen: now,
			Rate: 5000, PeakRate: 5000, Expires: now.Add(time.Hour)}
		s.Put(b)
	}
	if err := s.Save(path, now); err != nil {
		t.Fatal(err)
	}
	s = nil
	allocated := func(f func()) float64 {
		runtime.GC()
		defer debug.SetGCPercent(debug.SetGCPercent(-1))
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		f()
		runtime.ReadMemStats(&m1)
		return float64(m1.TotalAlloc-m0.TotalAlloc) / n
	}
	r := ban.NewStore(ban.Rails{}, time.Hour)
	load := allocated(func() {
		if _, err := r.Load(path, now); err != nil {
			t.Fatal(err)
		}
	})
	if r.Len() != n {
		t.Fatalf("loaded %d bans, want %d", r.Len(), n)
	}
	save := allocated(func() {
		if err := r.Save(path+".2", now); err != nil {
			t.Fatal(err)
		}
	})
	runtime.KeepAlive(r)
	t.Logf("loading %d bans allocated %.0f B per ban, a whole snapshot of them %.0f B per ban (banHeapBytes %d)", n, load, save, banHeapBytes)
	if load > banHeapBytes {
		t.Errorf("loading the state file allocates %.0f B per ban, more than the budget's %d", load, banHeapBytes)
	}
	// The snapshot's own garbage is short-lived, but it must not hold
	// the state twice over (a copy of the bans and the whole encoding).
	if save > banHeapBytes/4 {
		t.Errorf("writing a snapshot allocates %.0f B per ban, more than a quarter of the budget's %d", save, banHeapBytes)
	}
}
