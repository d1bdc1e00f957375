// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/tierwall/tierwall/internal/control/apiv1"
	"github.com/tierwall/tierwall/internal/control/ban"
	"github.com/tierwall/tierwall/internal/datapath"
	"github.com/tierwall/tierwall/internal/rule"
)

// An operator's bans and allows, from the API: through the rails (width
// limit unless forced, never the management addresses), and a re-add
// that keeps what is there unless the operator asks for an update, saying
// which happened.

func checkOperator(o ban.Operator) error {
	if o.TTL != nil && *o.TTL < 0 {
		return fmt.Errorf("%w: negative ttl", apiv1.ErrBadRequest)
	}
	return nil
}

// dataPlaneError marks what the caller can fix (a full table, an invalid
// rule) as a bad request.
func dataPlaneError(err error) error {
	if errors.Is(err, datapath.ErrTableFull) || errors.Is(err, rule.ErrInvalid) {
		return fmt.Errorf("%w: %v", apiv1.ErrBadRequest, err)
	}
	return err
}

// OperatorBan bans p for the operator.
func (d *Daemon) OperatorBan(ctx context.Context, p netip.Prefix, o ban.Operator) (res apiv1.BanResult, err error) {
	if err := rule.CheckPrefix(p); err != nil {
		return res, fmt.Errorf("%w: %v", apiv1.ErrBadRequest, err)
	}
	if err := checkOperator(o); err != nil {
		return res, err
	}
	derr := d.Do(ctx, func() {
		now := time.Now()
		d.keepManagement(now)
		var b ban.Ban
		var r ban.Result
		if b, r, err = d.apply(now, p, o); err != nil {
			return
		}
		switch r {
		case ban.Added:
			d.Metrics.bans.Inc()
			d.event(now, "ban", p, "operator: %s", b.Reason)
		case ban.Updated:
			d.event(now, "ban", p, "operator updated the ban: %s, %s", b.Reason, expiry(b))
		}
		if r != ban.Exists {
			d.dirty = true
			err = d.save(now)
		}
		m, _ := d.store.Meter(p)
		res = apiv1.BanResult{RuleView: apiv1.RuleView{Ban: b, Packets: m.Packets, Tier: d.card.tierOf(p)}, Result: r}
	})
	return res, errors.Join(derr, err)
}

func expiry(b ban.Ban) string {
	if b.Expires.IsZero() {
		return "no expiry"
	}
	return "expires " + b.Expires.Format(time.RFC3339)
}

// apply is one operator ban in store and data plane, undone in the store
// when the data plane refuses it. An existing ban is blocked again: a rule
// deleted behind the daemon's back comes back.
func (d *Daemon) apply(now time.Time, p netip.Prefix, o ban.Operator) (ban.Ban, ban.Result, error) {
	b, r, prev, err := d.store.AddOperator(now, p, o)
	if err != nil {
		return b, r, fmt.Errorf("%w: %v", apiv1.ErrBadRequest, err)
	}
	undo := func() {
		if prev != nil {
			d.store.Put(*prev)
		} else {
			d.store.Remove(p)
		}
	}
	if err := d.admit(p); err != nil {
		undo()
		return b, r, fmt.Errorf("%w: %v", apiv1.ErrBadRequest, err)
	}
	if err := d.dp.Block(p); err != nil {
		undo()
		return b, r, dataPlaneError(err)
	}
	return b, r, nil
}

// OperatorBans bans every prefix for the operator. Entries are judged one
// by one: one the rails or the data plane refuse is reported with its
// reason and the others are applied (a feed with one bad line must not
// sink the rest), unless allOrNothing asks that any refusal change
// nothing (the CLI, whose verbs are all or nothing). The data plane gets
// one batch; only when it refuses that are the entries retried alone.
func (d *Daemon) OperatorBans(ctx context.Context, ps []netip.Prefix, o ban.Operator, allOrNothing bool) (res apiv1.BatchResult, err error) {
	for _, p := range ps {
		if err := rule.CheckPrefix(p); err != nil {
			return res, fmt.Errorf("%w: %v (nothing changed)", apiv1.ErrBadRequest, err)
		}
	}
	if err := checkOperator(o); err != nil {
		return res, err
	}
	res.Prefixes, res.Refused = len(ps), []apiv1.RefusedBan{}
	derr := d.Do(ctx, func() {
		now := time.Now()
		d.keepManagement(now)
		type done struct {
			p    netip.Prefix
			r    ban.Result
			prev *ban.Ban
		}
		var ok []done
		undo := func(x done) {
			if x.prev != nil {
				d.store.Put(*x.prev)
			} else {
				d.store.Remove(x.p)
			}
		}
		undoAll := func() {
			for i := len(ok) - 1; i >= 0; i-- {
				undo(ok[i])
			}
		}
		for _, p := range ps {
			_, r, prev, e := d.store.AddOperator(now, p, o)
			if e == nil {
				if e = d.admit(p); e != nil {
					undo(done{p, r, prev})
				}
			}
			if e != nil {
				if allOrNothing {
					undoAll()
					err = fmt.Errorf("%w: %v (nothing changed)", apiv1.ErrBadRequest, e)
					return
				}
				res.Refused = append(res.Refused, apiv1.RefusedBan{Prefix: p, Reason: e.Error()})
				continue
			}
			ok = append(ok, done{p, r, prev})
		}
		blockable := make([]netip.Prefix, len(ok))
		for i, x := range ok {
			blockable[i] = x.p
		}
		if e := d.dp.Block(blockable...); e != nil {
			if allOrNothing || len(ok) == 1 {
				undoAll()
				if allOrNothing {
					err = fmt.Errorf("%w (nothing changed)", dataPlaneError(e))
					return
				}
				res.Refused = append(res.Refused, apiv1.RefusedBan{Prefix: ok[0].p, Reason: e.Error()})
				ok = nil
			} else {
				kept := ok[:0]
				for _, x := range ok {
					if e := d.dp.Block(x.p); e != nil {
						undo(x)
						res.Refused = append(res.Refused, apiv1.RefusedBan{Prefix: x.p, Reason: e.Error()})
						continue
					}
					kept = append(kept, x)
				}
				ok = kept
			}
		}
		for _, x := range ok {
			switch x.r {
			case ban.Added:
				res.New++
			case ban.Exists:
				res.Exists++
			case ban.Updated:
				res.Updated++
			}
		}
		d.Metrics.bans.Add(float64(res.New))
		if res.New+res.Updated > 0 {
			reason := o.Reason
			if reason == "" {
				reason = "operator"
			}
			d.event(now, "ban", netip.Prefix{}, "operator: %d prefixes (%d new, %d updated, %d refused): %s",
				len(ps), res.New, res.Updated, len(res.Refused), reason)
			d.dirty = true
			err = d.save(now)
		}
	})
	return res, errors.Join(derr, err)
}

// AllowRule allowlists p for the operator, through the width rail of the
// allowlist (force lifts it); see SetAllow.
func (d *Daemon) AllowRule(ctx context.Context, p netip.Prefix, force bool) error {
	if err := rule.CheckPrefix(p); err != nil {
		return fmt.Errorf("%w: %v", apiv1.ErrBadRequest, err)
	}
	var err error
	derr := d.Do(ctx, func() {
		err = checkAllow(p, d.cfg.Rails.MaxAllowPrefixV4, d.cfg.Rails.MaxAllowPrefixV6, force)
	})
	if err := errors.Join(derr, err); err != nil {
		return err
	}
	return d.SetAllow(ctx, p, true)
}
