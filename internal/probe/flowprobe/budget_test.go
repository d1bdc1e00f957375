// SPDX-License-Identifier: Apache-2.0

package flowprobe

import (
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/probe/flow"
	"github.com/tierwall/tierwall/internal/probe/flow/flowtest"
	"github.com/tierwall/tierwall/internal/tier"
	"github.com/tierwall/tierwall/internal/tier/tiertest"
)

// A flood of new flows (spoofed SYNs, one packet each) grows the probe's
// own state only to MaxFlows: past it, flows are left to the software
// tier, counted, and still get one exact final record each; the flows
// tracked before the flood keep their DPI and offload.
func TestFloodOfNewFlowsStaysWithinMaxFlows(t *testing.T) {
	r := newRig(t, 64, Config{MaxFlows: 100, Learn: tier.LearnOptions{TCPAutoUnlearn: true}})
	r.sw = flowtest.New(5000, 10)
	r.sw.Now = func() time.Time { return r.now }
	r.p = New(Config{MaxFlows: 100, Now: r.sw.Now, Learn: tier.LearnOptions{TCPAutoUnlearn: true}}, r.sw, r.nic, portClassifier{},
		func(rec Record) { r.records = append(r.records, rec) })

	c, s, web := tcpFlow(40000)
	r.send(6, c, s, 0x02, "", 1)
	r.send(6, s, c, 0x12, "", 1)
	r.send(6, c, s, 0x18, "GET / HTTP/1.1\r\n", 1)
	r.step()

	const bots = 3000
	var keys []tier.FlowKey
	for i := 0; i < bots; i++ {
		src := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), uint16(1024+i))
		k, _ := tier.NewFlowKey(6, src, s)
		keys = append(keys, k)
		r.send(6, src, s, 0x02, "", 1+i%3) // a SYN and its retransmits
		if i%500 == 0 {
			r.step()
		}
	}
	r.step()
	if n := len(r.p.flows); n > 100 {
		t.Fatalf("%d flows tracked, want at most MaxFlows=100", n)
	}
	st := r.p.Stats()
	if st.UntrackedFlows < bots-100 {
		t.Fatalf("%d flows counted as untracked, want at least %d", st.UntrackedFlows, bots-100)
	}
	if r.state(web) != flow.StateOffloaded {
		t.Errorf("the flow tracked before the flood: state %v, want offloaded", r.state(web))
	}
	r.send(6, c, s, 0x11, "", 1) // FIN
	r.send(6, s, c, 0x11, "", 1)
	for i := 0; i < 40; i++ {
		r.advance(2 * time.Second) // past the idle timeout, over 8 sweeps
	}
	// The untracked flows ended idle, found by the sweeps' walks; those
	// tracked may sit in the NIC (the fake one never ages them) until
	// the flush.
	ended := 0
	for _, rec := range r.records {
		if rec.Final && rec.Reason == EndIdle {
			ended++
		}
	}
	if ended < bots-100 {
		t.Errorf("%d flows ended idle, want the %d untracked at least", ended, bots-100)
	}
	if err := r.p.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if rec := r.final(k); rec.App != "unknown" {
			t.Fatalf("flood flow %v classified %q", k, rec.App)
		}
	}
	if rec := r.final(web); rec.App != "http" {
		t.Errorf("the tracked flow's application %q, want http", rec.App)
	}
	if len(r.p.flows) != 0 || len(r.sw.Flows) != 0 {
		t.Errorf("after every flow ended: %d tracked, %d in software", len(r.p.flows), len(r.sw.Flows))
	}
}

// TrackedFlowBytes is what one tracked flow costs the heap, within 25%.
func TestTrackedFlowBytes(t *testing.T) {
	const n = 50_000
	sw := flowtest.New(n, 1)
	nic := tiertest.NewFlowTable(1)
	p := New(Config{MaxFlows: n}, sw, nic, nil, nil)
	for i := 0; i < n; i++ {
		a := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		sw.Packet(flowtest.Pkt{Proto: 17, Src: netip.AddrPortFrom(a, 53), Dst: netip.AddrPortFrom(a, 53), Size: 64})
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := 0; i < 2*n/sampleBatch && len(p.flows) < n; i++ {
		if err := p.Step(time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if len(p.flows) != n {
		t.Fatalf("%d flows tracked, want %d", len(p.flows), n)
	}
	per := float64(after.HeapAlloc-before.HeapAlloc) / n
	t.Logf("%.0f bytes per tracked flow", per)
	if per > TrackedFlowBytes*1.25 || per < TrackedFlowBytes*0.5 {
		t.Errorf("%.0f heap bytes per tracked flow; TrackedFlowBytes says %d", per, TrackedFlowBytes)
	}
	runtime.KeepAlive(p)
}
