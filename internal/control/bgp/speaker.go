// SPDX-License-Identifier: Apache-2.0

package bgp

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	api "github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/osrg/gobgp/v4/pkg/server"

	"github.com/tierwall/tierwall/internal/control/bgp/community"
	"github.com/tierwall/tierwall/internal/rule"
)

// Timers of the sessions that the configuration leaves to us. GoBGP's
// defaults (120 s to retry a connection, 30 s idle after a reset) are for
// routers; an edge host that is mitigating an attack wants its session
// back in seconds.
const (
	connectRetry   = 5 * time.Second
	idleAfterReset = 3 * time.Second
)

// A neighbour past max_prefixes is taken down by GoBGP and left down: its
// FSM stays idle in the "prefix count" admin state whatever its idle hold
// time (IdleHoldTimeAfterReset only applies to an administrative reset),
// until someone enables it again. The speaker does, after an idle hold
// that starts at prefixLimitIdle and doubles each time the peer is taken
// down again, up to prefixLimitIdleMax; a session that stayed up that
// long starts over. A peer that keeps sending too much is thus retried
// a few times an hour, not in a loop, and one that was fixed comes back
// without a restart of tierwall.
const (
	prefixLimitIdle    = 30 * time.Second
	prefixLimitIdleMax = 15 * time.Minute
)

// Names of the export policy objects in GoBGP; a neighbour's
// communities are added by a statement of its own, matching a neighbour
// set of its own (prefixNeighbor followed by its address).
const (
	policyName           = "tierwall-export"
	setReceiveOnly       = "tierwall-no-flowspec"
	stmtNoFlowSpecToPeer = "tierwall-no-flowspec-to-receive-only"
	stmtLocalOnly        = "tierwall-local-only"
	prefixNeighbor       = "tierwall-neighbor-"
)

var flowFamilies = []bgp.Family{bgp.RF_FS_IPv4_UC, bgp.RF_FS_IPv6_UC}

// Speaker is the embedded BGP speaker: the sessions to the configured
// neighbours, what we announce to them and what they send us. It is safe
// for concurrent use.
type Speaker struct {
	cfg     Config
	log     *slog.Logger
	enc     encoder
	changed chan struct{}
	kick    chan struct{}
	now     func() time.Time
	// pfxIdle is the first idle hold after max_prefixes (prefixLimitIdle;
	// tests shorten it).
	pfxIdle time.Duration

	// amu serialises Announce, which talks to GoBGP without holding mu.
	amu sync.Mutex

	mu        sync.Mutex
	srv       *server.BgpServer
	started   bool
	stopped   bool
	cancel    context.CancelFunc
	loopDone  chan struct{}
	announced map[string]announcedRoute // by wire key
	peers     map[netip.Addr]*peerState
	order     []netip.Addr // peers in configuration order
}

type announcedRoute struct {
	route Route
	wire  wire
}

// peerState is a neighbour as the speaker last saw it.
type peerState struct {
	cfg      *NeighborConfig
	state    bgp.FSMState
	since    time.Time
	families []string
	// eor: families whose End-of-RIB arrived since the session came up;
	// until then, routes held from the lost session stay (the peer has
	// not finished re-sending).
	eor    map[bgp.Family]bool
	routes map[string]*remoteEntry
	// pfxHold is the next idle hold after max_prefixes took the session
	// down, and pfxTimer the pending re-enable (nil: none).
	pfxHold  time.Duration
	pfxTimer *time.Timer
	// peerRestart is the restart time the peer announced (RFC 4724),
	// with graceful restart on: see onPeer.
	peerRestart time.Duration
}

// remoteEntry is one received FlowSpec route, keyed by its NLRI.
type remoteEntry struct {
	key      string
	family   bgp.Family
	flow     Flow
	received time.Time
	lost     time.Time
	reason   string // why it cannot be enforced, before max_rules
}

