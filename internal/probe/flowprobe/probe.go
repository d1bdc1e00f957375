// SPDX-License-Identifier: Apache-2.0

// Package flowprobe is tierwall's flow probe (Deri, Cardigliano, Fusco,
// HPSR 2024): the software flow tier in XDP keeps every flow and hands the
// first packets of each new one to DPI here; once DPI has a verdict (or
// gives up) the per-application policy decides whether the NIC's flow
// table learns the flow (offload: the NIC counts and handles it from then
// on), discards it, or whether it stays in software. Flow records merge the
// software counters with the final hardware counters of the NIC's
// unlearn event, so every packet is counted exactly once across the tiers.
//
// A Probe runs on one goroutine (Run, or Step in tests); Stats, Top and
// Apps may be called from any goroutine.
package flowprobe

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tierwall/tierwall/internal/probe/dpi"
	"github.com/tierwall/tierwall/internal/probe/flow"
	"github.com/tierwall/tierwall/internal/tier"
)

// Config tunes the probe; zero values take the defaults.
type Config struct {
	Inline     bool          // inline (IPS bridge) rather than passive (mirror)
	DPIPackets int           // give up after this many samples of a flow (default 10)
	DPITimeout time.Duration // give up on flows that stop short of that (default 2 s)
	MaxDPI     int           // flows in DPI at once; beyond, new flows skip DPI (default 65536)
	// MaxFlows bounds the flows the probe keeps state of in Go (in DPI,
	// learning, in the NIC, or in software with their application):
	// about TrackedFlowBytes each. Beyond it a new flow is left to the
	// software tier alone, untracked: no DPI and no offload, its
	// application "unknown", but its counts still exact in its one final
	// record (default 1<<20).
	MaxFlows      int
	IdleTimeout   time.Duration     // software flows end after this long idle (default 30 s)
	ActiveTimeout time.Duration     // a long-lived flow is reported this often (default 120 s)
	EndGrace      time.Duration     // wait after a flow's end for its last packets (default 1 s)
	SweepEvery    time.Duration     // pass over the software table (default: a tenth of the idle timeout, 100 ms..2 s)
	Learn         tier.LearnOptions // options of every learned flow
	// PassiveForward: a passive probe's offloaded flows are learned with
	// forward (counted by the NIC, delivered marked hit) instead of
	// discard. Inline ignores it.
	PassiveForward bool
	Policy         func(dpi.Verdict) dpi.Decision // per application (dpi.Policy.Decide); nil: offload everything
	Now            func() time.Time               // tests
}

