// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"time"

	"github.com/tierwall/tierwall/internal/control/apiv1"
	"github.com/tierwall/tierwall/internal/control/ban"
	"github.com/tierwall/tierwall/internal/control/config"
	"github.com/tierwall/tierwall/internal/control/detect"
	"github.com/tierwall/tierwall/internal/datapath"
	"github.com/tierwall/tierwall/internal/rule"
	"github.com/tierwall/tierwall/internal/tier"
)

// What the API reads and changes. Every method runs on the loop goroutine
// through Do, so it sees and leaves a consistent state.

// Answers keep every field, whatever its value: operators key scripts
// and alerts on them, and a field that comes and goes reads as a schema
// change. What is not known yet is null, lists are [] when empty, and
// rates are rounded (roundRate): their last digits are noise.

func (d *Daemon) Status(ctx context.Context) (s apiv1.Status, err error) {
	err = d.Do(ctx, func() {
		s = apiv1.Status{Interface: d.cfg.Interface, Interval: d.cfg.Interval.String(), Hardware: d.card.name(), Started: d.started,
			Intervals: d.steps, Bans: d.store.Len(), MonitorOnly: d.cfg.Rails.MonitorOnly,
			Breaker: d.breaker, UnbanPPS: apiv1.RoundRate(d.unbanThreshold())}
		if !d.lastSnap.IsZero() {
			t := d.lastSnap
			s.LastRun = &t
		}
		if l, ok := d.det.learnedPPS(); ok {
			l = apiv1.RoundRate(l)
			s.LearnedPPS = &l
		}
	})
	return s, err
}

// apply narrows items, oldest first, by their time at.
func apply[T any](q apiv1.ListQuery, items []T, at func(*T) time.Time) []T {
	if !q.Since.IsZero() {
		i := 0
		for i < len(items) && !at(&items[i]).After(q.Since) {
			i++
		}
		items = items[i:]
	}
	if q.Limit > 0 && len(items) > q.Limit {
		items = items[len(items)-q.Limit:]
	}
	return items
}

// Rules lists the bans, oldest first.
func (d *Daemon) Rules(ctx context.Context, q apiv1.ListQuery) (out []apiv1.RuleView, err error) {
	err = d.Do(ctx, func() {
		for _, b := range d.store.All() {
			if !q.Since.IsZero() && !b.FirstSeen.After(q.Since) {
				continue
			}
			m, _ := d.store.Meter(b.Prefix)
			out = append(out, apiv1.RuleView{Ban: b, Packets: m.Packets, Tier: d.card.tierOf(b.Prefix)})
		}
	})
	slices.SortStableFunc(out, func(a, b apiv1.RuleView) int { return a.FirstSeen.Compare(b.FirstSeen) })
	out = apply(apiv1.ListQuery{Limit: q.Limit}, out, func(v *apiv1.RuleView) time.Time { return v.FirstSeen })
	if out == nil {
		out = []apiv1.RuleView{}
	}
	return out, err
}

// AddRule is an operator ban: refused on allowlisted or protected space.
func (d *Daemon) AddRule(ctx context.Context, p netip.Prefix, reason string, ttl time.Duration) (b ban.Ban, err error) {
	if err := datapath.CheckPrefix(p); err != nil {
		return b, fmt.Errorf("%w: %v", apiv1.ErrBadRequest, err)
	}
	if ttl < 0 {
		return b, fmt.Errorf("%w: negative ttl", apiv1.ErrBadRequest)
	}
	derr := d.Do(ctx, func() {
		now := time.Now()
		_, existed := d.store.Get(p)
		if b, err = d.store.Add(now, p, reason, ttl); err != nil {
			err = fmt.Errorf("%w: %v", apiv1.ErrBadRequest, err)
			return
		}
		if err = d.dp.Block(p); err != nil {
			if !existed {
				d.store.Remove(p)
			}
			if errors.Is(err, datapath.ErrTableFull) || errors.Is(err, rule.ErrInvalid) {
				err = fmt.Errorf("%w: %v", apiv1.ErrBadRequest, err)
			}
			return
		}
		d.dirty = true
		if !existed {
			d.Metrics.bans.Inc()
		}
		d.event(now, "ban", p, "operator: %s", reason)
		err = d.save(now)
	})
	return b, errors.Join(derr, err)
}

// AddRules bans every prefix as an operator ban, all or nothing: one rails
// check each, one data-plane batch, one save. A feed of 100K lines is one
// request and one batch, not 100K of each.
func (d *Daemon) AddRules(ctx context.Context, ps []netip.Prefix, reason string, ttl time.Duration) (added int, err error) {
	for _, p := range ps {
		if err := datapath.CheckPrefix(p); err != nil {
			return 0, fmt.Errorf("%w: %v", apiv1.ErrBadRequest, err)
		}
	}
	if ttl < 0 {
		return 0, fmt.Errorf("%w: negative ttl", apiv1.ErrBadRequest)
	}
	derr := d.Do(ctx, func() {
		now := time.Now()
		prev := map[netip.Prefix]ban.Ban{}
		var done []netip.Prefix
		undo := func() {
			for _, p := range done {
				d.store.Remove(p)
				if b, ok := prev[p]; ok {
					d.store.Put(b)
				}
			}
		}
		for _, p := range ps {
			if b, ok := d.store.Get(p); ok {
				prev[p] = b
			}
			if _, err = d.store.Add(now, p, reason, ttl); err != nil {
				undo()
				err = fmt.Errorf("%w: %v (nothing changed)", apiv1.ErrBadRequest, err)
				return
			}
			done = append(done, p)
		}
		if err = d.dp.Block(ps...); err != nil {
			undo()
			if errors.Is(err, datapath.ErrTableFull) || errors.Is(err, rule.ErrInvalid) {
				err = fmt.Errorf("%w: %v (nothing changed)", apiv1.ErrBadRequest, err)
			}
			return
		}
		added = len(ps) - len(prev)
		d.Metrics.bans.Add(float64(added))
		d.dirty = true
		d.event(now, "ban", netip.Prefix{}, "operator: %d prefixes (%d new): %s", len(ps), added, reason)
		err = d.save(now)
	})
	return added, errors.Join(derr, err)
}