// New prepares a speaker for cfg, which Config.Resolve has
// checked; it refuses (rule.ErrInvalid) what it cannot use.
func New(cfg Config, log *slog.Logger) (*Speaker, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if !cfg.Enabled() {
		return nil, fmt.Errorf("%w: bgp: asn is 0 (the speaker is off)", rule.ErrInvalid)
	}
	if !cfg.RouterIDAddr.IsValid() {
		id, err := netip.ParseAddr(cfg.RouterID)
		if err != nil || !id.Is4() {
			return nil, fmt.Errorf("%w: bgp.router_id %q is not an IPv4 address", rule.ErrInvalid, cfg.RouterID)
		}
		cfg.RouterIDAddr = id
	}
	s := &Speaker{
		cfg:       cfg,
		log:       log,
		changed:   make(chan struct{}, 1),
		kick:      make(chan struct{}, 1),
		now:       time.Now,
		pfxIdle:   prefixLimitIdle,
		announced: map[string]announcedRoute{},
		peers:     map[netip.Addr]*peerState{},
	}
	enc, err := newEncoder(cfg.ASN, cfg.Announce)
	if err != nil {
		return nil, err
	}
	s.enc = enc
	s.cfg.Neighbors = slices.Clone(cfg.Neighbors)
	for i := range s.cfg.Neighbors {
		n := &s.cfg.Neighbors[i]
		if !n.AddressAddr.IsValid() {
			a, err := netip.ParseAddr(n.Address)
			if err != nil {
				return nil, fmt.Errorf("%w: bgp.neighbors[%d].address %q", rule.ErrInvalid, i, n.Address)
			}
			n.AddressAddr = a.Unmap()
		}
		if _, dup := s.peers[n.AddressAddr]; dup {
			return nil, fmt.Errorf("%w: bgp.neighbors[%d].address %s is configured twice", rule.ErrInvalid, i, n.AddressAddr)
		}
		if n.Port == 0 {
			n.Port = 179
		}
		if n.MaxPrefixes == 0 {
			n.MaxPrefixes = 1000
		}
		// Parsed here to refuse a bad one before GoBGP is started; the
		// export policy gives GoBGP the text.
		if _, err := community.ParseStandards(n.Communities); err != nil {
			return nil, fmt.Errorf("%w: bgp.neighbors[%d].communities%w", rule.ErrInvalid, i, err)
		}
		if _, err := community.ParseLarges(n.LargeCommunities); err != nil {
			return nil, fmt.Errorf("%w: bgp.neighbors[%d].large_communities%w", rule.ErrInvalid, i, err)
		}
		s.peers[n.AddressAddr] = &peerState{cfg: n, routes: map[string]*remoteEntry{}}
		s.order = append(s.order, n.AddressAddr)
	}
	return s, nil
}

// newEncoder is the wire form of the announce policy a: next hops and
// communities.
func newEncoder(asn uint32, a AnnounceConfig) (encoder, error) {
	e := encoder{asn: asn, nextHop4: a.NextHop4Addr, nextHop6: a.NextHop6Addr}
	std, err := community.ParseStandards(a.Communities)
	if err != nil {
		return e, fmt.Errorf("%w: bgp.announce.communities%w", rule.ErrInvalid, err)
	}
	for _, c := range std {
		e.communities = append(e.communities, uint32(c))
	}
	if e.large, err = community.ParseLarges(a.LargeCommunities); err != nil {
		return e, fmt.Errorf("%w: bgp.announce.large_communities%w", rule.ErrInvalid, err)
	}
	return e, nil
}

// SetAnnounce takes a reloaded announce policy's next hops and
// communities (validated by package config); the next Announce re-sends
// every route whose attributes they change. A policy that does not
// encode is refused and the running one kept.
func (s *Speaker) SetAnnounce(a AnnounceConfig) error {
	enc, err := newEncoder(s.cfg.ASN, a)
	if err != nil {
		return err
	}
	s.amu.Lock()
	defer s.amu.Unlock()
	s.enc = enc
	return nil
}

// neighborFamilies is what n negotiates: unicast only to be sent RTBH,
// FlowSpec to be sent it or to receive it.
func neighborFamilies(n *NeighborConfig) []bgp.Family {
	var fs []bgp.Family
	if n.Sends("rtbh") {
		fs = append(fs, bgp.RF_IPv4_UC, bgp.RF_IPv6_UC)
	}
	if n.Sends("flowspec") || n.Receive {
		fs = append(fs, flowFamilies...)
	}
	return fs
}

func familyName(f bgp.Family) string {
	switch f {
	case bgp.RF_IPv4_UC:
		return "ipv4-unicast"
	case bgp.RF_IPv6_UC:
		return "ipv6-unicast"
	case bgp.RF_FS_IPv4_UC:
		return "ipv4-flowspec"
	case bgp.RF_FS_IPv6_UC:
		return "ipv6-flowspec"
	}
	return f.String()
}

func seconds(d time.Duration) uint64 { return uint64((d + time.Second - 1) / time.Second) }

