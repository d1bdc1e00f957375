// SPDX-License-Identifier: Apache-2.0

package nicstage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/tierwall/tierwall/internal/tier"
	"github.com/tierwall/tierwall/internal/tier/flowtab"
)

// The flow-mode firmware: one goroutine, woken by requests or every tick,
// running step. Everything it does is bounded per step (requests by the
// token bucket and the batch size, the ageing sweep by a budget, the ring
// by the event room), so a 1M-flow table never stalls it.

const (
	fwTick     = 50 * time.Millisecond // longest sleep: ring and sweep polling (each wake-up of this locked thread costs the host's threads a hand-off; the sweep's slice follows the time since the last step, so a longer tick only notices an ended flow later)
	fwMaxBatch = 4096                  // requests per map batch
	sweepMin   = 64                    // entries the sweep reads per step, at least
	sweepMax   = 64 << 10              // and at most
	reqCost    = int64(time.Second)    // token bucket: credit is request-nanoseconds
)

// Values of flow.h's enum tw_flow_action and nicflow.h's enum
// tw_nicflow_opt: neither reaches BTF (the entry keeps them in bytes), so
// bpf2go cannot export them. The fixture tests pin them.
const (
	faForward  = 0
	faDiscard  = 1
	nfoTCPAuto = 1
)

type unlearnReq struct {
	id    uint64
	cause tier.Cause
	app   bool              // the application's: an unknown id is reported
	key   *nicflowTwFlowKey // from the data plane: must still name the flow
}

// FirmwareThread is the name (comm) of the OS thread the firmware runs
// on. On a real NIC the firmware is the NIC's own processor: the lab finds
// the thread by this name to pin it beside the NIC stage and to count its
// time as the NIC's, not the host's.
const FirmwareThread = "tw-nic-firmware"

func (t *FlowTable) run(stop <-chan struct{}) {
	// The goroutine keeps its thread, and the thread ends with it
	// (never unlocked): the name stays on this thread only.
	runtime.LockOSThread()
	if name, err := unix.BytePtrFromString(FirmwareThread); err == nil {
		_ = unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(name)), 0, 0, 0) // a name only: the lab's measurements
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.q.Wake():
		case <-timer.C:
		}
		timer.Reset(t.step(t.now()))
	}
}

func (t *FlowTable) burst() int64 { return max(int64(t.o.LearnRate)/100, 1) * reqCost }

func (t *FlowTable) refill(now int64) {
	dt := now - t.lastFill
	if dt <= 0 {
		return
	}
	t.lastFill = now
	dt = min(dt, int64(time.Second)) // dt * rate must not overflow
	t.credit = min(t.credit+dt*int64(t.o.LearnRate), t.burst())
}

// step does one round of firmware work at now (CLOCK_MONOTONIC ns) and
// returns how long it may sleep before the next. Tests call it directly
// with their own clock.
func (t *FlowTable) step(now int64) time.Duration {
	t.refill(now)
	room := t.q.Room()
	if room <= 0 {
		t.mu.Lock()
		t.stats.Stalls++
		t.mu.Unlock()
		return fwTick
	}

	// What the data plane and the clock ended, then what was asked: every
	// one of these yields exactly one event, so each takes room first.
	auto := t.drainRing(nil, room)
	auto = t.sweep(now, auto, room-len(auto))
	room -= len(auto)

	batch, head, more := t.q.Take(room, func(r flowtab.Req) bool {
		if t.credit < reqCost || r.Ready > now {
			return false
		}
		t.credit -= reqCost
		return true
	})
	next := fwTick
	if more {
		switch {
		case head.Ready > now:
			next = min(next, time.Duration(head.Ready-now))
		case t.credit < reqCost:
			next = min(next, time.Duration((reqCost-t.credit)/int64(t.o.LearnRate)+1))
		default:
			t.mu.Lock()
			t.stats.Stalls++ // out of event room
			t.mu.Unlock()
		}
	}

	_ = t.unlearn(now, auto) // failures are counted and reported as events
	t.serve(now, batch)
	return next
}

