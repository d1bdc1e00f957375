// SPDX-License-Identifier: Apache-2.0

package scaleout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tierwall/tierwall/internal/control/telemetry"
)

// PublisherConfig configures the publishing side of a collector; zero
// fields take the defaults in parentheses.
type PublisherConfig struct {
	// Name identifies the collector in its messages (its host name):
	// unique per collector, since detectors track collectors by it.
	Name string
	// TickLen is the tick the aggregates are counted in (the Partial's,
	// 100ms); a detector refuses messages of another.
	TickLen     time.Duration
	Partitioner Partitioner
	Stream      StreamConfig
	// MaxBatch is the most aggregates in one message (256, at most
	// MaxBatch).
	MaxBatch int
	// MaxInFlight bounds the publishes not yet acknowledged by the server
	// (256): NATS's own bound, past which a publish waits.
	MaxInFlight int
	// Queue bounds the messages encoded and waiting for a publish slot
	// (1024). A full queue drops the tick's message and counts it: the
	// decoder must never wait for the bus (the kernel would drop the
	// routers' datagrams instead, uncounted by us).
	Queue int
	// InterfaceEvery (5s) is how often a collector reports its
	// exporters' interfaces to the detectors (uplinks.go).
	InterfaceEvery time.Duration
}

func (c *PublisherConfig) defaults() {
	c.Stream.defaults()
	if c.MaxBatch <= 0 || c.MaxBatch > MaxBatch {
		c.MaxBatch = 256
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = 256
	}
	if c.Queue <= 0 {
		c.Queue = 1024
	}
	if c.Partitioner.N <= 0 {
		c.Partitioner.N = 1
	}
	if c.TickLen <= 0 {
		c.TickLen = 100 * time.Millisecond
	}
	if c.InterfaceEvery <= 0 {
		c.InterfaceEvery = 5 * time.Second
	}
}

// PublisherStats are the publisher's counters.
type PublisherStats struct {
	// Aggregates were queued for publishing, Messages handed to NATS;
	// Acked messages were stored by the stream.
	Aggregates, Messages, Acked uint64
	// Dropped aggregates (and DroppedMessages) found the queue full;
	// Errors are publishes the server refused or never acknowledged.
	Dropped, DroppedMessages, Errors uint64
}

// Publisher partitions a collector's aggregates, encodes them and
// publishes them to the stream.
type Publisher struct {
	cfg    PublisherConfig
	js     jetstream.JetStream
	log    *slog.Logger
	q      chan *nats.Msg
	done   chan struct{}
	closed atomic.Bool

	aggs, msgs, acked, dropped, droppedMsgs, errs atomic.Uint64
	// buckets are reused by Emit (it runs under the Partial's lock).
	buckets  [][]telemetry.Aggregate
	lastErr  atomic.Pointer[error]
	recreate chan struct{}
}

// NewPublisher makes sure the stream exists and starts publishing.
func NewPublisher(ctx context.Context, nc *nats.Conn, cfg PublisherConfig, log *slog.Logger) (*Publisher, error) {
	cfg.defaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Publisher{cfg: cfg, log: log, q: make(chan *nats.Msg, cfg.Queue), done: make(chan struct{}), recreate: make(chan struct{}, 1),
		buckets: make([][]telemetry.Aggregate, cfg.Partitioner.N)}
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(cfg.MaxInFlight),
		jetstream.WithPublishAsyncTimeout(5*time.Second),
		jetstream.WithPublishAsyncAckHandler(func(jetstream.JetStream, *nats.Msg, *jetstream.PubAck) { p.acked.Add(1) }),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, _ *nats.Msg, err error) { p.fail(err) }))
	if err != nil {
		return nil, fmt.Errorf("opening JetStream: %w", err)
	}
	p.js = js
	if _, err := EnsureStream(ctx, js, cfg.Stream); err != nil {
		return nil, err
	}
	go p.run()
	go p.recreateStream()
	return p, nil
}