func (s *Speaker) apiPeer(n *NeighborConfig) *api.Peer {
	p := &api.Peer{
		Conf: &api.PeerConf{
			NeighborAddress: n.AddressAddr.String(),
			PeerAsn:         n.ASN,
			Description:     n.Description,
			AuthPassword:    n.Password,
		},
		Transport: &api.Transport{
			RemotePort:  uint32(n.Port),
			PassiveMode: n.Passive,
		},
		Timers: &api.Timers{Config: &api.TimersConfig{
			ConnectRetry:           seconds(connectRetry),
			IdleHoldTimeAfterReset: seconds(idleAfterReset),
		}},
	}
	if n.LocalAddressAddr.IsValid() {
		p.Transport.LocalAddress = n.LocalAddressAddr.String()
	}
	if n.HoldTime > 0 {
		p.Timers.Config.HoldTime = seconds(n.HoldTime)
		p.Timers.Config.KeepaliveInterval = max(seconds(n.HoldTime)/3, 1)
	}
	if n.Multihop > 0 {
		p.EbgpMultihop = &api.EbgpMultihop{Enabled: true, MultihopTtl: uint32(n.Multihop)}
	}
	gr := n.GracefulRestartOn()
	if gr {
		rt := n.RestartTime
		if rt == 0 {
			rt = 120 * time.Second
		}
		p.GracefulRestart = &api.GracefulRestart{Enabled: true, RestartTime: uint32(seconds(rt))}
	}
	for _, f := range neighborFamilies(n) {
		fam := apiutil.ToApiFamily(f.Afi(), f.Safi())
		a := &api.AfiSafi{
			Config:       &api.AfiSafiConfig{Family: fam, Enabled: true},
			PrefixLimits: &api.PrefixLimit{Family: fam, MaxPrefixes: n.MaxPrefixes},
		}
		if gr {
			// Marking the family GR-capable is what makes a peer keep
			// our routes (as stale) while tierwall restarts.
			a.MpGracefulRestart = &api.MpGracefulRestart{Config: &api.MpGracefulRestartConfig{Enabled: true}}
		}
		p.AfiSafis = append(p.AfiSafis, a)
	}
	return p
}

// Start starts GoBGP and adds every neighbour. The speaker runs until
// Stop, or until ctx is done.
func (s *Speaker) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return errors.New("bgp: speaker already started")
	}
	lvl := new(slog.LevelVar)
	lvl.Set(slog.LevelWarn) // GoBGP is chatty at info
	srv := server.NewBgpServer(server.LoggerOption(s.log.With("component", "gobgp"), lvl))
	go srv.Serve()
	g := &api.Global{
		Asn:             s.cfg.ASN,
		RouterId:        s.cfg.RouterIDAddr.String(),
		ListenPort:      s.cfg.ListenPort,
		ListenAddresses: s.cfg.ListenAddresses,
	}
	if g.ListenPort == 0 {
		g.ListenPort = 179
	}
	if err := srv.StartBgp(ctx, &api.StartBgpRequest{Global: g}); err != nil {
		srv.Stop()
		return fmt.Errorf("bgp: start: %w", err)
	}
	fail := func(err error) error {
		srv.Stop()
		return err
	}
	if err := s.exportPolicy(ctx, srv); err != nil {
		return fail(err)
	}
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	err := srv.WatchEvent(lctx, server.WatchEventMessageCallbacks{
		OnPeerUpdate: s.onPeer,
		OnPathUpdate: s.onUpdate,
		OnPathEor:    s.onEor,
	}, server.WatchPeer(), server.WatchUpdate(false, "", ""), server.WatchAdjInWithdraw(), server.WatchEor(false))
	if err != nil {
		cancel()
		return fail(fmt.Errorf("bgp: watch: %w", err))
	}
	for _, a := range s.order {
		n := s.peers[a].cfg
		if err := srv.AddPeer(ctx, &api.AddPeerRequest{Peer: s.apiPeer(n)}); err != nil {
			cancel()
			return fail(fmt.Errorf("bgp: neighbour %s: %w", n.AddressAddr, err))
		}
	}
	s.srv, s.started, s.cancel = srv, true, cancel
	s.loopDone = make(chan struct{})
	go s.loop(lctx, s.loopDone)
	go func() {
		select {
		case <-ctx.Done():
			s.Stop()
		case <-lctx.Done():
		}
	}()
	return nil
}

