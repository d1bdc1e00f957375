// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"cmp"
	"context"
	"fmt"
	"iter"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tierwall/tierwall/internal/control/apiv1"
	"github.com/tierwall/tierwall/internal/control/ban"
	"github.com/tierwall/tierwall/internal/control/bgp"
	"github.com/tierwall/tierwall/internal/control/config"
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
//
// bgpStage owns the speaker and what the loop keeps about it: the
// announcements (open, close, announce, setAnnounce), the received routes'
// pass (received, note, refuse, endPass), their application as remote
// bans and remote flow rules with its bookkeeping (remote.go: applyRemote
// and the rails it applies, on the store, flow stage and data plane a
// fleetHost lends it), and the status the API and the collector read
// (status, speaker, loopRefused). What stays on *Daemon: syncBGP (the
// interval's step: the remote pass, then announce) and flowRulesForBGP.

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

// bgpStage is the BGP side of the loop (see above). What it reads of the
// rest of the daemon comes through the functions wired by newBGPStage.
type bgpStage struct {
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

	cfg     func() *config.Config // the configuration in force (a reload replaces it)
	event   func(now time.Time, kind string, p netip.Prefix, format string, args ...any)
	log     *slog.Logger
	mu      *sync.Mutex // the daemon's: guards sp and why, which the collector and BGP read
	metrics *bgpMetrics
}

// newBGPStage wires the stage to the daemon's configuration, events, lock
// and metrics.
func (d *Daemon) newBGPStage() bgpStage {
	return bgpStage{cfg: func() *config.Config { return d.cfg }, event: d.event, log: d.log, mu: &d.mu, metrics: &d.Metrics.bgp}
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
func (b *bgpStage) setAnnounce(now time.Time) {
	enc := announceEncoding(&b.cfg().BGP.Announce)
	if enc == b.encoding {
		return
	}
	b.encoding = enc
	u, ok := b.sp.(announceSetter)
	if !ok {
		return
	}
	if err := u.SetAnnounce(b.cfg().BGP.Announce); err != nil {
		b.event(now, "error", netip.Prefix{}, "bgp: keeping the running communities and next hops: %v", err)
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

// remoteKey names a received route in bgpStage.why.
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
			Help: "Routes not announced or not enforced, by why (encode: the speaker could not; validation: a peer's FlowSpec failed RFC 8955 §6 or what the data plane matches; rail: the rails (guarded space, the widest ban, the per-interval limit, the circuit breaker, a destination not this host's, a rule that would cut the host off); known_good: a peer's ban over this host's known-good clients; full: max_total or the peers' share of the flow-rule table)."},
			[]string{"reason"}),
	}
	for _, c := range []string{"announced", "withdrawn", "applied", "lifted"} {
		m.changes.WithLabelValues(c)
	}
	for _, r := range []string{"encode", "validation", "rail", "known_good", "full"} {
		m.refusals.WithLabelValues(r)
	}
	reg.MustRegister(m.changes, m.refusals, &bgpCollector{b: &d.bgp})
	return m
}

// bgpCollector reads the speaker's live state at scrape time (the speaker
// is safe for concurrent use; the loop's own state is not touched).
type bgpCollector struct{ b *bgpStage }

var (
	bgpSessionDesc = prometheus.NewDesc("tierwall_bgp_session_up", "1 when the session with the neighbour is established.", []string{"neighbor"}, nil)
	bgpRoutesDesc  = prometheus.NewDesc("tierwall_bgp_routes", "Routes per neighbour: announced to it, received from it, and of those accepted for enforcement.", []string{"neighbor", "direction"}, nil)
)

func (c *bgpCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- bgpSessionDesc
	ch <- bgpRoutesDesc
}

