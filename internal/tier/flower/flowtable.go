// SPDX-License-Identifier: Apache-2.0

package flower

// The flow probe's hardware flow table on tc flower (tier.FlowTable): a
// learned flow is two skip_sw flower filters, one per direction, each
// matching the exact 5-tuple with a gact action that carries the flow's
// id in its cookie. Flower has no flow events, no timeouts and no marks, so
// a worker goroutine plays the firmware of the vendor APIs: it serves the
// learn and unlearn queue over rtnetlink, polls the filters' hardware
// statistics with one dump per address family, ages flows from them and
// reports every outcome as an event.
//
//	tier.FlowTable          tc flower (this backend)
//	Learn                   RTM_NEWTFILTER ×2 (skip_sw), read back for in_hw
//	Unlearn                 RTM_GETTFILTER ×2 (final counters), RTM_DELTFILTER ×2
//	Unlearned/CauseIdle     a poll found no new packets for the idle timeout
//	Unlearned/CauseLifetime a poll found the flow older than its lifetime
//	Read                    the counters of the last poll
//
// On this path a packet that reaches the host was not taken by a learned
// flow (a "miss"): the NIC drops a FlowDiscard flow's packets and counts a
// FlowForward flow's ones as it passes them up, unmarked (so the software
// tier counts those again: the probe offloads passively with discard, and
// the configuration refuses flower inline). Byte counts are the driver's:
// some count from the Ethernet header, not from the IP header as
// tier.FlowCounters say; packet counts are exact.

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/tierwall/tierwall/internal/tier"
	"github.com/tierwall/tierwall/internal/tier/flowtab"
)

// The flow table's tc priorities. Distinct from the mitigation Table's
// Priority and Priority6 so that both can run on one port and each dumps
// and adopts only its own filters (Table.dump keys on its two, the flow
// table dumps only its two). Two of them because the kernel keeps one
// protocol per priority (cls_api.c, tcf_chain_tp_find: EINVAL for an IPv6
// filter where IPv4 ones are). Numerically after Priority and Priority6: tc
// runs lower priorities first, so a mitigation drop wins over a flow's pass.
const (
	FlowPriority4 = 0xBEF0
	FlowPriority6 = 0xBEF1
)

// Flow table defaults and bounds.
const (
	DefaultFlowCapacity  = 64 << 10
	MaxFlowCapacity      = 1 << 20 // two filters each: handles stay below probeHandle
	DefaultPoll          = time.Second
	DefaultFlowQueueLen  = 4096
	DefaultEventQueueLen = 64 << 10
	DefaultIdleTimeout   = 30 * time.Second
	flowCookieLen        = 16 // TC_COOKIE_MAX_SIZE: "tierwall" and the id
)

// FlowOptions configure a flower flow table.
type FlowOptions struct {
	// Capacity is the flows the NIC holds, two filters each (flower has
	// no query for it); default 64K, at most 1M. Every poll dumps all of
	// them: about 300 bytes of netlink per filter, 40 MB at 64K flows.
	Capacity int
	// Poll is how often the filters' statistics are dumped: the
	// resolution of idle and lifetime ageing and of Read. Default 1s.
	Poll        time.Duration
	IdleTimeout time.Duration // flows' default; default 30s, <0: none
	Lifetime    time.Duration // flows' default; 0: none
	QueueLen    int           // queued learn and unlearn requests; default 4096
	// EventQueueLen bounds the undelivered events; default 64K. No event
	// is ever dropped (an Unlearned one holds a flow's only counters):
	// while the queue is full the worker serves no request and ages
	// nothing, counting the stall, and Learn and Unlearn fill up.
	EventQueueLen int
	// Software puts the flows in the kernel's software path (skip_hw),
	// as OpenSoftware does the mitigation rules: for tests on a kernel
	// with flower and no offloading NIC.
	Software bool

	manual bool             // tests: no worker goroutine, they call step
	now    func() time.Time // tests replace the clock
}

