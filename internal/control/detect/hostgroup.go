// SPDX-License-Identifier: Apache-2.0

package detect

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/tierwall/tierwall/internal/enum"
	"github.com/tierwall/tierwall/internal/rule"
)

// Host groups give parts of the protected network their own thresholds and
// action, as FastNetMon's hostgroups do: a DNS farm takes floods of small
// packets that would be an attack on a mail server, and a customer's /24
// may be watched without anything ever being dropped for it. A destination
// belongs to the group of the most specific prefix holding it.

// GroupAction is what an attack on a group's host leads to.
type GroupAction uint8

const (
	// ActionBan runs the mitigation ladder from its first rung (source
	// bans), as for any victim.
	ActionBan GroupAction = iota
	// ActionMonitor reports the attack and mitigates nothing.
	ActionMonitor
	// ActionFlowRule goes straight to a flow rule for the victim (with the
	// known-good bypass): no source is banned for it.
	ActionFlowRule
)

var actionNames = enum.New("action", rule.ErrInvalid, map[GroupAction]string{
	ActionBan: "ban", ActionMonitor: "monitor", ActionFlowRule: "flowrule",
}).Empty(ActionBan)

func (a GroupAction) String() string { return actionNames.String(a) }

// MarshalText makes actions readable in JSON.
func (a GroupAction) MarshalText() ([]byte, error) { return []byte(a.String()), nil }

// ParseGroupAction reads an action's name; "" is ActionBan.
func ParseGroupAction(s string) (GroupAction, error) { return actionNames.Parse(s) }

// HostGroup is one named part of the protected network. Zero thresholds
// leave that test to the detector's own judgement.
type HostGroup struct {
	Name     string
	Prefixes []netip.Prefix
	// PPS, BPS (bits/s) and SYNPPS are per destination host: above one,
	// the host is attacked, whatever its learned baseline; below all that
	// are set, it is not.
	PPS, BPS, SYNPPS float64
	// SourcePPS is per source toward one host of the group: the rate
	// detector names a source above it.
	SourcePPS float64
	Action    GroupAction
}

// HostGroups finds the group of an address. Lookups cost one map probe per
// distinct prefix length, whatever the number of prefixes.
type HostGroups struct {
	groups []HostGroup
	lens   []int                // distinct prefix lengths, longest first
	at     map[netip.Prefix]int // masked prefix → group
	source bool                 // some group has SourcePPS
}

// NewHostGroups indexes gs. The same prefix in two groups (or twice in
// one) is refused: neither would be more specific, so which one wins would
// be an accident of order.
func NewHostGroups(gs []HostGroup) (*HostGroups, error) {
	h := &HostGroups{groups: gs, at: map[netip.Prefix]int{}}
	for gi, g := range gs {
		h.source = h.source || g.SourcePPS > 0
		for _, p := range g.Prefixes {
			p = p.Masked()
			if p.Addr().Is4In6() {
				p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
			}
			if o, dup := h.at[p]; dup {
				return nil, fmt.Errorf("prefix %s is in host groups %q and %q: same length, neither is more specific", p, gs[o].Name, g.Name)
			}
			h.at[p] = gi
			key := p.Bits()
			if p.Addr().Is6() {
				key += 1000 // IPv6 lengths apart from IPv4's
			}
			if !slices.Contains(h.lens, key) {
				h.lens = append(h.lens, key)
			}
		}
	}
	slices.SortFunc(h.lens, func(a, b int) int { return b%1000 - a%1000 })
	return h, nil
}

// Lookup is the group of the most specific prefix holding a, or nil.
func (h *HostGroups) Lookup(a netip.Addr) *HostGroup {
	if h == nil || len(h.groups) == 0 {
		return nil
	}
	a = a.Unmap()
	for _, key := range h.lens {
		if (key >= 1000) != a.Is6() {
			continue
		}
		p, err := a.Prefix(key % 1000)
		if err != nil {
			continue
		}
		if gi, ok := h.at[p]; ok {
			return &h.groups[gi]
		}
	}
	return nil
}

// Len is the number of groups.
func (h *HostGroups) Len() int {
	if h == nil {
		return 0
	}
	return len(h.groups)
}

// judged reports whether a destination sending pps deserves judging for
// its group although it is below the detector's tracking rate.
func (g *HostGroup) judged(pps float64) bool {
	return g != nil && (g.PPS > 0 && pps > g.PPS)
}

// apply replaces the volume tests of ev by the group's thresholds, where
// set.
func (g *HostGroup) apply(ev *Evidence) {
	if g == nil {
		return
	}
	if g.PPS > 0 {
		ev.Signals &^= SigPPS | SigTCP | SigUDP
		if ev.PPS > g.PPS {
			ev.Signals |= SigPPS
		}
		ev.ThresholdPPS = g.PPS
	}
	if g.BPS > 0 {
		ev.Signals &^= SigBPS
		if ev.BPS > g.BPS {
			ev.Signals |= SigBPS
		}
	}
	if g.SYNPPS > 0 {
		ev.Signals &^= SigSYN
		if ev.SYNPPS > g.SYNPPS {
			ev.Signals |= SigSYN
		}
	}
}

// name is the group's name for events ("" outside any group).
func (g *HostGroup) name() string {
	if g == nil {
		return ""
	}
	return g.Name
}
