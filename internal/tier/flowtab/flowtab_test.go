// SPDX-License-Identifier: Apache-2.0

package flowtab

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/tier"
)

func learn(id uint64) tier.Learn {
	k, _ := tier.NewFlowKey(17, netip.MustParseAddrPort("192.0.2.1:1000"), netip.AddrPortFrom(netip.MustParseAddr("192.0.2.2"), uint16(id)))
	return tier.Learn{ID: id, Key: k, Action: tier.FlowDiscard}
}

// The queues both emulated firmwares serve from: bounded, in order, woken,
// counted, and closed with the queued learns failed.
func TestQueues(t *testing.T) {
	q := New(3, 10)
	if _, err := q.Learn([]tier.Learn{{ID: 1}}, 0); !errors.Is(err, tier.ErrInvalid) {
		t.Fatalf("an invalid learn was queued: %v", err)
	}
	if n, err := q.Learn([]tier.Learn{learn(1), learn(2)}, 5); n != 2 || err != nil {
		t.Fatalf("learn: %d, %v", n, err)
	}
	select {
	case <-q.Wake():
	default:
		t.Fatal("no wake-up")
	}
	if n, err := q.Unlearn([]uint64{1, 2}, 7); n != 1 || !errors.Is(err, tier.ErrQueueFull) {
		t.Fatalf("unlearn past the queue: %d, %v", n, err)
	}
	batch, head, more := q.Take(10, func(r Req) bool { return r.Ready <= 5 })
	if len(batch) != 2 || !batch[0].Learn || batch[1].ID != 2 || !more || head.Learn || head.ID != 1 || head.Ready != 7 {
		t.Fatalf("take: %+v, head %+v, more %v", batch, head, more)
	}
	q.Emit(tier.FlowEvent{Kind: tier.LearnDone, ID: 2})
	q.Emit(tier.FlowEvent{Kind: tier.Unlearned, ID: 2, Cause: tier.CauseIdle})
	if q.Room() != 8 {
		t.Fatalf("room %d, want 8", q.Room())
	}
	if c := q.Counts(); c.Learned != 1 || c.Unlearned[tier.CauseIdle] != 1 {
		t.Fatalf("counts %+v", c)
	}
	if _, err := q.Learn([]tier.Learn{learn(3)}, 0); err != nil {
		t.Fatal(err)
	}
	at := time.Unix(1, 0)
	q.Close(func() time.Time { return at })
	if _, err := q.Unlearn([]uint64{3}, 0); !errors.Is(err, tier.ErrClosed) {
		t.Fatalf("unlearn after close: %v", err)
	}
	buf := make([]tier.FlowEvent, 2)
	var got []tier.FlowEvent
	for {
		n, err := q.Events(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			if !errors.Is(err, tier.ErrClosed) {
				t.Fatal(err)
			}
			break
		}
	}
	if len(got) != 3 || got[2].Kind != tier.LearnFailed || got[2].ID != 3 || !errors.Is(got[2].Err, tier.ErrClosed) || !got[2].At.Equal(at) {
		t.Fatalf("events %+v", got)
	}
}

// Close stops a started firmware and waits for its loop to return.
func TestStartClose(t *testing.T) {
	q := New(1, 1)
	returned := false
	q.Start(func(stop <-chan struct{}) {
		<-stop
		returned = true
	})
	q.Close(time.Now)
	if !returned {
		t.Fatal("Close returned before the loop did")
	}
}
