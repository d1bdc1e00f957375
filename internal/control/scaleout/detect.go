// SPDX-License-Identifier: Apache-2.0

package scaleout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tierwall/tierwall/internal/control/telemetry"
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
	// server and the detector (256), MaxPendingBytes their bytes (4 MiB,
	// at least the stream's MaxMsgSize, or a message could never come):
	// 256 full messages would be 120 MiB a partition.
	MaxPending      int
	MaxPendingBytes int
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
	// A partition named twice would be consumed twice, and counted twice.
	c.Owned = slices.Compact(slices.Sorted(slices.Values(c.Owned)))
	if c.Replay == 0 {
		c.Replay = 2 * time.Second
	}
	c.Replay = min(c.Replay, c.Stream.MaxAge)
	if c.MaxPending <= 0 {
		c.MaxPending = 256
	}
	if c.MaxPendingBytes <= 0 {
		c.MaxPendingBytes = 4 << 20
	}
	c.MaxPendingBytes = max(c.MaxPendingBytes, int(c.Stream.MaxMsgSize))
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
	// Untracked messages came from collectors past the first
	// maxCollectors names (their aggregates are merged, their health
	// not tracked).
	Untracked uint64
}

// maxCollectors bounds the collectors whose health a detector tracks:
// their names come over the bus.
const maxCollectors = 1024

// CollectorSeen is one collector as a detector last heard from it.
type CollectorSeen struct {
	Name string `json:"name"`
	// LastTick is the start of the latest tick it reported (every
	// collector reports every tick to every partition, empty or not).
	LastTick time.Time `json:"last_tick"`
	Messages uint64    `json:"messages"`
}

// Consumer feeds one telemetry.Detector from its partitions.
type Consumer struct {
	cfg DetectorConfig
	det *telemetry.Detector
	// tick is the detector's, read once: it never changes.
	tick time.Duration
	log  *slog.Logger
	ccs  []jetstream.ConsumeContext

	msgs, aggs, malformed, wrongTick, misrouted, invalid, untracked atomic.Uint64

	mu        sync.Mutex
	seen      map[string]*CollectorSeen
	last      map[string]map[int]int64 // collector → partition → tick
	complete  int64
	completed chan int64
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
	c := &Consumer{cfg: cfg, det: det, tick: det.Config().Tick, log: log, seen: map[string]*CollectorSeen{},
		last: map[string]map[int]int64{}, completed: make(chan int64, 1)}
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
			jetstream.PullMaxMessagesWithBytesLimit(cfg.MaxPending, cfg.MaxPendingBytes),
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
	if b.TickLen != c.tick {
		if c.wrongTick.Add(1) == 1 {
			c.log.Warn("scaleout: aggregates of another tick length", "collector", b.Collector,
				"tick", b.TickLen, "ours", c.tick)
		}
		return
	}
	c.saw(part, b.Collector, b.Tick, b.TickLen)
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

// saw records that collector reported tick to part, and signals
// Completed when every collector heard from lately has now reported a
// later tick to every partition owned.
func (c *Consumer) saw(part int, collector string, tick int64, tickLen time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.seen[collector]
	if s == nil {
		if len(c.seen) >= maxCollectors {
			c.untracked.Add(1)
			return
		}
		s = &CollectorSeen{Name: collector}
		c.seen[collector] = s
		c.last[collector] = map[int]int64{}
	}
	s.Messages++
	if at := time.Unix(0, tick*int64(tickLen)); at.After(s.LastTick) {
		s.LastTick = at
	}
	last := c.last[collector]
	if tick <= last[part] {
		return
	}
	last[part] = tick
	if done := c.completeLocked(); done > c.complete {
		c.complete = done
		select {
		case c.completed <- done:
		default:
		}
	}
}

// completeLocked is the latest tick every live collector (one that
// reported within quietAfter of the latest) has reported to every
// partition owned; 0 while one has not.
func (c *Consumer) completeLocked() int64 {
	var latest time.Time
	for _, s := range c.seen {
		if s.LastTick.After(latest) {
			latest = s.LastTick
		}
	}
	done := int64(math.MaxInt64)
	for name, s := range c.seen {
		if latest.Sub(s.LastTick) > quietAfter {
			continue
		}
		for _, p := range c.cfg.Owned {
			done = min(done, c.last[name][p])
		}
	}
	if done == math.MaxInt64 {
		return 0
	}
	return done
}

// quietAfter is how far behind the latest tick a collector is quiet.
const quietAfter = time.Second

// Completed signals a tick that every live collector has reported to
// every partition owned: judged at once, its records are judged as
// early as in one process, plus the bus, instead of waiting for the
// detector's own tick. One signal is held; more wait for it to be read.
func (c *Consumer) Completed() <-chan int64 { return c.completed }

// Collectors lists the collectors heard from, by name.
func (c *Consumer) Collectors() []CollectorSeen {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]CollectorSeen, 0, len(c.seen))
	for _, s := range c.seen {
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b CollectorSeen) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Quiet lists the collectors whose last tick is more than after before
// the latest any collector reported: their routers' share is missing
// from every sum (an undercount), while the others still report. When
// every collector is quiet, the bus or this detector is the problem,
// and none is listed.
func (c *Consumer) Quiet(after time.Duration) []string {
	all := c.Collectors()
	var latest time.Time
	for _, s := range all {
		if s.LastTick.After(latest) {
			latest = s.LastTick
		}
	}
	var out []string
	for _, s := range all {
		if latest.Sub(s.LastTick) > after {
			out = append(out, s.Name)
		}
	}
	return out
}

// Stats reads the counters.
func (c *Consumer) Stats() ConsumerStats {
	return ConsumerStats{Messages: c.msgs.Load(), Aggregates: c.aggs.Load(), Malformed: c.malformed.Load(),
		WrongTick: c.wrongTick.Load(), Misrouted: c.misrouted.Load(), Invalid: c.invalid.Load(), Untracked: c.untracked.Load()}
}

// Close stops consuming.
func (c *Consumer) Close() {
	for _, cc := range c.ccs {
		cc.Stop()
	}
}

// ErrNoServer: the NATS server could not be reached.
var ErrNoServer = errors.New("no NATS server")

// Auth is how a process proves itself to the NATS server and checks the
// server: PEM files for TLS (CA: the server's issuer; Cert and Key: this
// client's, for servers that verify clients) and a credentials file for
// servers in operator mode. Empty fields are not used; a user and
// password go in the URL.
type Auth struct {
	CA, Cert, Key string
	Credentials   string
}

// Connect connects to url with the client's reconnecting defaults, a
// name the server shows, and auth.
func Connect(url, name string, auth Auth) (*nats.Conn, error) {
	opts := []nats.Option{nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(500 * time.Millisecond)}
	if auth.CA != "" {
		opts = append(opts, nats.RootCAs(auth.CA))
	}
	if auth.Cert != "" {
		opts = append(opts, nats.ClientCert(auth.Cert, auth.Key))
	}
	if auth.Credentials != "" {
		opts = append(opts, nats.UserCredentials(auth.Credentials))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("%w at %s: %w", ErrNoServer, url, err)
	}
	return nc, nil
}
