// SPDX-License-Identifier: Apache-2.0

package scaleout

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/control/telemetry"
)

// TestQuietCollectorNoticed: every collector reports every tick to every
// partition, routers quiet or not, so a detector tells a collector that
// stopped (its routers' share missing: an undercount) from one whose
// routers sent nothing.
func TestQuietCollectorNoticed(t *testing.T) {
	ctx := context.Background()
	nc := startNATS(t)
	cfg := detectorConfig(t)
	pt := Partitioner{N: partitions, Groups: cfg.Groups}
	stream := StreamConfig{Name: "HEALTH", Subject: "health"}
	// A detector owning one partition: heartbeats reach it too.
	c, err := Consume(ctx, nc, DetectorConfig{Partitioner: pt, Stream: stream, Owned: []int{5}}, telemetry.NewDetector(cfg), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var parts []*telemetry.Partial
	for _, name := range []string{"alive", "dies", "idle"} {
		pub, err := NewPublisher(ctx, nc, PublisherConfig{Name: name, Partitioner: pt, Stream: stream}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer pub.Close(ctx)
		parts = append(parts, telemetry.NewPartial(cfg, pub.Emit))
	}
	start := time.Unix(1700000000, 0)
	tick := 100 * time.Millisecond
	var last time.Time
	for k := range 20 {
		now := start.Add(time.Duration(k) * tick)
		// "alive" hears a router every tick, "idle" never; "dies" stops
		// after a second.
		parts[0].Add(now, []telemetry.Record{{Dst: victim, Packets: 1, Bytes: 100, Rate: 1, IPProto: 17}})
		for i, p := range parts {
			if i == 1 && k >= 10 {
				continue
			}
			p.Flush(now.Add(tick))
		}
		last = now
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		cs := c.Collectors()
		if len(cs) == 3 && cs[0].LastTick.Equal(last) && cs[2].LastTick.Equal(last) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("collectors seen: %+v", cs)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if q := c.Quiet(500 * time.Millisecond); !slices.Equal(q, []string{"dies"}) {
		t.Errorf("quiet %v, want [dies]; seen %+v", q, c.Collectors())
	}
}

// TestTickCompleted: a detector knows a tick is complete once every
// collector has reported it to every partition it owns, and not before.
func TestTickCompleted(t *testing.T) {
	ctx := context.Background()
	nc := startNATS(t)
	cfg := detectorConfig(t)
	pt := Partitioner{N: partitions, Groups: cfg.Groups}
	stream := StreamConfig{Name: "COMPLETE", Subject: "complete"}
	c, err := Consume(ctx, nc, DetectorConfig{Partitioner: pt, Stream: stream, Owned: []int{1, 2}}, telemetry.NewDetector(cfg), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var parts []*telemetry.Partial
	for _, name := range []string{"a", "b"} {
		pub, err := NewPublisher(ctx, nc, PublisherConfig{Name: name, Partitioner: pt, Stream: stream}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer pub.Close(ctx)
		parts = append(parts, telemetry.NewPartial(cfg, pub.Emit))
	}
	start := time.Unix(1700000000, 0)
	tick := 100 * time.Millisecond
	// Both collectors report a first tick: the detector knows them.
	for _, p := range parts {
		p.Add(start, []telemetry.Record{{Dst: victim, Packets: 1, Bytes: 100, Rate: 1, IPProto: 17}})
		p.Flush(start.Add(tick))
	}
	select {
	case <-c.Completed():
	case <-time.After(10 * time.Second):
		t.Fatalf("the first tick never completed; collectors %+v", c.Collectors())
	}
	// The first tick completes once every collector heard from has
	// reported it, which can be a alone: the publishers are separate, and
	// b's first messages may reach the stream after a's next ones. The
	// detector must know both before a's next tick means anything.
	for deadline := time.Now().Add(10 * time.Second); len(c.Collectors()) < 2; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("collectors %+v, want a and b", c.Collectors())
		}
	}
	next := start.Add(tick)
	want := next.UnixNano() / int64(tick)
	parts[0].Flush(next.Add(tick)) // an empty tick from a
	select {
	case got := <-c.Completed():
		t.Fatalf("tick %d complete with one collector of two", got)
	case <-time.After(300 * time.Millisecond):
	}
	parts[1].Add(next, []telemetry.Record{{Dst: victim, Packets: 1, Bytes: 100, Rate: 1, IPProto: 17}})
	parts[1].Flush(next.Add(tick))
	select {
	case got := <-c.Completed():
		if got != want {
			t.Errorf("tick %d complete, want %d", got, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no tick complete; collectors %+v", c.Collectors())
	}
}