// exportPolicy makes us an edge host, not a router: only locally
// originated paths leave (a peer's routes are never re-advertised to
// another), and no FlowSpec goes to a neighbour that negotiates it only
// to send us its own. GoBGP has per-neighbour export policies only for
// route-server clients, so this is the global export policy, with a
// neighbour set naming the receive-only peers.
func (s *Speaker) exportPolicy(ctx context.Context, srv *server.BgpServer) error {
	var receiveOnly []string
	for _, a := range s.order {
		n := s.peers[a].cfg
		if n.Receive && !n.Sends("flowspec") {
			receiveOnly = append(receiveOnly, netip.PrefixFrom(a, a.BitLen()).String())
		}
	}
	var stmts []*api.Statement
	// An empty neighbour set matches every neighbour in GoBGP: only
	// define it when someone is in it.
	if len(receiveOnly) > 0 {
		if err := srv.AddDefinedSet(ctx, &api.AddDefinedSetRequest{DefinedSet: &api.DefinedSet{
			DefinedType: api.DefinedType_DEFINED_TYPE_NEIGHBOR, Name: setReceiveOnly, List: receiveOnly,
		}}); err != nil {
			return fmt.Errorf("bgp: export policy: %w", err)
		}
		var fams []*api.Family
		for _, f := range flowFamilies {
			fams = append(fams, apiutil.ToApiFamily(f.Afi(), f.Safi()))
		}
		stmts = append(stmts, &api.Statement{
			Name: stmtNoFlowSpecToPeer,
			Conditions: &api.Conditions{
				NeighborSet: &api.MatchSet{Type: api.MatchSet_TYPE_ANY, Name: setReceiveOnly},
				AfiSafiIn:   fams,
			},
			Actions: &api.Actions{RouteAction: api.RouteAction_ROUTE_ACTION_REJECT},
		})
	}
	// A neighbour's own communities: GoBGP adds them to a copy of the
	// path as it is sent to that neighbour, so no other peer sees them.
	// The statement has no route action, so evaluation goes on to the
	// next and the local-only rule still decides; a path rejected above
	// never gets here.
	for _, a := range s.order {
		n := s.peers[a].cfg
		if len(n.Communities)+len(n.LargeCommunities) == 0 {
			continue
		}
		set := prefixNeighbor + a.String()
		if err := srv.AddDefinedSet(ctx, &api.AddDefinedSetRequest{DefinedSet: &api.DefinedSet{
			DefinedType: api.DefinedType_DEFINED_TYPE_NEIGHBOR, Name: set, List: []string{netip.PrefixFrom(a, a.BitLen()).String()},
		}}); err != nil {
			return fmt.Errorf("bgp: export policy of neighbour %s: %w", a, err)
		}
		act := &api.Actions{RouteAction: api.RouteAction_ROUTE_ACTION_UNSPECIFIED}
		if len(n.Communities) > 0 {
			act.Community = &api.CommunityAction{Type: api.CommunityAction_TYPE_ADD, Communities: slices.Clone(n.Communities)}
		}
		if len(n.LargeCommunities) > 0 {
			act.LargeCommunity = &api.CommunityAction{Type: api.CommunityAction_TYPE_ADD, Communities: slices.Clone(n.LargeCommunities)}
		}
		stmts = append(stmts, &api.Statement{
			Name:       set,
			Conditions: &api.Conditions{NeighborSet: &api.MatchSet{Type: api.MatchSet_TYPE_ANY, Name: set}},
			Actions:    act,
		})
	}
	stmts = append(stmts, &api.Statement{
		Name:       stmtLocalOnly,
		Conditions: &api.Conditions{RouteType: api.Conditions_ROUTE_TYPE_LOCAL},
		Actions:    &api.Actions{RouteAction: api.RouteAction_ROUTE_ACTION_ACCEPT},
	})
	pol := &api.Policy{Name: policyName, Statements: stmts}
	if err := srv.AddPolicy(ctx, &api.AddPolicyRequest{Policy: pol}); err != nil {
		return fmt.Errorf("bgp: export policy: %w", err)
	}
	if err := srv.SetPolicyAssignment(ctx, &api.SetPolicyAssignmentRequest{Assignment: &api.PolicyAssignment{
		Name:          "global",
		Direction:     api.PolicyDirection_POLICY_DIRECTION_EXPORT,
		Policies:      []*api.Policy{{Name: policyName}},
		DefaultAction: api.RouteAction_ROUTE_ACTION_REJECT,
	}}); err != nil {
		return fmt.Errorf("bgp: export policy: %w", err)
	}
	return nil
}

