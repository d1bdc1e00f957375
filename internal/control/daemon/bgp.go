// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"cmp"
	"context"
	"fmt"
	"iter"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tierwall/tierwall/internal/control/apiv1"
	"github.com/tierwall/tierwall/internal/control/ban"
	"github.com/tierwall/tierwall/internal/control/bgp"
	"github.com/tierwall/tierwall/internal/control/config"
	"github.com/tierwall/tierwall/internal/control/detect"
	"github.com/tierwall/tierwall/internal/control/mitigate"
	"github.com/tierwall/tierwall/internal/rule"
)

// The BGP side of the loop. Upstream, it announces what the tiers below
// cannot absorb: each interval the policy (announcePolicy) turns the bans
// and flow rules into the set of routes that should be announced, and the
// speaker makes its announcements equal that set, so a lifted ban is
// withdrawn by the same step that stops announcing it, and a restart
// announces exactly what the state file still bans (graceful restart keeps
// the old routes at the peer meanwhile, and drops those not re-announced).
// Downstream, FlowSpec from the fleet becomes remote bans (a source prefix)
// and remote flow rules (a destination and packet shape), applied as soon
// as the speaker reports a change, not at the next interval. Remote rules
// are never announced again: a host that re-announced what it received
// would keep a route alive after its origin withdrew it.

// Speaker is the BGP speaker as the loop uses it: *bgp.Speaker, or a fake
// in unit tests.
type Speaker interface {
	Start(ctx context.Context) error
	Stop()
	Announce(routes []bgp.Route) (bgp.Diff, error)
	Announced() []bgp.Route
	Neighbors() []bgp.Neighbor
	Received() []bgp.Remote
	Changed() <-chan struct{}
}

// newSpeaker builds the speaker; tests replace it.
var newSpeaker = func(cfg config.BGP, log *slog.Logger) (Speaker, error) { return bgp.New(cfg, log) }

// remoteDetector is the detector name of remote bans, and the prefix of
// their reason, which names the peer (so that a restarted daemon knows
// whose they are).
const (
	remoteDetector = "bgp"
	remoteReason   = "flowspec from "
)

// remoteSettle is how long a receiving peer's session must have been up
// before a remote rule it no longer sends is lifted: a restarted daemon
// keeps its remote rules from the state file until the peer had time to
// send them again.
const remoteSettle = 2 * time.Second

type bgpState struct {
	sp       Speaker // set once at start, read by the collector and BGP under mu
	asn      uint32
	routerID string
	started  time.Time
	cancel   context.CancelFunc
	// what the last announce step asked for, by key, for the events
	announced map[string]bgp.Route
	// saturation: the feature table overflowed, or the interface lost
	// packets before XDP, since the last interval
	overflowAt, lossAt uint64
	loss               func() (uint64, error) // wireLoss of the interface; tests replace it
	// refused are the received routes reported refused in the last pass:
	// each refusal is reported once while the peer keeps sending it (and
	// the set holds no more than the peers send).
	refused, refusing map[string]bool
	// remote are the remote bans and their peers: applyRemote runs on
	// every change a peer sends, so it must not walk every ban
	remote map[netip.Prefix]netip.Addr
	// newBans and newShare are the remote bans applied this interval and
	// the share of the established sources they cover: the per-interval
	// limit and the circuit breaker count every pass of the interval, not
	// one (applyRemote runs on each change a peer sends).
	newBans  int
	newShare float64
	breaker  bool
	// why are the received routes the loop refused in the last pass, by
	// peer and flow, with why: the speaker validated them, so only the
	// loop knows (read by BGP and the collector, under the daemon's mu).
	why, whying map[string]string
	// encoding is what the speaker was last given of bgp.announce's wire
	// form (next hops, communities), as text: a SIGHUP that changes it
	// reaches the speaker at the next interval (announceSetter).
	encoding string
}

// announceSetter is a speaker that takes a reloaded announce policy's
// next hops and communities (*bgp.Speaker; the unit tests' fake has
// none).
type announceSetter interface {
	SetAnnounce(config.BGPAnnounce) error
}

