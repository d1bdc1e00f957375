// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/tierwall/tierwall/internal/control/ban"
	"github.com/tierwall/tierwall/internal/control/bgp"
	"github.com/tierwall/tierwall/internal/control/detect"
	"github.com/tierwall/tierwall/internal/control/mitigate"
	"github.com/tierwall/tierwall/internal/rule"
)

// Downstream from the fleet: the BGP stage applies what its peers send
// as remote bans (a source prefix, in the ban store through the ban
// rails) and remote flow rules (in the flow stage's set), and keeps the
// bookkeeping of both (remote, newBans, newShare, breaker). What it needs
// of the rest of the loop comes in a fleetHost, built for each pass.

// fleetHost is what applying the peers' routes takes from the loop: the
// ban store and its rails, the flow stage, the host rail, and the data
// plane's block and unblock as the loop does them (the hardware tier,
// the allowlisted holes, an event on failure).
type fleetHost struct {
	store *ban.Store
	flow  *flowStage
	rail  hostRail
	// admit prepares the data plane for a ban of p (Daemon.admit);
	// block applies bans, returning those applied (Daemon.blockEach);
	// unblock lifts one in every tier (Daemon.unblock).
	admit   func(netip.Prefix) error
	block   func(time.Time, []netip.Prefix) []netip.Prefix
	unblock func(time.Time, netip.Prefix)
	// share is the share of the established sources a prefix covers,
	// for the circuit breaker (built only when a ban is proposed).
	share func() func(netip.Prefix) float64
	// good is this host's known-good list (nil without the victim
	// detector): the clients that completed handshakes with it, which no
	// peer's rule may take from it.
	good *detect.KnownGood
	// changed marks the state file to be written.
	changed func()
}

// fleetHost lends the loop's store, flow stage and data plane to the BGP
// stage for one pass.
func (d *Daemon) fleetHost() fleetHost {
	return fleetHost{store: d.store, flow: &d.flow, rail: d.rail(), admit: d.admit, block: d.blockEach, unblock: d.unblock,
		share: func() func(netip.Prefix) float64 {
			share, _ := d.src.establishedShare()
			return share
		},
		changed: func() { d.dirty = true }, good: d.knownGood()}
}

// knownGood is the victim detector's known-good list, nil without it.
func (d *Daemon) knownGood() *detect.KnownGood {
	if d.flow.victims == nil {
		return nil
	}
	return &d.flow.victims.Good
}

// applyRemote makes the remote bans and remote flow rules equal what the
// speaker reports enforceable: new ones through the rails, gone ones
// lifted once their peer had time to send them again.
func (b *bgpStage) applyRemote(now time.Time, h fleetHost) {
	wantBans, wantRules, gone := b.received(now)
	defer b.endPass()
	monitor := b.cfg().Rails.MonitorOnly
	for p, peer := range b.remote {
		if rb, ok := h.store.Get(p); !ok || rb.Detector != remoteDetector {
			delete(b.remote, p) // lifted another way (the operator)
			continue
		}
		if _, still := wantBans[p]; still && !monitor {
			delete(wantBans, p)
			continue
		}
		if monitor || gone(peer) {
			delete(b.remote, p)
			h.store.Remove(p)
			h.unblock(now, p)
			h.changed()
			b.metrics.changes.WithLabelValues("lifted").Inc()
			b.event(now, "bgp", p, "lifted remote ban from %s: the route was withdrawn", peer)
		}
	}
	if monitor {
		for _, rb := range wantBans {
			b.note(rb.peer, rb.flow, monitorOnly)
		}
	} else {
		b.applyRemoteBans(now, h, wantBans)
	}
	b.applyRemoteRules(now, h, wantRules, gone, monitor)
}

