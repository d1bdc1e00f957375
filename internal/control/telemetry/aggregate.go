// SPDX-License-Identifier: Apache-2.0

package telemetry

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"sync"
	"time"
)

// This file is network mode's seam for running collectors apart from
// detectors (internal/control/scaleout): a collector counts its records into
// per-destination aggregates over one tick with the detector's own
// counting code (Detector.count), and a detector merges aggregates from
// any number of collectors into the same per-destination state that Add
// feeds. Counting in one tick happens at that tick in both modes, so a
// detector fed aggregates reads the same rates as one fed the records.

// PerKind is one value per Kind.
type PerKind [numKinds]float64

// PortWeight is one entry of a destination's top ports.
type PortWeight struct {
	Port   uint16
	Weight float64
}

// Aggregate is what a collector saw of one destination in one tick:
// packets, bytes and flows per kind, already scaled by the sampling
// rate (and by a held sample's age and a long flow's duration, as Add
// scales them), and the summary a signature is built from.
type Aggregate struct {
	Dst netip.Addr
	// Tick is the tick counted in: time.Unix(0, Tick·DetectorConfig.Tick).
	Tick int64
	// Records is how many records went in (untracked counts them).
	Records uint32
	// First is the first record of the tick (the flood's first record,
	// when the destination was quiet before).
	First time.Time
	// Samples is the packets the exporters saw, before scaling: the
	// evidence MinSamples asks for.
	Samples               float64
	Packets, Bytes, Flows PerKind // bytes in bits, as the detector sums them
	// Proto is the packets by protocol: UDP, TCP, ICMP, other.
	Proto              [4]float64
	SrcPorts, DstPorts [4]PortWeight
	MinLen, MaxLen     uint16
	FlagsOR, FlagsAND  uint8
	HaveFlags          bool
}

// ErrBadAggregate: an aggregate that no collector could have counted
// (negative or non-finite values, no destination).
var ErrBadAggregate = errors.New("invalid aggregate")

func finite(xs ...float64) bool {
	for _, x := range xs {
		if x < 0 || math.IsNaN(x) || math.IsInf(x, 0) {
			return false
		}
	}
	return true
}

// Valid checks what a hostile or broken sender could put in an
// aggregate: it must not poison the detector's sums with NaN, Inf or
// negative counts.
func (a *Aggregate) Valid() error {
	if !a.Dst.IsValid() || a.Dst.Zone() != "" {
		return fmt.Errorf("%w: destination %v", ErrBadAggregate, a.Dst)
	}
	if !finite(a.Samples) || !finite(a.Proto[:]...) || !finite(a.Packets[:]...) || !finite(a.Bytes[:]...) || !finite(a.Flows[:]...) {
		return fmt.Errorf("%w: %v: a count is negative or not finite", ErrBadAggregate, a.Dst)
	}
	for _, pw := range append(a.SrcPorts[:], a.DstPorts[:]...) {
		if !finite(pw.Weight) {
			return fmt.Errorf("%w: %v: a port weight is negative or not finite", ErrBadAggregate, a.Dst)
		}
	}
	return nil
}

// Partial counts one collector's records into aggregates, one tick at a
// time: when a record of a later tick arrives, or Flush is called after
// the tick, the tick's aggregates (none, for a quiet tick) go to emit. Safe for concurrent use
// (the collector's sockets each call Add).
type Partial struct {
	det  *Detector // its configuration and counting code; its state unused
	emit func(tick int64, as []Aggregate)
	max  int

	mu       sync.Mutex
	tick     int64
	cur      map[netip.Addr]*partialDest
	overflow uint64 // records to destinations past max in their tick
	skipped  uint64 // records outside Protects
}

type partialDest struct {
	dest
	records uint32
}

// NewPartial counts with cfg's tick, window and scaling; at most
// cfg.MaxDests destinations a tick (records to others are counted in
// Overflow and dropped). emit is called with the lock held, in tick
// order; it must not keep as.
func NewPartial(cfg DetectorConfig, emit func(tick int64, as []Aggregate)) *Partial {
	d := NewDetector(cfg)
	return &Partial{det: d, emit: emit, max: d.cfg.MaxDests, cur: map[netip.Addr]*partialDest{}}
}