// Stop closes the sessions and stops GoBGP; it is idempotent.
func (s *Speaker) Stop() {
	s.mu.Lock()
	if !s.started || s.stopped {
		s.stopped = true
		s.mu.Unlock()
		return
	}
	s.stopped = true
	srv, cancel, done := s.srv, s.cancel, s.loopDone
	s.mu.Unlock()
	cancel()
	<-done
	srv.Stop()
	s.mu.Lock()
	now := s.now()
	for _, p := range s.peers {
		p.state, p.since, p.families = bgp.BGP_FSM_IDLE, now, nil
		if p.pfxTimer != nil {
			p.pfxTimer.Stop()
			p.pfxTimer = nil
		}
	}
	s.mu.Unlock()
	s.signal()
}

// Changed is signalled (without blocking, coalescing) whenever Received
// or a neighbour's state changes.
func (s *Speaker) Changed() <-chan struct{} { return s.changed }

func (s *Speaker) signal() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

func (s *Speaker) resyncSoon() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Announce makes the announced routes exactly routes: new ones are
// added, changed ones re-sent, gone ones withdrawn. A route that cannot
// be encoded is in Diff.Refused and does not stop the others.
func (s *Speaker) Announce(routes []Route) (Diff, error) {
	s.amu.Lock()
	defer s.amu.Unlock()
	s.mu.Lock()
	srv, ok := s.srv, s.started && !s.stopped
	cur := make(map[string]announcedRoute, len(s.announced))
	for k, v := range s.announced {
		cur[k] = v
	}
	s.mu.Unlock()
	if !ok {
		return Diff{}, errors.New("bgp: speaker not running")
	}
	var d Diff
	want := make(map[string]announcedRoute, len(routes))
	for _, r := range routes {
		w, err := s.enc.encode(r)
		if err != nil {
			d.Refused = append(d.Refused, err.Error())
			continue
		}
		if prev, dup := want[w.key]; dup {
			if prev.wire.attr != w.attr {
				d.Refused = append(d.Refused, fmt.Sprintf("%s: same match as another route with another action", w.key))
			}
			continue
		}
		want[w.key] = announcedRoute{route: r, wire: w}
	}
	next := make(map[string]announcedRoute, len(want))
	for k, old := range cur {
		if _, keep := want[k]; keep {
			continue
		}
		p := &apiutil.Path{Family: old.wire.family, Nlri: old.wire.nlri, Attrs: old.wire.attrs}
		if err := srv.DeletePath(apiutil.DeletePathRequest{Paths: []*apiutil.Path{p}}); err != nil {
			// Still announced as far as we know: keep it so that the next
			// Announce tries again.
			next[k] = old
			d.Refused = append(d.Refused, fmt.Sprintf("%s: withdraw: %v", k, err))
			continue
		}
		d.Withdrawn++
	}
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		w := want[k]
		if old, had := cur[k]; had && old.wire.attr == w.wire.attr {
			old.route = w.route // reason and rate are for the operator: refresh them
			next[k] = old
			continue
		}
		p := &apiutil.Path{Family: w.wire.family, Nlri: w.wire.nlri, Attrs: w.wire.attrs, Age: s.now().Unix()}
		if _, err := srv.AddPath(apiutil.AddPathRequest{Paths: []*apiutil.Path{p}}); err != nil {
			if old, had := cur[k]; had {
				next[k] = old
			}
			d.Refused = append(d.Refused, fmt.Sprintf("%s: %v", k, err))
			continue
		}
		next[k] = w
		d.Added++
	}
	s.mu.Lock()
	s.announced = next
	s.mu.Unlock()
	return d, nil
}

// Announced is what is announced now, sorted by kind and match.
func (s *Speaker) Announced() []Route {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]string, 0, len(s.announced))
	for k := range s.announced {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]Route, 0, len(keys))
	for _, k := range keys {
		out = append(out, s.announced[k].route)
	}
	return out
}