// announceEncoding is the part of a that the speaker encodes.
func announceEncoding(a *config.BGPAnnounce) string {
	return fmt.Sprint(a.NextHop4Addr, a.NextHop6Addr, a.Communities, a.LargeCommunities)
}

// setAnnounce hands a reloaded announce policy's wire form to the speaker
// (bgp.announce reloads on SIGHUP: the loop reads its policy every
// interval, the speaker its communities and next hops only from here).
func (d *Daemon) setAnnounce(now time.Time) {
	enc := announceEncoding(&d.cfg.BGP.Announce)
	if enc == d.bgp.encoding {
		return
	}
	d.bgp.encoding = enc
	u, ok := d.bgp.sp.(announceSetter)
	if !ok {
		return
	}
	if err := u.SetAnnounce(d.cfg.BGP.Announce); err != nil {
		d.event(now, "error", netip.Prefix{}, "bgp: keeping the running communities and next hops: %v", err)
	}
}

// remoteBan is a source ban a peer sent: its peer and the route's
// destination.
type remoteBan struct {
	peer netip.Addr
	flow bgp.Flow
}

// monitorOnly is why nothing received is enforced in monitor-only mode.
const monitorOnly = "monitor-only (rails.monitor_only): nothing received is enforced"

// remoteKey names a received route in bgpState.why.
func remoteKey(peer netip.Addr, f bgp.Flow) string { return peer.String() + " " + f.String() }

type bgpMetrics struct {
	changes  *prometheus.CounterVec
	refusals *prometheus.CounterVec
}

func newBGPMetrics(reg *prometheus.Registry, d *Daemon) bgpMetrics {
	m := bgpMetrics{
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tierwall_bgp_updates_total",
			Help: "Routes the speaker announced and withdrew, and remote rules applied and lifted."}, []string{"change"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tierwall_bgp_refusals_total",
			Help: "Routes not announced or not enforced, by why (encode: the speaker could not; validation: a peer's FlowSpec failed RFC 8955 §6 or what the data plane matches; rail: the rails (guarded space, the widest ban, the per-interval limit, the circuit breaker, a destination not this host's, a rule that would cut the host off); full: max_total or the peers' share of the flow-rule table)."},
			[]string{"reason"}),
	}
	for _, c := range []string{"announced", "withdrawn", "applied", "lifted"} {
		m.changes.WithLabelValues(c)
	}
	for _, r := range []string{"encode", "validation", "rail", "full"} {
		m.refusals.WithLabelValues(r)
	}
	reg.MustRegister(m.changes, m.refusals, &bgpCollector{d: d})
	return m
}

// bgpCollector reads the speaker's live state at scrape time (the speaker
// is safe for concurrent use; the loop's own state is not touched).
type bgpCollector struct{ d *Daemon }

var (
	bgpSessionDesc = prometheus.NewDesc("tierwall_bgp_session_up", "1 when the session with the neighbour is established.", []string{"neighbor"}, nil)
	bgpRoutesDesc  = prometheus.NewDesc("tierwall_bgp_routes", "Routes per neighbour: announced to it, received from it, and of those accepted for enforcement.", []string{"neighbor", "direction"}, nil)
)

func (c *bgpCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- bgpSessionDesc
	ch <- bgpRoutesDesc
}

func (c *bgpCollector) Collect(ch chan<- prometheus.Metric) {
	sp := c.d.speaker()
	if sp == nil {
		return
	}
	refused := c.d.loopRefused()
	for _, n := range sp.Neighbors() {
		n.Accepted -= refused[n.Address]
		up := 0.0
		if n.State == "established" {
			up = 1
		}
		a := n.Address.String()
		ch <- prometheus.MustNewConstMetric(bgpSessionDesc, prometheus.GaugeValue, up, a)
		ch <- prometheus.MustNewConstMetric(bgpRoutesDesc, prometheus.GaugeValue, float64(n.Announced), a, "announced")
		ch <- prometheus.MustNewConstMetric(bgpRoutesDesc, prometheus.GaugeValue, float64(n.Received), a, "received")
		ch <- prometheus.MustNewConstMetric(bgpRoutesDesc, prometheus.GaugeValue, float64(n.Accepted), a, "accepted")
	}
}