func (o *FlowOptions) defaults() error {
	o.Capacity = cmp.Or(o.Capacity, DefaultFlowCapacity)
	o.Poll = cmp.Or(o.Poll, DefaultPoll)
	o.IdleTimeout = cmp.Or(o.IdleTimeout, DefaultIdleTimeout)
	o.QueueLen = cmp.Or(o.QueueLen, DefaultFlowQueueLen)
	o.EventQueueLen = cmp.Or(o.EventQueueLen, DefaultEventQueueLen)
	if o.now == nil {
		o.now = time.Now
	}
	switch {
	case o.Capacity < 1 || o.Capacity > MaxFlowCapacity:
		return fmt.Errorf("%w: flower flow capacity %d out of range 1..%d", tier.ErrInvalid, o.Capacity, MaxFlowCapacity)
	case o.Poll < 10*time.Millisecond || o.Poll > time.Minute:
		return fmt.Errorf("%w: flower poll interval %v out of range 10ms..1m", tier.ErrInvalid, o.Poll)
	case o.QueueLen < 1 || o.EventQueueLen < 1:
		return fmt.Errorf("%w: queue lengths %d, %d", tier.ErrInvalid, o.QueueLen, o.EventQueueLen)
	case o.Lifetime < 0:
		return fmt.Errorf("%w: lifetime %v", tier.ErrInvalid, o.Lifetime)
	}
	return nil
}

// FlowStats count what the flow table's worker did.
type FlowStats struct {
	flowtab.Counts // the events it reported
	Polls          uint64
	PollErrors     uint64 // dumps that failed: nothing aged on them
	Stalls         uint64 // steps that served or aged nothing: event queue full
	DeleteErrors   uint64 // filter deletions that failed (retried next poll)
	Orphans        uint64 // flows whose filters vanished behind our back (tc, driver reset)
	Strays         uint64 // filters of ours without a flow, deleted by a poll
	Leftovers      int    // filters of an earlier run deleted by Open
	Foreign        int    // filters of someone else at our priorities, at Open
}

// FlowTable is a flow probe's flow table in tc flower: tier.FlowTable.
type FlowTable struct {
	link   tcLink
	o      FlowOptions
	q      *flowtab.Queues // requests, events, the worker goroutine
	closer sync.Once

	mu    sync.Mutex
	flows map[uint64]*hwFlow // in hardware until its Unlearned event; written under mu by the worker
	stats FlowStats

	// The worker's own (and Close's, once the worker stopped).
	keys     map[tier.FlowKey]uint64
	bySlot   map[uint32]*hwFlow
	free     []uint32 // released slots
	nextSlot uint32
	lastPoll time.Time
	gen      uint64 // poll generation
}

// hwFlow is one learned flow: filters 2*slot+1 (direction 0, Lo to Hi)
// and 2*slot+2 (direction 1).
type hwFlow struct {
	id      uint64
	key     tier.FlowKey
	slot    uint32
	idle    time.Duration // <0: none
	life    time.Duration // 0: none
	learned time.Time
	c       tier.FlowCounters // as of the last poll; guarded by mu
	seen    [2]uint64         // poll generation that last listed each filter
	ending  tier.Cause        // a removal failed: retried by every poll
}

var _ tier.FlowTable = (*FlowTable)(nil)

// OpenFlowTable probes flower offload on iface, deletes the filters an
// earlier probe left at the flow table's priorities (it has no state for
// them: their flows are new flows to this one), and starts the worker.
// When the probe fails the error wraps tier.ErrUnsupported and nothing is
// left behind.
func OpenFlowTable(iface string, o FlowOptions) (*FlowTable, error) {
	conn, err := netlink.Dial(unix.NETLINK_ROUTE, nil)
	if err != nil {
		return nil, fmt.Errorf("opening rtnetlink: %w", err)
	}
	t, err := openFlowTable(conn, iface, o)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return t, nil
}