// Neighbors is the configured peers with their session state and counts.
func (s *Speaker) Neighbors() []Neighbor {
	s.mu.Lock()
	defer s.mu.Unlock()
	remotes := s.evaluateLocked()
	rx, acc := map[netip.Addr]int{}, map[netip.Addr]int{}
	for _, r := range remotes {
		rx[r.Peer]++
		if r.Refused == "" {
			acc[r.Peer]++
		}
	}
	out := make([]Neighbor, 0, len(s.order))
	for _, a := range s.order {
		p := s.peers[a]
		n := Neighbor{
			Address:         a,
			ASN:             p.cfg.ASN,
			Description:     p.cfg.Description,
			State:           stateName(p.state),
			Since:           p.since,
			Families:        slices.Clone(p.families),
			Received:        rx[a],
			Accepted:        acc[a],
			Send:            slices.Clone(p.cfg.Send),
			Receive:         p.cfg.Receive,
			MD5:             p.cfg.Password != "",
			GracefulRestart: p.cfg.GracefulRestartOn(),
		}
		if p.state == bgp.BGP_FSM_ESTABLISHED {
			for _, r := range s.announced {
				if p.cfg.Sends(r.route.Kind.String()) && slices.Contains(p.families, familyName(r.wire.family)) {
					n.Announced++
				}
			}
		}
		out = append(out, n)
	}
	return out
}

func stateName(st bgp.FSMState) string {
	switch st {
	case bgp.BGP_FSM_IDLE:
		return "idle"
	case bgp.BGP_FSM_CONNECT:
		return "connect"
	case bgp.BGP_FSM_ACTIVE:
		return "active"
	case bgp.BGP_FSM_OPENSENT:
		return "opensent"
	case bgp.BGP_FSM_OPENCONFIRM:
		return "openconfirm"
	case bgp.BGP_FSM_ESTABLISHED:
		return "established"
	}
	return "idle"
}

// Received is the FlowSpec routes received from neighbours with receive,
// validated (Refused says why one is not enforced), including those of
// lost sessions still within accept.hold; sorted by peer and match.
func (s *Speaker) Received() []Remote {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.evaluateLocked()
}

// evaluateLocked validates every held route, applies accept.max_rules
// oldest first, and returns them sorted by peer and NLRI.
func (s *Speaker) evaluateLocked() []Remote {
	now := s.now()
	type item struct {
		peer netip.Addr
		e    *remoteEntry
	}
	var all []item
	for _, a := range s.order {
		for _, e := range s.peers[a].routes {
			if !e.lost.IsZero() && !now.Before(e.lost.Add(s.cfg.Accept.Hold)) {
				continue // expired; the loop deletes it
			}
			all = append(all, item{a, e})
		}
	}
	// Oldest first for max_rules: a flood of new rules cannot push out
	// the ones already enforced.
	slices.SortFunc(all, func(x, y item) int {
		return cmp.Or(x.e.received.Compare(y.e.received), x.peer.Compare(y.peer), strings.Compare(x.e.key, y.e.key))
	})
	accepted := 0
	out := make([]Remote, len(all))
	for i, it := range all {
		r := Remote{Peer: it.peer, Flow: it.e.flow, Received: it.e.received, Refused: it.e.reason, Lost: it.e.lost}
		if r.Refused == "" {
			if accepted >= s.cfg.Accept.MaxRules && s.cfg.Accept.MaxRules > 0 {
				r.Refused = fmt.Sprintf("over bgp.accept.max_rules (%d)", s.cfg.Accept.MaxRules)
			} else {
				accepted++
			}
		}
		out[i] = r
	}
	// Reported by peer and match, whatever their age.
	idx := make([]int, len(out))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(i, j int) int {
		return cmp.Or(all[i].peer.Compare(all[j].peer), strings.Compare(all[i].e.key, all[j].e.key))
	})
	sorted := make([]Remote, len(out))
	for i, k := range idx {
		sorted[i] = out[k]
	}
	return sorted
}

// validate says why the data plane will not enforce f ("": it will).
func (s *Speaker) validate(f Flow) string {
	if !f.Dst.IsValid() {
		return "no destination prefix"
	}
	own := false
	for _, p := range s.cfg.Accept.OwnPrefixesParsed {
		if p.Addr().Is4() == f.Dst.Addr().Is4() && p.Bits() <= f.Dst.Bits() && p.Contains(f.Dst.Addr()) {
			own = true
			break
		}
	}
	if !own {
		return fmt.Sprintf("destination %s is not within bgp.accept.own_prefixes", f.Dst)
	}
	if f.Src.IsValid() {
		// A source ban: Src, Dst and drop, nothing else.
		if f.Action != rule.FlowDrop {
			return "a source prefix with an action other than drop"
		}
		if err := rule.CheckPrefix(f.Src); err != nil {
			return err.Error()
		}
		if err := rule.CheckPrefix(f.Dst); err != nil {
			return err.Error()
		}
		return ""
	}
	if err := f.Check(); err != nil {
		return err.Error()
	}
	return ""
}