func (c *bgpCollector) Collect(ch chan<- prometheus.Metric) {
	sp := c.b.speaker()
	if sp == nil {
		return
	}
	refused := c.b.loopRefused()
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
func (b *bgpStage) loopRefused() map[netip.Addr]int {
	sp := b.speaker()
	if sp == nil {
		return nil
	}
	b.mu.Lock()
	why := b.why
	b.mu.Unlock()
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
func (b *bgpStage) speaker() Speaker {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sp
}

// setSpeaker replaces the speaker under mu (network mode wraps it, and
// unwraps it when it did not start).
func (b *bgpStage) setSpeaker(sp Speaker) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sp = sp
}

// running reports whether there is a speaker.
func (b *bgpStage) running() bool { return b.sp != nil }

// open starts the speaker when the configuration has one; bans are the
// ban store's, for the remote bans the state file kept. A speaker that
// cannot start fails the daemon's start: an operator who configured
// upstream announcements must not believe they are on.
func (b *bgpStage) open(now time.Time, bans iter.Seq[ban.Ban]) error {
	cfg := b.cfg()
	if !cfg.BGP.Enabled() {
		return nil
	}
	sp, err := newSpeaker(cfg.BGP, b.log)
	if err != nil {
		return fmt.Errorf("bgp: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := sp.Start(ctx); err != nil {
		cancel()
		return fmt.Errorf("bgp: starting the speaker: %w", err)
	}
	b.mu.Lock()
	iface := cfg.Interface
	b.sp, b.asn, b.routerID, b.started, b.cancel = sp, cfg.BGP.ASN, cfg.BGP.RouterID, now, cancel
	b.announced, b.refused, b.loss = map[string]bgp.Route{}, map[string]bool{}, func() (uint64, error) { return wireLoss(iface) }
	b.encoding = announceEncoding(&cfg.BGP.Announce)
	if n, err := b.loss(); err == nil {
		b.lossAt = n
	}
	// The remote bans the state file kept: still the peers' until they
	// say otherwise (applyRemote).
	b.remote = map[netip.Prefix]netip.Addr{}
	for x := range bans {
		if peer, ok := remotePeer(x); ok {
			b.remote[x.Prefix] = peer
		}
	}
	b.mu.Unlock()
	return nil
}

// close stops the speaker. Its sessions close with a notification, so
// peers withdraw our routes: a stopped daemon no longer vouches for them
// (the bans stay in XDP). A crash, by contrast, leaves them stale at
// graceful-restart peers until the restarted daemon re-announces.
func (b *bgpStage) close() {
	if b.sp == nil {
		return
	}
	b.sp.Stop()
	b.cancel()
}

// changed is the speaker's change signal (nil without a speaker: a nil
// channel never fires in the loop's select).
func (b *bgpStage) changed() <-chan struct{} {
	if b.sp == nil {
		return nil
	}
	return b.sp.Changed()
}

// syncBGP is the interval's BGP step: remote rules first (a peer's rule
// the local tiers now enforce), then the announcements.
func (d *Daemon) syncBGP(now time.Time, overflow uint64) {
	if !d.bgp.running() {
		return
	}
	d.bgp.newBans, d.bgp.newShare = 0, 0
	d.bgp.applyRemote(now, d.fleetHost())
	d.bgp.announce(now, overflow, d.store.Each, d.flowRulesForBGP(), d.store.Guarded)
}

// announce makes the speaker's announcements what the policy asks of the
// bans and flow rules (announcePolicy), reporting what changed. overflow
// is the feature table's overflow counter: it, or the interface's wire
// loss, growing since the last interval means the local tiers saturate.
func (b *bgpStage) announce(now time.Time, overflow uint64, bans iter.Seq[ban.Ban], flows []mitigate.Rule, guarded func(netip.Prefix) string) {
	saturated := overflow > b.overflowAt
	b.overflowAt = overflow
	if b.loss != nil {
		// Unreadable statistics say nothing either way: the overflow
		// alone decides then.
		if n, err := b.loss(); err == nil {
			saturated = saturated || n > b.lossAt
			b.lossAt = n
		}
	}
	b.setAnnounce(now)
	cfg := b.cfg()
	want := announcePolicy(&cfg.BGP, bans, flows, saturated, b.announced, guarded)
	if cfg.Rails.MonitorOnly {
		want = nil
	}
	diff, err := b.sp.Announce(want)
	if err != nil {
		b.event(now, "error", netip.Prefix{}, "bgp: announcing %d routes: %v", len(want), err)
		return
	}
	for _, why := range diff.Refused {
		b.metrics.refusals.WithLabelValues("encode").Inc()
		b.event(now, "bgp", netip.Prefix{}, "not announced: %s", why)
	}
	now2 := map[string]bgp.Route{}
	for _, r := range want {
		now2[r.String()] = r
	}
	for k, r := range now2 {
		if _, ok := b.announced[k]; !ok {
			b.metrics.changes.WithLabelValues("announced").Inc()
			b.event(now, "bgp", routePrefix(r), "announced %s (%s)", r.String(), r.Reason)
		}
	}
	for k, r := range b.announced {
		if _, ok := now2[k]; !ok {
			b.metrics.changes.WithLabelValues("withdrawn").Inc()
			b.event(now, "bgp", routePrefix(r), "withdrew %s", r.String())
		}
	}
	b.announced = now2
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
			if r.Origin == mitigate.Remote || r.Action == rule.FlowSYNCookie || r.Rung == mitigate.RungSYNSize {
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
	kept, _ := topRoutes(out, c.Announce.MaxRoutes)
	return kept
}

// topRoutes keeps the heaviest max routes per kind and family of rs
// (which it reorders), and says how many it cut: ties by key, so the set
// is stable from one interval to the next.
func topRoutes(rs []bgp.Route, max int) (kept []bgp.Route, cut int) {
	slices.SortFunc(rs, func(a, b bgp.Route) int {
		if c := cmp.Compare(b.Rate, a.Rate); c != 0 {
			return c
		}
		return strings.Compare(a.String(), b.String())
	})
	n := map[string]int{}
	kept = rs[:0]
	for _, r := range rs {
		k := fmt.Sprintf("%s/%v", r.Kind, routePrefix(r).Addr().Is4())
		if n[k] >= max {
			cut++
			continue
		}
		n[k]++
		kept = append(kept, r)
	}
	return kept, cut
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

// received starts a pass over what the speaker received: the remote bans
// (a source prefix) and remote flow rules it reports enforceable, by
// peer, with those it refused reported; gone says whether a peer's route
// no longer sent is to be lifted. endPass ends the pass.
func (b *bgpStage) received(now time.Time) (map[netip.Prefix]remoteBan, map[rule.FlowRule]netip.Addr, func(netip.Addr) bool) {
	if b.remote == nil {
		b.remote = map[netip.Prefix]netip.Addr{}
	}
	recv := b.sp.Received()
	up := map[netip.Addr]time.Time{}
	configured := map[netip.Addr]bool{}
	for _, n := range b.sp.Neighbors() {
		configured[n.Address] = true
		if n.State == "established" {
			up[n.Address] = n.Since
		}
	}
	wantBans := map[netip.Prefix]remoteBan{}
	wantRules := map[rule.FlowRule]netip.Addr{}
	b.refusing, b.whying = map[string]bool{}, map[string]string{}
	for _, r := range recv {
		if r.Refused != "" {
			b.refuse(now, "validation", netip.Prefix{}, r.Peer, r.Flow, fmt.Sprintf("not enforced: flowspec %s from %s", r.Flow.String(), r.Peer), r.Refused)
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
		return now.Sub(b.started) >= max(b.cfg().BGP.Accept.Hold, remoteSettle)
	}
	return wantBans, wantRules, gone
}

// endPass makes the pass's refusals the last pass's: each is reported
// again only once the peer stopped sending it in between, and why is what
// BGP and the collector read.
func (b *bgpStage) endPass() {
	b.refused, b.refusing = b.refusing, nil
	b.mu.Lock()
	b.why, b.whying = b.whying, nil
	b.mu.Unlock()
}

// note records why a received route is not enforced, for the operator.
func (b *bgpStage) note(peer netip.Addr, f bgp.Flow, why string) {
	if b.whying != nil {
		b.whying[remoteKey(peer, f)] = why
	}
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

// refuse counts and reports a received route not enforced, once
// while the peer keeps sending it (applyRemote's pass collects the
// refusals in refusing; the last pass's are in refused), and records why
// for the operator (`tierwall bgp routes`).
func (b *bgpStage) refuse(now time.Time, reason string, p netip.Prefix, peer netip.Addr, f bgp.Flow, what, why string) {
	b.note(peer, f, why)
	k := reason + " " + peer.String() + " " + f.String()
	if !b.refused[k] {
		b.metrics.refusals.WithLabelValues(reason).Inc()
		kind := "refused"
		if reason == "validation" {
			kind = "bgp"
		}
		b.event(now, kind, p, "%s: %s", what, why)
	}
	b.refusing[k] = true
}

// BGP reports the speaker's state (read from the speaker, which is safe
// for concurrent use).
func (d *Daemon) BGP() apiv1.BGPStatus { return d.bgp.status() }

func (b *bgpStage) status() apiv1.BGPStatus {
	sp := b.speaker()
	if sp == nil {
		return apiv1.BGPStatus{Neighbors: []bgp.Neighbor{}, Announced: []bgp.Route{}, Received: []bgp.Remote{}}
	}
	b.mu.Lock()
	st := apiv1.BGPStatus{Enabled: true, ASN: b.asn, RouterID: b.routerID}
	why := b.why
	b.mu.Unlock()
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
