// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/ban"
	"github.com/tierwall/tierwall/internal/datapath"
	"github.com/tierwall/tierwall/internal/detect"
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
