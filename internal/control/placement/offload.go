// SPDX-License-Identifier: Apache-2.0

package placement

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"time"

	"github.com/tierwall/tierwall/internal/tier"
)

// Counted is a blocked source with its cumulative packet counter in the
// software tier (XDP per-rule counters).
type Counted struct {
	Src     netip.Addr
	Packets uint64
}

// Offloader keeps a hardware table as a cache of the XDP blacklist, and is
// the only code that touches the table: each interval Measure reads it
// once and rates every blocked source from the growth of its counters in
// both tiers, Evict takes a lifted ban out (keeping its last counters),
// and Place runs Listing 1 and applies the plan (removals first, the table
// being full when swaps are due). Only source drop rules are managed;
// other rules in the table are left alone.
type Offloader struct {
	Table  tier.Table
	Params Params // K defaults to the table's capacity

	last    map[netip.Addr][2]uint64 // cumulative packets: [software, hardware]
	retired map[netip.Addr]uint64    // hardware packets of rules since removed
	// frozen holds, for tables without per-rule counters (n-tuple), the
	// rate a source had in software when it was offloaded: its hardware
	// drops leave no trace, so that rate stands until it is evicted (by a
	// candidate that beats it by the threshold) and measured again in XDP.
	frozen  map[netip.Addr]float64
	lastAt  time.Time
	latency time.Duration // EWMA of measured install/remove latency

	// What the last Measure read and computed, for Place and the readers.
	live  map[netip.Addr]uint64 // hardware counter of each source rule in the table
	inHW  []netip.Addr
	rep   *Report
	first bool
}

// Report is what one interval did.
type Report struct {
	Plan     Plan[netip.Addr]
	Rates    map[netip.Addr]float64
	Applied  int           // hardware updates that succeeded
	Failed   []error       // updates that did not (the rest still applied)
	Latency  time.Duration // current estimate of one update's cost
	HWPkts   uint64        // packets hardware dropped since the last Measure
	SWPkts   uint64        // packets XDP dropped since the last Measure
	Interval time.Duration
}

// Step is Measure then Place: one placement round at time now.
func (o *Offloader) Step(ctx context.Context, now time.Time, blocked []Counted) (*Report, error) {
	if _, err := o.Measure(ctx, now, blocked); err != nil {
		return nil, err
	}
	return o.Place(ctx)
}

// Measure reads the table once and rates every blocked source (packets
// per second over both tiers since the previous Measure; the frozen rate
// for a blind hardware entry). The first Measure only records counters:
// rates need two readings. The rates are those the ban monitor uses.
func (o *Offloader) Measure(ctx context.Context, now time.Time, blocked []Counted) (map[netip.Addr]float64, error) {
	entries, err := o.Table.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading hardware table: %w", err)
	}
	o.live = map[netip.Addr]uint64{}
	o.inHW = o.inHW[:0]
	blind := map[netip.Addr]bool{} // in hardware without counters
	for _, e := range entries {
		if e.Rule.Action != tier.Drop || e.Rule.Match.IsFlow() {
			continue
		}
		if !e.HasCounters {
			blind[e.Rule.Match.Src] = true
		}
		o.live[e.Rule.Match.Src] = e.Counters.Packets
		o.inHW = append(o.inHW, e.Rule.Match.Src)
	}
	if o.latency == 0 {
		o.latency = o.Params.UpdateLatency
	}
	rep := &Report{Rates: map[netip.Addr]float64{}, Latency: o.latency}
	cur := make(map[netip.Addr][2]uint64, len(blocked))
	for _, b := range blocked {
		cur[b.Src] = [2]uint64{b.Packets, o.HWPackets(b.Src)}
	}
	first := o.last == nil
	dt := now.Sub(o.lastAt)
	rep.Interval = dt
	for _, b := range blocked {
		c, p := cur[b.Src], o.last[b.Src]
		// A counter below its last reading was reset (rule re-created,
		// hardware slot reused): count from zero.
		d := [2]uint64{c[0] - p[0], c[1] - p[1]}
		for i := range d {
			if c[i] < p[i] {
				d[i] = c[i]
			}
		}
		rep.SWPkts += d[0]
		rep.HWPkts += d[1]
		r := 0.0
		if !first && dt > 0 {
			r = float64(d[0]+d[1]) / dt.Seconds()
		}
		if f, ok := o.frozen[b.Src]; ok && blind[b.Src] {
			r = f
		}
		rep.Rates[b.Src] = r
	}
	o.last, o.lastAt, o.rep, o.first = cur, now, rep, first
	return rep.Rates, nil
}

