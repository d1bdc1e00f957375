// SPDX-License-Identifier: Apache-2.0

// Package export sends the flow probe's records to flow collectors, IPFIX
// or NetFlow v9 over UDP (package ipfix encodes). The probe hands records
// to Export, which never blocks: a bounded queue, and a full queue drops
// the record and counts it. One goroutine batches the queue into messages
// and sends them to every collector; a collector that is down (ICMP port
// unreachable turns into ECONNREFUSED on the connected socket) or slow
// costs its own send errors, never the probe's time.
package export

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tierwall/tierwall/internal/errdefs"
	"github.com/tierwall/tierwall/internal/probe/export/ipfix"
	"github.com/tierwall/tierwall/internal/probe/flowprobe"
)

// ErrInvalid reports a configuration the exporter cannot work with.
// It is errdefs.ErrInvalid to errors.Is.
var ErrInvalid = errdefs.Invalid("invalid flow export configuration")

// Defaults of Config.
const (
	DefaultQueueLen      = 8192
	DefaultFlushInterval = time.Second
	DefaultMaxBatch      = 1024
	sendTimeout          = 100 * time.Millisecond
)

// Collector is one flow collector.
type Collector struct {
	Address string `yaml:"address"` // host:port, UDP
	Format  string `yaml:"format"`  // "ipfix" (default) or "netflow9"
}

// Config is the flow export section of the probe's configuration.
type Config struct {
	Collectors []Collector `yaml:"collectors"`
	// ObservationDomain is the IPFIX observation domain ID (NetFlow v9
	// source ID).
	ObservationDomain uint32 `yaml:"observation_domain"`
	// Biflow sends IPFIX records as RFC 5103 biflows, one per flow;
	// default one record per direction (NetFlow v9 is always so).
	Biflow bool `yaml:"biflow"`
	// MTU bounds a message's UDP payload (default 1400, 512..65507).
	MTU int `yaml:"mtu"`
	// Templates are resent every TemplateRefresh (default 1m) and every
	// TemplateRefreshMessages messages (default 100), whichever first;
	// negative: not on that trigger.
	TemplateRefresh         time.Duration `yaml:"template_refresh"`
	TemplateRefreshMessages int           `yaml:"template_refresh_messages"`
	// EnterpriseNumber carries tierwall's own elements (counting tier,
	// NIC counts); default 32473, RFC 5612's number for documentation.
	EnterpriseNumber uint32 `yaml:"enterprise_number"`
	// QueueLen bounds the records waiting to be sent (default 8192);
	// beyond it records are dropped and counted.
	QueueLen int `yaml:"queue_len"`
	// FlushInterval is the longest a record waits for a message to fill
	// (default 1s).
	FlushInterval time.Duration `yaml:"flush_interval"`
}

// Stats are the exporter's counters, for metrics.
type Stats struct {
	Queued     uint64 // records accepted by Export
	Dropped    uint64 // records refused: queue full, or exporter closed
	Collectors []CollectorStats
}

// CollectorStats count what was sent to one collector.
type CollectorStats struct {
	Address    string
	Format     string
	Messages   uint64 // messages sent
	Records    uint64 // data records in them
	Bytes      uint64 // UDP payload bytes
	SendErrors uint64 // messages not sent (refused, timed out, ...)
	Lost       uint64 // data records in messages not sent
	LastError  string
}

// sink is one collector: its own export session and socket.
type sink struct {
	addr   string
	format ipfix.Format
	enc    *ipfix.Encoder
	conn   net.Conn

	messages, records, bytes, errs, lost atomic.Uint64
	lastErr                              atomic.Value // string
}

// Exporter sends records to the configured collectors.
type Exporter struct {
	cfg   Config
	sinks []*sink
	// pending is the queue: a slice under mu, not a channel, so that a
	// record does not wake the sending goroutine; it wakes on its ticker,
	// or through full once a message's worth is waiting. A wake-up per
	// record was a fifth of an offloading probe's CPU.
	pending []ipfix.Record
	full    chan struct{}

	queued, dropped atomic.Uint64
	loss            func() ipfix.Loss // what the probe could not report (SetLoss)
	mu              sync.Mutex
	closed          bool
	stop            chan struct{}
	done            chan struct{}
	closeOnce       sync.Once
}

