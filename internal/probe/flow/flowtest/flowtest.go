// SPDX-License-Identifier: Apache-2.0

// Package flowtest is the software flow tier in memory, for tests of the
// probe engine without root: Packet does what bpf/probe/xdp_probe.c does with a
// packet (count once, send the first samples to DPI, refuse when full).
package flowtest

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/tierwall/tierwall/internal/probe/flow"
	"github.com/tierwall/tierwall/internal/tier"
)

// Tier is a fake flow.SoftwareTier.
type Tier struct {
	Cap        int
	DPIPackets int
	RingCap    int // samples the ring holds; 0: unbounded
	Now        func() time.Time

	Flows   map[tier.FlowKey]*flow.Entry
	ring    []flow.Sample
	stats   flow.TierStats
	Deleted int
	Walks   int // calls of Walk
	Lookups int // calls of Lookup
	Batches int // calls of Apply
}

var _ flow.SoftwareTier = (*Tier)(nil)

// New returns a tier of capacity k that samples n packets of each flow.
func New(k, n int) *Tier {
	return &Tier{Cap: k, DPIPackets: n, Now: time.Now, Flows: map[tier.FlowKey]*flow.Entry{}}
}

// Pkt is one packet on the wire.
type Pkt struct {
	Proto    uint8
	Src, Dst netip.AddrPort
	Flags    uint8 // TCP flags
	Size     int   // bytes from the IP header on
	Payload  []byte
	Mark     flow.Mark
}

// Packet handles p as the XDP program would and reports whether it was
// tracked. A passive probe's hit is counted by mark only: the NIC counted
// it already.
func (t *Tier) Packet(p Pkt) bool {
	t.stats.Packets[p.Mark]++
	k, dir := tier.NewFlowKey(p.Proto, p.Src, p.Dst)
	e := t.Flows[k]
	now := t.Now()
	if e == nil {
		if len(t.Flows) >= t.Cap {
			t.stats.Refused++
			t.stats.Untracked++
			return false
		}
		e = &flow.Entry{First: now, State: flow.StateDPI, InitDir: uint8(dir)}
		t.Flows[k] = e
	}
	e.Marks[p.Mark]++
	if p.Mark == flow.MarkHit {
		return true
	}
	e.Packets[dir]++
	e.Bytes[dir] += uint64(p.Size)
	e.TCPFlags[dir] |= p.Flags
	e.Last = now
	if int(e.DPISent) < t.DPIPackets && (e.State == flow.StateNew || e.State == flow.StateDPI) {
		if t.RingCap > 0 && len(t.ring) >= t.RingCap {
			e.DPILost++
			t.stats.DPILost++
			return true
		}
		data := append(make([]byte, 40), p.Payload...)
		t.ring = append(t.ring, flow.Sample{Key: k, Dir: uint8(dir), Seq: uint8(e.DPISent), Time: now,
			Mark: p.Mark, TCPFlags: p.Flags, L3Len: p.Size, L4Off: 20, PayOff: 40, Data: data})
		e.DPISent++
	}
	return true
}

func (t *Tier) ReadSamples(_ time.Time, max int, fn func(*flow.Sample)) (int, error) {
	n := 0
	for n < max && len(t.ring) > 0 {
		s := t.ring[0]
		t.ring = t.ring[1:]
		fn(&s)
		n++
	}
	return n, nil
}

func (t *Tier) SetState(k tier.FlowKey, s flow.State, a flow.Action) error {
	e := t.Flows[k]
	if e == nil {
		return fmt.Errorf("setting state of %v: no such flow", k)
	}
	e.State, e.Action = s, a
	return nil
}

func (t *Tier) Lookup(k tier.FlowKey) (flow.Entry, error) {
	t.Lookups++
	e := t.Flows[k]
	if e == nil {
		return flow.Entry{}, fmt.Errorf("looking up %v: no such flow", k)
	}
	return *e, nil
}

func (t *Tier) Delete(k tier.FlowKey) (flow.Entry, error) {
	e, err := t.Lookup(k)
	if err == nil {
		delete(t.Flows, k)
		t.Deleted++
	}
	return e, err
}

func (t *Tier) Walk(fn func(tier.FlowKey, *flow.Entry) bool) error {
	t.Walks++
	for k, e := range t.Flows {
		c := *e
		if !fn(k, &c) {
			break
		}
	}
	return nil
}

func (t *Tier) Stats() (flow.TierStats, error) {
	s := t.stats
	s.Flows, s.Capacity = len(t.Flows), t.Cap
	return s, nil
}

func (t *Tier) Close() error { return nil }

// Apply runs ops one by one (flow.Batcher), as the program does in a
// batch; Batches counts the calls.
func (t *Tier) Apply(ops []flow.Op) error {
	t.Batches++
	for i := range ops {
		if ops[i].Delete {
			ops[i].Entry, ops[i].Err = t.Delete(ops[i].Key)
		} else {
			ops[i].Err = t.SetState(ops[i].Key, ops[i].State, ops[i].Action)
		}
	}
	return nil
}

var _ flow.Batcher = (*Tier)(nil)