// applyRemoteBans bans the peers' new source prefixes through the same
// rails as a detector's (ban.Store.Propose): guarded space and the widest
// ban, then the per-interval limit, the total, and the circuit breaker
// over the established sources the interval's remote bans would cover. A
// peer's ban is also applied only when its route's destination is this
// host's (one of its addresses or protected prefixes): a source ban drops
// the source for every destination here, and a route about another host
// of the fleet is not a reason to. Nor is a ban over this host's verified
// clients applied: the peer judged from its own clients, and a flood
// spoofed from a prefix where this host's clients live (and the peer's do
// not) would otherwise cut them off here, as spareKnownGood keeps a local
// detection from doing. A local ban of p stays the local one.
// What the limits hold back waits, as a detection does, for a later
// interval.
func (b *bgpStage) applyRemoteBans(now time.Time, h fleetHost, want map[netip.Prefix]remoteBan) {
	var fresh []netip.Prefix
	for _, p := range slices.SortedFunc(maps.Keys(want), lessPrefixCmp) {
		rb := want[p]
		if _, ok := h.store.Get(p); ok {
			continue
		}
		if why := h.store.Guarded(p); why != "" {
			b.refuse(now, "rail", p, rb.peer, rb.flow, fmt.Sprintf("remote ban from %s", rb.peer), why)
			continue
		}
		if !h.rail.oursDst(rb.flow.Dst) {
			b.refuse(now, "rail", p, rb.peer, rb.flow, fmt.Sprintf("remote ban from %s", rb.peer),
				fmt.Sprintf("its destination %s holds none of this host's addresses or protected prefixes", rb.flow.Dst))
			continue
		}
		if n := goodIn(h.good, p); n > 0 {
			b.refuse(now, "known_good", p, rb.peer, rb.flow, fmt.Sprintf("remote ban from %s", rb.peer),
				fmt.Sprintf("it covers %d of this host's known-good clients (completed handshakes)", n))
			continue
		}
		fresh = append(fresh, p)
	}
	if len(fresh) == 0 {
		return
	}
	r := &h.store.Rails
	admit := len(fresh)
	if n := r.MaxNewPerInterval; n > 0 {
		admit = min(admit, max(n-b.newBans, 0))
	}
	if n := r.MaxTotal; n > 0 {
		admit = min(admit, max(n-h.store.Len(), 0))
	}
	if r.MaxEstablishedShare > 0 && admit > 0 {
		share := h.share()
		total := b.newShare
		for _, p := range fresh[:admit] {
			total += share(p)
		}
		if total > r.MaxEstablishedShare {
			if !b.breaker {
				b.event(now, "breaker", netip.Prefix{}, "circuit breaker open for remote bans: %d would cover %.0f%% of the established sources (limit %.0f%%)",
					len(fresh), 100*total, 100*r.MaxEstablishedShare)
			}
			b.breaker = true
			for _, p := range fresh {
				rb := want[p]
				b.refuse(now, "rail", p, rb.peer, rb.flow, fmt.Sprintf("remote ban from %s", rb.peer),
					fmt.Sprintf("circuit breaker: the remote bans would cover %.0f%% of the established sources (limit %.0f%%)", 100*total, 100*r.MaxEstablishedShare))
			}
			return
		}
		b.newShare = total
	}
	b.breaker = false
	for i, p := range fresh {
		rb := want[p]
		if i >= admit {
			if r.MaxTotal > 0 && h.store.Len() >= r.MaxTotal {
				b.refuse(now, "full", p, rb.peer, rb.flow, fmt.Sprintf("remote ban from %s", rb.peer), fmt.Sprintf("%d bans, the rails' max_total", h.store.Len()))
			} else {
				b.refuse(now, "rail", p, rb.peer, rb.flow, fmt.Sprintf("remote ban from %s", rb.peer), fmt.Sprintf("more than %d new remote bans this interval (rails.max_new_per_interval)", r.MaxNewPerInterval))
			}
			continue
		}
		b.applyRemoteBan(now, h, p, rb.peer)
	}
}

// goodIn is how many members of good p covers.
func goodIn(good *detect.KnownGood, p netip.Prefix) int {
	if good == nil || good.Len() == 0 {
		return 0
	}
	if p.IsSingleIP() {
		if good.Contains(p.Addr()) {
			return 1
		}
		return 0
	}
	_, n := good.PrefixFree(p)
	return n
}

// applyRemoteBan bans p for peer once the rails admitted it.
func (b *bgpStage) applyRemoteBan(now time.Time, h fleetHost, p netip.Prefix, peer netip.Addr) {
	if err := h.admit(p); err != nil {
		b.event(now, "error", p, "remote ban from %s: %v", peer, err)
		return
	}
	h.store.Put(ban.Ban{Prefix: p, Detector: remoteDetector, Reason: remoteReason + peer.String(), FirstSeen: now, LastSeen: now,
		Manual: true})
	if len(h.block(now, []netip.Prefix{p})) == 0 {
		return
	}
	b.remote[p] = peer
	b.newBans++
	h.changed()
	b.metrics.changes.WithLabelValues("applied").Inc()
	b.event(now, "bgp", p, "applied remote ban from %s", peer)
}

