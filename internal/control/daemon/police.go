// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/tierwall/tierwall/internal/control/mitigate"
	"github.com/tierwall/tierwall/internal/rule"
	"github.com/tierwall/tierwall/internal/tier"
)

// The card's side of the flow rules. A flood whose sources cannot be
// listed is dropped by a flow rule in XDP, but every packet of it still
// crosses the host's port and its CPU: at 0.5 Mpps on the lab, that CPU
// is what the clients lose (issue 32, item 4). A card that polices
// (tier.Policers) can take a rule's shape before the host and leave XDP
// the part that needs the host: the known-good bypass, the exact rate.
//
// A policer must never drop what the rule in XDP would have passed:
//   - A rule whose bypass lets verified clients through goes to the card
//     only once an interval in XDP passed none of them on it (the card
//     knows no clients), and leaves it as soon as XDP sees one again in
//     what the card lets through.
//   - The card passes a rate-limit rule's shape at twice its rate, and a
//     bypass drop rule's at polSamplePPS, so XDP still decides what is
//     admitted and still sees whether clients use the shape.
//   - The rules go in XDP's order, and a rule that stays in XDP keeps
//     every later rule that could match the same packets off the card:
//     there the first match decides, and the card must not decide first.
//   - SYN-cookie rules stay in XDP: the card cannot answer.
// What the card drops is added to its rule's counters in XDP, so the
// ladder sees the flood it holds off and does not lift the rule.

// polSamplePPS is what the card lets through of a bypass drop rule's
// shape: the sample in which XDP sees verified clients appear.
const polSamplePPS = 1000

// nicPolicing is the flow stage's record of the card's policers.
type nicPolicing struct {
	p      tier.Policers
	pushed []rule.FlowRule                        // the card's policers, in order
	of     map[rule.FlowRule]rule.FlowRule        // policer → the flow rule it stands for
	last   map[rule.FlowRule]uint64               // policer → its dropped counter at the last reading
	acc    map[rule.FlowRule]uint64               // flow rule → what the card dropped for it, ever
	good   map[rule.FlowRule]uint64               // flow rule → its known-good passes at the last reading
	clean  map[rule.FlowRule]int                  // flow rule → readings in a row with no known-good pass
	failed bool                                   // the last push failed: try again next interval
	view   map[rule.FlowRule]tier.PolicerCounters // flow rule → its policer's counters, for the API
}

func newNICPolicing(hw tier.Table) *nicPolicing {
	p, ok := hw.(tier.Policers)
	if !ok {
		return nil
	}
	// failed until the first push: what the card holds was set by an
	// earlier daemon, and must be brought to this one's rules even when
	// they want none.
	return &nicPolicing{p: p, failed: true, of: map[rule.FlowRule]rule.FlowRule{}, last: map[rule.FlowRule]uint64{},
		acc: map[rule.FlowRule]uint64{}, good: map[rule.FlowRule]uint64{}, clean: map[rule.FlowRule]int{}}
}

// policerFor is the card's form of flow rule r, and whether r may go to
// the card at all.
func policerFor(r rule.FlowRule) (rule.FlowRule, bool) {
	if r.Action != rule.FlowDrop && r.Action != rule.FlowRateLimit {
		return rule.FlowRule{}, false
	}
	p := r
	p.KnownGoodBypass = false
	if !r.KnownGoodBypass {
		return p, true
	}
	if r.Action == rule.FlowRateLimit {
		p.RatePPS = max(2*r.RatePPS, polSamplePPS)
		return p, true
	}
	p.Action, p.RatePPS = rule.FlowRateLimit, polSamplePPS
	return p, true
}

// overlap reports whether some packet could match both a and b: kept
// conservative (any doubt is an overlap).
func overlap(a, b rule.FlowRule) bool {
	// Prefixes of two families may still meet: an IPv6 rule's prefix
	// can cover ::ffff:0:0/96, where IPv4 rules match too.
	if a.Dst.Addr().Is4() == b.Dst.Addr().Is4() && !a.Dst.Overlaps(b.Dst) {
		return false
	}
	if a.Proto != 0 && b.Proto != 0 && a.Proto != b.Proto {
		return false
	}
	disjoint := func(x, y rule.PortRange) bool {
		return !x.Any() && !y.Any() && (x.Hi < y.Lo || y.Hi < x.Lo)
	}
	return !disjoint(a.DstPorts, b.DstPorts) && !disjoint(a.SrcPorts, b.SrcPorts)
}

