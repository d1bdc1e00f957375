// SPDX-License-Identifier: Apache-2.0

package telemetry

import (
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"sync"
	"time"
)

// Config is network mode's whole configuration.
type Config struct {
	// Listen are the UDP addresses collected on (any protocol on each).
	Listen   []string
	Decoder  DecoderConfig
	Detector DetectorConfig
	Action   ActionConfig
}

// Change is what one tick changed: attacks that started or ended, and
// the upstream plan when it differs from the last one.
type Change struct {
	Now            time.Time
	Started, Ended []Attack
	Plan           []Upstream
	PlanChanged    bool
}

// Service runs the collector and judges the destinations every tick.
type Service struct {
	cfg  Config
	dec  *Decoder
	det  *Detector
	col  *Collector
	log  *slog.Logger
	stop chan struct{}
	wg   sync.WaitGroup

	mu   sync.Mutex
	plan []Upstream
	// action is cfg.Action as last set (SetConfig): the ticker plans
	// with it, under mu.
	action ActionConfig
	// replan makes the next tick report its plan as changed: a reload
	// may change what a plan's routes carry (communities) or whether
	// they are announced at all, which the comparison of plans ignores.
	replan bool
}

// Start listens and starts the ticker; onChange is called from the
// ticker's goroutine for every tick that changed something.
func Start(cfg Config, log *slog.Logger, onChange func(Change)) (*Service, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	dec, err := NewDecoder(cfg.Decoder, log)
	if err != nil {
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	s := &Service{cfg: cfg, dec: dec, det: NewDetector(cfg.Detector), log: log, stop: make(chan struct{}), action: cfg.Action}
	s.col, err = Listen(cfg.Listen, dec, s.det.Add, log)
	if err != nil {
		return nil, err
	}
	s.wg.Add(1)
	go s.run(onChange)
	return s, nil
}

func (s *Service) run(onChange func(Change)) {
	defer s.wg.Done()
	tk := time.NewTicker(s.det.cfg.Tick)
	defer tk.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tk.C:
			// Not the tick's own time: when this goroutine is late, that
			// is older than records decoded since, and an attack would be
			// detected before its first record.
			if c, ok := s.Tick(time.Now()); ok && onChange != nil {
				onChange(c)
			}
		}
	}
}

// Tick judges at now and plans; ok reports a change. The ticker calls
// it; tests call it with their own clock.
func (s *Service) Tick(now time.Time) (Change, bool) {
	started, ended := s.det.Judge(now)
	var cur []Attack
	for _, a := range s.det.Attacks() {
		if a.Ended.IsZero() {
			cur = append(cur, a)
		}
	}
	s.mu.Lock()
	act, _ := s.capacities(s.action, now)
	plan := Plan(cur, act)
	changed := s.replan || !reflect.DeepEqual(stripRates(plan), stripRates(s.plan))
	s.plan, s.replan = plan, false
	s.mu.Unlock()
	return Change{Now: now, Started: started, Ended: ended, Plan: plan, PlanChanged: changed},
		changed || len(started) > 0 || len(ended) > 0
}

// GroupUplinks is a host group's uplink capacity as the plan uses it.
type GroupUplinks struct {
	Group string `json:"group"`
	// CapacityBPS is what RTBH is judged against (0: never blackholed);
	// Source says where it comes from: "configured" (uplink_bps),
	// "ifspeed" (the uplinks' counter samples) or "unknown" (uplinks
	// named, not all of them known).
	CapacityBPS   float64       `json:"capacity_bps"`
	Source        string        `json:"source"`
	ConfiguredBPS float64       `json:"configured_bps,omitempty"`
	DerivedBPS    float64       `json:"derived_bps,omitempty"`
	Uplinks       []UplinkState `json:"uplinks"`
}

// capacities is Capacities from the service's own decoder.
func (s *Service) capacities(act ActionConfig, now time.Time) (ActionConfig, []GroupUplinks) {
	return Capacities(act, s.dec, now)
}

