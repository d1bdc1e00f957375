// SPDX-License-Identifier: Apache-2.0

package scaleout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tierwall/tierwall/internal/telemetry"
)

// DetectorConfig configures the consuming side of a detector; zero
// fields take the defaults in parentheses.
type DetectorConfig struct {
	Partitioner Partitioner
	Stream      StreamConfig
	// Owned are the partitions this detector judges (all of them: nil).
	Owned []int
	// Replay (2s): at start, the aggregates of the last Replay are read
	// again from the stream, so that a restarted detector's decayed sums
	// are whole at once instead of after a window; at most the stream's
	// MaxAge. Negative: only new aggregates.
	Replay time.Duration
	// MaxPending bounds the messages buffered per partition between the
	// server and the detector (256).
	MaxPending int
}

func (c *DetectorConfig) defaults() {
	c.Stream.defaults()
	if c.Partitioner.N <= 0 {
		c.Partitioner.N = 1
	}
	if c.Owned == nil {
		for i := range c.Partitioner.N {
			c.Owned = append(c.Owned, i)
		}
	}
	if c.Replay == 0 {
		c.Replay = 2 * time.Second
	}
	c.Replay = min(c.Replay, c.Stream.MaxAge)
	if c.MaxPending <= 0 {
		c.MaxPending = 256
	}
}

// ConsumerStats are a detector's counters of what came over the bus.
type ConsumerStats struct {
	// Messages (with at least one aggregate of this partition) and
	// Aggregates were merged into the detector.
	Messages, Aggregates uint64
	// Malformed messages did not decode (ErrWire); WrongTick were counted
	// in another tick length than the detector's; Misrouted aggregates
	// belong to another partition (a collector with another partitioner,
	// or not ours); Invalid ones the detector refused.
	Malformed, WrongTick, Misrouted, Invalid uint64
}

// Consumer feeds one telemetry.Detector from its partitions.
type Consumer struct {
	cfg DetectorConfig
	det *telemetry.Detector
	log *slog.Logger
	ccs []jetstream.ConsumeContext

	msgs, aggs, malformed, wrongTick, misrouted, invalid atomic.Uint64
}

// Consume subscribes to cfg.Owned and merges every message into det
// until Close.
func Consume(ctx context.Context, nc *nats.Conn, cfg DetectorConfig, det *telemetry.Detector, log *slog.Logger) (*Consumer, error) {
	cfg.defaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	for _, p := range cfg.Owned {
		if p < 0 || p >= cfg.Partitioner.N {
			return nil, fmt.Errorf("partition %d is not in 0…%d", p, cfg.Partitioner.N-1)
		}
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("opening JetStream: %w", err)
	}
	if _, err := EnsureStream(ctx, js, cfg.Stream); err != nil {
		return nil, err
	}
	c := &Consumer{cfg: cfg, det: det, log: log}
	for _, p := range cfg.Owned {
		oc := jetstream.OrderedConsumerConfig{FilterSubjects: []string{Subject(cfg.Stream.Subject, p)}, DeliverPolicy: jetstream.DeliverNewPolicy}
		if cfg.Replay > 0 {
			from := time.Now().Add(-cfg.Replay)
			oc.DeliverPolicy, oc.OptStartTime = jetstream.DeliverByStartTimePolicy, &from
		}
		// Ordered: ephemeral, no acks, recreated by the client after a
		// gap or a server restart; one per partition, since the server
		// (2.9) takes one filter subject per consumer.
		cons, err := js.OrderedConsumer(ctx, cfg.Stream.Name, oc)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("consuming partition %d: %w", p, err)
		}
		part := p
		cc, err := cons.Consume(func(m jetstream.Msg) { c.handle(part, m.Data()) },
			jetstream.PullMaxMessages(cfg.MaxPending),
			jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
				log.Warn("scaleout: consuming aggregates", "partition", part, "err", err)
			}))
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("consuming partition %d: %w", p, err)
		}
		c.ccs = append(c.ccs, cc)
	}
	return c, nil
}

// handle checks one message and merges its aggregates.
func (c *Consumer) handle(part int, data []byte) {
	b, err := DecodeBatch(data)
	if err != nil {
		if c.malformed.Add(1) == 1 {
			c.log.Warn("scaleout: malformed aggregate message", "partition", part, "err", err)
		}
		return
	}
	if b.TickLen != c.det.Config().Tick {
		if c.wrongTick.Add(1) == 1 {
			c.log.Warn("scaleout: aggregates of another tick length", "collector", b.Collector,
				"tick", b.TickLen, "ours", c.det.Config().Tick)
		}
		return
	}
	// Every aggregate must belong here: one routed elsewhere would split
	// a destination's traffic between two detectors.
	as := b.Aggregates[:0]
	for _, a := range b.Aggregates {
		if c.cfg.Partitioner.Of(a.Dst) != part {
			c.misrouted.Add(1)
			continue
		}
		as = append(as, a)
	}
	if len(as) == 0 {
		return
	}
	c.invalid.Add(uint64(c.det.AddAggregates(as)))
	c.msgs.Add(1)
	c.aggs.Add(uint64(len(as)))
}

// Stats reads the counters.
func (c *Consumer) Stats() ConsumerStats {
	return ConsumerStats{Messages: c.msgs.Load(), Aggregates: c.aggs.Load(), Malformed: c.malformed.Load(),
		WrongTick: c.wrongTick.Load(), Misrouted: c.misrouted.Load(), Invalid: c.invalid.Load()}
}

// Close stops consuming.
func (c *Consumer) Close() {
	for _, cc := range c.ccs {
		cc.Stop()
	}
}

// ErrNoServer: the NATS server could not be reached.
var ErrNoServer = errors.New("no NATS server")

// Connect connects to url with the client's reconnecting defaults and a
// name the server shows.
func Connect(url, name string) (*nats.Conn, error) {
	nc, err := nats.Connect(url, nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(500*time.Millisecond))
	if err != nil {
		return nil, fmt.Errorf("%w at %s: %w", ErrNoServer, url, err)
	}
	return nc, nil
}
