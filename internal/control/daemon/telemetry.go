// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/tierwall/tierwall/internal/control/bgp"
	"github.com/tierwall/tierwall/internal/control/bgp/community"
	"github.com/tierwall/tierwall/internal/control/config"
	"github.com/tierwall/tierwall/internal/control/telemetry"
)

// Network mode's stage (telemetry: in the configuration, docs/NETWORK.md).
// It runs beside the loop, not in its interval: the collector's ticker
// judges the network's destinations every 100 ms, and an attack's
// upstream actions are announced from that tick, through the same speaker
// the loop announces bans and flow rules with. The speaker makes its
// announcements equal the set it is given, so the loop's set and network
// mode's are merged (mergedSpeaker): each side replaces only its own half,
// and neither withdraws the other's routes.

type telemetryState struct {
	svc *telemetry.Service
	// so runs the scale-out roles instead of svc (scaleout.go).
	so     *scaleoutRole
	role   string         // the daemon's role at start: a reload keeps it
	merged *mergedSpeaker // nil without BGP
	ctx    context.Context
	cancel context.CancelFunc
	// mu guards announce, maxRoutes and mode: the loop sets them on a reload, the
	// ticker reads them (it must not read d.cfg, which the loop replaces
	// on SIGHUP). announce: enforce mode and not rails.monitor_only.
	mu       sync.Mutex
	announce bool
	// maxRoutes is bgp.announce.max_routes, read by the telemetry
	// goroutine (the loop owns d.cfg).
	maxRoutes int
	mode      telemetry.Mode
	// started is the section network mode was built with: what opens
	// sockets or sizes the collector keeps these values until a restart.
	// seen* are the loop's last look at what a reload may change
	// (reloadTelemetry); only the loop touches them.
	started         config.Telemetry
	seen            config.Telemetry
	seenGroups      []config.HostGroup
	seenMonitorOnly bool
	// reports go to the loop through one goroutine, so that the ticker
	// never waits for the loop's interval; a full queue drops them.
	reports chan func()
	done    chan struct{}
}

// mergedSpeaker announces the loop's routes and network mode's together.
type mergedSpeaker struct {
	Speaker
	mu          sync.Mutex
	loop, extra []bgp.Route
}

func (m *mergedSpeaker) announce() (bgp.Diff, error) {
	all := slices.Clone(m.loop)
	seen := map[string]bool{}
	for _, r := range all {
		seen[r.String()] = true
	}
	for _, r := range m.extra {
		if !seen[r.String()] {
			all = append(all, r)
		}
	}
	return m.Speaker.Announce(all)
}

// SetAnnounce passes a reloaded announce policy to the speaker when it
// takes one; the routes of both halves are re-sent at the loop's next
// Announce.
func (m *mergedSpeaker) SetAnnounce(a config.BGPAnnounce) error {
	if u, ok := m.Speaker.(announceSetter); ok {
		return u.SetAnnounce(a)
	}
	return nil
}

// Announce is the loop's: it replaces the loop's half.
func (m *mergedSpeaker) Announce(rs []bgp.Route) (bgp.Diff, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.loop = rs
	return m.announce()
}

// announceExtra is network mode's: it replaces its own half.
func (m *mergedSpeaker) announceExtra(rs []bgp.Route) (bgp.Diff, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.extra = rs
	return m.announce()
}

// extraLen is how many routes network mode's half holds.
func (m *mergedSpeaker) extraLen() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.extra)
}

