// SPDX-License-Identifier: Apache-2.0

package flowprobe

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/probe/dpi"
	"github.com/tierwall/tierwall/internal/probe/flow"
	"github.com/tierwall/tierwall/internal/probe/flow/flowtest"
	"github.com/tierwall/tierwall/internal/tier"
	"github.com/tierwall/tierwall/internal/tier/tiertest"
)

// portClassifier names a flow by its server port once it has seen a
// payload, like DPI that needs the first data packet.
type portClassifier struct{}

type portFlow struct {
	k    tier.FlowKey
	seen int
}

func (portClassifier) NewFlow(k tier.FlowKey, _ uint8) dpi.Flow { return &portFlow{k: k} }
func (portClassifier) Name() string                             { return "port" }
func (portClassifier) Close() error                             { return nil }

func (f *portFlow) Add(s *flow.Sample) dpi.Verdict {
	f.seen++
	p := s.Payload()
	switch {
	case bytes.HasPrefix(p, []byte("GET ")):
		return dpi.Verdict{Done: true, App: "http", Host: "example.org"}
	case f.k.Hi.Port() == 53 || f.k.Lo.Port() == 53:
		return dpi.Verdict{Done: true, App: "dns"}
	}
	return dpi.Verdict{}
}

func (f *portFlow) Giveup() dpi.Verdict { return dpi.Verdict{App: "unknown"} }
func (f *portFlow) Close()              {}

// rig is a wire through a fake NIC flow table into a fake software tier,
// with a clock the test moves.
type rig struct {
	t       *testing.T
	now     time.Time
	nic     *tiertest.FlowTable
	sw      *flowtest.Tier
	p       *Probe
	records []Record
	sent    map[tier.FlowKey]*[2]uint64
}

func newRig(t *testing.T, nicCap int, cfg Config) *rig {
	r := &rig{t: t, now: time.Unix(1_000_000, 0), sent: map[tier.FlowKey]*[2]uint64{}}
	clock := func() time.Time { return r.now }
	if nicCap > 0 {
		r.nic = tiertest.NewFlowTable(nicCap)
		r.nic.Now = clock
	}
	r.sw = flowtest.New(1000, 10)
	r.sw.Now = clock
	cfg.Now = clock
	var hw tier.FlowTable
	if r.nic != nil {
		hw = r.nic
	}
	r.p = New(cfg, r.sw, hw, portClassifier{}, func(rec Record) { r.records = append(r.records, rec) })
	return r
}

var (
	client = netip.MustParseAddr("192.0.2.10")
	server = netip.MustParseAddr("198.51.100.1")
)

// send puts n packets of size bytes from src to dst on the wire: the NIC
// counts and consumes those of learned flows, the host gets the rest
// marked miss.
func (r *rig) send(proto uint8, src, dst netip.AddrPort, flags uint8, payload string, n int) {
	k, dir := tier.NewFlowKey(proto, src, dst)
	if r.sent[k] == nil {
		r.sent[k] = &[2]uint64{}
	}
	for i := 0; i < n; i++ {
		r.sent[k][dir]++
		if r.nic != nil && r.nic.Hit(k, dir, 1, 100) {
			continue
		}
		r.sw.Packet(flowtest.Pkt{Proto: proto, Src: src, Dst: dst, Flags: flags, Size: 100,
			Payload: []byte(payload), Mark: flow.MarkMiss})
	}
}

// step runs the probe once, lets the NIC's firmware apply what was
// queued, and runs the probe again to read the outcome.
// state is the probe's state of flow k: its own where it tracks k (the
// software entry is not told of every move past DPI), else the entry's.
func (r *rig) state(k tier.FlowKey) flow.State {
	if t := r.p.flows[k]; t != nil {
		return t.state
	}
	return r.sw.Flows[k].State
}

func (r *rig) step() {
	r.t.Helper()
	if err := r.p.Step(r.now); err != nil {
		r.t.Fatal(err)
	}
	if r.nic != nil {
		r.nic.Step()
	}
	if err := r.p.Step(r.now); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rig) advance(d time.Duration) {
	r.now = r.now.Add(d)
	r.step()
}

