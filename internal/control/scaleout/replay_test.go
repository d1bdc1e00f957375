// SPDX-License-Identifier: Apache-2.0

package scaleout

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/control/telemetry"
)

// TestRestartedDetectorReplays: a detector started after the collectors
// published reads the stream's last seconds first (Replay), so its sums
// are those of the detector that ran all along, not empty for a window.
func TestRestartedDetectorReplays(t *testing.T) {
	ctx := context.Background()
	nc := startNATS(t)
	cfg := detectorConfig(t)
	pt := Partitioner{N: partitions, Groups: cfg.Groups}
	stream := StreamConfig{Name: "REPLAY", Subject: "replay"}
	running := telemetry.NewDetector(cfg)
	c1, err := Consume(ctx, nc, DetectorConfig{Partitioner: pt, Stream: stream}, running, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	pub, err := NewPublisher(ctx, nc, PublisherConfig{Name: "c", Partitioner: pt, Stream: stream}, nil)
	if err != nil {
		t.Fatal(err)
	}
	part := telemetry.NewPartial(cfg, pub.Emit)
	dec := decoder(t, 0, 1, 2, 3)
	start := time.Unix(1700000000, 0)
	var end time.Time
	for k, dgs := range feed(start) {
		for _, dg := range dgs {
			var rs []telemetry.Record
			if err := dec.Decode(routers[dg.router], dg.b, dg.at, func(r *telemetry.Record) { rs = append(rs, *r) }); err != nil {
				t.Fatal(err)
			}
			part.Add(dg.at, rs)
		}
		end = start.Add(time.Duration(k+1) * 100 * time.Millisecond)
		part.Flush(end)
	}
	if err := pub.Close(ctx); err != nil {
		t.Fatal(err)
	}
	wait := func(c *Consumer) {
		deadline := time.Now().Add(10 * time.Second)
		for c.Stats().Aggregates < pub.Stats().Aggregates {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d aggregates", c.Stats().Aggregates, pub.Stats().Aggregates)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	wait(c1)
	restarted := telemetry.NewDetector(cfg)
	c2, err := Consume(ctx, nc, DetectorConfig{Partitioner: pt, Stream: stream, Replay: 30 * time.Second}, restarted, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	wait(c2)
	late := telemetry.NewDetector(cfg)
	c3, err := Consume(ctx, nc, DetectorConfig{Partitioner: pt, Stream: stream, Replay: -1}, late, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	running.Judge(end)
	restarted.Judge(end)
	late.Judge(end)
	for _, dst := range []string{"198.51.100.7", "203.0.113.9", "2001:db8:1::7"} {
		a := netip.MustParseAddr(dst)
		want, got := running.Rates(a), restarted.Rates(a)
		if len(want) == 0 || len(got) != len(want) {
			t.Fatalf("%v: replayed %v, running %v", a, got, want)
		}
		for k, w := range want {
			if !near(got[k].PPS, w.PPS) {
				t.Errorf("%v %v: replayed %.1f pps, running %.1f", a, k, got[k].PPS, w.PPS)
			}
		}
		if late.Rates(a) != nil {
			t.Errorf("%v: a detector without replay has state", a)
		}
	}
}