// applyRemoteRules puts the peers' flow rules in the set (origin "bgp")
// and takes out those gone; the set goes to the data plane as one. Each
// is applied with the known-good bypass (which FlowSpec cannot carry):
// a peer's rule is about the flood it saw, and this host's verified
// clients pass it as they pass the host's own ladder rules.
func (b *bgpStage) applyRemoteRules(now time.Time, h fleetHost, want map[rule.FlowRule]netip.Addr, gone func(netip.Addr) bool, monitor bool) {
	f := h.flow
	if f.set == nil || f.fp == nil {
		for fr, peer := range want {
			b.refuse(now, "validation", fr.Dst, peer, bgp.Flow{FlowRule: fr}, fmt.Sprintf("remote flow rule %s from %s", fr, peer), "this data plane has no flow rules")
		}
	}
	if f.set == nil {
		return
	}
	for _, r := range f.set.Rules() {
		if r.Origin != mitigate.Remote {
			continue
		}
		received := r.FlowRule
		received.KnownGoodBypass = false // FlowSpec carries none
		if _, still := want[received]; still && !monitor {
			delete(want, received)
			continue
		}
		peer, _ := netip.ParseAddr(strings.TrimPrefix(r.Reason, remoteReason))
		if monitor || gone(peer) {
			_, _ = f.set.Remove(r.FlowRule) // it is there: Rules just listed it
			f.dirty = true
			b.metrics.changes.WithLabelValues("lifted").Inc()
			b.event(now, "bgp", r.Dst, "lifted remote flow rule %s from %s: the route was withdrawn", r.FlowRule, r.Reason)
		}
	}
	if monitor || f.fp == nil {
		if monitor {
			for fr, peer := range want {
				b.note(peer, bgp.Flow{FlowRule: fr}, monitorOnly)
			}
		}
		f.pushFlowRules(now)
		return
	}
	remote := 0
	for _, r := range f.set.Rules() {
		if r.Origin == mitigate.Remote {
			remote++
		}
	}
	room := remoteFlowSlots(f.set.Cap())
	// In a stable order, so that which rules the slots hold does not
	// change from one pass to the next.
	for _, fr := range slices.SortedFunc(maps.Keys(want), func(a, b rule.FlowRule) int { return strings.Compare(a.String(), b.String()) }) {
		peer := want[fr]
		what := fmt.Sprintf("remote flow rule %s from %s", fr, peer)
		if why := h.rail.cutsOff(fr); why != "" {
			b.refuse(now, "rail", fr.Dst, peer, bgp.Flow{FlowRule: fr}, what, why)
			continue
		}
		if remote >= room {
			b.refuse(now, "full", fr.Dst, peer, bgp.Flow{FlowRule: fr}, what,
				fmt.Sprintf("peers' rules may take %d of the %d flow-rule slots; the rest are this host's own", room, f.set.Cap()))
			continue
		}
		added, err := f.set.Add(mitigate.Rule{FlowRule: bypassing(fr), Origin: mitigate.Remote, Reason: remoteReason + peer.String(), Added: now})
		if err != nil {
			b.refuse(now, "full", fr.Dst, peer, bgp.Flow{FlowRule: fr}, what, err.Error())
			continue
		}
		if added {
			remote++
			f.dirty = true
			b.metrics.changes.WithLabelValues("applied").Inc()
			b.event(now, "bgp", fr.Dst, "applied remote flow rule %s from %s", fr, peer)
		}
	}
	f.pushFlowRules(now)
}

// bypassing is fr as it is applied: with the known-good bypass.
func bypassing(fr rule.FlowRule) rule.FlowRule {
	fr.KnownGoodBypass = true
	return fr
}

// remoteFlowSlots is how many of the flow-rule table's slots peers' rules
// may take: half. The rest are kept for this host's own rules (the
// operator's, the ladder's SYN cookies and rate limits), which a fleet's
// rules must never crowd out: 100 remote rules once filled the 64-slot
// table and the ladder's SYN-cookie rule failed with "table full".
func remoteFlowSlots(capacity int) int { return capacity / 2 }