// New validates cfg, opens a UDP socket per collector and starts the
// sending goroutine. Collector addresses are resolved once, here.
func New(cfg Config) (*Exporter, error) {
	x, err := newExporter(cfg, nil)
	if err != nil {
		return nil, err
	}
	go x.run()
	return x, nil
}

// newExporter builds an exporter without starting it; tests inject the
// encoders' clock.
func newExporter(cfg Config, now func() time.Time) (*Exporter, error) {
	if len(cfg.Collectors) == 0 {
		return nil, fmt.Errorf("%w: no collector", ErrInvalid)
	}
	if cfg.QueueLen == 0 {
		cfg.QueueLen = DefaultQueueLen
	}
	if cfg.QueueLen < 0 {
		return nil, fmt.Errorf("%w: queue length %d", ErrInvalid, cfg.QueueLen)
	}
	if cfg.FlushInterval == 0 {
		cfg.FlushInterval = DefaultFlushInterval
	}
	if cfg.FlushInterval < 0 {
		return nil, fmt.Errorf("%w: flush interval %v", ErrInvalid, cfg.FlushInterval)
	}
	x := &Exporter{cfg: cfg, full: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	for _, c := range cfg.Collectors {
		s, err := x.newSink(c, now)
		if err != nil {
			x.closeSinks()
			return nil, err
		}
		x.sinks = append(x.sinks, s)
	}
	return x, nil
}

func (x *Exporter) newSink(c Collector, now func() time.Time) (*sink, error) {
	name := c.Format
	if name == "" {
		name = "ipfix"
	}
	f, err := ipfix.ParseFormat(name)
	if err != nil {
		return nil, fmt.Errorf("%w: collector %s: %v", ErrInvalid, c.Address, err)
	}
	enc, err := ipfix.NewEncoder(ipfix.Options{Format: f, ObservationDomain: x.cfg.ObservationDomain, Biflow: x.cfg.Biflow,
		MaxMessageSize: x.cfg.MTU, TemplateRefresh: x.cfg.TemplateRefresh, TemplateRefreshMessages: x.cfg.TemplateRefreshMessages,
		EnterpriseNumber: x.cfg.EnterpriseNumber, Now: now})
	if err != nil {
		return nil, fmt.Errorf("%w: collector %s: %v", ErrInvalid, c.Address, err)
	}
	// Connected: the kernel reports the collector's ICMP port
	// unreachable on the next send, which is then counted.
	conn, err := net.Dial("udp", c.Address)
	if err != nil {
		return nil, fmt.Errorf("%w: collector %s: %v", ErrInvalid, c.Address, err)
	}
	s := &sink{addr: c.Address, format: f, enc: enc, conn: conn}
	s.lastErr.Store("")
	return s, nil
}

// Export queues r for export and returns at once; with the queue full,
// or the exporter closed, r is dropped and counted.
func (x *Exporter) Export(r flowprobe.Record) {
	x.mu.Lock() // against Close: a record queued is a record sent
	defer x.mu.Unlock()
	if x.closed || len(x.pending) >= x.cfg.QueueLen {
		x.dropped.Add(1)
		return
	}
	x.pending = append(x.pending, ipfixRecord(&r))
	x.queued.Add(1)
	if len(x.pending) == DefaultMaxBatch {
		select {
		case x.full <- struct{}{}:
		default:
		}
	}
}

// ipfixRecord is the engine's record as the encoder sends it: the one place
// where the probe's record meets the codec's.
func ipfixRecord(r *flowprobe.Record) ipfix.Record {
	return ipfix.Record{Proto: r.Key.Proto, Lo: r.Key.Lo, Hi: r.Key.Hi, InitDir: r.InitDir, App: r.App,
		Start: r.Start, End: r.End, Packets: r.Packets, Bytes: r.Bytes, HWPackets: r.HWPackets, HWBytes: r.HWBytes,
		TCPFlags: r.TCPFlags, Reason: uint8(r.Reason), Final: r.Final}
}

// take returns what is queued and empties the queue; spare is the slice
// to queue into next (the last one taken, emptied).
func (x *Exporter) take(spare []ipfix.Record) []ipfix.Record {
	x.mu.Lock()
	defer x.mu.Unlock()
	got := x.pending
	x.pending = spare[:0]
	return got
}

// lossEvery is the most often the loss record goes out while its counts
// change: they grow every packet of a flood.
var lossEvery = 10 * time.Second

// SetLoss has the exporter send what f reports the probe could not put in
// flow records (the software table's refusals, flows it tracks no more
// of), with the records this exporter dropped, to every IPFIX collector
// as an options record: when the counts change, at most every lossEvery,
// and at Close. A flood the probe could only partly follow then shows at
// the collector as such, not as less traffic. f is called on the
// exporter's goroutine.
func (x *Exporter) SetLoss(f func() ipfix.Loss) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.loss = f
}

