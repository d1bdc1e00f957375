package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/tierwall/tierwall/internal/ban"
	"github.com/tierwall/tierwall/internal/config"
	"github.com/tierwall/tierwall/internal/datapath"
	"github.com/tierwall/tierwall/internal/detect"
	"github.com/tierwall/tierwall/internal/rule"
)

// What the API reads and changes. Every method runs on the loop goroutine
// through Do, so it sees and leaves a consistent state.

// ErrBadRequest marks a request the caller must fix (4xx).
var ErrBadRequest = errors.New("bad request")

// Status is the daemon's overview.
type Status struct {
	Interface   string    `json:"interface"`
	Interval    string    `json:"interval"`
	Hardware    string    `json:"hardware"`
	Started     time.Time `json:"started"`
	Intervals   uint64    `json:"intervals"`
	LastRun     time.Time `json:"last_interval,omitzero"`
	Bans        int       `json:"bans"`
	MonitorOnly bool      `json:"monitor_only"`
	Breaker     bool      `json:"circuit_breaker_open"`
	UnbanPPS    float64   `json:"unban_threshold_pps"`
	LearnedPPS  float64   `json:"learned_threshold_pps,omitempty"`
}

func (d *Daemon) Status(ctx context.Context) (s Status, err error) {
	err = d.Do(ctx, func() {
		s = Status{Interface: d.cfg.Interface, Interval: d.cfg.Interval.String(), Hardware: d.hwName(), Started: d.started,
			Intervals: d.steps, LastRun: d.lastSnap, Bans: d.store.Len(), MonitorOnly: d.cfg.Rails.MonitorOnly,
			Breaker: d.breaker, UnbanPPS: d.unbanThreshold()}
		if d.rate != nil {
			s.LearnedPPS, _ = d.rate.Learned()
		}
	})
	return s, err
}

// RuleView is a ban with its current rate and counters.
type RuleView struct {
	ban.Ban
	Packets uint64 `json:"packets"` // both tiers, since the rule was created
}

func (d *Daemon) Rules(ctx context.Context) (out []RuleView, err error) {
	err = d.Do(ctx, func() {
		for _, b := range d.store.All() {
			m, _ := d.store.Meter(b.Prefix)
			out = append(out, RuleView{Ban: b, Packets: m.Packets})
		}
	})
	if out == nil {
		out = []RuleView{}
	}
	return out, err
}

// AddRule is an operator ban: refused on allowlisted or protected space.
func (d *Daemon) AddRule(ctx context.Context, p netip.Prefix, reason string, ttl time.Duration) (b ban.Ban, err error) {
	if err := datapath.CheckPrefix(p); err != nil {
		return b, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	if ttl < 0 {
		return b, fmt.Errorf("%w: negative ttl", ErrBadRequest)
	}
	derr := d.Do(ctx, func() {
		now := time.Now()
		_, existed := d.store.Get(p)
		if b, err = d.store.Add(now, p, reason, ttl); err != nil {
			err = fmt.Errorf("%w: %v", ErrBadRequest, err)
			return
		}
		if err = d.dp.Block(p); err != nil {
			if !existed {
				d.store.Remove(p)
			}
			if errors.Is(err, datapath.ErrTableFull) || errors.Is(err, rule.ErrInvalid) {
				err = fmt.Errorf("%w: %v", ErrBadRequest, err)
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
			return 0, fmt.Errorf("%w: %v", ErrBadRequest, err)
		}
	}
	if ttl < 0 {
		return 0, fmt.Errorf("%w: negative ttl", ErrBadRequest)
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
				err = fmt.Errorf("%w: %v (nothing changed)", ErrBadRequest, err)
				return
			}
			done = append(done, p)
		}
		if err = d.dp.Block(ps...); err != nil {
			undo()
			if errors.Is(err, datapath.ErrTableFull) || errors.Is(err, rule.ErrInvalid) {
				err = fmt.Errorf("%w: %v (nothing changed)", ErrBadRequest, err)
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

// ErrNotFound is a rule or entry that does not exist (404).
var ErrNotFound = errors.New("not found")

func (d *Daemon) DeleteRule(ctx context.Context, p netip.Prefix) (err error) {
	derr := d.Do(ctx, func() {
		now := time.Now()
		if !d.store.Remove(p) {
			err = fmt.Errorf("%w: no ban on %s", ErrNotFound, p)
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

// Allowlist is the data plane's allowlist (passes whatever else matches)
// and the rails' never-ban list from the configuration.
type Allowlist struct {
	DataPlane []datapath.Rule `json:"data_plane"`
	Rails     []netip.Prefix  `json:"rails"`
}

func (d *Daemon) Allowlist(ctx context.Context) (a Allowlist, err error) {
	derr := d.Do(ctx, func() {
		a.DataPlane, err = d.dp.Allowed()
		a.Rails = d.store.Rails.Allow
	})
	if a.DataPlane == nil {
		a.DataPlane = []datapath.Rule{}
	}
	return a, errors.Join(derr, err)
}

// SetAllow adds p to (or removes it from) the data plane's allowlist and
// the rails; adding lifts bans inside it.
func (d *Daemon) SetAllow(ctx context.Context, p netip.Prefix, add bool) (err error) {
	if err := datapath.CheckPrefix(p); err != nil {
		return fmt.Errorf("%w: %v", ErrBadRequest, err)
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
			err = fmt.Errorf("%w: %s is not allowlisted", ErrNotFound, p)
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

// Events returns the recent events, newest last; kinds filters (empty: all).
func (d *Daemon) Events(kinds ...string) []Event {
	want := map[string]bool{}
	for _, k := range kinds {
		want[k] = true
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	out := []Event{}
	for _, e := range d.events {
		if len(want) == 0 || want[e.Kind] {
			out = append(out, e)
		}
	}
	return out
}

// Top is the heaviest sources of the last interval that passed the filter.
func (d *Daemon) Top(ctx context.Context) (out []detect.Talker, err error) {
	err = d.Do(ctx, func() {
		for _, t := range d.lastTop {
			_, t.Banned = d.store.Get(netip.PrefixFrom(t.Src, t.Src.BitLen()))
			out = append(out, t)
		}
	})
	if out == nil {
		out = []detect.Talker{}
	}
	return out, err
}

// Tiers describes each tier's capacity and use.
type Tiers struct {
	XDP      *datapath.Stats `json:"xdp"`
	Hardware *HWTier         `json:"hardware,omitempty"`
}

type HWTier struct {
	Backend       string  `json:"backend"`
	Iface         string  `json:"iface"`
	Capacity      int     `json:"capacity"`
	Occupancy     int     `json:"occupancy"`
	Counters      bool    `json:"counters"`
	UpdateLatency string  `json:"update_latency_estimate"`
	Updates       uint64  `json:"placement_updates"`
	MaxRate       float64 `json:"max_rate_pps"`
}

func (d *Daemon) Tiers(ctx context.Context) (t Tiers, err error) {
	derr := d.Do(ctx, func() {
		if t.XDP, err = d.dp.Stats(); err != nil {
			return
		}
		if d.hw != nil {
			c := d.hw.Caps()
			t.Hardware = &HWTier{Backend: c.Backend, Iface: c.Iface, Capacity: c.Capacity, Occupancy: d.off.Occupancy(), Counters: c.Counters,
				UpdateLatency: d.off.Latency().String(), MaxRate: d.off.Params.MaxRate, Updates: d.hwUpdates}
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