func (d *Daemon) DeleteRule(ctx context.Context, p netip.Prefix) (err error) {
	derr := d.Do(ctx, func() {
		now := time.Now()
		if !d.store.Remove(p) {
			err = fmt.Errorf("%w: no ban on %s", apiv1.ErrNotFound, p)
			return
		}
		d.unblock(now, p)
		d.Metrics.unbans.Inc()
		d.dirty = true
		d.event(now, "unban", p, "operator")
		err = d.save(now)
	})
	return errors.Join(derr, err)
}

func (d *Daemon) Allowlist(ctx context.Context) (a apiv1.Allowlist, err error) {
	derr := d.Do(ctx, func() {
		a.DataPlane, err = d.dp.Allowed()
		a.Rails = d.store.Rails.Allow
	})
	if a.DataPlane == nil {
		a.DataPlane = []datapath.Rule{}
	}
	if a.Rails == nil {
		a.Rails = []netip.Prefix{}
	}
	return a, errors.Join(derr, err)
}

// SetAllow adds p to (or removes it from) the data plane's allowlist and
// the rails; adding lifts bans inside it.
func (d *Daemon) SetAllow(ctx context.Context, p netip.Prefix, add bool) (err error) {
	if err := datapath.CheckPrefix(p); err != nil {
		return fmt.Errorf("%w: %v", apiv1.ErrBadRequest, err)
	}
	derr := d.Do(ctx, func() {
		now := time.Now()
		if add {
			if err = d.dp.Allow(p); err != nil {
				return
			}
			d.store.Rails.Allow = append(d.store.Rails.Allow, p)
			// Bans inside the allowed prefix go; a broader ban stays, the
			// data plane's allowlist passes the allowed part of it.
			for _, b := range d.store.All() {
				if p.Bits() <= b.Prefix.Bits() && p.Contains(b.Prefix.Addr()) {
					d.store.Remove(b.Prefix)
					d.unblock(now, b.Prefix)
					d.Metrics.unbans.Inc()
					d.event(now, "unban", b.Prefix, "allowlisted by operator (%s)", p)
				}
			}
			d.dirty = true
			err = d.save(now)
			return
		}
		if err = d.dp.Disallow(p); errors.Is(err, datapath.ErrNoRule) {
			err = fmt.Errorf("%w: %s is not allowlisted", apiv1.ErrNotFound, p)
			return
		}
		var keep []netip.Prefix
		for _, a := range d.store.Rails.Allow {
			if a != p {
				keep = append(keep, a)
			}
		}
		d.store.Rails.Allow = keep
	})
	return errors.Join(derr, err)
}

// Top is the heaviest sources of the last interval that passed the filter.
func (d *Daemon) Top(ctx context.Context) (out []detect.Talker, err error) {
	err = d.Do(ctx, func() {
		for _, t := range d.obs.top {
			_, t.Banned = d.store.Get(netip.PrefixFrom(t.Src, t.Src.BitLen()))
			t.PPS, t.BPS, t.SYNPS = apiv1.RoundRate(t.PPS), math.Round(t.BPS), apiv1.RoundRate(t.SYNPS)
			out = append(out, t)
		}
	})
	if out == nil {
		out = []detect.Talker{}
	}
	return out, err
}

func (d *Daemon) Tiers(ctx context.Context) (t apiv1.Tiers, err error) {
	derr := d.Do(ctx, func() {
		if t.XDP, err = d.dp.Stats(); err != nil {
			return
		}
		if d.card.present() {
			t.Hardware = d.card.view()
			if vt, ok := d.card.table.(tier.Verdicts); ok {
				if t.Hardware.Verdicts, err = vt.Verdicts(); err != nil {
					err = fmt.Errorf("reading the hardware tier's counters: %w", err)
					return
				}
			} else if t.Hardware.Counters {
				m := d.Metrics
				m.mu.Lock()
				for _, v := range []string{"hit_drop", "hit_forward"} {
					t.Hardware.Verdicts[v] = m.hwTotal[v]
				}
				m.mu.Unlock()
			}
		}
	})
	return t, errors.Join(derr, err)
}

// Config returns the running configuration (the API token is never part
// of it).
func (d *Daemon) Config(ctx context.Context) (c config.Config, err error) {
	err = d.Do(ctx, func() { c = *d.cfg })
	return c, err
}