func openFlowTable(conn *netlink.Conn, iface string, o FlowOptions) (*FlowTable, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	ifc, err := net.InterfaceByName(iface)
	if err != nil {
		return nil, fmt.Errorf("%w: flower: no interface %s", tier.ErrUnsupported, iface)
	}
	t := &FlowTable{link: tcLink{conn: conn, iface: iface, ifindex: ifc.Index, software: o.Software}, o: o,
		q:     flowtab.New(o.QueueLen, o.EventQueueLen),
		flows: map[uint64]*hwFlow{}, keys: map[tier.FlowKey]uint64{}, bySlot: map[uint32]*hwFlow{}}
	created, err := t.link.ensureClsact()
	if err != nil {
		return nil, fmt.Errorf("%w: flower on %s: clsact qdisc: %v", tier.ErrUnsupported, iface, err)
	}
	undo := func() {
		if created {
			t.link.deleteClsact()
		}
	}
	// Probe both priorities with a flow no packet matches (TEST-NET
	// broadcast to itself, port 9): only filters that reached hardware
	// count, and the kernel says here if either priority holds another
	// protocol.
	probes := []tier.FlowKey{
		{Proto: unix.IPPROTO_UDP, Lo: netip.MustParseAddrPort("192.0.2.255:9"), Hi: netip.MustParseAddrPort("192.0.2.255:9")},
		{Proto: unix.IPPROTO_UDP, Lo: netip.MustParseAddrPort("[2001:db8::ffff]:9"), Hi: netip.MustParseAddrPort("[2001:db8::ffff]:9")},
	}
	for _, k := range probes {
		prio, fam := flowPrio(k)
		if _, err := t.link.addFilter(probeHandle, prio, directionRule(k, 0, tier.FlowDiscard), flowCookie(0)); err != nil {
			undo()
			return nil, fmt.Errorf("%w: flower offload on %s at priority %#x: %v", tier.ErrUnsupported, iface, prio, err)
		}
		if err := t.link.delFilter(probeHandle, prio, fam); err != nil {
			undo()
			return nil, fmt.Errorf("%w: flower on %s: removing probe: %v", tier.ErrUnsupported, iface, err)
		}
	}
	if err := t.cleanup(); err != nil {
		undo()
		return nil, err
	}
	t.lastPoll = o.now()
	if !o.manual {
		t.q.Start(t.run)
	}
	return t, nil
}

// cleanup deletes every filter of ours at the flow table's priorities.
func (t *FlowTable) cleanup() error {
	for _, pf := range [][2]uint16{{FlowPriority4, ethPIP}, {FlowPriority6, ethPIPv6}} {
		fs, err := t.link.dumpFilters(pf[0], pf[1])
		if err != nil {
			return fmt.Errorf("listing leftover flow filters: %w", err)
		}
		for _, f := range fs {
			if _, ok := flowID(f.cookie); !ok {
				t.stats.Foreign++
				continue
			}
			if err := t.link.delFilter(f.handle, pf[0], pf[1]); err != nil && !errors.Is(err, unix.ENOENT) {
				return fmt.Errorf("removing a flow filter an earlier run left on %s: %w", t.link.iface, err)
			}
			t.stats.Leftovers++
		}
	}
	return nil
}

// flowCookie is the action cookie of flow id's filters: "tierwall" and
// the id, big-endian, so a restarted probe knows its filters.
func flowCookie(id uint64) []byte {
	c := make([]byte, flowCookieLen)
	copy(c, Cookie)
	binary.BigEndian.PutUint64(c[len(Cookie):], id)
	return c
}

func flowID(cookie []byte) (uint64, bool) {
	if len(cookie) != flowCookieLen || string(cookie[:len(Cookie)]) != string(Cookie) {
		return 0, false
	}
	return binary.BigEndian.Uint64(cookie[len(Cookie):]), true
}

func flowPrio(k tier.FlowKey) (prio, fam uint16) {
	if k.Lo.Addr().Is4() {
		return FlowPriority4, ethPIP
	}
	return FlowPriority6, ethPIPv6
}

func handleOf(slot uint32, dir int) uint32 { return 2*slot + 1 + uint32(dir) }

