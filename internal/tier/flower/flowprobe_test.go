// SPDX-License-Identifier: Apache-2.0

package flower

import (
	"net/netip"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/probe/flow"
	"github.com/tierwall/tierwall/internal/probe/flow/flowtest"
	"github.com/tierwall/tierwall/internal/probe/flowprobe"
	"github.com/tierwall/tierwall/internal/tier"
)

// hit is the NIC on the wire: a packet that matches a learned flow's
// filter is counted there (and, the action being drop, consumed).
func (k *flowKernel) hit(m tier.Match, size uint64) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	for fk, f := range k.filters {
		if p, ok, _ := parseFilter(f.body, FlowPriority4, FlowPriority6); ok && p.rule.Match == m {
			if fk.prio != FlowPriority4 && fk.prio != FlowPriority6 {
				continue
			}
			f.pkts++
			f.bytes += size
			return true
		}
	}
	return false
}

// TestProbeOverFlowerCountsOnce runs the flow probe engine, passive, over
// the flower flow table: an offloaded flow's packets are counted by its two
// filters, those before the learn by software (unmarked: on this path what
// reaches the host missed), and the flow ends idle by the polled counters
// with every packet in its records once.
func TestProbeOverFlowerCountsOnce(t *testing.T) {
	k := newFlowKernel(t)
	ft, clk := manualTable(t, k, FlowOptions{Poll: time.Second, IdleTimeout: 5 * time.Second})
	sw := flowtest.New(100, 1)
	sw.Now = clk.now
	var recs []flowprobe.Record
	p := flowprobe.New(flowprobe.Config{Now: clk.now, Learn: tier.LearnOptions{TCPAutoUnlearn: true}},
		sw, ft, nil, func(r flowprobe.Record) { recs = append(recs, r) })
	step := func() {
		t.Helper()
		if err := p.Step(clk.now()); err != nil {
			t.Fatal(err)
		}
		ft.step()
		if err := p.Step(clk.now()); err != nil {
			t.Fatal(err)
		}
	}
	c, s := netip.MustParseAddrPort("192.0.2.10:40000"), netip.MustParseAddrPort("198.51.100.1:443")
	key, _ := tier.NewFlowKey(6, c, s)
	var sent [2]uint64
	send := func(src, dst netip.AddrPort, n int) {
		_, dir := tier.NewFlowKey(6, src, dst)
		for range n {
			sent[dir]++
			if k.hit(tier.Match{Src: src.Addr(), Dst: dst.Addr(), Proto: 6, SrcPort: src.Port(), DstPort: dst.Port()}, 100) {
				continue
			}
			sw.Packet(flowtest.Pkt{Proto: 6, Src: src, Dst: dst, Size: 100, Mark: flow.MarkNone})
		}
	}
	send(c, s, 2)
	send(s, c, 1)
	step()
	// The engine keeps "offloaded" to itself; the software entry stays
	// past DPI (learning), which is all the data plane needs.
	if st := sw.Flows[key].State; st != flow.StateLearning {
		t.Fatalf("software state %v, want learning (past DPI)", st)
	}
	send(c, s, 50)
	send(s, c, 30)
	for i := 0; i < 10 && (len(recs) == 0 || !recs[len(recs)-1].Final); i++ {
		clk.add(time.Second)
		step()
	}
	var got, hw [2]uint64
	finals := 0
	for _, r := range recs {
		for d := range 2 {
			got[d] += r.Packets[d]
			hw[d] += r.HWPackets[d]
		}
		if r.Final {
			finals++
			if r.Reason != flowprobe.EndIdle {
				t.Errorf("final record %+v, want ended idle", r)
			}
		}
	}
	if finals != 1 || got != sent || hw != [2]uint64{50, 30} {
		t.Fatalf("records %+v: %d final, packets %v (sent %v), hardware %v", recs, finals, got, sent, hw)
	}
	if st := p.Stats(); st.LearnDone != 1 || st.Unlearned[tier.CauseIdle] != 1 || ft.Occupancy() != 0 || len(k.ours()) != 0 {
		t.Fatalf("stats %+v, occupancy %d", st, ft.Occupancy())
	}
}