// openTelemetry starts network mode when configured: in this process,
// or as one of its scale-out roles (telemetry.scaleout:, scaleout.go).
func (d *Daemon) openTelemetry() error {
	d.tele.role = d.cfg.Role
	if !d.cfg.Telemetry.Enabled {
		return nil
	}
	tc, err := d.cfg.TelemetryConfig()
	if err != nil {
		return err
	}
	sc, err := d.cfg.ScaleoutConfig()
	if err != nil {
		return err
	}
	// A collector judges nothing and announces nothing: the speaker stays
	// the loop's alone.
	if sp := d.bgp.speaker(); sp != nil && sc.Role != config.ScaleoutCollector {
		d.tele.merged = &mergedSpeaker{Speaker: sp}
		d.bgp.setSpeaker(d.tele.merged)
	}
	d.tele.mode = tc.Action.Mode
	d.tele.announce = tc.Action.Mode == telemetry.Enforce && !d.cfg.Rails.MonitorOnly
	d.tele.maxRoutes = d.cfg.BGP.Announce.MaxRoutes
	d.tele.started, d.tele.seen = d.cfg.Telemetry, d.cfg.Telemetry
	d.tele.seenGroups, d.tele.seenMonitorOnly = d.cfg.HostGroups, d.cfg.Rails.MonitorOnly
	d.tele.ctx, d.tele.cancel = context.WithCancel(context.Background())
	d.tele.reports, d.tele.done = make(chan func(), 256), make(chan struct{})
	go func() {
		defer close(d.tele.done)
		for f := range d.tele.reports {
			_ = d.Do(d.tele.ctx, f) // fails only once closing
		}
	}()
	if sc.Role != "" {
		if err := d.openScaleout(tc, sc); err != nil {
			d.tele.cancel()
			close(d.tele.reports)
			<-d.tele.done
			d.unmergeSpeaker()
			return fmt.Errorf("starting network mode's scale-out %s: %w", sc.Role, err)
		}
		return nil
	}
	svc, err := telemetry.Start(tc, d.log, d.telemetryChanged)
	if err != nil {
		d.tele.cancel()
		close(d.tele.reports)
		<-d.tele.done
		d.unmergeSpeaker()
		return fmt.Errorf("starting network mode: %w", err)
	}
	d.tele.svc = svc
	d.Metrics.Registry.MustRegister(telemetry.NewMetrics(svc))
	d.log.Info("network mode: collecting telemetry", "listen", svc.Addrs(), "exporters", len(tc.Decoder.Exporters), "mode", tc.Action.Mode)
	return nil
}

// closeTelemetry stops the collector; what it announced is withdrawn with
// the speaker's sessions (a stopped daemon no longer watches the feed).
func (d *Daemon) closeTelemetry() {
	if d.tele.svc == nil && d.tele.so == nil {
		return
	}
	d.tele.cancel()
	if d.tele.svc != nil {
		_ = d.tele.svc.Close()
	}
	d.closeScaleout()
	close(d.tele.reports)
	<-d.tele.done
	d.tele.svc = nil
}

// unmergeSpeaker gives the loop its speaker back when network mode did
// not start.
func (d *Daemon) unmergeSpeaker() {
	if d.tele.merged != nil {
		d.bgp.setSpeaker(d.tele.merged.Speaker)
		d.tele.merged = nil
	}
}

// upstreamRoutes turns network mode's plan into routes, an RTBH route
// with its host group's communities. A community that does not parse
// (the configuration was validated: it cannot) leaves its route out, with
// the error: a blackhole without the provider's community is ignored
// upstream, or worse, taken as something else.
func upstreamRoutes(plan []telemetry.Upstream) ([]bgp.Route, error) {
	var out []bgp.Route
	var errs []error
	for _, u := range plan {
		switch u.Kind {
		case telemetry.UpFlowSpec:
			out = append(out, bgp.Route{Kind: bgp.FlowSpec, Flow: bgp.Flow{FlowRule: u.Rule}, Reason: u.Reason, Rate: u.PPS})
		case telemetry.UpRTBH:
			std, err1 := community.ParseStandards(u.Communities.Standard)
			large, err2 := community.ParseLarges(u.Communities.Large)
			if err := errors.Join(err1, err2); err != nil {
				errs = append(errs, fmt.Errorf("rtbh %s: communities: %w", u.Prefix, err))
				continue
			}
			out = append(out, bgp.Route{Kind: bgp.RTBH, Prefix: u.Prefix, Reason: u.Reason, Rate: u.PPS,
				Communities: std, LargeCommunities: large})
		}
	}
	return out, errors.Join(errs...)
}