// serve runs requests in their order, consecutive ones of a kind batched.
func (t *FlowTable) serve(now int64, batch []flowtab.Req) {
	for len(batch) > 0 {
		j := 1
		for j < len(batch) && j < fwMaxBatch && batch[j].Learn == batch[0].Learn {
			j++
		}
		if batch[0].Learn {
			t.learn(now, batch[:j])
		} else {
			us := make([]unlearnReq, j)
			for i, r := range batch[:j] {
				us[i] = unlearnReq{id: r.ID, cause: tier.CauseApp, app: true}
			}
			_ = t.unlearn(now, us)
		}
		batch = batch[j:]
	}
}

func timeoutMs(d, dflt time.Duration) uint32 {
	if d == 0 {
		d = dflt
	}
	if d <= 0 {
		return 0
	}
	return uint32(min(max((d+time.Millisecond-1)/time.Millisecond, 1), 1<<32-1))
}

// learn writes a batch. The kernel takes no BPF_NOEXIST in a batch
// (generic_map_update_batch refuses any elem_flags but BPF_F_LOCK), so the
// firmware, the table's only writer, checks ids, keys and room against its
// own index first, and the batch only ever adds absent keys.
func (t *FlowTable) learn(now int64, reqs []flowtab.Req) {
	at := t.wall(now)
	keys := make([]nicflowTwFlowKey, 0, len(reqs))
	vals := make([]nicflowTwNicflowEntry, 0, len(reqs))
	ls := make([]tier.Learn, 0, len(reqs))
	batchIDs := make(map[uint64]bool, len(reqs))
	batchKeys := make(map[nicflowTwFlowKey]bool, len(reqs))
	var refused []tier.FlowEvent
	t.mu.Lock()
	for _, r := range reqs {
		k := bpfKey(r.L.Key)
		ev := tier.FlowEvent{Kind: tier.LearnIgnored, ID: r.ID, Key: r.L.Key, At: at}
		switch _, dupKey := t.keys[k]; {
		case t.flows[r.ID] != nil || batchIDs[r.ID]:
			ev.Err = fmt.Errorf("%w: %d", flowtab.ErrDuplicateID, r.ID)
		case dupKey || batchKeys[k]:
			ev.Err = fmt.Errorf("%w: %v", flowtab.ErrDuplicateKey, r.L.Key)
		case t.occupancy+len(keys) >= t.o.Capacity:
			ev.Kind, ev.Err = tier.LearnFailed, fmt.Errorf("learning %v: %w (%d flows)", r.L.Key, tier.ErrTableFull, t.o.Capacity)
		default:
			ev.Kind = 0
		}
		if ev.Kind != 0 {
			refused = append(refused, ev)
			continue
		}
		batchIDs[r.ID], batchKeys[k] = true, true
		e := nicflowTwNicflowEntry{FlowId: r.ID, LearnedNs: uint64(now), LastNs: uint64(now),
			State: nicflowTwNicflowStateTW_NFS_ACTIVE, Action: faForward, Hash: FlowHash(r.L.Key, t.o.Seed),
			IdleMs: timeoutMs(r.L.Options.IdleTimeout, t.o.IdleTimeout),
			LifeMs: timeoutMs(r.L.Options.Lifetime, t.o.Lifetime)}
		if r.L.Action == tier.FlowDiscard {
			e.Action = faDiscard
		}
		if r.L.Options.TCPAutoUnlearn {
			e.Opts = nfoTCPAuto
		}
		keys = append(keys, k)
		vals = append(vals, e)
		ls = append(ls, r.L)
	}
	t.mu.Unlock()
	for _, ev := range refused {
		t.q.Emit(ev)
	}
	if len(keys) == 0 {
		return
	}

	_, err := t.objs.TwNicflowTable.BatchUpdate(keys, vals, nil)
	for i, k := range keys {
		ok := err == nil
		if !ok {
			// The count the kernel reports is not trustworthy for every
			// failure (an early refusal leaves it as given): look.
			var e nicflowTwNicflowEntry
			ok = t.objs.TwNicflowTable.Lookup(&k, &e) == nil && e.FlowId == ls[i].ID
		}
		if !ok {
			ev := tier.FlowEvent{Kind: tier.LearnFailed, ID: ls[i].ID, Key: ls[i].Key, At: at,
				Err: fmt.Errorf("learning %v: %w: %v", ls[i].Key, tier.ErrNotInHardware, err)}
			if errors.Is(err, unix.E2BIG) {
				ev.Err = fmt.Errorf("learning %v: %w (%d flows)", ls[i].Key, tier.ErrTableFull, t.o.Capacity)
			}
			t.q.Emit(ev)
			continue
		}
		t.mu.Lock()
		t.flows[ls[i].ID] = &hwFlow{key: ls[i].Key, bkey: k}
		t.keys[k] = ls[i].ID
		t.occupancy++
		t.mu.Unlock()
		t.q.Emit(tier.FlowEvent{Kind: tier.LearnDone, ID: ls[i].ID, Key: ls[i].Key, At: at})
	}
	t.writeOcc()
}