// Add counts records that arrived at now (a Sink).
func (p *Partial) Add(now time.Time, rs []Record) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.det.tickAt(now)
	if t > p.tick {
		p.flushLocked()
		p.tick = t
	}
	// A record of an earlier tick (a slow socket goroutine) counts in the
	// current one: its tick was emitted already.
	t = p.tick
	for i := range rs {
		r := &rs[i]
		if p.det.cfg.Protects != nil && !p.det.cfg.Protects(r.Dst) {
			p.skipped++
			continue
		}
		s := p.cur[r.Dst]
		if s == nil {
			if len(p.cur) >= p.max {
				p.overflow++
				continue
			}
			s = &partialDest{dest: dest{addr: r.Dst, tick: t}}
			p.cur[r.Dst] = s
		}
		p.det.count(&s.dest, t, now, r)
		s.records++
	}
}

// Flush emits the current tick's aggregates if now is past it: the
// collector calls it every tick, so that a quiet feed does not hold the
// last tick back.
func (p *Partial) Flush(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if t := p.det.tickAt(now); t > p.tick {
		p.flushLocked()
		p.tick = t
	}
}

// flushLocked emits the current tick's aggregates, none included: an
// empty tick tells the detectors that this collector is alive and its
// routers sent nothing, which a collector that died cannot.
func (p *Partial) flushLocked() {
	if p.tick == 0 {
		return // nothing counted yet
	}
	as := make([]Aggregate, 0, len(p.cur))
	for _, s := range p.cur {
		as = append(as, s.aggregate(p.tick))
	}
	p.emit(p.tick, as)
	clear(p.cur)
}

// Overflow is the records dropped past MaxDests in their tick, Skipped
// those to destinations outside Protects.
func (p *Partial) Overflow() (overflow, skipped uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.overflow, p.skipped
}

// Tick is the tick length counted in (the detectors must use the same).
func (p *Partial) Tick() time.Duration { return p.det.cfg.Tick }

func (s *partialDest) aggregate(tick int64) Aggregate {
	a := Aggregate{Dst: s.addr, Tick: tick, Records: s.records, First: s.first, Samples: s.r.samples,
		Packets: s.r.p, Bytes: s.r.b, Flows: s.r.f, Proto: s.sum.proto,
		MinLen: s.sum.minLen[0], MaxLen: s.sum.maxLen[0],
		FlagsOR: s.sum.flagsOR, FlagsAND: s.sum.flagsAND, HaveFlags: s.sum.haveFlags}
	for i := range s.sum.sport.port {
		a.SrcPorts[i] = PortWeight{s.sum.sport.port[i], s.sum.sport.w[i]}
		a.DstPorts[i] = PortWeight{s.sum.dport.port[i], s.sum.dport.w[i]}
	}
	return a
}

// AddAggregates merges collectors' aggregates, as Add counts records:
// the destination's sums, its group's total, the cap on destinations.
// An aggregate of a tick the destination has passed (it came late, over
// the bus) counts as decayed as if it had come on time. Invalid ones are
// skipped and counted in the result.
func (d *Detector) AddAggregates(as []Aggregate) (invalid int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := range as {
		a := &as[i]
		// A tick far ahead of this detector's would move the
		// destination's clock there, and every honest aggregate after it
		// would count as decayed to nothing until then: one message
		// would blind a destination.
		if a.Valid() != nil || (d.tick != 0 && a.Tick > d.tick+maxAheadTicks) {
			invalid++
			continue
		}
		if d.cfg.Protects != nil && !d.cfg.Protects(a.Dst) {
			d.outside += uint64(a.Records)
			continue
		}
		s := d.dests[a.Dst]
		if s == nil {
			g := d.cfg.Groups.Lookup(a.Dst)
			if len(d.dests) >= d.cfg.MaxDests {
				d.untracked += uint64(a.Records)
				if tot := d.total(g, a.Tick); tot != nil {
					d.merge(tot, a)
				}
				continue
			}
			s = &dest{addr: a.Dst, group: g, tick: a.Tick}
			d.dests[a.Dst] = s
		}
		d.merge(s, a)
		if tot := d.total(s.group, a.Tick); tot != nil {
			d.merge(tot, a)
		}
	}
	return invalid
}

