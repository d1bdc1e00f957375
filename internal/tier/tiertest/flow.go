// SPDX-License-Identifier: Apache-2.0

package tiertest

import (
	"fmt"
	"time"

	"github.com/tierwall/tierwall/internal/tier"
)

// FlowTable is a fake tier.FlowTable that applies requests when Step is
// called, as a NIC's firmware would some time after the request. Tests
// move packets through it with Hit and end flows with Expire or TCPTerm.
type FlowTable struct {
	Cap      int
	QueueCap int // 0: unbounded

	Flows   map[uint64]*FakeFlow
	byKey   map[tier.FlowKey]uint64
	queue   []fakeReq
	events  []tier.FlowEvent
	Learns  int // learn requests accepted
	Now     func() time.Time
	Stepped int
}

// FakeFlow is one learned flow.
type FakeFlow struct {
	Learn    tier.Learn
	Counters tier.FlowCounters
}

type fakeReq struct {
	learn   *tier.Learn
	unlearn uint64
}

var _ tier.FlowTable = (*FlowTable)(nil)

// NewFlowTable returns an empty fake flow table of capacity k.
func NewFlowTable(k int) *FlowTable {
	return &FlowTable{Cap: k, Flows: map[uint64]*FakeFlow{}, byKey: map[tier.FlowKey]uint64{}, Now: time.Now}
}

func (t *FlowTable) Caps() tier.FlowCaps {
	return tier.FlowCaps{Name: "fake", Capacity: t.Cap, Directions: true, Discard: true,
		TCPAutoUnlearn: true, Timeouts: true, Marks: true}
}

func (t *FlowTable) full() bool { return t.QueueCap > 0 && len(t.queue) >= t.QueueCap }

func (t *FlowTable) Learn(reqs []tier.Learn) (int, error) {
	for i := range reqs {
		if t.full() {
			return i, fmt.Errorf("queueing learn %d: %w", reqs[i].ID, tier.ErrQueueFull)
		}
		r := reqs[i]
		t.queue = append(t.queue, fakeReq{learn: &r})
		t.Learns++
	}
	return len(reqs), nil
}

func (t *FlowTable) Unlearn(ids []uint64) (int, error) {
	for i, id := range ids {
		if t.full() {
			return i, fmt.Errorf("queueing unlearn %d: %w", id, tier.ErrQueueFull)
		}
		t.queue = append(t.queue, fakeReq{unlearn: id})
	}
	return len(ids), nil
}

// Step applies every queued request, as the firmware would.
func (t *FlowTable) Step() {
	t.Stepped++
	q := t.queue
	t.queue = nil
	for _, r := range q {
		if r.learn == nil {
			t.unlearn(r.unlearn, tier.CauseApp)
			continue
		}
		l := *r.learn
		ev := tier.FlowEvent{ID: l.ID, Key: l.Key, At: t.Now()}
		_, dupID := t.Flows[l.ID]
		_, dupKey := t.byKey[l.Key]
		switch {
		case l.Key.Validate() != nil:
			ev.Kind, ev.Err = tier.LearnFailed, l.Key.Validate()
		case dupID || dupKey:
			ev.Kind, ev.Err = tier.LearnIgnored, fmt.Errorf("flow %v already learned", l.Key)
		case len(t.Flows) >= t.Cap:
			ev.Kind, ev.Err = tier.LearnFailed, fmt.Errorf("learning %v: %w", l.Key, tier.ErrTableFull)
		default:
			ev.Kind = tier.LearnDone
			t.Flows[l.ID] = &FakeFlow{Learn: l, Counters: tier.FlowCounters{First: t.Now()}}
			t.byKey[l.Key] = l.ID
		}
		t.events = append(t.events, ev)
	}
}

func (t *FlowTable) unlearn(id uint64, c tier.Cause) {
	f, ok := t.Flows[id]
	if !ok {
		t.events = append(t.events, tier.FlowEvent{Kind: tier.LearnIgnored, ID: id, At: t.Now(),
			Err: fmt.Errorf("unlearning %d: %w", id, tier.ErrNoRule)})
		return
	}
	delete(t.Flows, id)
	delete(t.byKey, f.Learn.Key)
	t.events = append(t.events, tier.FlowEvent{Kind: tier.Unlearned, ID: id, Key: f.Learn.Key, Cause: c,
		Counters: f.Counters, At: t.Now()})
}

// Hit counts packets of bytes each in direction dir of a learned flow and
// reports whether the flow is in the table (else the packet is a miss).
func (t *FlowTable) Hit(k tier.FlowKey, dir int, packets, bytes uint64) bool {
	id, ok := t.byKey[k]
	if !ok {
		return false
	}
	c := &t.Flows[id].Counters
	c.Packets[dir] += packets
	c.Bytes[dir] += bytes * packets
	c.Last = t.Now()
	return true
}

// Expire unlearns a flow with cause c (idle, lifetime, TCP termination).
func (t *FlowTable) Expire(k tier.FlowKey, c tier.Cause) bool {
	id, ok := t.byKey[k]
	if ok {
		t.unlearn(id, c)
	}
	return ok
}

func (t *FlowTable) Events(buf []tier.FlowEvent) (int, error) {
	n := copy(buf, t.events)
	t.events = t.events[n:]
	return n, nil
}

func (t *FlowTable) Read(id uint64) (tier.FlowCounters, error) {
	f, ok := t.Flows[id]
	if !ok {
		return tier.FlowCounters{}, fmt.Errorf("reading flow %d: %w", id, tier.ErrNoRule)
	}
	return f.Counters, nil
}

func (t *FlowTable) Occupancy() int { return len(t.Flows) }

// Close unlearns every flow with cause flush, as a NIC reset would.
func (t *FlowTable) Close() error {
	for id := range t.Flows {
		t.unlearn(id, tier.CauseFlush)
	}
	return nil
}