// final returns the one final record of k and checks that the records of
// k together count exactly what was sent.
func (r *rig) final(k tier.FlowKey) Record {
	r.t.Helper()
	var got [2]uint64
	var fin []Record
	for _, rec := range r.records {
		if rec.Key != k {
			continue
		}
		got[0] += rec.Packets[0]
		got[1] += rec.Packets[1]
		if rec.Final {
			fin = append(fin, rec)
		}
	}
	if len(fin) != 1 {
		r.t.Fatalf("%v: %d final records, want 1: %+v", k, len(fin), r.records)
	}
	if want := *r.sent[k]; got != want {
		r.t.Fatalf("%v: records count %v packets, sent %v", k, got, want)
	}
	return fin[0]
}

func tcpFlow(cport uint16) (c, s netip.AddrPort, k tier.FlowKey) {
	c, s = netip.AddrPortFrom(client, cport), netip.AddrPortFrom(server, 80)
	k, _ = tier.NewFlowKey(6, c, s)
	return
}

func TestOffloadedFlowCountedOnceAcrossTiers(t *testing.T) {
	r := newRig(t, 16, Config{Learn: tier.LearnOptions{TCPAutoUnlearn: true}})
	c, s, k := tcpFlow(40000)
	r.send(6, c, s, 0x02, "", 1) // SYN
	r.send(6, s, c, 0x12, "", 1) // SYN-ACK
	r.send(6, c, s, 0x10, "", 1) // ACK
	r.send(6, c, s, 0x18, "GET / HTTP/1.1\r\n", 1)
	r.step()
	if st := r.state(k); st != flow.StateOffloaded {
		t.Fatalf("state after DPI and learn: %v, want offloaded", st)
	}
	if r.nic.Flows[1].Learn.Action != tier.FlowDiscard {
		t.Fatalf("passive offload action %v, want discard (consumed by the NIC)", r.nic.Flows[1].Learn.Action)
	}
	r.send(6, s, c, 0x10, "", 50)
	r.send(6, c, s, 0x10, "", 70)
	r.nic.Expire(k, tier.CauseTCPTerm)
	r.send(6, c, s, 0x10, "", 1) // the last ACK after the NIC let go: a miss
	r.step()
	if len(r.records) != 0 {
		t.Fatalf("record before the end grace: %+v", r.records)
	}
	r.advance(2 * time.Second)
	rec := r.final(k)
	if rec.Reason != EndOfFlow || rec.App != "http" || rec.Host != "example.org" {
		t.Fatalf("record %+v: want end of flow, http, example.org", rec)
	}
	if rec.HWPackets[0]+rec.HWPackets[1] != 120 || rec.Tier() != "both" {
		t.Fatalf("hardware packets %v tier %s, want 120 both", rec.HWPackets, rec.Tier())
	}
	if _, ok := r.sw.Flows[k]; ok {
		t.Fatal("software entry left after the final record")
	}
	st := r.p.Stats()
	if st.LearnDone != 1 || st.Unlearned[tier.CauseTCPTerm] != 1 || st.LearnLatencyN != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestTableFullKeepsFlowsInSoftwareWithNothingLost(t *testing.T) {
	r := newRig(t, 1, Config{})
	c1, s1, k1 := tcpFlow(40001)
	c2, s2, k2 := tcpFlow(40002)
	r.send(6, c1, s1, 0x18, "GET /a", 1)
	r.send(6, c2, s2, 0x18, "GET /b", 1)
	r.step()
	if r.state(k1) != flow.StateOffloaded || r.state(k2) != flow.StateSoftware {
		t.Fatalf("states %v %v, want offloaded, software", r.state(k1), r.state(k2))
	}
	r.send(6, c2, s2, 0x10, "", 30)
	r.send(6, s2, c2, 0x10, "", 20)
	r.advance(31 * time.Second)
	rec := r.final(k2)
	if rec.Reason != EndIdle || rec.Tier() != "software" || rec.App != "http" {
		t.Fatalf("record %+v", rec)
	}
	if st := r.p.Stats(); st.LearnFailed != 1 || st.LearnTableFull != 1 {
		t.Fatalf("stats: failed %d table full %d, want 1 1", st.LearnFailed, st.LearnTableFull)
	}
}

func TestPolicyKeepsAndDiscards(t *testing.T) {
	r := newRig(t, 16, Config{Inline: true, Policy: func(v dpi.Verdict) dpi.Decision {
		return map[string]dpi.Decision{"dns": dpi.Software, "http": dpi.Discard}[v.App]
	}})
	dc, ds := netip.AddrPortFrom(client, 5353), netip.AddrPortFrom(server, 53)
	r.send(17, dc, ds, 0, "q", 1)
	_, _, hk := tcpFlow(40003)
	hc, hs, _ := tcpFlow(40003)
	r.send(6, hc, hs, 0x18, "GET /", 1)
	r.step()
	dk, _ := tier.NewFlowKey(17, dc, ds)
	if e := r.sw.Flows[dk]; e.State != flow.StateSoftware || e.Action != flow.Forward {
		t.Fatalf("dns: %v %v, want software forward", e.State, e.Action)
	}
	if r.nic.Occupancy() != 1 || r.nic.Flows[1].Learn.Key != hk || r.nic.Flows[1].Learn.Action != tier.FlowDiscard {
		t.Fatalf("nic holds %+v, want the http flow discarded", r.nic.Flows)
	}
}

func TestInlineOffloadForwards(t *testing.T) {
	r := newRig(t, 16, Config{Inline: true})
	c, s, _ := tcpFlow(40004)
	r.send(6, c, s, 0x18, "GET /", 1)
	r.step()
	if a := r.nic.Flows[1].Learn.Action; a != tier.FlowForward {
		t.Fatalf("inline offload action %v, want forward", a)
	}
}

func TestLifetimeReportsActiveThenGoesOnInSoftware(t *testing.T) {
	r := newRig(t, 16, Config{})
	c, s, k := tcpFlow(40005)
	r.send(6, c, s, 0x18, "GET /", 1)
	r.step()
	r.send(6, c, s, 0x10, "", 10)
	r.nic.Expire(k, tier.CauseLifetime)
	r.step()
	if len(r.records) != 1 || r.records[0].Reason != EndActive || r.records[0].Final {
		t.Fatalf("records %+v, want one active timeout", r.records)
	}
	if r.state(k) != flow.StateSoftware {
		t.Fatalf("state %v, want software", r.state(k))
	}
	r.send(6, c, s, 0x10, "", 5)
	r.advance(31 * time.Second)
	if rec := r.final(k); rec.Reason != EndIdle {
		t.Fatalf("final %+v", rec)
	}
}

func TestDPIGivesUpOnShortFlows(t *testing.T) {
	r := newRig(t, 16, Config{})
	c, s := netip.AddrPortFrom(client, 999), netip.AddrPortFrom(server, 7777)
	r.send(17, c, s, 0, "xyz", 2)
	r.step()
	k, _ := tier.NewFlowKey(17, c, s)
	if st := r.state(k); st != flow.StateDPI {
		t.Fatalf("state %v before the DPI timeout, want dpi", st)
	}
	r.advance(3 * time.Second)
	if st := r.state(k); st != flow.StateOffloaded {
		t.Fatalf("state %v after giving up, want offloaded", st)
	}
	if st := r.p.Stats(); st.DPIGiveups != 1 || st.Classified["unknown"] != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestDPIStateBounded(t *testing.T) {
	r := newRig(t, 0, Config{MaxDPI: 2})
	for i := 0; i < 5; i++ {
		r.send(17, netip.AddrPortFrom(client, uint16(1000+i)), netip.AddrPortFrom(server, 9), 0, "x", 1)
	}
	r.step()
	if st := r.p.Stats(); st.InDPI != 2 || st.DPISkipped != 3 {
		t.Fatalf("in DPI %d skipped %d, want 2 3", st.InDPI, st.DPISkipped)
	}
}

func TestLearnQueueFullStaysInSoftware(t *testing.T) {
	r := newRig(t, 16, Config{})
	r.nic.QueueCap = 1
	c1, s1, k1 := tcpFlow(40006)
	c2, s2, k2 := tcpFlow(40007)
	r.send(6, c1, s1, 0x18, "GET /", 1)
	r.send(6, c2, s2, 0x18, "GET /", 1)
	r.step()
	if r.state(k1) != flow.StateOffloaded || r.state(k2) != flow.StateSoftware {
		t.Fatalf("states %v %v", r.state(k1), r.state(k2))
	}
	if st := r.p.Stats(); st.LearnQueueFull != 1 {
		t.Fatalf("queue full %d, want 1", st.LearnQueueFull)
	}
}

func TestFlushEndsEveryFlow(t *testing.T) {
	r := newRig(t, 16, Config{})
	c1, s1, k1 := tcpFlow(40008)
	r.send(6, c1, s1, 0x18, "GET /", 1)
	r.step()
	r.send(6, c1, s1, 0x10, "", 9)
	dc, ds := netip.AddrPortFrom(client, 5353), netip.AddrPortFrom(server, 53)
	dk, _ := tier.NewFlowKey(17, dc, ds)
	r.send(17, dc, ds, 0, "q", 3)
	r.step()
	if err := r.p.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, k := range []tier.FlowKey{k1, dk} {
		if rec := r.final(k); rec.Reason != EndForced {
			t.Fatalf("%v: reason %v, want forced", k, rec.Reason)
		}
	}
	if r.nic.Occupancy() != 0 || len(r.sw.Flows) != 0 {
		t.Fatalf("left: nic %d software %d", r.nic.Occupancy(), len(r.sw.Flows))
	}
}

func TestSoftwareTCPEndDetected(t *testing.T) {
	r := newRig(t, 0, Config{})
	c, s, k := tcpFlow(40009)
	r.send(6, c, s, 0x18, "GET /", 3)
	r.send(6, c, s, 0x11, "", 1)
	r.send(6, s, c, 0x11, "", 1)
	r.send(6, c, s, 0x10, "", 1)
	r.advance(2 * time.Second)
	if rec := r.final(k); rec.Reason != EndOfFlow || rec.Tier() != "software" {
		t.Fatalf("record %+v", rec)
	}
}

func TestStaleLearnUnlearnedAgain(t *testing.T) {
	r := newRig(t, 16, Config{})
	c, s, k := tcpFlow(40010)
	r.send(6, c, s, 0x18, "GET /", 1)
	if err := r.p.Step(r.now); err != nil { // learn queued
		t.Fatal(err)
	}
	// The flow ends in software before the firmware gets to it.
	if _, err := r.sw.Delete(k); err != nil {
		t.Fatal(err)
	}
	delete(r.p.flows, k)
	r.step()
	r.step()
	if r.nic.Occupancy() != 0 || r.p.Stats().LearnStale != 1 {
		t.Fatalf("occupancy %d stale %d, want 0 1", r.nic.Occupancy(), r.p.Stats().LearnStale)
	}
}

func TestRecentRecordsPaged(t *testing.T) {
	r := newRig(t, 0, Config{})
	for i := 0; i < 5; i++ {
		c, s, _ := tcpFlow(uint16(41000 + i))
		r.send(6, c, s, 0x18, "GET /", 1)
	}
	r.step()
	if err := r.p.Flush(); err != nil {
		t.Fatal(err)
	}
	got, next := r.p.Records(0, 3)
	if len(got) != 3 || next != 3 {
		t.Fatalf("first page: %d records, next %d", len(got), next)
	}
	got, next = r.p.Records(next, 100)
	if len(got) != 2 || next != 5 {
		t.Fatalf("second page: %d records, next %d", len(got), next)
	}
	if got, _ := r.p.Records(next, 100); len(got) != 0 {
		t.Fatalf("records past the end: %d", len(got))
	}
}

// The FIN passes in software while the NIC is still learning the flow;
// the NIC never sees it and ages the flow out as idle. The record says the
// flow ended: one tier saw it end.
func TestFINBeforeLearnEndsTheFlow(t *testing.T) {
	r := newRig(t, 16, Config{Learn: tier.LearnOptions{TCPAutoUnlearn: true}})
	c, s, k := tcpFlow(40011)
	r.send(6, c, s, 0x18, "GET / HTTP/1.1\r\n", 1)
	if err := r.p.Step(r.now); err != nil { // DPI done, learn queued
		t.Fatal(err)
	}
	r.send(6, c, s, 0x11, "", 1) // FINs before the firmware learns
	r.send(6, s, c, 0x11, "", 1)
	r.step()
	if st := r.state(k); st != flow.StateOffloaded {
		t.Fatalf("state %v, want offloaded", st)
	}
	r.nic.Expire(k, tier.CauseIdle)
	r.advance(2 * time.Second)
	r.advance(2 * time.Second)
	if rec := r.final(k); rec.Reason != EndOfFlow {
		t.Fatalf("record %+v: want end of flow (FIN seen both ways in software)", rec)
	}
}

// Samples read after their flow ended (the ring lags a busy probe) must
// neither take a place in the NIC nor stay in the probe's maps.
func TestLateSamplesLeaveNothing(t *testing.T) {
	r := newRig(t, 16, Config{})
	c, s, k := tcpFlow(40012)
	r.send(6, c, s, 0x18, "GET / HTTP/1.1\r\n", 1) // DPI decides on it
	c2, s2, k2 := tcpFlow(40013)
	r.send(6, c2, s2, 0x10, "", 1) // DPI would wait for more
	for _, key := range []tier.FlowKey{k, k2} {
		if _, err := r.sw.Delete(key); err != nil { // ended before the probe read its samples
			t.Fatal(err)
		}
	}
	r.step()
	if r.nic.Occupancy() != 0 || len(r.nic.Flows) != 0 {
		t.Fatalf("NIC holds %d flows, want none: the flow had ended", r.nic.Occupancy())
	}
	for i := 0; i < 20; i++ {
		r.advance(5 * time.Second) // sweeps (the orphan scan runs every 8th)
	}
	if len(r.p.flows) != 0 || len(r.p.dpi) != 0 {
		t.Fatalf("probe keeps %d flows, %d in DPI, want none", len(r.p.flows), len(r.p.dpi))
	}
	if st := r.p.Stats(); st.Orphans != 2 {
		t.Fatalf("orphans %d, want 2", st.Orphans)
	}
	for _, rec := range r.records {
		if rec.Packets[0]+rec.Packets[1] == 0 {
			t.Fatalf("an empty record: %+v", rec)
		}
	}
}

// With most flows in the NIC, sweeps look up the few that software holds
// instead of walking the table, and still end them on time; every 8th
// sweep walks the whole table.
func TestSweepLooksUpSoftwareFlowsAmongOffloaded(t *testing.T) {
	r := newRig(t, 10, Config{SweepEvery: time.Second})
	var keys []tier.FlowKey
	for i := 0; i < 11; i++ {
		c, s, k := tcpFlow(uint16(41000 + i))
		r.send(6, c, s, 0x18, "GET /", 1)
		keys = append(keys, k)
	}
	r.step()
	sw := keys[10]
	if r.state(sw) != flow.StateSoftware || r.state(keys[0]) != flow.StateOffloaded {
		t.Fatalf("states %v %v, want software (table full), offloaded", r.state(sw), r.state(keys[0]))
	}
	walks, lookups := r.sw.Walks, r.sw.Lookups
	c, s, _ := tcpFlow(41010)
	r.send(6, c, s, 0x10, "", 5)
	r.advance(31 * time.Second) // the idle timeout is 30 s
	if r.sw.Walks != walks || r.sw.Lookups == lookups {
		t.Fatalf("walks %d→%d lookups %d→%d: want lookups only", walks, r.sw.Walks, lookups, r.sw.Lookups)
	}
	if rec := r.final(sw); rec.Reason != EndIdle || rec.Tier() != "software" {
		t.Fatalf("record %+v: want idle end in software", rec)
	}
	for i := 0; i < 8; i++ {
		r.advance(time.Second)
	}
	if r.sw.Walks == walks {
		t.Fatal("eight sweeps and no walk of the whole table")
	}
}

// unbatched hides the tier's Apply: the probe then runs each operation
// with its own call.
type unbatched struct{ flow.SoftwareTier }

// A software tier without batches (no flow.Batcher) gets the same
// operations one call each, with the same outcomes: a decided flow is
// learned, one whose entry is gone takes its learn back, and every flow
// ends with its record.
func TestOpsWithoutBatches(t *testing.T) {
	r := newRig(t, 16, Config{})
	r.p.sw = unbatched{r.sw}
	c1, s1, k1 := tcpFlow(40020)
	r.send(6, c1, s1, 0x18, "GET / HTTP/1.1\r\n", 1)
	c2, s2, k2 := tcpFlow(40021)
	r.send(6, c2, s2, 0x18, "GET / HTTP/1.1\r\n", 1)
	if _, err := r.sw.Delete(k2); err != nil { // gone before its samples are read
		t.Fatal(err)
	}
	r.step()
	r.step()
	if r.nic.Occupancy() != 1 {
		t.Fatalf("NIC holds %d flows, want the one whose entry is there", r.nic.Occupancy())
	}
	if st := r.p.Stats(); st.StateErrors != 1 || st.Orphans != 1 {
		t.Fatalf("stats %+v: want one failed state change, one orphan", st)
	}
	if err := r.p.Flush(); err != nil {
		t.Fatal(err)
	}
	if rec := r.final(k1); rec.Reason != EndForced || rec.Packets[0] != 1 {
		t.Fatalf("%v: %+v", k1, rec)
	}
	if r.sw.Batches != 0 || len(r.sw.Flows) != 0 || r.nic.Occupancy() != 0 {
		t.Fatalf("%d batches, software %d flows, NIC %d", r.sw.Batches, len(r.sw.Flows), r.nic.Occupancy())
	}
}