// telemetryChanged runs on network mode's ticker: it announces first
// (the loop may be in its interval, and an attack should not wait for
// it), then reports through the loop.
func (d *Daemon) telemetryChanged(c telemetry.Change) {
	var announced []bgp.Route
	var aerr error
	d.tele.mu.Lock()
	announcing, mode, maxRoutes := d.tele.merged != nil && d.tele.announce, d.tele.mode, d.tele.maxRoutes
	d.tele.mu.Unlock()
	withdrawn, cut := 0, 0
	switch {
	case c.PlanChanged && announcing:
		var perr error
		announced, perr = upstreamRoutes(c.Plan)
		// The heaviest bgp.announce.max_routes per kind and family, as
		// the loop's half: a flood over thousands of the network's
		// addresses must not announce a route for each and trip the
		// upstream's maximum-prefix limit, which tears the session down
		// and withdraws every mitigation with it.
		if maxRoutes <= 0 {
			maxRoutes = 100 // bgp.announce.max_routes' default
		}
		announced, cut = topRoutes(announced, maxRoutes)
		_, aerr = d.tele.merged.announceExtra(announced)
		aerr = errors.Join(perr, aerr)
	case c.PlanChanged && d.tele.merged != nil:
		// Not announcing (any more: a reload to dry-run or monitor, or
		// rails.monitor_only): what network mode announced goes.
		if withdrawn = d.tele.merged.extraLen(); withdrawn > 0 {
			_, aerr = d.tele.merged.announceExtra(nil)
		}
	}
	report := func() {
		for _, a := range c.Started {
			d.event(c.Now, "telemetry", firstPrefix(a.Dst), "network attack %s on %v (%s): %v, %.0f pps, %.0f bit/s; signature %+v; first record %s before",
				a.ID, a.Dst, a.Group, a.Kinds, a.PPS, a.BPS, a.Signature, c.Now.Sub(a.FirstRecord).Round(time.Millisecond))
		}
		for _, a := range c.Ended {
			d.event(c.Now, "telemetry", firstPrefix(a.Dst), "network attack %s on %v over (peak %.0f pps, %.0f bit/s)", a.ID, a.Dst, a.PeakPPS, a.PeakBPS)
		}
		// Notifications, as host mode's attacks get them.
		d.alertNetwork(c, announcing, aerr != nil, mode)
		if !c.PlanChanged {
			return
		}
		switch {
		case aerr != nil:
			d.event(c.Now, "error", netip.Prefix{}, "telemetry: announcing %d routes: %v", len(announced), aerr)
		case announcing:
			d.event(c.Now, "telemetry", netip.Prefix{}, "upstream: %d routes announced for network attacks", len(announced))
			if cut > 0 {
				d.event(c.Now, "refused", netip.Prefix{}, "upstream: %d routes of network attacks not announced: past bgp.announce.max_routes (%d per kind and family, the heaviest kept)", cut, maxRoutes)
			}
		default:
			if withdrawn > 0 {
				d.event(c.Now, "telemetry", netip.Prefix{}, "upstream: %d routes of network attacks withdrawn (%s, or rails.monitor_only)", withdrawn, mode)
			}
			for _, u := range c.Plan {
				d.event(c.Now, "telemetry", netip.Prefix{}, "would announce (%s, or no BGP): %s %s — %s", mode, u.Kind, upstreamText(u), u.Reason)
			}
		}
	}
	select {
	case d.tele.reports <- report:
	default:
		d.log.Warn("telemetry: report queue full, events dropped", "started", len(c.Started), "ended", len(c.Ended))
	}
}