// Capacities is act with each group's uplink capacity derived from its
// uplinks' ifSpeed (src) where none is configured, and every group's
// capacity for the operator. A configured uplink_bps wins: it is the
// operator's word for what the links carry (a provider's committed rate
// or policer, a LAG whose members hash unevenly, a sub-interface whose
// ifSpeed is its parent's), and no datagram can change it.
func Capacities(act ActionConfig, src UplinkSource, now time.Time) (ActionConfig, []GroupUplinks) {
	var out []GroupUplinks
	var pol map[string]GroupPolicy
	for _, name := range slices.Sorted(maps.Keys(act.Policies)) {
		p := act.Policies[name]
		if p.UplinkBPS <= 0 && len(p.Uplinks) == 0 {
			continue
		}
		g := GroupUplinks{Group: name, CapacityBPS: p.UplinkBPS, Source: "configured", ConfiguredBPS: p.UplinkBPS, Uplinks: []UplinkState{}}
		if len(p.Uplinks) > 0 {
			g.DerivedBPS, g.Uplinks = src.Uplinks(p.Uplinks, now)
		}
		if p.UplinkBPS <= 0 {
			g.CapacityBPS, g.Source = g.DerivedBPS, "ifspeed"
			if g.DerivedBPS == 0 {
				g.Source = "unknown"
			}
			if pol == nil {
				pol = maps.Clone(act.Policies) // the configuration's own map is shared
			}
			p.UplinkBPS = g.DerivedBPS
			pol[name] = p
		}
		out = append(out, g)
	}
	if pol != nil {
		act.Policies = pol
	}
	return act, out
}

// stripRates leaves what makes two plans the same announcements.
func stripRates(p []Upstream) []Upstream {
	out := make([]Upstream, len(p))
	for i, u := range p {
		out[i] = Upstream{Attack: u.Attack, Kind: u.Kind, Rule: u.Rule, Prefix: u.Prefix}
	}
	return out
}

// SetConfig applies a reloaded configuration (SIGHUP): the detector's
// thresholds, host groups and policies (Detector.SetConfig) and the
// action policy (mode, FlowSpec action, uplinks, communities), from the
// next tick on, which reports its plan as changed so that the caller
// announces it again under the new policy. What opens sockets or sizes
// the collector is kept as it started (Listen, the decoder's exporters
// and bounds, Tick, Window, MaxDests): those need a restart.
func (s *Service) SetConfig(cfg Config) {
	s.det.SetConfig(cfg.Detector)
	s.mu.Lock()
	s.action, s.replan = cfg.Action, true
	s.mu.Unlock()
}

// Decoder is the service's decoder (for its statistics).
func (s *Service) Decoder() *Decoder { return s.dec }

// Detector is the service's detector.
func (s *Service) Detector() *Detector { return s.det }

// Addrs are the addresses the collector listens on.
func (s *Service) Addrs() []netip.AddrPort { return s.col.Addrs() }

// Status is network mode's state for the operator (/v1/telemetry).
type Status struct {
	Enabled     bool             `json:"enabled"`
	Mode        Mode             `json:"mode"`
	Listen      []netip.AddrPort `json:"listen"`
	Exporters   []ExporterStats  `json:"exporters"`
	Unknown     uint64           `json:"unknown_datagrams"`
	LastUnknown netip.Addr       `json:"last_unknown,omitzero"`
	Untracked   uint64           `json:"untracked_records"`
	Attacks     []Attack         `json:"attacks"`
	Plan        []Upstream       `json:"plan"`
	Top         []Talker         `json:"top"`
	// Capacities are the host groups' uplink capacities (those with
	// uplink_bps or uplinks; absent when none has).
	Capacities []GroupUplinks `json:"capacities,omitempty"`
}

// Status reads the service's state, with the top n destinations.
func (s *Service) Status(n int) Status {
	st := Status{Enabled: true, Listen: s.Addrs(), Exporters: s.dec.Exporters(),
		Untracked: s.det.Untracked(), Attacks: s.det.Attacks(), Top: s.det.Top(n)}
	st.Unknown, st.LastUnknown = s.dec.Unknown()
	s.mu.Lock()
	st.Mode = s.action.Mode
	st.Plan = append([]Upstream{}, s.plan...)
	_, st.Capacities = s.capacities(s.action, time.Now())
	s.mu.Unlock()
	if st.Attacks == nil {
		st.Attacks = []Attack{}
	}
	if st.Plan == nil {
		st.Plan = []Upstream{}
	}
	return st
}

// Close stops the collector and the ticker.
func (s *Service) Close() error {
	close(s.stop)
	err := s.col.Close()
	s.wg.Wait()
	return err
}