func (t *FlowTable) writeOcc() {
	t.mu.Lock()
	occ := uint32(t.occupancy)
	t.mu.Unlock()
	// Only the firmware writes it; a failure leaves the data plane's view
	// of "full" stale, never a flow unaccounted.
	_ = t.objs.TwNicflowOcc.Put(uint32(0), occ)
}

// unlearn removes flows without losing a packet's count. A map update
// from here would replace the entry while programs still add to the old
// one, so first tw_nicflow_unlearning flips each entry to UNLEARNING in
// place (compare and swap; from then on the data plane treats its packets
// as misses and the host counts them). Programs that read the state before
// the flip may still be adding: XDP programs run inside an RCU read-side
// critical section (driver NAPI poll, and BPF_PROG_TEST_RUN likewise), so
// once an RCU grace period has passed none of them is left. The kernel
// waits one for us: updating an ARRAY_OF_MAPS slot returns only after
// synchronize_rcu() (kernel/bpf/syscall.c, maybe_wait_bpf_programs; the
// kernel selftests' kern_sync_rcu() relies on the same). Then the entry is
// read and deleted in one call, its counters final. One grace period
// covers the whole batch.
func (t *FlowTable) unlearn(now int64, us []unlearnReq) error {
	type marked struct {
		id    uint64
		f     *hwFlow
		cause tier.Cause
	}
	at := t.wall(now)
	var ms []marked
	var firstErr error
	for _, u := range us {
		t.mu.Lock()
		f := t.flows[u.id]
		stale := f == nil || f.unlearning || (u.key != nil && *u.key != f.bkey)
		t.mu.Unlock()
		if stale {
			if u.app {
				t.q.Emit(tier.FlowEvent{Kind: tier.LearnIgnored, ID: u.id, At: at, Err: fmt.Errorf("%w: %d", flowtab.ErrUnknownID, u.id)})
			}
			continue
		}
		st, err := t.objs.TwNicflowUnlearning.Run(&ebpf.RunOptions{Context: nicflowTwNicflowRef{Key: f.bkey, FlowId: u.id}})
		if err != nil {
			// The flow stays learned and counted; the application may ask again.
			err = fmt.Errorf("unlearning flow %d: %w", u.id, err)
			firstErr = cmpErr(firstErr, err)
			if u.app {
				t.q.Emit(tier.FlowEvent{Kind: tier.LearnIgnored, ID: u.id, Key: f.key, At: at, Err: err})
			}
			continue
		}
		t.mu.Lock()
		f.unlearning = true
		if st == 0 {
			t.stats.Orphans++ // gone behind the firmware's back: nothing to wait for
		}
		t.mu.Unlock()
		ms = append(ms, marked{u.id, f, u.cause})
	}
	if len(ms) == 0 {
		return firstErr
	}
	if err := t.rcu.Put(uint32(0), t.rcuIn); err != nil {
		// Should not happen; a program run takes microseconds, so a
		// sleep a thousand times as long is the fallback.
		time.Sleep(time.Millisecond)
		firstErr = cmpErr(firstErr, fmt.Errorf("waiting for a grace period: %w", err))
	}
	t.mu.Lock()
	t.stats.GracePeriods++
	t.mu.Unlock()
	for _, m := range ms {
		var e nicflowTwNicflowEntry
		err := t.objs.TwNicflowTable.LookupAndDelete(&m.f.bkey, &e)
		t.mu.Lock()
		delete(t.flows, m.id)
		delete(t.keys, m.f.bkey)
		t.occupancy--
		if err != nil {
			t.stats.Orphans++
		}
		t.mu.Unlock()
		ev := tier.FlowEvent{Kind: tier.Unlearned, ID: m.id, Key: m.f.key, Cause: m.cause, At: at}
		if err == nil {
			ev.Counters = t.counters(&e)
		} else if !errors.Is(err, ebpf.ErrKeyNotExist) {
			firstErr = cmpErr(firstErr, fmt.Errorf("removing flow %d: %w", m.id, err))
		}
		t.q.Emit(ev)
	}
	t.writeOcc()
	return firstErr
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// sweepPeriod is how long one full ageing pass over the table takes: a
// tenth of the idle timeout, within [100ms, 5s].
func (t *FlowTable) sweepPeriod() int64 {
	p := t.o.IdleTimeout / 10
	return int64(min(max(p, 100*time.Millisecond), 5*time.Second))
}

// sweep reads the next slice of the table (a batch cursor over the hash
// map, resumed each step) and returns the flows to unlearn: idle, past
// their lifetime, or terminating (the backstop for a lost ring record).
// The slice is the share of a full pass that the time since the last step
// calls for, so a pass takes sweepPeriod at any occupancy.
func (t *FlowTable) sweep(now int64, out []unlearnReq, room int) []unlearnReq {
	t.mu.Lock()
	occ := t.occupancy
	t.mu.Unlock()
	dt := max(now-t.lastSweep, 0)
	t.lastSweep = now
	if occ == 0 || room <= 0 {
		return out
	}
	budget := int(int64(occ)*dt/t.sweepPeriod()) + 1
	budget = min(max(budget, sweepMin), sweepMax)
	if len(t.sweepK) < budget {
		t.sweepK = make([]nicflowTwFlowKey, budget)
		t.sweepV = make([]nicflowTwNicflowEntry, budget)
	}
	n, err := t.objs.TwNicflowTable.BatchLookup(&t.cursor, t.sweepK[:budget], t.sweepV[:budget], nil)
	if err != nil {
		// The end of a pass, or a cursor the kernel no longer likes
		// (deletions under it): either way start over.
		t.cursor = ebpf.MapBatchCursor{}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			t.mu.Lock()
			t.stats.SweepPasses++
			t.mu.Unlock()
		}
	}
	for i := 0; i < n && room > 0; i++ {
		e := &t.sweepV[i]
		var c tier.Cause
		switch {
		case e.State == nicflowTwNicflowStateTW_NFS_UNLEARNING:
		case e.State == nicflowTwNicflowStateTW_NFS_TERMINATING:
			c = tier.CauseTCPTerm
		case e.LifeMs != 0 && now-int64(e.LearnedNs) >= int64(e.LifeMs)*int64(time.Millisecond):
			c = tier.CauseLifetime
		case e.IdleMs != 0 && now-int64(e.LastNs) >= int64(e.IdleMs)*int64(time.Millisecond):
			c = tier.CauseIdle
		}
		if c != 0 {
			k := t.sweepK[i]
			out = append(out, unlearnReq{id: e.FlowId, cause: c, key: &k})
			room--
		}
	}
	return out
}

// drainRing reads the data plane's TCP-termination records (written
// without wakeup: the firmware polls every step).
func (t *FlowTable) drainRing(out []unlearnReq, room int) []unlearnReq {
	t.term.SetDeadline(time.Now())
	var rec ringbuf.Record
	for len(out) < room {
		if err := t.term.ReadInto(&rec); err != nil {
			break
		}
		var ref nicflowTwNicflowRef
		if _, err := binary.Decode(rec.RawSample, binary.LittleEndian, &ref); err != nil {
			continue
		}
		k := ref.Key
		out = append(out, unlearnReq{id: ref.FlowId, cause: tier.CauseTCPTerm, key: &k})
	}
	return out
}