func firstPrefix(ps []netip.Prefix) netip.Prefix {
	if len(ps) == 0 {
		return netip.Prefix{}
	}
	return ps[0]
}

// Telemetry is network mode's status (zero, Enabled false, when off).
func (d *Daemon) Telemetry(top int) telemetry.Status {
	if d.tele.so != nil {
		return d.tele.so.status(top)
	}
	if d.tele.svc == nil {
		return telemetry.Status{Listen: []netip.AddrPort{}, Exporters: []telemetry.ExporterStats{}, Attacks: []telemetry.Attack{}, Plan: []telemetry.Upstream{}, Top: []telemetry.Talker{}}
	}
	return d.tele.svc.Status(top)
}

func upstreamText(u telemetry.Upstream) string {
	if u.Kind == telemetry.UpRTBH {
		return u.Prefix.String()
	}
	return u.Rule.String()
}

// reloadTelemetry applies a reloaded configuration to network mode: its
// thresholds, host groups (hostgroups: and telemetry.groups: thresholds,
// totals, uplinks, communities), mode, FlowSpec action, min_samples and
// withdraw_after, and rails.monitor_only. What opens sockets or sizes the
// collector keeps its running value (needsRestart lists it: enabled,
// listen, exporters, max_*, tick, window). reload() calls it as it
// replaces d.cfg, and the loop every interval (a no-op while nothing
// changed); the next tick of network mode then announces (or withdraws)
// its plan under the new policy.
func (d *Daemon) reloadTelemetry(now time.Time) {
	t := &d.tele
	if d.cfg.Role != t.role {
		// The data plane (or its absence) was chosen at start: the role
		// is kept, and the operator told.
		d.event(now, "error", netip.Prefix{}, "reload: role %s needs a restart: running as %s until then", d.cfg.Role, t.role)
		d.cfg.Role = t.role
	}
	if t.svc == nil && t.so == nil || reflect.DeepEqual(t.seen, d.cfg.Telemetry) && reflect.DeepEqual(t.seenGroups, d.cfg.HostGroups) &&
		t.seenMonitorOnly == d.cfg.Rails.MonitorOnly {
		return
	}
	t.seen, t.seenGroups, t.seenMonitorOnly = d.cfg.Telemetry, d.cfg.HostGroups, d.cfg.Rails.MonitorOnly
	run := *d.cfg
	s := t.started
	run.Telemetry.Enabled, run.Telemetry.Listen, run.Telemetry.Exporters = s.Enabled, s.Listen, s.Exporters
	run.Telemetry.MaxTemplates, run.Telemetry.MaxExporters, run.Telemetry.MaxDestinations = s.MaxTemplates, s.MaxExporters, s.MaxDestinations
	run.Telemetry.Tick, run.Telemetry.Window = s.Tick, s.Window
	// The scale-out role, its bus and its partitions are kept too.
	run.Telemetry.Scaleout = s.Scaleout
	tc, err := run.TelemetryConfig()
	if err != nil {
		// A file that turned network mode off is not validated for it:
		// what it says of thresholds may not build. The running policy
		// stays, and the operator is told.
		d.event(now, "error", netip.Prefix{}, "reload: network mode keeps its running thresholds and policy: %v", err)
		return
	}
	if t.so != nil {
		t.so.setConfig(tc)
	} else {
		t.svc.SetConfig(tc)
	}
	t.mu.Lock()
	t.mode = tc.Action.Mode
	t.announce = tc.Action.Mode == telemetry.Enforce && !d.cfg.Rails.MonitorOnly
	t.maxRoutes = d.cfg.BGP.Announce.MaxRoutes
	announce := t.announce
	t.mu.Unlock()
	d.event(now, "telemetry", netip.Prefix{}, "network mode reloaded: mode %s, announcing %v", tc.Action.Mode, announce && t.merged != nil)
}