// directionRule is the filter of direction dir of k: dir 0 is sent by Lo.
// FlowDiscard drops in the NIC; FlowForward passes to the host, counted.
func directionRule(k tier.FlowKey, dir int, a tier.FlowAction) tier.Rule {
	src, dst := k.Lo, k.Hi
	if dir == 1 {
		src, dst = dst, src
	}
	r := tier.Rule{Match: tier.Match{Src: src.Addr(), Dst: dst.Addr(), Proto: k.Proto, SrcPort: src.Port(), DstPort: dst.Port()},
		Action: tier.Drop}
	if a == tier.FlowForward {
		r.Action = tier.Forward
	}
	return r
}

// Caps: flower counts per direction (a filter each) and drops, but has no
// flow events: no TCP auto-unlearn (it cannot see a FIN; a learn asking
// for it succeeds and the flow ages out idle), no timeouts of its own (the
// worker polls) and no marks on what reaches the host.
func (t *FlowTable) Caps() tier.FlowCaps {
	return tier.FlowCaps{Name: "tc-flower", Capacity: t.o.Capacity, Directions: true, Discard: true}
}

// Learn queues learn requests in order, as many as fit.
func (t *FlowTable) Learn(reqs []tier.Learn) (int, error) { return t.q.Learn(reqs, 0) }

// Unlearn queues unlearn requests, in order with the learns.
func (t *FlowTable) Unlearn(ids []uint64) (int, error) { return t.q.Unlearn(ids, 0) }

// Events hands out pending events, oldest first. After Close it still
// hands out what is left (the flush's Unlearned events), then ErrClosed.
func (t *FlowTable) Events(buf []tier.FlowEvent) (int, error) { return t.q.Events(buf) }

// Read returns a learned flow's counters as of the last poll: flower's
// counters live in the NIC, and reading them is a netlink round trip the
// probe's goroutine must not wait for.
func (t *FlowTable) Read(id uint64) (tier.FlowCounters, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f := t.flows[id]
	if f == nil {
		return tier.FlowCounters{}, fmt.Errorf("%w: flow %d", tier.ErrNoRule, id)
	}
	return f.c, nil
}

// Occupancy is the flows in hardware, those being unlearned included.
func (t *FlowTable) Occupancy() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.flows)
}

// Stats returns what the worker did so far.
func (t *FlowTable) Stats() FlowStats {
	t.mu.Lock()
	st := t.stats
	t.mu.Unlock()
	st.Counts = t.q.Counts()
	return st
}

// Close stops the worker and unlearns every flow (Unlearned, CauseFlush,
// with final counters; queued learns fail with ErrClosed). The clsact
// qdisc stays: the mitigation table may be using it. Events keeps handing
// out what is left.
func (t *FlowTable) Close() error {
	var err error
	t.closer.Do(func() {
		t.q.Close(t.o.now)
		var errs []error
		for _, f := range t.bySlot {
			// Unlearned even when a filter stays behind: no one
			// will ask again, and the next Open deletes it.
			if e := t.remove(f, tier.CauseFlush, true); e != nil {
				errs = append(errs, e)
			}
		}
		err = errors.Join(append(errs, t.link.conn.Close())...)
	})
	return err
}

func (t *FlowTable) run(stop <-chan struct{}) {
	tick := time.NewTicker(t.o.Poll)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.q.Wake():
		case <-tick.C:
		}
		t.step()
	}
}

// step serves the queued requests and, when due, polls.
func (t *FlowTable) step() {
	// Each request emits at most one event: serve no more than fit.
	batch, _, more := t.q.Take(t.q.Room(), nil)
	if more && len(batch) == 0 {
		t.mu.Lock()
		t.stats.Stalls++
		t.mu.Unlock()
	}
	for _, r := range batch {
		if r.Learn {
			t.learn(r.L)
		} else {
			t.unlearn(r.ID)
		}
	}
	if now := t.o.now(); now.Sub(t.lastPoll) >= t.o.Poll {
		t.lastPoll = now
		t.poll(now)
	}
}