// Place runs Listing 1 over the sources the last Measure rated (less those
// evicted since) and applies the plan.
func (o *Offloader) Place(ctx context.Context) (*Report, error) {
	rep := o.rep
	if rep == nil {
		return nil, errors.New("placement: Place before Measure")
	}
	o.rep = nil
	all := make([]Source[netip.Addr], 0, len(rep.Rates))
	for k, r := range rep.Rates {
		if o.first {
			r = 0 // still drop unblocked sources from hardware right away
		}
		all = append(all, Source[netip.Addr]{Key: k, Rate: r})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Key.Less(all[j].Key) }) // deterministic ties
	p := o.Params
	if p.K == 0 {
		p.K = o.Table.Caps().Capacity
	}
	if rep.Interval > 0 && !o.first {
		p.Interval = rep.Interval
	}
	p.UpdateLatency = o.latency
	rep.Plan = Decide(all, o.inHW, p)
	for _, k := range rep.Plan.Remove {
		lat, err := o.remove(ctx, k)
		o.record(rep, lat, err)
	}
	for _, k := range rep.Plan.Install {
		lat, err := o.Table.Install(ctx, tier.Rule{Match: tier.SourceMatch(k), Action: tier.Drop})
		o.record(rep, lat, err)
		if err == nil {
			o.live[k] = 0
			o.inHW = append(o.inHW, k)
			if !o.Table.Caps().Counters {
				if o.frozen == nil {
					o.frozen = map[netip.Addr]float64{}
				}
				o.frozen[k] = rep.Rates[k]
			}
		}
		if errors.Is(err, tier.ErrTableFull) {
			break
		}
	}
	rep.Latency = o.latency
	return rep, nil
}

// remove takes src's rule out of the table and keeps its last counters.
func (o *Offloader) remove(ctx context.Context, src netip.Addr) (time.Duration, error) {
	last, lat, err := o.Table.Remove(ctx, tier.SourceMatch(src))
	if err != nil {
		return lat, err
	}
	if o.retired == nil {
		o.retired = map[netip.Addr]uint64{}
	}
	o.retired[src] += last.Packets
	delete(o.live, src)
	delete(o.frozen, src)
	o.inHW = slices.DeleteFunc(o.inHW, func(a netip.Addr) bool { return a == src })
	return lat, nil
}

// Evict takes a source whose ban was lifted out of the table (if it is
// there) and out of the round in progress. Its last hardware counters are
// kept until Forget, so the packets it dropped stay accounted.
func (o *Offloader) Evict(ctx context.Context, src netip.Addr) error {
	if o.rep != nil {
		delete(o.rep.Rates, src)
	}
	if !o.InHardware(src) {
		return nil
	}
	_, err := o.remove(ctx, src)
	if errors.Is(err, tier.ErrNoRule) {
		return nil
	}
	return err
}

// InHardware reports whether src had a rule in the table at the last
// reading (or was installed since).
func (o *Offloader) InHardware(src netip.Addr) bool { _, ok := o.live[src]; return ok }

// Occupancy is the number of source rules in the table at the last reading.
func (o *Offloader) Occupancy() int { return len(o.inHW) }

// HWPackets is everything hardware has dropped from src while this
// Offloader ran: the live counter at the last reading plus those of rules
// it removed.
func (o *Offloader) HWPackets(src netip.Addr) uint64 {
	return o.retired[src] + o.live[src]
}

// Forget drops what is remembered of a source that left the blacklist.
func (o *Offloader) Forget(src netip.Addr) {
	delete(o.retired, src)
	delete(o.last, src)
}

// Flush removes every rule the table lists (shutdown) and forgets them.
func (o *Offloader) Flush(ctx context.Context) error {
	err := tier.Flush(ctx, o.Table)
	o.live, o.inHW, o.frozen = map[netip.Addr]uint64{}, nil, nil
	return err
}

func (o *Offloader) record(rep *Report, lat time.Duration, err error) {
	if err != nil {
		rep.Failed = append(rep.Failed, err)
		return
	}
	rep.Applied++
	if lat > 0 {
		if o.latency == 0 {
			o.latency = lat
		} else {
			o.latency = (7*o.latency + lat) / 8
		}
	}
}

// Latency is the current estimate of one hardware update's cost.
func (o *Offloader) Latency() time.Duration {
	if o.latency == 0 {
		return o.Params.UpdateLatency
	}
	return o.latency
}

// Retired is what the rules of src that this Offloader removed had dropped.
func (o *Offloader) Retired(src netip.Addr) uint64 { return o.retired[src] }