// GoBGP callbacks: they run on GoBGP's goroutines, so they only note
// what happened and leave the listing of the adj-RIB-in to the loop.

func (s *Speaker) onPeer(ev *apiutil.WatchEventMessage_PeerEvent, t time.Time) {
	if ev.Type != apiutil.PEER_EVENT_STATE {
		return
	}
	a := ev.Peer.State.NeighborAddress.Unmap()
	st := ev.Peer.State.SessionState
	s.mu.Lock()
	p, ok := s.peers[a]
	if !ok || s.stopped {
		s.mu.Unlock()
		return
	}
	was, wasSince := p.state, p.since
	p.state, p.since = st, s.now()
	if st != bgp.BGP_FSM_ESTABLISHED && ev.Peer.State.AdminState == api.PeerState_ADMIN_STATE_PFX_CT && p.pfxTimer == nil {
		hold := p.pfxHold
		if hold == 0 || was == bgp.BGP_FSM_ESTABLISHED && p.since.Sub(wasSince) >= prefixLimitIdleMax {
			hold = s.pfxIdle
		}
		p.pfxHold = min(2*hold, prefixLimitIdleMax)
		// GoBGP takes its own teardown for the peer's graceful restart
		// (the closed connection reads as a failure) and keeps the peer's
		// routes as stale until the restart time it announced: enabled
		// before that, the session comes up with the stale routes still
		// counted and is over the limit again at once.
		hold = max(hold, p.peerRestart+time.Second)
		p.pfxTimer = time.AfterFunc(hold, func() { s.enableAfterPrefixLimit(a) })
		s.log.Warn("bgp: neighbour sent more than max_prefixes: session down, retried after an idle hold",
			"neighbor", a, "max_prefixes", p.cfg.MaxPrefixes, "idle_hold", hold)
	}
	if st == bgp.BGP_FSM_ESTABLISHED {
		p.eor = map[bgp.Family]bool{}
		p.families = negotiated(ev.Peer.State.LocalCap, ev.Peer.State.RemoteCap)
		p.peerRestart = 0
		if p.cfg.GracefulRestartOn() {
			for _, c := range ev.Peer.State.RemoteCap {
				if gr, ok := c.(*bgp.CapGracefulRestart); ok {
					p.peerRestart = time.Duration(gr.Time) * time.Second
				}
			}
		}
	} else {
		p.families = nil
	}
	if was == bgp.BGP_FSM_ESTABLISHED && st != bgp.BGP_FSM_ESTABLISHED {
		// The session is lost: its routes stay for accept.hold.
		now := s.now()
		for k, e := range p.routes {
			if s.cfg.Accept.Hold <= 0 {
				delete(p.routes, k)
			} else if e.lost.IsZero() {
				e.lost = now
			}
		}
		if s.cfg.Accept.Hold > 0 && len(p.routes) > 0 {
			time.AfterFunc(s.cfg.Accept.Hold, s.resyncSoon)
		}
	}
	s.mu.Unlock()
	s.signal()
	s.resyncSoon()
}

// enableAfterPrefixLimit brings back a neighbour GoBGP took down for
// max_prefixes, once its idle hold is over.
func (s *Speaker) enableAfterPrefixLimit(a netip.Addr) {
	s.mu.Lock()
	p, srv := s.peers[a], s.srv
	stopped := s.stopped
	if p != nil {
		p.pfxTimer = nil
	}
	s.mu.Unlock()
	if p == nil || stopped || srv == nil {
		return
	}
	if err := srv.EnablePeer(context.Background(), &api.EnablePeerRequest{Address: a.String()}); err != nil {
		s.log.Warn("bgp: enabling the neighbour after its idle hold", "neighbor", a, "err", err)
	}
}

// negotiated is the families both sides announced (RFC 4760).
func negotiated(local, remote []bgp.ParameterCapabilityInterface) []string {
	set := func(caps []bgp.ParameterCapabilityInterface) map[bgp.Family]bool {
		m := map[bgp.Family]bool{}
		for _, c := range caps {
			if mp, ok := c.(*bgp.CapMultiProtocol); ok {
				m[mp.CapValue] = true
			}
		}
		return m
	}
	l, r := set(local), set(remote)
	var out []string
	for _, f := range []bgp.Family{bgp.RF_IPv4_UC, bgp.RF_IPv6_UC, bgp.RF_FS_IPv4_UC, bgp.RF_FS_IPv6_UC} {
		if l[f] && r[f] {
			out = append(out, familyName(f))
		}
	}
	return out
}

