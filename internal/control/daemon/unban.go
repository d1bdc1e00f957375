// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/tierwall/tierwall/internal/control/apiv1"
	"github.com/tierwall/tierwall/internal/datapath"
	"github.com/tierwall/tierwall/internal/rule"
)

// An operator's unbans in one request, all or nothing: every prefix is
// checked before anything changes, so a refused request leaves every ban
// as it was. The CLI used to delete one prefix per request and, on a
// refusal, undo by re-adding what it had deleted: an entropy ban with an
// hour left came back as a permanent operator ban without its reason, and
// its source was unbanned in between.

// OperatorUnbans lifts the bans on ps, all or nothing: a prefix without a
// ban refuses the request (ErrNotFound, naming it) and nothing changes.
// all lifts every ban in force (ps must be empty): the operator's flush.
func (d *Daemon) OperatorUnbans(ctx context.Context, ps []netip.Prefix, all bool) (res apiv1.UnbanResult, err error) {
	if all && len(ps) > 0 {
		return res, fmt.Errorf("%w: all lifts every ban; give no prefixes with it", apiv1.ErrBadRequest)
	}
	if !all && len(ps) == 0 {
		return res, fmt.Errorf("%w: no prefixes", apiv1.ErrBadRequest)
	}
	for _, p := range ps {
		if err := rule.CheckPrefix(p); err != nil {
			return res, fmt.Errorf("%w: %v (nothing changed)", apiv1.ErrBadRequest, err)
		}
	}
	derr := d.Do(ctx, func() {
		now := time.Now()
		if all {
			ps = slices.Clone(d.store.Prefixes())
		} else {
			ps = uniquePrefixes(ps)
			var missing []string
			for _, p := range ps {
				if _, ok := d.store.Get(p); !ok {
					missing = append(missing, p.String())
				}
			}
			if len(missing) > 0 {
				err = fmt.Errorf("%w: no ban on %s (nothing changed)", apiv1.ErrNotFound, listSome(missing, 5))
				return
			}
		}
		if len(ps) == 0 {
			return
		}
		// The data plane first, in one all-or-nothing call: a ban its rule
		// was deleted from behind the daemon's back is lifted in the store
		// only.
		present := make([]datapath.Reading, len(ps))
		if e := d.dp.RuleCountersInto(ps, present); e != nil {
			err = fmt.Errorf("reading the data plane's rules: %w (nothing changed)", e)
			return
		}
		inDP := make([]netip.Prefix, 0, len(ps))
		for i, p := range ps {
			if present[i].Found {
				inDP = append(inDP, p)
			}
		}
		if e := d.dp.Unblock(inDP...); e != nil && !errors.Is(e, datapath.ErrNoRule) {
			err = fmt.Errorf("%w (nothing changed)", dataPlaneError(e))
			return
		}
		for _, p := range ps {
			if e := d.card.evict(p); e != nil {
				d.event(now, "error", p, "removing from hardware: %v", e)
			}
			d.store.Remove(p)
		}
		d.Metrics.unbans.Add(float64(len(ps)))
		if len(ps) == 1 {
			d.event(now, "unban", ps[0], "operator")
		} else {
			d.event(now, "unban", netip.Prefix{}, "operator: %d prefixes", len(ps))
		}
		res.Prefixes = len(ps)
		d.dirty = true
		err = d.save(now)
	})
	return res, errors.Join(derr, err)
}

// uniquePrefixes drops repeated prefixes, the first kept.
func uniquePrefixes(ps []netip.Prefix) []netip.Prefix {
	seen := make(map[netip.Prefix]bool, len(ps))
	out := make([]netip.Prefix, 0, len(ps))
	for _, p := range ps {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}

// listSome names up to n items and counts the rest: an error about 199K
// prefixes must stay readable.
func listSome(xs []string, n int) string {
	if len(xs) <= n {
		return strings.Join(xs, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(xs[:n], ", "), len(xs)-n)
}

// OperatorAllows adds ps to (or removes them from) the allowlist, all or
// nothing: every prefix passes the width rail (unless force) or, to
// remove, is on the allowlist, before anything changes. Adding lifts the
// bans inside each prefix, as SetAllow does.
func (d *Daemon) OperatorAllows(ctx context.Context, ps []netip.Prefix, add, force bool) (n int, err error) {
	if len(ps) == 0 {
		return 0, fmt.Errorf("%w: no prefixes", apiv1.ErrBadRequest)
	}
	for _, p := range ps {
		if err := datapath.CheckPrefix(p); err != nil {
			return 0, fmt.Errorf("%w: %v (nothing changed)", apiv1.ErrBadRequest, err)
		}
	}
	ps = uniquePrefixes(ps)
	derr := d.Do(ctx, func() {
		now := time.Now()
		if add {
			for _, p := range ps {
				if e := checkAllow(p, d.cfg.Rails.MaxAllowPrefixV4, d.cfg.Rails.MaxAllowPrefixV6, force); e != nil {
					err = fmt.Errorf("%w (nothing changed)", e)
					return
				}
			}
			have := map[netip.Prefix]bool{}
			rs, e := d.dp.Allowed()
			if e != nil {
				err = e
				return
			}
			for _, r := range rs {
				have[r.Prefix] = true
			}
			var fresh []netip.Prefix
			for _, p := range ps {
				if !have[p] {
					fresh = append(fresh, p)
				}
			}
			if len(fresh) > 0 {
				if e := d.dp.Allow(fresh...); e != nil {
					err = fmt.Errorf("%w (nothing changed)", dataPlaneError(e))
					return
				}
			}
			for _, p := range fresh {
				if !slices.Contains(d.store.Rails.Allow, p) {
					d.store.Rails.Allow = append(d.store.Rails.Allow, p)
				}
			}
			// Bans inside an allowed prefix go (see SetAllow).
			// Each ban looks up the prefixes covering it (one per length),
			// not every allow: 199K allows against 199K bans.
			allowed := make(map[netip.Prefix]bool, len(ps))
			for _, p := range ps {
				allowed[p.Masked()] = true
			}
			for _, b := range d.store.All() {
				for l := 0; l <= b.Prefix.Bits(); l++ {
					p := netip.PrefixFrom(b.Prefix.Addr(), l).Masked()
					if allowed[p] {
						d.store.Remove(b.Prefix)
						d.unblock(now, b.Prefix)
						d.Metrics.unbans.Inc()
						d.event(now, "unban", b.Prefix, "allowlisted by operator (%s)", p)
						break
					}
				}
			}
			n = len(ps)
			d.dirty = true
			err = d.save(now)
			return
		}
		rs, e := d.dp.Allowed()
		if e != nil {
			err = e
			return
		}
		have := map[netip.Prefix]bool{}
		for _, r := range rs {
			have[r.Prefix] = true
		}
		var missing []string
		for _, p := range ps {
			if !have[p] {
				missing = append(missing, p.String())
			}
		}
		if len(missing) > 0 {
			err = fmt.Errorf("%w: %s not allowlisted (nothing changed)", apiv1.ErrNotFound, listSome(missing, 5))
			return
		}
		if e := d.dp.Disallow(ps...); e != nil {
			err = fmt.Errorf("%w (nothing changed)", dataPlaneError(e))
			return
		}
		gone := map[netip.Prefix]bool{}
		for _, p := range ps {
			gone[p] = true
		}
		d.store.Rails.Allow = slices.DeleteFunc(slices.Clone(d.store.Rails.Allow), func(a netip.Prefix) bool { return gone[a] })
		n = len(ps)
	})
	return n, errors.Join(derr, err)
}