func (p *Publisher) fail(err error) {
	if p.errs.Add(1) == 1 {
		p.log.Warn("scaleout: publishing aggregates failed", "err", err)
	}
	p.lastErr.Store(&err)
	// A standalone server keeps a memory stream's definition in memory:
	// after a restart the stream is gone and every publish fails until
	// someone creates it again.
	if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) {
		select {
		case p.recreate <- struct{}{}:
		default:
		}
	}
}

// recreateStream creates the stream again when publishes find none, at
// most once a second.
func (p *Publisher) recreateStream() {
	for {
		select {
		case <-p.done:
			return
		case <-p.recreate:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if _, err := EnsureStream(ctx, p.js, p.cfg.Stream); err != nil {
			p.log.Warn("scaleout: recreating the stream", "err", err)
		} else {
			p.log.Info("scaleout: stream recreated", "stream", p.cfg.Stream.Name)
		}
		cancel()
		select {
		case <-p.done:
			return
		case <-time.After(time.Second):
		}
	}
}

// Emit is the Partial's emit: it splits one tick's aggregates by
// partition into messages of at most MaxBatch and queues them.
func (p *Publisher) Emit(tick int64, as []telemetry.Aggregate) {
	if p.closed.Load() {
		return
	}
	for i := range p.buckets {
		p.buckets[i] = p.buckets[i][:0]
	}
	for i := range as {
		n := p.cfg.Partitioner.Of(as[i].Dst)
		p.buckets[n] = append(p.buckets[n], as[i])
	}
	tickLen := p.cfg.TickLen
	for part, b := range p.buckets {
		// A partition with nothing this tick still gets an empty batch:
		// its detector learns that this collector is alive.
		for first := true; first || len(b) > 0; first = false {
			n := min(len(b), p.cfg.MaxBatch)
			batch := Batch{Collector: p.cfg.Name, Partition: part, TickLen: tickLen, Tick: tick, Aggregates: b[:n]}
			m := &nats.Msg{Subject: Subject(p.cfg.Stream.Subject, part), Data: AppendBatch(make([]byte, 0, 64+n*160), &batch)}
			select {
			case p.q <- m:
				p.aggs.Add(uint64(n))
			default:
				p.dropped.Add(uint64(n))
				p.droppedMsgs.Add(1)
			}
			b = b[n:]
		}
	}
}

func (p *Publisher) run() {
	defer close(p.done)
	for m := range p.q {
		// The wait for a slot is bounded: past it the message is dropped
		// and counted, and the queue behind it keeps moving.
		if _, err := p.js.PublishMsgAsync(m, jetstream.WithStallWait(time.Second)); err != nil {
			p.fail(err)
			continue
		}
		p.msgs.Add(1)
	}
}

// Stats reads the counters.
func (p *Publisher) Stats() PublisherStats {
	return PublisherStats{Aggregates: p.aggs.Load(), Messages: p.msgs.Load(), Acked: p.acked.Load(),
		Dropped: p.dropped.Load(), DroppedMessages: p.droppedMsgs.Load(), Errors: p.errs.Load()}
}

// Close publishes what is queued, waits up to ctx for the server's
// acknowledgements, and stops. Emit must not be called after it.
func (p *Publisher) Close(ctx context.Context) error {
	if p.closed.Swap(true) {
		return nil
	}
	close(p.q)
	<-p.done
	select {
	case <-p.js.PublishAsyncComplete():
	case <-ctx.Done():
		return fmt.Errorf("waiting for %d acknowledgements: %w", p.js.PublishAsyncPending(), ctx.Err())
	}
	if e := p.lastErr.Load(); e != nil {
		return fmt.Errorf("%d publishes failed, the last: %w", p.errs.Load(), *e)
	}
	return nil
}

// CollectorConfig is one collector: the routers it listens to, how it
// counts, and where it publishes.
type CollectorConfig struct {
	Listen  []string
	Decoder telemetry.DecoderConfig
	// Detector: Tick, Window, MaxDests and Protects are used (counting is
	// the detector's); thresholds are the detectors' business.
	Detector  telemetry.DetectorConfig
	Publisher PublisherConfig
}

// Collector is a collector of its own: UDP sockets, the decoder, a
// Partial counting per tick, and a Publisher.
type Collector struct {
	dec  *telemetry.Decoder
	part *telemetry.Partial
	pub  *Publisher
	col  *telemetry.Collector
	stop chan struct{}
	wg   sync.WaitGroup

	ifSent, ifErrs atomic.Uint64
}

// StartCollector listens and publishes until Close.
func StartCollector(ctx context.Context, nc *nats.Conn, cfg CollectorConfig, log *slog.Logger) (*Collector, error) {
	dec, err := telemetry.NewDecoder(cfg.Decoder, log)
	if err != nil {
		return nil, fmt.Errorf("scaleout collector: %w", err)
	}
	c := &Collector{dec: dec, stop: make(chan struct{})}
	c.part = telemetry.NewPartial(cfg.Detector, func(tick int64, as []telemetry.Aggregate) { c.pub.Emit(tick, as) })
	cfg.Publisher.TickLen = c.part.Tick()
	if c.pub, err = NewPublisher(ctx, nc, cfg.Publisher, log); err != nil {
		return nil, err
	}
	if c.col, err = telemetry.Listen(cfg.Listen, dec, c.part.Add, log); err != nil {
		_ = c.pub.Close(ctx)
		return nil, fmt.Errorf("scaleout collector: %w", err)
	}
	c.wg.Add(2)
	go c.flush()
	pc := c.pub.cfg
	go c.reportInterfaces(nc, pc.Name, InterfacesSubject(pc.Stream.Subject), pc.InterfaceEvery, c.pub.log)
	return c, nil
}

// flush closes every tick just after it ends, so that a tick's last
// aggregates do not wait for the next record.
func (c *Collector) flush() {
	defer c.wg.Done()
	tick := c.part.Tick()
	for {
		next := time.Now().Truncate(tick).Add(tick + time.Millisecond)
		select {
		case <-c.stop:
			return
		case <-time.After(time.Until(next)):
			c.part.Flush(time.Now())
		}
	}
}

// Addrs are the addresses listened on.
func (c *Collector) Addrs() []netip.AddrPort { return c.col.Addrs() }

// Decoder is the collector's decoder (its per-exporter statistics).
func (c *Collector) Decoder() *telemetry.Decoder { return c.dec }

// Publisher is the collector's publisher (its counters).
func (c *Collector) Publisher() *Publisher { return c.pub }

// Partial is the collector's counting (its overflow counters).
func (c *Collector) Partial() *telemetry.Partial { return c.part }

// Close stops listening, publishes the last tick and waits up to ctx for
// it to be acknowledged.
func (c *Collector) Close(ctx context.Context) error {
	err := c.col.Close()
	close(c.stop)
	c.wg.Wait()
	c.part.Flush(time.Now().Add(time.Hour))
	return errors.Join(err, c.pub.Close(ctx))
}

// Status is the collector's state for the operator (/v1/telemetry):
// what it listens on and hears from its exporters; no attacks nor plan
// (its detectors judge).
func (c *Collector) Status() telemetry.Status {
	st := telemetry.Status{Enabled: true, Mode: telemetry.Monitor, Listen: c.Addrs(), Exporters: c.dec.Exporters(),
		Attacks: []telemetry.Attack{}, Plan: []telemetry.Upstream{}, Top: []telemetry.Talker{}}
	st.Unknown, st.LastUnknown = c.dec.Unknown()
	if st.Exporters == nil {
		st.Exporters = []telemetry.ExporterStats{}
	}
	return st
}