// choose is the card's set for the flow rules in force, in order.
func (n *nicPolicing) choose(in []rule.FlowRule) (ps []rule.FlowRule, of map[rule.FlowRule]rule.FlowRule) {
	of = map[rule.FlowRule]rule.FlowRule{}
	var stay []rule.FlowRule // rules kept in XDP: later overlapping ones stay too
	for _, r := range in {
		p, ok := policerFor(r)
		if ok && r.KnownGoodBypass && n.clean[r] < 1 {
			ok = false
		}
		if ok && slices.ContainsFunc(stay, func(s rule.FlowRule) bool { return overlap(s, r) }) {
			ok = false
		}
		if _, dup := of[p]; ok && !dup && len(ps) < n.p.PolicerCapacity() {
			ps = append(ps, p)
			of[p] = r
			continue
		}
		if r.Action != rule.FlowSYNCookie || !ok {
			stay = append(stay, r)
		}
	}
	return ps, of
}

// police brings the card's policers to the flow rules in force. Monitor
// only, or with no flow rules in the data plane, the card holds none.
func (f *flowStage) police(now time.Time) {
	n := f.nic
	if n == nil {
		return
	}
	var in []rule.FlowRule
	if !f.cfg().Rails.MonitorOnly && f.fp != nil {
		in = f.pushed
	}
	want, of := n.choose(in)
	if slices.Equal(want, n.pushed) && !n.failed {
		n.of = of
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := n.p.SetPolicers(ctx, want); err != nil {
		n.failed = true
		f.event(now, "error", netip.Prefix{}, "the card's flow policers: %v (the rules stay in XDP)", err)
		return
	}
	n.failed = false
	for _, p := range want {
		if !slices.Contains(n.pushed, p) {
			r := of[p]
			f.event(now, "flowrule", r.Dst, "to the card: %s as policer %s", r, p)
		}
	}
	for _, p := range n.pushed {
		if !slices.Contains(want, p) {
			if r, ok := n.of[p]; ok {
				f.event(now, "flowrule", r.Dst, "off the card: %s", r)
			}
			delete(n.last, p)
		}
	}
	n.pushed, n.of = want, of
	f.metrics.flowPolicers.Set(float64(len(want)))
}

// policing reports whether the card holds any policer.
func (n *nicPolicing) policing() bool { return n != nil && len(n.pushed) > 0 }

// annotate names each rule's policer on the card, and what the card
// dropped for it, in rs (the API's copy of the set).
func (n *nicPolicing) annotate(rs []mitigate.Rule) {
	if n == nil {
		return
	}
	for i := range rs {
		rs[i].NICDropped = n.acc[rs[i].FlowRule]
		for p, r := range n.of {
			if r == rs[i].FlowRule {
				rs[i].NIC = p.String()
			}
		}
	}
}

// unpolice empties the card's policers: the daemon stops.
func (f *flowStage) unpolice() error {
	if f.nic == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return f.nic.p.SetPolicers(ctx, nil)
}

// read adds what the card dropped since the last reading to each
// rule's counters (by rule: c[i] belongs to rs[i]), and keeps each
// rule's known-good record for choose.
func (n *nicPolicing) read(rs []rule.FlowRule, good []uint64) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cs, err := n.p.PolicerCounters(ctx)
	if err != nil {
		return fmt.Errorf("reading the card's flow policers: %w", err)
	}
	n.view = map[rule.FlowRule]tier.PolicerCounters{}
	for _, c := range cs {
		r, ok := n.of[c.Rule]
		if !ok {
			continue // set by another process: not this daemon's to count
		}
		d := c.Dropped
		if prev, seen := n.last[c.Rule]; seen && prev <= c.Dropped {
			d = c.Dropped - prev
		}
		n.last[c.Rule] = c.Dropped
		n.acc[r] += d
		n.view[r] = c
	}
	for i, r := range rs {
		if prev, seen := n.good[r]; seen && good[i] == prev {
			n.clean[r]++
		} else {
			n.clean[r] = 0
		}
		n.good[r] = good[i]
	}
	// Rules no longer in force leave the records.
	for _, m := range []map[rule.FlowRule]uint64{n.acc, n.good} {
		for r := range m {
			if !slices.Contains(rs, r) {
				delete(m, r)
			}
		}
	}
	for r := range n.clean {
		if !slices.Contains(rs, r) {
			delete(n.clean, r)
		}
	}
	return nil
}