func (t *FlowTable) learn(l tier.Learn) {
	ev := tier.FlowEvent{ID: l.ID, Key: l.Key}
	t.mu.Lock()
	_, dupID := t.flows[l.ID]
	n := len(t.flows)
	t.mu.Unlock()
	_, dupKey := t.keys[l.Key]
	switch {
	case dupID:
		ev.Kind, ev.Err = tier.LearnIgnored, fmt.Errorf("learning flow %d (%v): %w", l.ID, l.Key, flowtab.ErrDuplicateID)
	case dupKey:
		ev.Kind, ev.Err = tier.LearnIgnored, fmt.Errorf("learning flow %d (%v): %w", l.ID, l.Key, flowtab.ErrDuplicateKey)
	case n >= t.o.Capacity:
		ev.Kind, ev.Err = tier.LearnFailed, fmt.Errorf("learning flow %d (%v): %w: %d of %d flows in use", l.ID, l.Key, tier.ErrTableFull, n, t.o.Capacity)
	default:
		slot := t.nextSlot
		if len(t.free) > 0 {
			slot = t.free[len(t.free)-1]
			t.free = t.free[:len(t.free)-1]
		} else {
			t.nextSlot++
		}
		if err := t.install(slot, l); err != nil {
			t.free = append(t.free, slot)
			ev.Kind, ev.Err = tier.LearnFailed, err
			break
		}
		now := t.o.now()
		f := &hwFlow{id: l.ID, key: l.Key, slot: slot, idle: t.o.IdleTimeout, life: t.o.Lifetime, learned: now,
			c: tier.FlowCounters{First: now, Last: now}, seen: [2]uint64{t.gen, t.gen}}
		if l.Options.IdleTimeout > 0 {
			f.idle = l.Options.IdleTimeout
		}
		if l.Options.Lifetime > 0 {
			f.life = l.Options.Lifetime
		}
		t.keys[l.Key] = l.ID
		t.bySlot[slot] = f
		t.mu.Lock()
		t.flows[l.ID] = f
		t.mu.Unlock()
		ev.Kind = tier.LearnDone
	}
	ev.At = t.o.now()
	t.q.Emit(ev)
}

// install adds both directions' filters, or neither.
func (t *FlowTable) install(slot uint32, l tier.Learn) error {
	prio, fam := flowPrio(l.Key)
	cookie := flowCookie(l.ID)
	for dir := range 2 {
		if _, err := t.link.addFilter(handleOf(slot, dir), prio, directionRule(l.Key, dir, l.Action), cookie); err != nil {
			if dir == 1 {
				_ = t.link.delFilter(handleOf(slot, 0), prio, fam)
			}
			return fmt.Errorf("learning flow %d (%v), direction %d: %w", l.ID, l.Key, dir, err)
		}
	}
	return nil
}

func (t *FlowTable) unlearn(id uint64) {
	t.mu.Lock()
	f := t.flows[id]
	t.mu.Unlock()
	switch {
	case f == nil:
		t.q.Emit(tier.FlowEvent{Kind: tier.LearnIgnored, ID: id, At: t.o.now(),
			Err: fmt.Errorf("unlearning flow %d: %w: %w", id, flowtab.ErrUnknownID, tier.ErrNoRule)})
	case f.ending != 0:
		// Its removal is being retried; that emits the event.
	default:
		_ = t.remove(f, tier.CauseApp, false)
	}
}

// remove reads a flow's final counters, deletes its filters and reports
// it Unlearned. The counters are read just before the deletion: packets
// counted in between (microseconds) are lost, as the NIC keeps no counters
// of a deleted filter. When a deletion fails the flow stays, marked, and
// the next poll retries: reported unlearned, a filter left in hardware
// would go on taking the flow's packets from the host unseen. force
// reports it all the same (Close).
func (t *FlowTable) remove(f *hwFlow, cause tier.Cause, force bool) error {
	prio, fam := flowPrio(f.key)
	t.mu.Lock()
	c := f.c
	t.mu.Unlock()
	now := t.o.now()
	var errs []error
	for dir := range 2 {
		h := handleOf(f.slot, dir)
		if g, err := t.link.getFilter(h, prio, fam); err == nil {
			if id, ok := flowID(g.cookie); ok && id == f.id {
				updateDir(&c, dir, g.counters, now)
			}
		}
		if err := t.link.delFilter(h, prio, fam); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.mu.Lock()
		t.stats.DeleteErrors++
		f.c = c
		t.mu.Unlock()
		if f.ending == 0 {
			f.ending = cause
		}
		if !force {
			return fmt.Errorf("unlearning flow %d (%v): %w", f.id, f.key, err)
		}
	}
	if f.ending != 0 {
		cause = f.ending
	}
	t.forget(f)
	t.q.Emit(tier.FlowEvent{Kind: tier.Unlearned, ID: f.id, Key: f.key, Cause: cause, Counters: c, At: now})
	return nil
}