// maxAheadTicks is how far ahead of the detector's last judged tick an
// aggregate may be (collectors' clocks run a little ahead, and a tick's
// aggregates may arrive before it is judged).
const maxAheadTicks = 20

func (d *Detector) merge(s *dest, a *Aggregate) {
	w := 1.0
	if s.tick > a.Tick {
		w = math.Pow(d.decay, float64(s.tick-a.Tick))
	} else {
		d.catchUp(s, a.Tick)
	}
	switch {
	case s.r.samples < d.cfg.MinSamples/4 && s.attack == nil:
		s.first = a.First
	case !s.first.IsZero() && d.tickAt(s.first) == a.Tick && a.First.Before(s.first):
		// Another collector's share of the tick that started the episode
		// began earlier: the first record is the earliest of them all.
		s.first = a.First
	}
	s.r.samples += a.Samples * w
	for k := range s.r.p {
		s.r.p[k] += a.Packets[k] * w
		s.r.b[k] += a.Bytes[k] * w
		s.r.f[k] += a.Flows[k] * w
	}
	sm := &s.sum
	for i := range sm.proto {
		sm.proto[i] += a.Proto[i] * w
	}
	for i := range a.SrcPorts {
		if a.SrcPorts[i].Weight > 0 {
			sm.sport.add(a.SrcPorts[i].Port, a.SrcPorts[i].Weight*w)
		}
		if a.DstPorts[i].Weight > 0 {
			sm.dport.add(a.DstPorts[i].Port, a.DstPorts[i].Weight*w)
		}
	}
	if a.HaveFlags {
		if !sm.haveFlags {
			sm.flagsOR, sm.flagsAND, sm.haveFlags = a.FlagsOR, a.FlagsAND, true
		}
		sm.flagsOR |= a.FlagsOR
		sm.flagsAND &= a.FlagsAND
	}
	// Lengths over whole windows, as count keeps them; a late tick of the
	// previous window still widens that window's range.
	slot := 0
	switch period := a.Tick * int64(d.cfg.Tick) / int64(d.cfg.Window); {
	case period > sm.lenPeriod:
		if period == sm.lenPeriod+1 {
			sm.minLen[1], sm.maxLen[1] = sm.minLen[0], sm.maxLen[0]
		} else {
			sm.minLen[1], sm.maxLen[1] = 0, 0
		}
		sm.minLen[0], sm.maxLen[0], sm.lenPeriod = 0, 0, period
	case period == sm.lenPeriod-1:
		slot = 1
	case period < sm.lenPeriod:
		return
	}
	if a.MinLen > 0 {
		if sm.minLen[slot] == 0 || a.MinLen < sm.minLen[slot] {
			sm.minLen[slot] = a.MinLen
		}
		sm.maxLen[slot] = max(sm.maxLen[slot], a.MaxLen)
	}
}

// Rates is a destination's current rates per kind (nil: no state), for
// comparing detectors fed differently.
func (d *Detector) Rates(dst netip.Addr) map[Kind]Limits {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.dests[dst]
	if s == nil {
		return nil
	}
	d.catchUp(s, d.now())
	out := map[Kind]Limits{}
	for k := range numKinds {
		if l := d.rate(s, Kind(k)); l.PPS > 0 {
			out[Kind(k)] = l
		}
	}
	return out
}

// Config is the detector's configuration with the defaults filled in
// (collectors and detectors of one deployment must share Tick).
func (d *Detector) Config() DetectorConfig {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cfg
}