func (s *Speaker) onUpdate(paths []*apiutil.Path, _ time.Time) {
	for _, p := range paths {
		if p.Family == bgp.RF_FS_IPv4_UC || p.Family == bgp.RF_FS_IPv6_UC {
			s.resyncSoon()
			return
		}
	}
}

func (s *Speaker) onEor(p *apiutil.Path, _ time.Time) {
	s.mu.Lock()
	if ps, ok := s.peers[p.PeerAddress.Unmap()]; ok && ps.eor != nil {
		ps.eor[p.Family] = true
	}
	s.mu.Unlock()
	s.resyncSoon()
}

// loop re-reads the adj-RIB-in of the receiving peers whenever GoBGP
// reports something: keyed by (peer, NLRI), it sees a second peer's
// route even where GoBGP's best path hides it.
func (s *Speaker) loop(ctx context.Context, done chan struct{}) {
	defer close(done)
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
		}
		s.resync()
	}
}

type listing struct {
	peer  netip.Addr
	paths map[string]*apiutil.Path
	fams  map[string]bgp.Family
}

func (s *Speaker) resync() {
	s.mu.Lock()
	srv := s.srv
	var up []*peerState
	for _, a := range s.order {
		p := s.peers[a]
		if p.cfg.Receive && p.state == bgp.BGP_FSM_ESTABLISHED {
			up = append(up, p)
		}
	}
	s.mu.Unlock()
	var ls []listing
	for _, p := range up {
		l := listing{peer: p.cfg.AddressAddr, paths: map[string]*apiutil.Path{}, fams: map[string]bgp.Family{}}
		failed := false
		for _, f := range flowFamilies {
			n := 0
			err := srv.ListPath(apiutil.ListPathRequest{
				TableType: api.TableType_TABLE_TYPE_ADJ_IN, Name: l.peer.String(), Family: f,
			}, func(nlri bgp.NLRI, paths []*apiutil.Path) {
				for _, path := range paths {
					// GoBGP resets a session past max_prefixes; this
					// bound only keeps our own maps from growing if it
					// did not.
					if n >= int(p.cfg.MaxPrefixes) || path.Withdrawal {
						continue
					}
					k := familyName(f) + " " + nlri.String()
					l.paths[k], l.fams[k] = path, f
					n++
				}
			})
			if err != nil {
				// The session went down under us: its state event
				// handles the routes.
				s.log.Debug("bgp: adj-rib-in", "peer", l.peer, "err", err)
				failed = true
			}
		}
		if !failed {
			ls = append(ls, l)
		}
	}
	s.mu.Lock()
	changed := s.reconcileLocked(ls)
	s.mu.Unlock()
	if changed {
		s.signal()
	}
}

// reconcileLocked folds fresh adj-RIB-in listings into the peers' routes
// and drops expired held ones; it reports whether anything changed.
func (s *Speaker) reconcileLocked(ls []listing) bool {
	now := s.now()
	changed := false
	for _, l := range ls {
		p := s.peers[l.peer]
		if p.state != bgp.BGP_FSM_ESTABLISHED {
			continue // went down while we were listing
		}
		for k, path := range l.paths {
			flow, err := decodeFlow(path.Nlri, path.Attrs)
			reason := ""
			if err != nil {
				reason = strings.TrimPrefix(err.Error(), errUnsupported.Error()+": ")
			} else {
				reason = s.validate(flow)
			}
			e, ok := p.routes[k]
			if !ok {
				e = &remoteEntry{key: k, family: l.fams[k], received: now}
				p.routes[k] = e
				changed = true
			} else if e.flow != flow || e.reason != reason || !e.lost.IsZero() {
				changed = true
			}
			e.flow, e.reason, e.lost = flow, reason, time.Time{}
		}
		for k, e := range p.routes {
			if _, ok := l.paths[k]; ok {
				continue
			}
			// Gone from the adj-RIB-in: withdrawn, unless it is held
			// from the lost session and the peer has not finished
			// re-sending this family.
			if !e.lost.IsZero() && !p.eor[e.family] {
				continue
			}
			delete(p.routes, k)
			changed = true
		}
	}
	for _, p := range s.peers {
		for k, e := range p.routes {
			if !e.lost.IsZero() && !now.Before(e.lost.Add(s.cfg.Accept.Hold)) {
				delete(p.routes, k)
				changed = true
			}
		}
	}
	return changed
}
