package placement

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/tierwall/tierwall/internal/tier"
)

// Counted is a blocked source with its cumulative packet counter in the
// software tier (XDP per-rule counters).
type Counted struct {
	Src     netip.Addr
	Packets uint64
}

// Offloader keeps a hardware table as a cache of the XDP blacklist: each
// Step rates every blocked source from the growth of its counters in both
// tiers since the previous Step, runs Listing 1, and applies the plan
// (removals first, the table being full when swaps are due). Only source
// drop rules are managed; other rules in the table are left alone.
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
}

// Report is what one Step did.
type Report struct {
	Plan     Plan[netip.Addr]
	Rates    map[netip.Addr]float64
	Applied  int           // hardware updates that succeeded
	Failed   []error       // updates that did not (the rest still applied)
	Latency  time.Duration // current estimate of one update's cost
	HWPkts   uint64        // packets hardware dropped since the last Step
	SWPkts   uint64        // packets XDP dropped since the last Step
	Interval time.Duration
}

// Step runs one placement round at time now over the current blacklist.
// The first Step only records counters: rates need two readings.
func (o *Offloader) Step(ctx context.Context, now time.Time, blocked []Counted) (*Report, error) {
	entries, err := o.Table.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading hardware table: %w", err)
	}
	hwCnt := map[netip.Addr]uint64{}
	blind := map[netip.Addr]bool{} // in hardware without counters
	var inHW []netip.Addr
	for _, e := range entries {
		if e.Rule.Action != tier.Drop || e.Rule.Match.IsFlow() {
			continue
		}
		if !e.HasCounters {
			blind[e.Rule.Match.Src] = true
		}
		hwCnt[e.Rule.Match.Src] = e.Counters.Packets
		inHW = append(inHW, e.Rule.Match.Src)
	}
	for src, n := range o.retired {
		hwCnt[src] += n
	}
	if o.latency == 0 {
		o.latency = o.Params.UpdateLatency
	}
	rep := &Report{Rates: map[netip.Addr]float64{}, Latency: o.latency}
	cur := make(map[netip.Addr][2]uint64, len(blocked))
	for _, b := range blocked {
		cur[b.Src] = [2]uint64{b.Packets, hwCnt[b.Src]}
	}
	first := o.last == nil
	dt := now.Sub(o.lastAt)
	rep.Interval = dt
	var all []Source[netip.Addr]
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
		all = append(all, Source[netip.Addr]{Key: b.Src, Rate: r})
	}
	o.last, o.lastAt = cur, now
	if first {
		// Still drop unblocked sources from hardware right away.
		all = all[:0]
		for _, b := range blocked {
			all = append(all, Source[netip.Addr]{Key: b.Src, Rate: 0})
		}
	}

	p := o.Params
	if p.K == 0 {
		p.K = o.Table.Caps().Capacity
	}
	if dt > 0 && !first {
		p.Interval = dt
	}
	p.UpdateLatency = o.latency
	rep.Plan = Decide(all, inHW, p)
	for _, k := range rep.Plan.Remove {
		last, lat, err := o.Table.Remove(ctx, tier.SourceMatch(k))
		o.record(rep, lat, err)
		if err == nil {
			if o.retired == nil {
				o.retired = map[netip.Addr]uint64{}
			}
			o.retired[k] += last.Packets
			delete(o.frozen, k)
		}
	}
	for _, k := range rep.Plan.Install {
		lat, err := o.Table.Install(ctx, tier.Rule{Match: tier.SourceMatch(k), Action: tier.Drop})
		o.record(rep, lat, err)
		if err == nil && !o.Table.Caps().Counters {
			if o.frozen == nil {
				o.frozen = map[netip.Addr]float64{}
			}
			o.frozen[k] = rep.Rates[k]
		}
		if errors.Is(err, tier.ErrTableFull) {
			break
		}
	}
	rep.Latency = o.latency
	return rep, nil
}

// HWPackets is everything hardware has dropped from src while this
// Offloader ran: live counters plus those of rules it removed. live is the
// source's current counter in the table (0 when not there).
func (o *Offloader) HWPackets(src netip.Addr, live uint64) uint64 {
	return o.retired[src] + live
}

// Forget drops the retired count of a source that left the blacklist.
func (o *Offloader) Forget(src netip.Addr) { delete(o.retired, src) }

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
