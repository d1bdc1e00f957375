// SPDX-License-Identifier: Apache-2.0

// Package flowtab is what the NIC tier's two emulated flow-table firmwares
// share: the emulated NIC's (nicstage, over BPF maps) and the tc flower
// backend's worker (flower, over rtnetlink). Both put the application's
// learns and unlearns in a bounded FIFO, serve it from a goroutine of
// their own, report every outcome as an event in a bounded queue that
// never drops one, count the events by kind, and on Close fail the learns
// still queued. That is Queues. What stays in each backend is its
// kernel-facing half (how a flow enters the hardware, is read from it and
// leaves it, and how flows age) and its serving loop's pace.
package flowtab

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tierwall/tierwall/internal/tier"
)

// Sentinels of LearnIgnored events.
var (
	ErrDuplicateID  = errors.New("flow id already learned")
	ErrDuplicateKey = errors.New("flow key already learned")
	ErrUnknownID    = errors.New("no learned flow with this id")
)

// Req is a queued request: a learn, or an unlearn of ID.
type Req struct {
	Learn bool
	L     tier.Learn // a learn's request
	ID    uint64     // the flow (L.ID for a learn)
	Ready int64      // the firmware's clock: not to be served before (nicstage's latency); 0: at once
}

// Counts count the events a firmware reported, by kind.
type Counts struct {
	Learned      uint64
	LearnFailed  uint64
	LearnIgnored uint64
	Unlearned    [6]uint64 // by tier.Cause
}

// Queues are a firmware's request and event queues. Their methods are
// safe for concurrent use: the application calls Learn, Unlearn and
// Events while the firmware goroutine calls Take, Room and Emit. A
// backend guards the rest of its state with a lock of its own.
type Queues struct {
	queueLen, eventQueueLen int
	wake                    chan struct{}
	stop, done              chan struct{}
	started                 bool

	mu     sync.Mutex
	reqs   []Req // FIFO; reqs[0] is next
	events []tier.FlowEvent
	closed bool
	counts Counts
}

// New returns empty queues of queueLen requests and eventQueueLen events.
func New(queueLen, eventQueueLen int) *Queues {
	return &Queues{queueLen: queueLen, eventQueueLen: eventQueueLen, wake: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{})}
}

// Start runs serve, the firmware's loop, on a goroutine of its own until
// Close; serve returns once stop is closed. Tests that step a firmware by
// hand do not start it.
func (q *Queues) Start(serve func(stop <-chan struct{})) {
	q.started = true
	go func() {
		defer close(q.done)
		serve(q.stop)
	}()
}

// Wake is signalled when requests were queued: the firmware's cue.
func (q *Queues) Wake() <-chan struct{} { return q.wake }

// Learn checks every request and queues them in order, as many as fit,
// ready at ready on the firmware's clock.
func (q *Queues) Learn(reqs []tier.Learn, ready int64) (int, error) {
	for i, r := range reqs {
		if err := r.Key.Validate(); err != nil {
			return 0, fmt.Errorf("learn %d (flow %d): %w", i, r.ID, err)
		}
		if r.Action != tier.FlowForward && r.Action != tier.FlowDiscard {
			return 0, fmt.Errorf("%w: learn %d (flow %d): action %v", tier.ErrInvalid, i, r.ID, r.Action)
		}
		if r.Options.IdleTimeout < 0 || r.Options.Lifetime < 0 {
			return 0, fmt.Errorf("%w: learn %d (flow %d): negative timeout", tier.ErrInvalid, i, r.ID)
		}
	}
	return q.enqueue(len(reqs), func(i int) Req { return Req{Learn: true, L: reqs[i], ID: reqs[i].ID, Ready: ready} })
}

// Unlearn queues unlearn requests, in order with the learns.
func (q *Queues) Unlearn(ids []uint64, ready int64) (int, error) {
	return q.enqueue(len(ids), func(i int) Req { return Req{ID: ids[i], Ready: ready} })
}

// enqueue queues as many of n requests as fit, wakes the firmware when
// any did, and short of n says ErrQueueFull with the numbers.
func (q *Queues) enqueue(n int, mk func(int) Req) (int, error) {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return 0, tier.ErrClosed
	}
	room := max(0, min(n, q.queueLen-len(q.reqs)))
	for i := range room {
		q.reqs = append(q.reqs, mk(i))
	}
	q.mu.Unlock()
	if room > 0 {
		select {
		case q.wake <- struct{}{}:
		default:
		}
	}
	if room < n {
		return room, fmt.Errorf("%w: %d of %d queued, %d waiting", tier.ErrQueueFull, room, n, q.queueLen)
	}
	return n, nil
}

// Take removes up to n requests from the front, in order, as long as ok
// (nil: any) takes them, and returns them with the request now at the
// front, if any (more).
func (q *Queues) Take(n int, ok func(Req) bool) (batch []Req, head Req, more bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	i := 0
	for i < len(q.reqs) && i < n && (ok == nil || ok(q.reqs[i])) {
		i++
	}
	batch = q.reqs[:i:i]
	q.reqs = q.reqs[i:]
	if len(q.reqs) == 0 {
		q.reqs = nil // let the backing array go
		return batch, Req{}, false
	}
	return batch, q.reqs[0], true
}

// Room is how many more events the queue takes: every request and every
// flow the firmware ends yields one, so it takes room before it acts.
func (q *Queues) Room() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.eventQueueLen - len(q.events)
}

// Emit queues an event and counts it. The firmware takes room before it
// acts, so the queue only grows past its length by the flush at Close.
func (q *Queues) Emit(ev tier.FlowEvent) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.events = append(q.events, ev)
	c := &q.counts
	switch ev.Kind {
	case tier.LearnDone:
		c.Learned++
	case tier.LearnFailed:
		c.LearnFailed++
	case tier.LearnIgnored:
		c.LearnIgnored++
	case tier.Unlearned:
		if int(ev.Cause) < len(c.Unlearned) {
			c.Unlearned[ev.Cause]++
		}
	}
}

// Events moves up to len(buf) pending events, oldest first, into buf.
// After Close it still hands out what is left (the flush's Unlearned
// events), then ErrClosed.
func (q *Queues) Events(buf []tier.FlowEvent) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := copy(buf, q.events)
	q.events = q.events[n:]
	if len(q.events) == 0 {
		q.events = nil // let the backing array go
		if q.closed && n == 0 {
			return 0, tier.ErrClosed
		}
	}
	return n, nil
}

// Counts returns the events counted so far.
func (q *Queues) Counts() Counts {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.counts
}

// Close stops the firmware's goroutine and waits for it, then refuses
// requests from now on and fails the learns still queued (LearnFailed,
// ErrClosed, at now()): the first half of a backend's Close, before it
// flushes its flows. It is called once.
func (q *Queues) Close(now func() time.Time) {
	if q.started {
		close(q.stop)
		<-q.done
	}
	at := now()
	q.mu.Lock()
	q.closed = true
	pending := q.reqs
	q.reqs = nil
	q.mu.Unlock()
	for _, r := range pending {
		if r.Learn {
			q.Emit(tier.FlowEvent{Kind: tier.LearnFailed, ID: r.ID, Key: r.L.Key, Err: tier.ErrClosed, At: at})
		}
	}
}