func (t *FlowTable) forget(f *hwFlow) {
	delete(t.keys, f.key)
	delete(t.bySlot, f.slot)
	t.free = append(t.free, f.slot)
	t.mu.Lock()
	delete(t.flows, f.id)
	t.mu.Unlock()
}

// updateDir takes direction dir's counters from the NIC; packets since
// the last reading move Last to now (the poll's resolution).
func updateDir(c *tier.FlowCounters, dir int, hw tier.Counters, now time.Time) {
	if hw.Packets != c.Packets[dir] {
		c.Last = now
	}
	c.Packets[dir], c.Bytes[dir] = hw.Packets, hw.Bytes
}

// poll dumps the filters of each family that has flows (one dump each,
// not one request per flow), updates every flow's counters, and ages
// flows out.
func (t *FlowTable) poll(now time.Time) {
	t.gen++
	var fams [2]bool // families with flows
	for _, f := range t.bySlot {
		fams[famIndex(f.key)] = true
	}
	var ok [2]bool // families whose dump succeeded
	for i, pf := range [][2]uint16{{FlowPriority4, ethPIP}, {FlowPriority6, ethPIPv6}} {
		if !fams[i] {
			continue
		}
		fs, err := t.link.dumpFilters(pf[0], pf[1])
		t.mu.Lock()
		t.stats.Polls++
		if err != nil {
			t.stats.PollErrors++
			t.mu.Unlock()
			continue
		}
		ok[i] = true
		var strays []uint32
		for _, g := range fs {
			id, mine := flowID(g.cookie)
			if !mine {
				continue
			}
			f := t.bySlot[(g.handle-1)/2]
			if g.handle == 0 || g.handle == probeHandle || f == nil || f.id != id || famIndex(f.key) != i {
				strays = append(strays, g.handle)
				continue
			}
			dir := int((g.handle - 1) % 2)
			f.seen[dir] = t.gen
			updateDir(&f.c, dir, g.counters, now)
		}
		t.stats.Strays += uint64(len(strays))
		t.mu.Unlock()
		for _, h := range strays {
			// A filter of ours the table does not know: one a
			// failed learn could not take back. It would take
			// packets from the host unseen.
			_ = t.link.delFilter(h, pf[0], pf[1])
		}
	}
	room := t.q.Room()
	for _, f := range t.bySlot {
		i := famIndex(f.key)
		if !ok[i] {
			continue // no fresh counters: nothing to judge by
		}
		cause := f.ending
		switch {
		case cause != 0:
		case f.seen[0] != t.gen || f.seen[1] != t.gen:
			// Someone deleted a filter (tc, a driver reset): the
			// flow is no longer counted. What the NIC counted
			// up to the last poll is all there is.
			cause = tier.CauseFlush
			t.mu.Lock()
			t.stats.Orphans++
			t.mu.Unlock()
		case f.life > 0 && now.Sub(f.learned) >= f.life:
			cause = tier.CauseLifetime
		case f.idle > 0 && now.Sub(f.c.Last) >= f.idle:
			cause = tier.CauseIdle
		default:
			continue
		}
		if room <= 0 {
			t.mu.Lock()
			t.stats.Stalls++
			t.mu.Unlock()
			break
		}
		if t.remove(f, cause, false) == nil {
			room--
		}
	}
}

func famIndex(k tier.FlowKey) int {
	if k.Lo.Addr().Is4() {
		return 0
	}
	return 1
}