// loopRefused counts, per peer, the received routes the speaker accepted
// and the loop refused in its last pass (the rails, the table).
func (d *Daemon) loopRefused() map[netip.Addr]int {
	sp := d.speaker()
	if sp == nil {
		return nil
	}
	d.mu.Lock()
	why := d.bgp.why
	d.mu.Unlock()
	if len(why) == 0 {
		return nil
	}
	out := map[netip.Addr]int{}
	for _, r := range sp.Received() {
		if r.Refused == "" && why[remoteKey(r.Peer, r.Flow)] != "" {
			out[r.Peer]++
		}
	}
	return out
}

// speaker returns the speaker under mu (the collector's view; the loop
// sets it once at start).
func (d *Daemon) speaker() Speaker {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.bgp.sp
}

// openBGP starts the speaker when the configuration has one. A speaker
// that cannot start fails the daemon's start: an operator who configured
// upstream announcements must not believe they are on.
func (d *Daemon) openBGP(now time.Time) error {
	if !d.cfg.BGP.Enabled() {
		return nil
	}
	sp, err := newSpeaker(d.cfg.BGP, d.log)
	if err != nil {
		return fmt.Errorf("bgp: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := sp.Start(ctx); err != nil {
		cancel()
		return fmt.Errorf("bgp: starting the speaker: %w", err)
	}
	d.mu.Lock()
	iface := d.cfg.Interface
	d.bgp = bgpState{sp: sp, asn: d.cfg.BGP.ASN, routerID: d.cfg.BGP.RouterID, started: now, cancel: cancel,
		announced: map[string]bgp.Route{}, refused: map[string]bool{}, loss: func() (uint64, error) { return wireLoss(iface) },
		encoding: announceEncoding(&d.cfg.BGP.Announce)}
	if n, err := d.bgp.loss(); err == nil {
		d.bgp.lossAt = n
	}
	// The remote bans the state file kept: still the peers' until they
	// say otherwise (applyRemote).
	d.bgp.remote = map[netip.Prefix]netip.Addr{}
	for b := range d.store.Each {
		if peer, ok := remotePeer(b); ok {
			d.bgp.remote[b.Prefix] = peer
		}
	}
	d.mu.Unlock()
	return nil
}

// closeBGP stops the speaker. Its sessions close with a notification, so
// peers withdraw our routes: a stopped daemon no longer vouches for them
// (the bans stay in XDP). A crash, by contrast, leaves them stale at
// graceful-restart peers until the restarted daemon re-announces.
func (d *Daemon) closeBGP() {
	if d.bgp.sp == nil {
		return
	}
	d.bgp.sp.Stop()
	d.bgp.cancel()
}

// bgpChanged is the speaker's change signal (nil without a speaker: a nil
// channel never fires in the loop's select).
func (d *Daemon) bgpChanged() <-chan struct{} {
	if d.bgp.sp == nil {
		return nil
	}
	return d.bgp.sp.Changed()
}

// syncBGP is the interval's BGP step: remote rules first (a peer's rule
// the local tiers now enforce), then the announcements.
func (d *Daemon) syncBGP(now time.Time, overflow uint64) {
	if d.bgp.sp == nil {
		return
	}
	d.bgp.newBans, d.bgp.newShare = 0, 0
	d.applyRemote(now)
	saturated := overflow > d.bgp.overflowAt
	d.bgp.overflowAt = overflow
	if d.bgp.loss != nil {
		// Unreadable statistics say nothing either way: the overflow
		// alone decides then.
		if n, err := d.bgp.loss(); err == nil {
			saturated = saturated || n > d.bgp.lossAt
			d.bgp.lossAt = n
		}
	}
	d.setAnnounce(now)
	want := announcePolicy(&d.cfg.BGP, d.store.Each, d.flowRulesForBGP(), saturated, d.bgp.announced, d.store.Guarded)
	if d.cfg.Rails.MonitorOnly {
		want = nil
	}
	diff, err := d.bgp.sp.Announce(want)
	if err != nil {
		d.event(now, "error", netip.Prefix{}, "bgp: announcing %d routes: %v", len(want), err)
		return
	}
	for _, why := range diff.Refused {
		d.Metrics.bgp.refusals.WithLabelValues("encode").Inc()
		d.event(now, "bgp", netip.Prefix{}, "not announced: %s", why)
	}
	now2 := map[string]bgp.Route{}
	for _, r := range want {
		now2[r.String()] = r
	}
	for k, r := range now2 {
		if _, ok := d.bgp.announced[k]; !ok {
			d.Metrics.bgp.changes.WithLabelValues("announced").Inc()
			d.event(now, "bgp", routePrefix(r), "announced %s (%s)", r.String(), r.Reason)
		}
	}
	for k, r := range d.bgp.announced {
		if _, ok := now2[k]; !ok {
			d.Metrics.bgp.changes.WithLabelValues("withdrawn").Inc()
			d.event(now, "bgp", routePrefix(r), "withdrew %s", r.String())
		}
	}
	d.bgp.announced = now2
}

// flowRulesForBGP lists the flow rules that may go upstream.
func (d *Daemon) flowRulesForBGP() []mitigate.Rule {
	if d.flow.set == nil {
		return nil
	}
	return d.flow.set.Rules()
}

// announcePolicy is what should be announced: bans and flow rules whose
// rate reached announce.min_pps (a ban's peak, so a route does not flap
// while the rate dips; a flow rule already announced stays while it
// exists), or every ban while the local tiers are saturated; never a
// remote rule, a SYN-cookie rule (a local mitigation with no FlowSpec
// action), a detector's ban of one address unless announce.host_bans (its
// source may be spoofed), or a prefix a rail guards (checked again here, whatever let
// the ban in: a forced operator ban of protected space stays local); the
// heaviest announce.max_routes per kind and family.
func announcePolicy(c *config.BGP, bans iter.Seq[ban.Ban], flows []mitigate.Rule, saturated bool, prev map[string]bgp.Route, guarded func(netip.Prefix) string) []bgp.Route {
	var rtbh, fs bool
	for _, n := range c.Neighbors {
		rtbh = rtbh || n.Sends("rtbh")
		fs = fs || n.Sends("flowspec")
	}
	var out []bgp.Route
	if bans == nil {
		bans = func(func(ban.Ban) bool) {}
	}
	for b := range bans {
		if b.Detector == remoteDetector || guarded(b.Prefix) != "" {
			continue
		}
		// One address's ban is no evidence that the address sent the
		// flood (config.BGPAnnounce.HostBans); it stays local.
		if b.Prefix.IsSingleIP() && !b.Manual && !c.Announce.HostBans {
			continue
		}
		rate := max(b.Rate, b.PeakRate)
		reason := fmt.Sprintf("ban by %s, peak %.0f pps", b.Detector, b.PeakRate)
		var rs []bgp.Route
		if rtbh {
			rs = append(rs, bgp.Route{Kind: bgp.RTBH, Prefix: b.Prefix, Reason: reason, Rate: rate})
		}
		if fs {
			f := bgp.Flow{Src: b.Prefix, FlowRule: rule.FlowRule{Action: rule.FlowDrop}}
			if d := c.Announce.DestinationPrefix; d.IsValid() && d.Addr().Is4() == b.Prefix.Addr().Is4() {
				f.Dst = d
			}
			rs = append(rs, bgp.Route{Kind: bgp.FlowSpec, Flow: f, Reason: reason, Rate: rate})
		}
		// Announced once, a ban stays upstream until it is lifted (a
		// saturation that ended does not withdraw it).
		was := slices.ContainsFunc(rs, func(r bgp.Route) bool { _, ok := prev[r.String()]; return ok })
		if rate < c.Announce.MinPPS && !(saturated && c.Announce.SaturatedOn()) && !was {
			continue
		}
		out = append(out, rs...)
	}
	if fs {
		for _, r := range flows {
			// A flow rule's destination is ours by nature (the victim): the
			// source-ban rails are not about it.
			if r.Origin == mitigate.Remote || r.Action == rule.FlowSYNCookie {
				continue
			}
			rt := bgp.Route{Kind: bgp.FlowSpec, Flow: bgp.Flow{FlowRule: r.FlowRule}, Reason: fmt.Sprintf("%s flow rule: %s", r.Origin, r.Reason), Rate: r.MatchedPPS}
			_, was := prev[rt.String()]
			if !was && r.MatchedPPS < c.Announce.MinPPS {
				continue
			}
			out = append(out, rt)
		}
	}
	// Top-N per kind and family, heaviest first; ties by key, so the set
	// is stable from one interval to the next.
	slices.SortFunc(out, func(a, b bgp.Route) int {
		if c := cmp.Compare(b.Rate, a.Rate); c != 0 {
			return c
		}
		return strings.Compare(a.String(), b.String())
	})
	n := map[string]int{}
	kept := out[:0]
	for _, r := range out {
		k := fmt.Sprintf("%s/%v", r.Kind, routePrefix(r).Addr().Is4())
		if n[k] >= c.Announce.MaxRoutes {
			continue
		}
		n[k]++
		kept = append(kept, r)
	}
	return kept
}

// routePrefix is the prefix an event names: the source of a ban, else the
// destination of a flow rule.
func routePrefix(r bgp.Route) netip.Prefix {
	switch {
	case r.Kind == bgp.RTBH:
		return r.Prefix
	case r.Flow.Src.IsValid():
		return r.Flow.Src
	}
	return r.Flow.Dst
}

// applyRemote makes the remote bans and remote flow rules equal what the
// speaker reports enforceable: new ones through the rails, gone ones
// lifted once their peer had time to send them again.
func (d *Daemon) applyRemote(now time.Time) {
	sp := d.bgp.sp
	if d.bgp.remote == nil {
		d.bgp.remote = map[netip.Prefix]netip.Addr{}
	}
	recv := sp.Received()
	up := map[netip.Addr]time.Time{}
	configured := map[netip.Addr]bool{}
	for _, n := range sp.Neighbors() {
		configured[n.Address] = true
		if n.State == "established" {
			up[n.Address] = n.Since
		}
	}
	wantBans := map[netip.Prefix]remoteBan{}
	wantRules := map[rule.FlowRule]netip.Addr{}
	d.bgp.refusing, d.bgp.whying = map[string]bool{}, map[string]string{}
	defer func() {
		d.bgp.refused, d.bgp.refusing = d.bgp.refusing, nil
		d.mu.Lock()
		d.bgp.why, d.bgp.whying = d.bgp.whying, nil
		d.mu.Unlock()
	}()
	for _, r := range recv {
		if r.Refused != "" {
			d.refuseRemote(now, "validation", netip.Prefix{}, r.Peer, r.Flow, fmt.Sprintf("not enforced: flowspec %s from %s", r.Flow.String(), r.Peer), r.Refused)
			continue
		}
		if r.Flow.Src.IsValid() {
			wantBans[r.Flow.Src] = remoteBan{peer: r.Peer, flow: r.Flow}
		} else {
			wantRules[r.Flow.FlowRule] = r.Peer
		}
	}
	// Lifted: a remote ban or rule the peer no longer sends, once the peer
	// has been up long enough to have sent it again (or is not configured
	// any more, or never came back within the hold after our start).
	gone := func(peer netip.Addr) bool {
		if !configured[peer] {
			return true
		}
		if since, ok := up[peer]; ok {
			return now.Sub(since) >= remoteSettle
		}
		return now.Sub(d.bgp.started) >= max(d.cfg.BGP.Accept.Hold, remoteSettle)
	}
	monitor := d.cfg.Rails.MonitorOnly
	for p, peer := range d.bgp.remote {
		if b, ok := d.store.Get(p); !ok || b.Detector != remoteDetector {
			delete(d.bgp.remote, p) // lifted another way (the operator)
			continue
		}
		if _, still := wantBans[p]; still && !monitor {
			delete(wantBans, p)
			continue
		}
		if monitor || gone(peer) {
			delete(d.bgp.remote, p)
			d.store.Remove(p)
			d.unblock(now, p)
			d.dirty = true
			d.Metrics.bgp.changes.WithLabelValues("lifted").Inc()
			d.event(now, "bgp", p, "lifted remote ban from %s: the route was withdrawn", peer)
		}
	}
	if monitor {
		for _, rb := range wantBans {
			d.bgp.whying[remoteKey(rb.peer, rb.flow)] = monitorOnly
		}
	} else {
		d.applyRemoteBans(now, wantBans)
	}
	d.applyRemoteRules(now, wantRules, gone, monitor)
}

func lessPrefixCmp(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return cmp.Compare(a.Bits(), b.Bits())
}

// remotePeer is the peer of a remote ban.
func remotePeer(b ban.Ban) (netip.Addr, bool) {
	if b.Detector != remoteDetector {
		return netip.Addr{}, false
	}
	s, ok := strings.CutPrefix(b.Reason, remoteReason)
	if !ok {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(s)
	return a, err == nil
}

// applyRemoteBans bans the peers' new source prefixes through the same
// rails as a detector's (ban.Store.Propose): guarded space and the widest
// ban, then the per-interval limit, the total, and the circuit breaker
// over the established sources the interval's remote bans would cover. A
// peer's ban is also applied only when its route's destination is this
// host's (one of its addresses or protected prefixes): a source ban drops
// the source for every destination here, and a route about another host
// of the fleet is not a reason to. A local ban of p stays the local one.
// What the limits hold back waits, as a detection does, for a later
// interval.
func (d *Daemon) applyRemoteBans(now time.Time, want map[netip.Prefix]remoteBan) {
	var fresh []netip.Prefix
	for _, p := range slices.SortedFunc(maps.Keys(want), lessPrefixCmp) {
		rb := want[p]
		if _, ok := d.store.Get(p); ok {
			continue
		}
		if why := d.store.Guarded(p); why != "" {
			d.refuseRemote(now, "rail", p, rb.peer, rb.flow, fmt.Sprintf("remote ban from %s", rb.peer), why)
			continue
		}
		if !d.oursDst(rb.flow.Dst) {
			d.refuseRemote(now, "rail", p, rb.peer, rb.flow, fmt.Sprintf("remote ban from %s", rb.peer),
				fmt.Sprintf("its destination %s holds none of this host's addresses or protected prefixes", rb.flow.Dst))
			continue
		}
		fresh = append(fresh, p)
	}
	if len(fresh) == 0 {
		return
	}
	r := &d.store.Rails
	admit := len(fresh)
	if n := r.MaxNewPerInterval; n > 0 {
		admit = min(admit, max(n-d.bgp.newBans, 0))
	}
	if n := r.MaxTotal; n > 0 {
		admit = min(admit, max(n-d.store.Len(), 0))
	}
	if r.MaxEstablishedShare > 0 && admit > 0 {
		share := d.establishedShare(&detect.Traffic{})
		total := d.bgp.newShare
		for _, p := range fresh[:admit] {
			total += share(p)
		}
		if total > r.MaxEstablishedShare {
			if !d.bgp.breaker {
				d.event(now, "breaker", netip.Prefix{}, "circuit breaker open for remote bans: %d would cover %.0f%% of the established sources (limit %.0f%%)",
					len(fresh), 100*total, 100*r.MaxEstablishedShare)
			}
			d.bgp.breaker = true
			for _, p := range fresh {
				rb := want[p]
				d.refuseRemote(now, "rail", p, rb.peer, rb.flow, fmt.Sprintf("remote ban from %s", rb.peer),
					fmt.Sprintf("circuit breaker: the remote bans would cover %.0f%% of the established sources (limit %.0f%%)", 100*total, 100*r.MaxEstablishedShare))
			}
			return
		}
		d.bgp.newShare = total
	}
	d.bgp.breaker = false
	for i, p := range fresh {
		rb := want[p]
		if i >= admit {
			if r.MaxTotal > 0 && d.store.Len() >= r.MaxTotal {
				d.refuseRemote(now, "full", p, rb.peer, rb.flow, fmt.Sprintf("remote ban from %s", rb.peer), fmt.Sprintf("%d bans, the rails' max_total", d.store.Len()))
			} else {
				d.refuseRemote(now, "rail", p, rb.peer, rb.flow, fmt.Sprintf("remote ban from %s", rb.peer), fmt.Sprintf("more than %d new remote bans this interval (rails.max_new_per_interval)", r.MaxNewPerInterval))
			}
			continue
		}
		d.applyRemoteBan(now, p, rb.peer)
	}
}

// oursDst reports whether a remote ban's destination is this host's: it
// holds one of its addresses or overlaps a protected prefix.
func (d *Daemon) oursDst(dst netip.Prefix) bool {
	for _, m := range d.hostAddrs() {
		if dst.Contains(m.Addr) {
			return true
		}
	}
	return slices.ContainsFunc(d.cfg.Rails.ProtectedPrefixes, dst.Overlaps)
}

// applyRemoteBan bans p for peer once the rails admitted it.
func (d *Daemon) applyRemoteBan(now time.Time, p netip.Prefix, peer netip.Addr) {
	if err := d.admit(p); err != nil {
		d.event(now, "error", p, "remote ban from %s: %v", peer, err)
		return
	}
	d.store.Put(ban.Ban{Prefix: p, Detector: remoteDetector, Reason: remoteReason + peer.String(), FirstSeen: now, LastSeen: now,
		Tier: "xdp", Manual: true})
	if len(d.blockEach(now, []netip.Prefix{p})) == 0 {
		return
	}
	d.bgp.remote[p] = peer
	d.bgp.newBans++
	d.dirty = true
	d.Metrics.bgp.changes.WithLabelValues("applied").Inc()
	d.event(now, "bgp", p, "applied remote ban from %s", peer)
}

// applyRemoteRules puts the peers' flow rules in the set (origin "bgp")
// and takes out those gone; the set goes to the data plane as one.
func (d *Daemon) applyRemoteRules(now time.Time, want map[rule.FlowRule]netip.Addr, gone func(netip.Addr) bool, monitor bool) {
	f := &d.flow
	if f.set == nil || f.fp == nil {
		for fr, peer := range want {
			d.refuseRemote(now, "validation", fr.Dst, peer, bgp.Flow{FlowRule: fr}, fmt.Sprintf("remote flow rule %s from %s", fr, peer), "this data plane has no flow rules")
		}
	}
	if f.set == nil {
		return
	}
	for _, r := range f.set.Rules() {
		if r.Origin != mitigate.Remote {
			continue
		}
		if _, still := want[r.FlowRule]; still && !monitor {
			delete(want, r.FlowRule)
			continue
		}
		peer, _ := netip.ParseAddr(strings.TrimPrefix(r.Reason, remoteReason))
		if monitor || gone(peer) {
			_, _ = f.set.Remove(r.FlowRule) // it is there: Rules just listed it
			f.dirty = true
			d.Metrics.bgp.changes.WithLabelValues("lifted").Inc()
			d.event(now, "bgp", r.Dst, "lifted remote flow rule %s from %s: the route was withdrawn", r.FlowRule, r.Reason)
		}
	}
	if monitor || f.fp == nil {
		if monitor {
			for fr, peer := range want {
				d.bgp.whying[remoteKey(peer, bgp.Flow{FlowRule: fr})] = monitorOnly
			}
		}
		d.flow.pushFlowRules(now)
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
		if why := d.cutsOff(fr); why != "" {
			d.refuseRemote(now, "rail", fr.Dst, peer, bgp.Flow{FlowRule: fr}, what, why)
			continue
		}
		if remote >= room {
			d.refuseRemote(now, "full", fr.Dst, peer, bgp.Flow{FlowRule: fr}, what,
				fmt.Sprintf("peers' rules may take %d of the %d flow-rule slots; the rest are this host's own", room, f.set.Cap()))
			continue
		}
		added, err := f.set.Add(mitigate.Rule{FlowRule: fr, Origin: mitigate.Remote, Reason: remoteReason + peer.String(), Added: now})
		if err != nil {
			d.refuseRemote(now, "full", fr.Dst, peer, bgp.Flow{FlowRule: fr}, what, err.Error())
			continue
		}
		if added {
			remote++
			f.dirty = true
			d.Metrics.bgp.changes.WithLabelValues("applied").Inc()
			d.event(now, "bgp", fr.Dst, "applied remote flow rule %s from %s", fr, peer)
		}
	}
	d.flow.pushFlowRules(now)
}

// remoteFlowSlots is how many of the flow-rule table's slots peers' rules
// may take: half. The rest are kept for this host's own rules (the
// operator's, the ladder's SYN cookies and rate limits), which a fleet's
// rules must never crowd out: 100 remote rules once filled the 64-slot
// table and the ladder's SYN-cookie rule failed with "table full".
func remoteFlowSlots(capacity int) int { return capacity / 2 }

// refuseRemote counts and reports a received route not enforced, once
// while the peer keeps sending it (applyRemote's pass collects the
// refusals in refusing; the last pass's are in refused), and records why
// for the operator (`tierwall bgp routes`).
func (d *Daemon) refuseRemote(now time.Time, reason string, p netip.Prefix, peer netip.Addr, f bgp.Flow, what, why string) {
	if d.bgp.whying != nil {
		d.bgp.whying[remoteKey(peer, f)] = why
	}
	k := reason + " " + peer.String() + " " + f.String()
	if !d.bgp.refused[k] {
		d.Metrics.bgp.refusals.WithLabelValues(reason).Inc()
		kind := "refused"
		if reason == "validation" {
			kind = "bgp"
		}
		d.event(now, kind, p, "%s: %s", what, why)
	}
	d.bgp.refusing[k] = true
}

// BGP reports the speaker's state (read from the speaker, which is safe
// for concurrent use).
func (d *Daemon) BGP() apiv1.BGPStatus {
	sp := d.speaker()
	if sp == nil {
		return apiv1.BGPStatus{Neighbors: []bgp.Neighbor{}, Announced: []bgp.Route{}, Received: []bgp.Remote{}}
	}
	d.mu.Lock()
	st := apiv1.BGPStatus{Enabled: true, ASN: d.bgp.asn, RouterID: d.bgp.routerID}
	why := d.bgp.why
	d.mu.Unlock()
	st.Neighbors, st.Announced, st.Received = sp.Neighbors(), sp.Announced(), sp.Received()
	// The speaker validated what it received; the loop's rails and table
	// may still have refused it, and then it is not enforced.
	refused := map[netip.Addr]int{}
	for i := range st.Received {
		r := &st.Received[i]
		if w := why[remoteKey(r.Peer, r.Flow)]; r.Refused == "" && w != "" {
			r.Refused = w
			refused[r.Peer]++
		}
	}
	for i := range st.Neighbors {
		st.Neighbors[i].Accepted -= refused[st.Neighbors[i].Address]
	}
	if st.Announced == nil {
		st.Announced = []bgp.Route{}
	}
	if st.Neighbors == nil {
		st.Neighbors = []bgp.Neighbor{}
	}
	if st.Received == nil {
		st.Received = []bgp.Remote{}
	}
	return st
}