// Stats returns the counters.
func (x *Exporter) Stats() Stats {
	st := Stats{Queued: x.queued.Load(), Dropped: x.dropped.Load()}
	for _, s := range x.sinks {
		st.Collectors = append(st.Collectors, CollectorStats{Address: s.addr, Format: s.format.String(),
			Messages: s.messages.Load(), Records: s.records.Load(), Bytes: s.bytes.Load(),
			SendErrors: s.errs.Load(), Lost: s.lost.Load(), LastError: s.lastErr.Load().(string)})
	}
	return st
}

// Close sends what is queued and closes the sockets. Records exported
// after Close are dropped and counted.
func (x *Exporter) Close() error {
	x.closeOnce.Do(func() {
		x.mu.Lock()
		x.closed = true
		x.mu.Unlock()
		close(x.stop)
		<-x.done
	})
	return nil
}

func (x *Exporter) closeSinks() {
	for _, s := range x.sinks {
		s.conn.Close()
	}
}

// run is the sending goroutine: it fills a batch from the queue and sends
// it when it is large enough, every FlushInterval (which also lets idle
// sessions refresh their templates), and at Close.
func (x *Exporter) run() {
	defer close(x.done)
	defer x.closeSinks()
	tick := time.NewTicker(x.cfg.FlushInterval)
	defer tick.Stop()
	var spare []ipfix.Record
	send := func() {
		got := x.take(spare)
		for batch := got; ; {
			n := min(len(batch), DefaultMaxBatch)
			for _, s := range x.sinks {
				for _, m := range s.enc.Encode(batch[:n]) {
					s.send(m)
				}
			}
			if batch = batch[n:]; len(batch) == 0 {
				break
			}
		}
		clear(got) // drop the records' strings
		spare = got[:0]
	}
	var lastLoss ipfix.Loss
	var lossAt time.Time
	sendLoss := func(final bool) {
		x.mu.Lock()
		f := x.loss
		x.mu.Unlock()
		if f == nil {
			return
		}
		l := f()
		l.NotSentFlows += x.dropped.Load()
		if l == lastLoss || !final && time.Since(lossAt) < lossEvery {
			return
		}
		for _, s := range x.sinks {
			for _, m := range s.enc.EncodeLoss(l) {
				s.send(m)
			}
		}
		lastLoss, lossAt = l, time.Now()
	}
	send() // templates first, so collectors know them before data
	for {
		select {
		case <-x.full:
		case <-tick.C:
			sendLoss(false)
		case <-x.stop:
			send() // Close set closed first: nothing is queued after this
			sendLoss(true)
			return
		}
		send()
	}
}

// send writes one message; failures are counted, never returned: flow
// export is best effort over UDP.
func (s *sink) send(m ipfix.Message) {
	err := s.conn.SetWriteDeadline(time.Now().Add(sendTimeout))
	if err == nil {
		_, err = s.conn.Write(m.Bytes)
	}
	if err != nil {
		s.errs.Add(1)
		s.lost.Add(uint64(m.Records))
		s.lastErr.Store(err.Error())
		return
	}
	s.messages.Add(1)
	s.records.Add(uint64(m.Records))
	s.bytes.Add(uint64(len(m.Bytes)))
}