func (c *Config) defaults() {
	if c.DPIPackets <= 0 {
		c.DPIPackets = 10
	}
	if c.DPITimeout <= 0 {
		c.DPITimeout = 2 * time.Second
	}
	if c.MaxDPI <= 0 {
		c.MaxDPI = 65536
	}
	if c.MaxFlows <= 0 {
		c.MaxFlows = 1 << 20
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = 30 * time.Second
	}
	if c.ActiveTimeout <= 0 {
		c.ActiveTimeout = 120 * time.Second
	}
	if c.EndGrace <= 0 {
		c.EndGrace = time.Second
	}
	if c.SweepEvery <= 0 {
		// A pass reads every flow: at a million flows a pass every
		// 500 ms is most of a CPU. Timeouts are what the sweep
		// serves, so its period follows the idle timeout's scale.
		c.SweepEvery = min(max(c.IdleTimeout/10, 100*time.Millisecond), 2*time.Second)
	}
	if c.Policy == nil {
		c.Policy = func(dpi.Verdict) dpi.Decision { return dpi.Offload }
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// tracked is the probe's own state of a flow from its first sample (or
// first sweep) until its last record. The software entry in XDP holds the
// counters; this holds what XDP cannot: the application, the learned id and
// what the NIC counted of flows it no longer holds.
type tracked struct {
	app      string
	host     string
	decision dpi.Decision
	state    flow.State
	id       uint64    // learned id while in the NIC, else 0
	learnAt  time.Time // learn requested, for the latency
	hw       tier.FlowCounters
	sentPkts [2]uint64 // software counters already reported
	sentByts [2]uint64
	exported time.Time // last record (active timeout)
	seen     uint64    // the last sweep that found its software entry
	endAt    time.Time // the NIC ended the flow: record after EndGrace
	cause    tier.Cause
}

type dpiState struct {
	f     dpi.Flow
	first time.Time
	n     int
}

// Probe is the engine. Its fields are owned by the goroutine in Run.
type Probe struct {
	cfg  Config
	sw   flow.SoftwareTier
	hw   tier.FlowTable // nil: software only
	cls  dpi.Classifier // nil: no DPI, every flow is "unknown"
	sink func(Record)

	flows     map[tier.FlowKey]*tracked
	dpi       map[tier.FlowKey]*dpiState
	byID      map[uint64]tier.FlowKey
	nextID    uint64
	learns    []tier.Learn
	closing   bool
	events    []tier.FlowEvent
	lastSweep time.Time
	sweeps    uint64
	walked    int          // entries the last walk of the software table found
	ending    []endingFlow // ended in the NIC, in order of endAt: finished after EndGrace
	pending   []pendingOp  // software-table operations for the next batch (flushOps)
	spare     []pendingOp
	opBuf     []flow.Op
	flushing  bool

	stats Stats
	view  view

	mu     sync.Mutex
	pub    published
	recent recent
}

// New returns a probe over the software tier sw and, when hw is not nil,
// the NIC's flow table. Records go to sink, called on the probe's
// goroutine: it must not block (the IPFIX exporter drops and counts).
func New(cfg Config, sw flow.SoftwareTier, hw tier.FlowTable, cls dpi.Classifier, sink func(Record)) *Probe {
	cfg.defaults()
	if sink == nil {
		sink = func(Record) {}
	}
	return &Probe{
		cfg: cfg, sw: sw, hw: hw, cls: cls, sink: sink,
		flows:  map[tier.FlowKey]*tracked{},
		dpi:    map[tier.FlowKey]*dpiState{},
		byID:   map[uint64]tier.FlowKey{},
		events: make([]tier.FlowEvent, 4096),
		stats:  newStats(),
		view:   newView(),
	}
}

// Run serves the probe until ctx ends, then flushes: flows still in the
// NIC are unlearned and every flow gets its last record.
//
// It polls on a timer rather than sleeping in the sample ring's epoll: a
// goroutine parked on a timer holds no P, while one blocked in epoll_wait
// for the whole period is a syscall the Go scheduler retakes, and every
// retake, like every return from idle, puts sysmon back to waking every
// 20 µs. Polled every 10 ms through epoll, that cost more CPU than the
// probe's own work. The interval adapts as NAPI's does: busy polls (many
// samples waiting) come quicker, down to minPoll, so that a burst of new
// flows does not fill the ring; quiet ones relax to maxPoll.
func (p *Probe) Run(ctx context.Context) error {
	every := maxPoll
	timer := time.NewTimer(every)
	defer timer.Stop()
	var published time.Time
	for {
		n, err := p.step(time.Time{})
		if err != nil {
			return err
		}
		// Readers of Stats see at most publishEvery-old counters; copying
		// them every poll was a twentieth of the probe's CPU.
		if now := time.Now(); now.Sub(published) >= publishEvery {
			published = now
			p.publish()
		}
		switch {
		case n == sampleBatch && ctx.Err() == nil:
			continue // a full batch: more samples are waiting
		case n >= sampleBatch/8:
			every = max(every/2, minPoll)
		case n < sampleBatch/64:
			every = min(every*2, maxPoll)
		}
		timer.Reset(every)
		select {
		case <-ctx.Done():
			return p.Flush()
		case <-timer.C:
		}
	}
}

// maxPoll is the quiet probe's poll: each wake-up of a Go process costs
// more than the work of a quiet poll, so at 10 ms the probe's wake-ups
// were most of its CPU (eval-flows, 10K flows: 7–9% of a CPU at 10 ms,
// 5% at 50 ms). A busy ring tightens the poll to minPoll; a new flow's
// DPI samples wait at most this long, and its learn with them.
const (
	minPoll      = time.Millisecond
	maxPoll      = 50 * time.Millisecond
	publishEvery = 100 * time.Millisecond
)

// Step reads samples until deadline (at most a batch), applies the NIC's
// events and, when due, sweeps the software table; then publishes the
// counters.
func (p *Probe) Step(deadline time.Time) error {
	_, err := p.step(deadline)
	p.publish()
	return err
}

// sampleBatch bounds the samples one step reads, so that the NIC's events
// and the sweep are not starved by a flood of new flows.
const sampleBatch = 4096

// step is Step without publishing; n is the samples it read.
func (p *Probe) step(deadline time.Time) (n int, err error) {
	n, err = p.sw.ReadSamples(deadline, sampleBatch, p.sample)
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return n, fmt.Errorf("reading DPI samples: %w", err)
	}
	if err := p.drainEvents(); err != nil {
		return n, err
	}
	now := p.cfg.Now()
	p.finishEnded(now)
	if now.Sub(p.lastSweep) >= p.cfg.SweepEvery {
		p.lastSweep = now
		if err := p.sweep(now); err != nil {
			return n, err
		}
	}
	p.flushOps()
	p.flushLearns()
	return n, nil
}

func (p *Probe) sample(s *flow.Sample) {
	p.stats.Samples++
	t := p.flows[s.Key]
	if t != nil && t.state != flow.StateDPI {
		p.stats.SamplesLate++
		return
	}
	d := p.dpi[s.Key]
	if d == nil {
		if t == nil && len(p.flows) >= p.cfg.MaxFlows {
			// A flood of new flows (spoofed SYNs) made one of these
			// per flow until the heap took a gigabyte: past MaxFlows
			// the flow is the software tier's alone. Its first
			// sample tells the tier to stop sampling it; the rest,
			// already in the ring, are passed over.
			p.stats.SamplesUntracked++
			if s.Seq == 0 {
				p.untrack(s.Key)
			}
			return
		}
		if t == nil {
			t = &tracked{state: flow.StateDPI, seen: p.sweeps}
			p.flows[s.Key] = t
		}
		if p.cls == nil || len(p.dpi) >= p.cfg.MaxDPI {
			// No room for another flow's DPI state: it is decided
			// as unknown rather than queued without bound.
			p.stats.DPISkipped++
			p.decide(s.Key, t, dpi.Verdict{App: dpi.AppUnknown})
			return
		}
		d = &dpiState{f: p.cls.NewFlow(s.Key, s.Dir), first: s.Time}
		p.dpi[s.Key] = d
	}
	d.n++
	v := d.f.Add(s)
	if !v.Done && d.n < p.cfg.DPIPackets {
		return
	}
	if !v.Done {
		v = d.f.Giveup()
		p.stats.DPIGiveups++
	}
	p.endDPI(s.Key, d)
	p.decide(s.Key, t, v)
}

func (p *Probe) endDPI(k tier.FlowKey, d *dpiState) {
	d.f.Close()
	delete(p.dpi, k)
}

// untrack leaves flow k to the software tier: no DPI samples, no offload,
// and no state here. A sweep's walk finds it when it ends, and its entry's
// counters make its one record.
func (p *Probe) untrack(k tier.FlowKey) {
	p.stats.UntrackedFlows++
	p.queue(pendingOp{op: flow.Op{Key: k, State: flow.StateSoftware, Action: flow.Forward}})
}

// decide applies the policy to a classified flow.
func (p *Probe) decide(k tier.FlowKey, t *tracked, v dpi.Verdict) {
	if v.App == "" {
		v.App = "unknown"
	}
	t.app, t.host = v.App, v.Host
	t.decision = p.cfg.Policy(v)
	p.stats.Classified[v.App]++
	if p.hw == nil || t.decision == dpi.Software {
		p.keepInSoftware(k, t)
		return
	}
	p.nextID++
	t.id = p.nextID
	t.learnAt = p.cfg.Now()
	p.byID[t.id] = k
	p.learns = append(p.learns, tier.Learn{ID: t.id, Key: k, Action: p.nicAction(t.decision), Options: p.cfg.Learn})
	// Software first: the state change runs before the learn goes out
	// (flushOps, then flushLearns), and a flow whose entry is gone (a
	// late sample of a flow that already ended) takes its learn back
	// rather than a place in the NIC.
	p.setState(k, t, flow.StateLearning)
}

// nicAction maps a decision to the NIC's action. A passive probe only
// wants the NIC's counters: its offloaded flows are consumed there, which
// is the NIC's discard, unless it asked for them (PassiveForward: the NIC
// delivers them marked hit); inline, offloaded flows go to the twin port.
func (p *Probe) nicAction(d dpi.Decision) tier.FlowAction {
	if d == dpi.Discard || (!p.cfg.Inline && !p.cfg.PassiveForward) {
		return tier.FlowDiscard
	}
	return tier.FlowForward
}

func (t *tracked) swAction() flow.Action {
	if t.decision == dpi.Discard {
		return flow.Discard
	}
	return flow.Forward
}

func (p *Probe) keepInSoftware(k tier.FlowKey, t *tracked) {
	t.id = 0
	p.setState(k, t, flow.StateSoftware)
}

// setState moves flow k to state s: the probe's own state at once, the
// software entry's with the next batch (flushOps). If the entry turns out
// gone, the probe's state of it is let go then (stateFailed).
func (p *Probe) setState(k tier.FlowKey, t *tracked, s flow.State) {
	t.state = s
	p.queue(pendingOp{op: flow.Op{Key: k, State: s, Action: t.swAction()}, t: t, learn: t.id})
}

// pendingOp is a software-table operation waiting for its batch, and what
// its outcome is for: t's state change (learn: the id of the learn queued
// with it, 0 if none), or t's end (finish: the record it makes).
type pendingOp struct {
	op     flow.Op
	t      *tracked
	learn  uint64
	reason EndReason // finish only
}

// maxPendingOps bounds the queue between two batches: a step that queues
// more (a sweep ending a million flows) runs a batch at once.
const maxPendingOps = 4096

func (p *Probe) queue(o pendingOp) {
	p.pending = append(p.pending, o)
	if len(p.pending) >= maxPendingOps && !p.flushing {
		p.flushOps()
	}
}

// flushOps runs the queued software-table operations in order, in one
// batch where the tier can (flow.Batcher: a system call for all of them,
// where each alone was one), and then what each outcome calls for. An
// outcome may queue more (a failed state change finishing a flow): those
// run in the next round.
func (p *Probe) flushOps() {
	if p.flushing {
		return
	}
	p.flushing = true
	defer func() { p.flushing = false }()
	for len(p.pending) > 0 {
		batch := p.pending
		p.pending, p.spare = p.spare[:0], nil
		ops := p.opBuf[:0]
		for i := range batch {
			ops = append(ops, batch[i].op)
		}
		if b, ok := p.sw.(flow.Batcher); ok {
			if err := b.Apply(ops); err != nil {
				p.stats.BatchErrors++ // each op not applied holds it too
			}
		} else {
			for i := range ops {
				if ops[i].Delete {
					ops[i].Entry, ops[i].Err = p.sw.Delete(ops[i].Key)
				} else {
					ops[i].Err = p.sw.SetState(ops[i].Key, ops[i].State, ops[i].Action)
				}
			}
		}
		for i := range batch {
			switch {
			case ops[i].Delete:
				p.finished(&batch[i], &ops[i])
			case ops[i].Err != nil && batch[i].t == nil:
				p.stats.StateErrors++ // an untracked flow's: nothing here to let go of
			case ops[i].Err != nil:
				p.stateFailed(&batch[i])
			}
		}
		clear(batch)
		p.spare, p.opBuf = batch[:0], ops[:0]
	}
}

// stateFailed: the flow's software entry is gone (refused, or ended
// meanwhile), so the probe lets go of its state of it (orphan) and takes
// back the learn queued with the change; the next sample or sweep starts
// over.
func (p *Probe) stateFailed(o *pendingOp) {
	p.stats.StateErrors++
	k, t := o.op.Key, o.t
	if o.learn != 0 && t.id == o.learn {
		for i, l := range p.learns {
			if l.ID == o.learn {
				p.learns = append(p.learns[:i], p.learns[i+1:]...)
				break
			}
		}
		delete(p.byID, t.id)
		t.id = 0
	}
	p.orphan(k, t)
}

// orphan lets go of the probe's state of a flow whose software entry is
// gone, so that late samples of ended flows cannot grow the probe's
// maps: a flow still in the NIC waits for the NIC's event; one holding
// counters the NIC reported ends with its record; the rest are dropped.
func (p *Probe) orphan(k tier.FlowKey, t *tracked) {
	if t.id != 0 || p.flows[k] != t {
		return
	}
	p.stats.Orphans++
	if t.hw.Packets[0]+t.hw.Packets[1] > 0 {
		p.finish(k, t)
		return
	}
	if d := p.dpi[k]; d != nil {
		p.endDPI(k, d)
	}
	delete(p.flows, k)
}

func (p *Probe) flushLearns() {
	if len(p.learns) == 0 {
		return
	}
	n, err := p.hw.Learn(p.learns)
	p.stats.LearnRequests += uint64(n)
	if err != nil {
		// The firmware queue is full: the rest stay in software,
		// counted, and nothing waits for an answer that never comes.
		for _, l := range p.learns[n:] {
			p.stats.LearnQueueFull++
			if t := p.flows[l.Key]; t != nil && t.id == l.ID {
				delete(p.byID, l.ID)
				p.keepInSoftware(l.Key, t)
			}
		}
	}
	p.learns = p.learns[:0]
}

func (p *Probe) drainEvents() error {
	if p.hw == nil {
		return nil
	}
	for {
		n, err := p.hw.Events(p.events)
		if errors.Is(err, tier.ErrClosed) && p.closing {
			return nil // every event of the flush was read
		}
		if err != nil {
			return fmt.Errorf("reading flow events: %w", err)
		}
		for i := range p.events[:n] {
			p.event(&p.events[i])
		}
		if n < len(p.events) {
			return nil
		}
	}
}

func (p *Probe) event(ev *tier.FlowEvent) {
	k, known := p.byID[ev.ID]
	var t *tracked
	if known {
		t = p.flows[k]
	}
	switch ev.Kind {
	case tier.LearnDone:
		p.stats.LearnDone++
		if t == nil || t.id != ev.ID {
			// The flow ended in software while the learn was
			// queued: take it out again.
			p.stats.LearnStale++
			if _, err := p.hw.Unlearn([]uint64{ev.ID}); err != nil {
				p.stats.UnlearnQueueFull++
			}
			return
		}
		p.observeLearn(ev.At.Sub(t.learnAt))
		// Only the probe's own state moves: the program treats every
		// state past DPI alike, and a write to the entry is a syscall
		// per flow, the largest of the offload's costs in the probe.
		t.state = flow.StateOffloaded
	case tier.LearnFailed, tier.LearnIgnored:
		if ev.Kind == tier.LearnFailed {
			p.stats.LearnFailed++
			if errors.Is(ev.Err, tier.ErrTableFull) {
				p.stats.LearnTableFull++
			}
		} else {
			p.stats.LearnIgnored++
		}
		if t != nil && t.id == ev.ID {
			delete(p.byID, ev.ID)
			p.keepInSoftware(k, t)
		}
	case tier.Unlearned:
		p.stats.Unlearned[ev.Cause]++
		delete(p.byID, ev.ID)
		if !known {
			k = ev.Key
			t = p.flows[k]
		}
		if t == nil {
			// Nothing in software any more: the NIC's counters
			// alone make the record.
			p.stats.OrphanEvents++
			p.emit(Record{Key: k, App: "unknown", Start: ev.Counters.First, End: ev.Counters.Last,
				Packets: ev.Counters.Packets, Bytes: ev.Counters.Bytes,
				HWPackets: ev.Counters.Packets, HWBytes: ev.Counters.Bytes,
				TCPFlags: ev.Counters.TCPFlags, Reason: endReason(k, reasonOf(ev.Cause), ev.Counters.TCPFlags), Final: true})
			return
		}
		t.id = 0
		addCounters(&t.hw, &ev.Counters)
		if ev.Cause == tier.CauseLifetime {
			// Still alive: reported as an active timeout, and
			// carried on in software.
			p.exportActive(k, t, p.cfg.Now())
			p.keepInSoftware(k, t)
			return
		}
		// The entry stays as it is and keeps counting late packets;
		// finishEnded reads and deletes it once EndGrace has passed.
		t.endAt, t.cause, t.state = p.cfg.Now(), ev.Cause, flow.StateEnded
		p.ending = append(p.ending, endingFlow{k, t})
	}
}

type endingFlow struct {
	k tier.FlowKey
	t *tracked
}

// finishEnded gives the flows the NIC ended their last record once their
// grace is over. The queue is in order of endAt, so only due flows are
// visited; one finished meanwhile by another path (a flush, a sweep) is
// no longer its key's flow and is passed over.
func (p *Probe) finishEnded(now time.Time) {
	n := 0
	for ; n < len(p.ending); n++ {
		e := p.ending[n]
		if now.Sub(e.t.endAt) < p.cfg.EndGrace {
			break
		}
		if p.flows[e.k] == e.t {
			p.finish(e.k, e.t)
		}
	}
	p.ending = append(p.ending[:0], p.ending[n:]...)
}

func addCounters(dst, src *tier.FlowCounters) {
	for d := 0; d < 2; d++ {
		dst.Packets[d] += src.Packets[d]
		dst.Bytes[d] += src.Bytes[d]
		dst.TCPFlags[d] |= src.TCPFlags[d]
	}
	if dst.First.IsZero() || (!src.First.IsZero() && src.First.Before(dst.First)) {
		dst.First = src.First
	}
	if src.Last.After(dst.Last) {
		dst.Last = src.Last
	}
}

// Flush unlearns every flow still in the NIC and reports every flow's last
// record (forced end), as on shutdown.
func (p *Probe) Flush() error {
	if p.hw != nil {
		ids := make([]uint64, 0, len(p.byID))
		for id := range p.byID {
			ids = append(ids, id)
		}
		if _, err := p.hw.Unlearn(ids); err != nil {
			p.stats.UnlearnQueueFull++
		}
	}
	var errs []error
	if p.hw != nil {
		// Close unlearns what is left (cause flush); its events stay
		// readable until drained.
		p.closing = true
		errs = append(errs, p.hw.Close(), p.drainEvents())
	}
	var keys []tier.FlowKey
	errs = append(errs, p.sw.Walk(func(k tier.FlowKey, _ *flow.Entry) bool {
		keys = append(keys, k)
		return true
	}))
	for _, k := range keys {
		t := p.flows[k]
		if t == nil {
			t = &tracked{app: "unknown"}
		}
		if t.cause == 0 {
			t.cause = tier.CauseFlush
		}
		p.finish(k, t)
	}
	// Flows the NIC ended whose software entry is gone: the NIC's
	// counters make their record.
	for _, e := range p.ending {
		if p.flows[e.k] == e.t {
			p.finish(e.k, e.t)
		}
	}
	p.ending = nil
	for k, d := range p.dpi {
		p.endDPI(k, d)
	}
	p.flushOps()
	p.publish()
	return errors.Join(errs...)
}

// TrackedFlowBytes is about what one tracked flow costs the Go heap (its
// tracked state, its entries in the flows and learned-id maps, its
// learn; ~700 B measured by TestTrackedFlowBytes): what a memory budget
// sizes MaxFlows with.
const TrackedFlowBytes = 768
