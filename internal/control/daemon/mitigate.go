// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"net/netip"
	"slices"
	"time"

	"github.com/tierwall/tierwall/internal/control/apiv1"
	"github.com/tierwall/tierwall/internal/control/config"
	"github.com/tierwall/tierwall/internal/control/detect"
	"github.com/tierwall/tierwall/internal/control/mitigate"
	"github.com/tierwall/tierwall/internal/datapath"
	"github.com/tierwall/tierwall/internal/rule"
	"github.com/tierwall/tierwall/internal/synproxy"
	dpsynproxy "github.com/tierwall/tierwall/internal/synproxy/xdp"
)

var _ FlowPlane = (*datapath.Datapath)(nil)

// FlowPlane is the data plane's side for floods whose sources cannot be
// listed: the ordered flow rules, their counters and the known-good list.
// *datapath.Datapath has it; a DataPlane without it (older fakes) runs the
// victim detector's source rungs only.
type FlowPlane interface {
	// SetFlowRules replaces the whole ordered set; on error nothing changed.
	SetFlowRules(rs []rule.FlowRule) error
	// FlowRuleCounters reads the rules in force with their counters,
	// in order.
	FlowRuleCounters() ([]datapath.FlowRuleCounters, error)
	AddKnownGood(as []netip.Addr) error
	RemoveKnownGood(as []netip.Addr) error
}

// flowStage owns the flow-rule side: the per-victim detector and its
// ladder's flow rules, the set the data plane holds, the known-good list
// and the SYN-cookie stage behind the rules. The loop calls
// observeVictims in the detect stage, mitigate after the rails, and
// readFlowCounters with the counters; the API's flow-rule verbs run on the
// loop too. What it reads of the rest of the daemon comes through the
// functions wired by newFlowStage.
type flowStage struct {
	fp      FlowPlane    // nil: no flow rules in this data plane
	nic     *nicPolicing // nil: the card polices nothing (police.go)
	victims *detect.Victims
	set     *mitigate.Set
	pushed  []rule.FlowRule // what the data plane holds, in order
	dirty   bool            // set differs from pushed
	saved   bool            // set is on disk as it is

	goodVersion uint64
	good        map[netip.Addr]struct{} // what the data plane's known-good list holds
	guard       uint32                  // the SYN guard's rate the data plane was given, when guardSet
	guardSet    bool
	dec         detect.Decision       // this interval's, from detect to mitigate
	dropped     map[netip.Addr]uint64 // per victim, packets its flow rules dropped last interval
	lastRead    time.Time
	syn         synStage
	hs          handshakeState // this interval's TCP connections, for known-good (handshake.go)
	// clients are Good's members for the ban store's breaker, as of
	// clientsVersion.
	clients        []netip.Addr
	clientsVersion uint64

	cfg             func() *config.Config // the configuration in force (a reload replaces it)
	event           func(now time.Time, kind string, p netip.Prefix, format string, args ...any)
	metrics         *Metrics
	dp              DataPlane
	log             *slog.Logger
	publish         func()                                   // the flow rules' view for the API (publishFlows)
	verifyHandshake func(src, dst netip.Addr) bool           // known-good's proof (handshake.go)
	connected       func() iter.Seq2[netip.Addr, netip.Addr] // the same proof, listed (handshake.go)
	protects        func(netip.Addr) bool                    // whether a destination is the daemon's to protect
}

// newFlowStage wires the flow-rule stage to the daemon.
func (d *Daemon) newFlowStage() flowStage {
	return flowStage{
		cfg:             func() *config.Config { return d.cfg },
		event:           d.event,
		metrics:         d.Metrics,
		dp:              d.dp,
		nic:             newNICPolicing(d.card.table),
		log:             d.log,
		publish:         d.publishFlows,
		verifyHandshake: d.verifyHandshake,
		connected:       d.connected,
		protects:        d.protects,
	}
}

// knownGoodLister is the data plane's side that lists its known-good
// list: read when the daemon starts or reloads, so that entries it does
// not vouch for (an earlier run's, the CLI's) leave the list.
type knownGoodLister interface {
	KnownGood() ([]netip.Addr, error)
}

// knownGoodRater is the data plane's side that bounds what a known-good
// source passes outside the host's connections (datapath.SetKnownGoodRate):
// set when the daemon starts or reloads.
type knownGoodRater interface {
	SetKnownGoodRate(pps uint32) error
}

// knownGoodPPS is detectors.victim.known_good_pps with its default.
func (f *flowStage) knownGoodPPS() uint32 {
	if v := f.cfg().Detectors.Victim.KnownGoodPPS; v > 0 {
		return uint32(v)
	}
	return datapath.DefaultKnownGoodPPS
}

// quietPPS is the matched rate under which an interval counts as quiet
// for a ladder rule whose mitigation the detector no longer tracks (after
// a restart): such a rule goes after WithdrawAfter quiet intervals.
const quietPPS = 10

// observeVictims runs the per-victim detector; its source rungs become
// detections for the ban store (with its rails), its flow rules wait for
// mitigate.
func (f *flowStage) observeVictims(tr *detect.Traffic, ports *detect.PortProfile) []detect.Detection {
	if f.victims == nil {
		return nil
	}
	f.dec = f.victims.Observe(detect.Input{Traffic: tr, Ports: ports, Dropped: f.dropped})
	var ds []detect.Detection
	for _, m := range f.dec.Apply {
		if m.Rung != detect.RungFlowRule {
			ds = append(ds, m.Detections()...)
		}
	}
	f.metrics.victimsAttacked.Set(float64(len(f.dec.Attacks)))
	return ds
}

// mitigate applies the ladder's flow rules and withdrawals, ends the
// operator's rules whose TTL is over, keeps the known-good list in step,
// and pushes the set when it changed. Monitor-only logs instead.
func (f *flowStage) mitigate(now time.Time) {
	if f.set == nil {
		return
	}
	monitor := f.cfg().Rails.MonitorOnly
	for _, m := range f.dec.Apply {
		f.metrics.mitigations.WithLabelValues(m.Rung.String()).Inc()
		victim := netip.PrefixFrom(m.Victim, m.Victim.BitLen())
		if len(m.Spared) > 0 {
			// The data plane's flow rules match no source: a verified
			// client's flood passes with its bypass (issue 32, item 3).
			f.event(now, "refused", victim, "known-good sources above the per-source limit not banned (their connections are verified; a ban would hit them if spoofed): %v", m.Spared)
			f.metrics.refuse("known_good", len(m.Spared))
		}
		if m.Rung != detect.RungFlowRule {
			f.event(now, "mitigation", victim, "%s: %s", m.Rung, m.Reason)
			continue
		}
		if monitor || f.fp == nil {
			why := "monitor-only"
			if f.fp == nil {
				why = "no flow rules in this data plane"
			}
			f.event(now, "mitigation", victim, "%s (%s, not applied): %s: %s", m.Rung, why, rulesString(m.Rules), m.Reason)
			continue
		}
		for _, r := range m.Rules {
			rung := "flow-rule"
			switch {
			case r.Action == rule.FlowSYNCookie:
				rung = "syn-cookie"
			case detect.IsSYNSizeRule(r):
				// Optional beside the flood's cookies: never at the cost
				// of another victim's cookie rule in the data plane's
				// 64 (a carpet SYN flood).
				rung = mitigate.RungSYNSize
				if f.set.Len() >= f.set.Cap()/2 {
					f.event(now, "refused", victim, "flow rule %s: the flow rules are half full, kept for other victims' SYN cookies", r)
					continue
				}
			}
			added, err := f.set.Add(mitigate.Rule{FlowRule: r, Origin: mitigate.Ladder, Rung: rung, Reason: m.Reason,
				Added: now, Victim: m.Victim, Mitigation: m.ID})
			if err != nil {
				f.event(now, "refused", victim, "flow rule %s: %v", r, err)
				continue
			}
			if added {
				f.dirty = true
				f.event(now, "mitigation", victim, "%s %s: %s", rung, r, m.Reason)
			}
		}
	}
	for _, w := range f.dec.Withdraw {
		for _, r := range f.set.Rules() {
			if r.Origin == mitigate.Ladder && r.Mitigation == w.ID {
				_, _ = f.set.Remove(r.FlowRule) // it is there: Rules just listed it
				f.dirty = true
				f.event(now, "withdraw", netip.PrefixFrom(r.Victim, r.Victim.BitLen()), "flow rule %s: %s", r.FlowRule, w.Reason)
			}
		}
	}
	if f.victims != nil {
		active := map[uint64]bool{}
		for _, m := range f.victims.Active() {
			active[m.ID] = true
		}
		for _, r := range f.set.WithdrawIf(func(r mitigate.Rule) bool {
			return r.Origin == mitigate.Ladder && !active[r.Mitigation] && r.Quiet >= withdrawAfter(f.cfg())
		}) {
			f.dirty = true
			f.event(now, "withdraw", netip.PrefixFrom(r.Victim, r.Victim.BitLen()), "flow rule %s: quiet for %d intervals and no attack tracked", r.FlowRule, r.Quiet)
		}
	}
	for _, r := range f.set.Expire(now) {
		f.dirty = true
		f.event(now, "withdraw", r.Dst, "flow rule %s: TTL over", r.FlowRule)
	}
	f.syncKnownGood(now)
	f.syncSynGuard(now)
	f.pushFlowRules(now)
	f.syncSynproxyGood(now)
	f.police(now)
}

func withdrawAfter(c *config.Config) int {
	if n := c.Detectors.Victim.WithdrawAfter; n > 0 {
		return n
	}
	return 5
}

func rulesString(rs []rule.FlowRule) string {
	s := ""
	for i, r := range rs {
		if i > 0 {
			s += "; "
		}
		s += r.String()
	}
	return s
}

// pushFlowRules gives the data plane the set when it changed. The data
// plane takes all or nothing; when it refuses, the set goes back to what
// the data plane holds and the newest rules are reported refused.
func (f *flowStage) pushFlowRules(now time.Time) {
	if f.fp == nil {
		return
	}
	if !f.dirty {
		if !f.syn.synced {
			// The first pass brings the kernel side to the rules
			// in force even when none changed: a table left by an
			// earlier daemon whose state is gone would otherwise
			// keep every SYN to its ports in the kernel's SYNPROXY.
			f.syncSynproxy(now, f.pushed)
		}
		return
	}
	want := f.set.FlowRules()
	// The SYN-cookie stage goes in before the rules that use it (a rule
	// without it passes SYNs to the kernel: at 0.7 Mpps the 100 ms nft
	// takes let 70K through) and comes out after them. Its XDP part goes
	// first of all: loading and installing it are BPF syscalls, where the
	// kernel side (nft) execs a process, which a loaded CPU held for
	// about a second while 80K SYNs reached the kernel (eval-spoof
	// --background). Between the two the XDP stage answers SYNs with the
	// kernel's own cookies, which a listener the flood overflowed takes.
	synFirst := len(synproxy.TargetsOf(want)) > 0
	if synFirst {
		f.installXDPProxy(now)
	}
	if err := f.fp.SetFlowRules(want); err != nil {
		f.event(now, "error", netip.Prefix{}, "flow rules: the data plane refused the set of %d: %v (keeping the %d in force)", len(want), err, len(f.pushed))
		for _, r := range f.set.Rules() {
			if !slices.Contains(f.pushed, r.FlowRule) {
				_, _ = f.set.Remove(r.FlowRule) // it is there: Rules just listed it
			}
		}
		f.dirty = false
		return
	}
	f.pushed, f.dirty, f.saved = want, false, false
	f.metrics.flowRules.Set(float64(len(want)))
	f.syncSynproxy(now, want)
}

// synGuarder is the data plane's SYN guard (datapath.SetSynGuard): SYNs a
// second per CPU from sources not known good that reach the host's stack
// while no rule decides them.
type synGuarder interface {
	SetSynGuard(pps uint32) error
}

// syncSynGuard gives the data plane the guard's rate when it is not what
// it was given last (at start, and after a reload that changed it):
// detectors.victim.syn_guard_pps, or off without the victim detector,
// whose rules the guard holds the place of, or in monitor-only mode,
// which drops nothing of its own.
func (f *flowStage) syncSynGuard(now time.Time) {
	g, ok := f.fp.(synGuarder)
	if !ok {
		return
	}
	var want uint32
	if c := f.cfg(); f.victims != nil && !c.Rails.MonitorOnly {
		want = uint32(c.Detectors.Victim.SYNGuardPPS)
	}
	if f.guardSet && f.guard == want {
		return
	}
	if err := g.SetSynGuard(want); err != nil {
		f.event(now, "error", netip.Prefix{}, "SYN guard: setting %d SYN/s per CPU: %v", want, err)
		return
	}
	f.guard, f.guardSet = want, true
}

// syncKnownGood brings the data plane's list to the detector's set when
// the set changed: removals first, so the list never holds a revoked
// client while a rule drops.
func (f *flowStage) syncKnownGood(now time.Time) {
	if f.fp == nil || f.cfg().Rails.MonitorOnly {
		return
	}
	// Without the victim detector nobody is vouched for: the list is
	// emptied once and stays empty.
	var v uint64
	if f.victims != nil {
		v = f.victims.Good.Version()
	}
	if v == f.goodVersion && f.good != nil {
		return
	}
	if f.good == nil {
		// Start or reload: the list may hold what no one vouches for now
		// (an earlier run kept 60,391 poisoned entries while its successor
		// knew 30). Read it, and the diff below removes them.
		f.good = map[netip.Addr]struct{}{}
		if r, ok := f.fp.(knownGoodRater); ok {
			if err := r.SetKnownGoodRate(f.knownGoodPPS()); err != nil {
				f.event(now, "error", netip.Prefix{}, "known-good list: setting its rate: %v", err)
				f.good = nil
				return
			}
		}
		if l, ok := f.fp.(knownGoodLister); ok {
			held, err := l.KnownGood()
			if err != nil {
				f.event(now, "error", netip.Prefix{}, "known-good list: reading it: %v", err)
				f.good = nil
				return
			}
			for _, a := range held {
				f.good[a] = struct{}{}
			}
		}
	}
	var members []netip.Addr
	if f.victims != nil {
		members = f.victims.Good.AppendMembers(nil)
	}
	want := make(map[netip.Addr]struct{}, len(members))
	for _, a := range members {
		want[a] = struct{}{}
	}
	var add, del []netip.Addr
	for a := range f.good {
		if _, ok := want[a]; !ok {
			del = append(del, a)
		}
	}
	for a := range want {
		if _, ok := f.good[a]; !ok {
			add = append(add, a)
		}
	}
	if len(del) > 0 {
		if err := f.fp.RemoveKnownGood(del); err != nil {
			f.event(now, "error", netip.Prefix{}, "known-good list: removing %d: %v", len(del), err)
			return
		}
	}
	if len(add) > 0 {
		if err := f.fp.AddKnownGood(add); err != nil {
			f.event(now, "error", netip.Prefix{}, "known-good list: adding %d: %v", len(add), err)
			return
		}
	}
	f.good, f.goodVersion = want, v
	f.syn.goodDirty = true
	f.metrics.knownGood.Set(float64(len(want)))
}

// syncSynproxyGood gives the SYN proxy's kernel side the known-good list
// when it changed: those clients skip SYNPROXY as they skip the XDP stage,
// so their connections open as without a proxy and those open before it
// came up are not cut. On error the previous list stays; the next
// interval tries again.
func (f *flowStage) syncSynproxyGood(now time.Time) {
	s := &f.syn
	if len(s.targets) == 0 || !s.goodDirty {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := synproxy.SetKnownGood(ctx, "", f.knownGoodList()); err != nil {
		f.event(now, "error", netip.Prefix{}, "SYN proxy: known-good list: %v", err)
		return
	}
	s.goodDirty = false
}

// knownGoodList is the known-good list the data plane holds, at most as
// many as the kernel side's set holds (more only if the detector was
// configured beyond it; the rest then go through the proxy like any
// client, which costs them nothing but the proxy's handshake).
func (f *flowStage) knownGoodList() []netip.Addr {
	out := make([]netip.Addr, 0, min(len(f.good), synproxy.MaxKnownGood))
	for a := range f.good {
		if len(out) == synproxy.MaxKnownGood {
			break
		}
		out = append(out, a)
	}
	return out
}

// readFlowCounters reads the rules' counters after the interval, for the
// API, the metrics, the withdrawal of orphaned ladder rules and the
// detector's offered rate (passed + dropped) per victim.
func (f *flowStage) readFlowCounters(now time.Time) error {
	if f.fp == nil || f.set == nil || len(f.pushed) == 0 {
		f.dropped = nil
		f.lastRead = now
		return nil
	}
	rc, err := f.fp.FlowRuleCounters()
	if err != nil {
		return fmt.Errorf("reading flow rule counters: %w", err)
	}
	// By rule, not by position: another process (the CLI without the
	// daemon) may have replaced the set since the last push.
	byRule := make(map[rule.FlowRule]mitigate.Counters, len(rc))
	for _, c := range rc {
		mc := mitigate.Counters{Packets: c.Matched.Packets, Bytes: c.Matched.Bytes, Dropped: c.Dropped, PassedKnownGood: c.PassedKnownGood}
		if c.Rule.Action == rule.FlowSYNCookie {
			// What a syn-cookie rule hands the SYN proxy never reaches
			// the host's stack: for the detector's offered rate it is
			// dropped (else a working rule looks like a flood that ended
			// and is withdrawn, and the flood comes back).
			mc.Dropped = c.Matched.Packets - min(c.PassedKnownGood, c.Matched.Packets)
		}
		byRule[c.Rule] = mc
	}
	cs := make([]mitigate.Counters, len(f.pushed))
	for i, r := range f.pushed {
		cs[i] = byRule[r]
	}
	if f.nic != nil {
		good := make([]uint64, len(cs))
		for i := range cs {
			good[i] = cs[i].PassedKnownGood
		}
		if err := f.nic.read(f.pushed, good); err != nil {
			f.event(now, "error", netip.Prefix{}, "%v", err)
		}
		// What the card dropped for a rule, the rule matched and
		// dropped: the ladder measures the flood, not what is left of
		// it after the card.
		for i, r := range f.pushed {
			cs[i].Packets += f.nic.acc[r]
			cs[i].Dropped += f.nic.acc[r]
		}
	}
	dt := f.cfg().Interval
	if !f.lastRead.IsZero() && now.After(f.lastRead) {
		dt = now.Sub(f.lastRead)
	}
	f.lastRead = now
	f.set.Observe(f.pushed, cs, dt, quietPPS)
	defer f.publish()
	f.dropped = map[netip.Addr]uint64{}
	for _, r := range f.set.Rules() {
		if r.Origin == mitigate.Ladder && r.Victim.IsValid() {
			f.dropped[r.Victim] += uint64(r.DroppedPPS * dt.Seconds())
		}
	}
	return nil
}

// saveFlowRules writes the set when it changed since the last write.
func (f *flowStage) saveFlowRules(now time.Time) error {
	if f.set == nil || f.saved {
		return nil
	}
	if err := f.set.Save(now); err != nil {
		return err
	}
	f.saved = true
	return nil
}

// FlowRulesFile is where the flow rules are kept, beside the state file.
func FlowRulesFile(stateFile string) string { return stateFile + ".flowrules" }

// openFlowRules loads the flow rules kept from the last run, builds the
// victim detector, and gives the data plane the rules again (a reload or
// a fresh filter after a crash must not leave a victim unprotected).
func (d *Daemon) openFlowRules(now time.Time) error {
	f := &d.flow
	f.fp, _ = d.dp.(FlowPlane)
	capacity := d.cfg.Capacity.FlowRules
	if capacity == 0 {
		capacity = config.MaxFlowRules
	}
	set, warns, err := mitigate.Load(capacity, FlowRulesFile(d.cfg.StateFile))
	if err != nil {
		return err
	}
	for _, w := range warns {
		d.event(now, "restore", netip.Prefix{}, "%s", w)
	}
	f.set, f.saved = set, true
	d.flow.buildVictims()
	// The XDP SYN-cookie stage is loaded now, not when a SYN flood first
	// needs it: its verification takes 0.4 s of an idle CPU here, 2 s of
	// a loaded one (eval-spoof --background: the syn-cookie rule reached
	// XDP 4.8 intervals into the flood, 0.6 after the decision), and the
	// rule waits for it.
	if f.fp != nil && d.cfg.Detectors.Victim.Enabled && !d.cfg.Rails.MonitorOnly {
		d.flow.loadXDPProxy()
	}
	d.flow.syncKnownGood(now) // before the rules: their bypass must not pass an earlier run's list
	d.flow.syncSynGuard(now)  // from the start: a flood may be running already
	if f.fp != nil && set.Len() > 0 {
		f.dirty = true
		d.flow.pushFlowRules(now)
		d.event(now, "restore", netip.Prefix{}, "%d flow rules restored", len(f.pushed))
	}
	d.publishFlows()
	return nil
}

// buildVictims makes the per-victim detector from the configuration;
// a reload starts it afresh (its baselines are not kept across runs).
func (f *flowStage) buildVictims() {
	c := f.cfg().Detectors.Victim
	f.victims = nil
	if !c.Enabled {
		return
	}
	// The prefix rung proposes nothing wider than the rails would take
	// from a detector (0, any width, is /1: the rung's own default is
	// /16).
	w4, w6 := f.cfg().Rails.AutoBanLimits()
	f.victims = detect.NewVictims(detect.VictimConfig{K: c.K, MinPPS: c.MinPPS, ColdPPS: c.ColdPPS,
		LearnIntervals: c.LearnIntervals, Coverage: c.Coverage, RateFactor: c.RateFactor, RateFloorPPS: c.RateFloorPPS,
		WithdrawAfter: c.WithdrawAfter, MaxVictims: c.MaxVictims, MinBits4: max(w4, 1), MinBits6: max(w6, 1),
		SYNSizeDrop: c.SYNSizeDrop})
	f.victims.Good.Verify = f.verifyHandshake
	// The data plane's lists hold capacity.known_good a family and refuse
	// past it: the members stay under it, so an insert never meets a
	// full list.
	kg := f.cfg().Capacity.KnownGood
	if kg <= 0 {
		kg = datapath.DefaultKnownGoodCapacity
	}
	f.victims.Good.Cap = min(detect.DefaultKnownGoodCap, kg)
	f.victims.Protects = f.protects
	f.victims.Connections = f.connected
	f.goodVersion, f.good = 0, nil
}

// publishFlows copies the rules for the API and the metrics.
func (d *Daemon) publishFlows() {
	rs := d.flow.set.Rules()
	d.mu.Lock()
	d.flowView = rs
	d.mu.Unlock()
}

// FlowRules returns the flow rules in force, in the data plane's order,
// with their counters as of the last interval.
func (d *Daemon) FlowRules(ctx context.Context) (out []mitigate.Rule, err error) {
	derr := d.Do(ctx, func() {
		out = d.flow.set.Rules()
		d.flow.nic.annotate(out)
	})
	return out, derr
}

// AddFlowRule adds the operator's flow rule (ttl 0: until removed) and
// pushes the set; on any error nothing changed. The flow-rule rail
// applies (checkOperatorFlowRule): force takes a rule that stops traffic
// to this host's own addresses, never one that can stop its BGP or
// management sessions.
func (d *Daemon) AddFlowRule(ctx context.Context, r rule.FlowRule, reason string, ttl time.Duration, force bool) (out mitigate.Rule, err error) {
	if err := r.Check(); err != nil {
		return out, fmt.Errorf("%w: %v", apiv1.ErrBadRequest, err)
	}
	if ttl < 0 {
		return out, fmt.Errorf("%w: negative ttl", apiv1.ErrBadRequest)
	}
	derr := d.Do(ctx, func() {
		f := &d.flow
		if f.fp == nil {
			err = fmt.Errorf("%w: this data plane has no flow rules", apiv1.ErrBadRequest)
			return
		}
		if err = d.rail().checkOperatorFlowRule(r, force); err != nil {
			return
		}
		now := time.Now()
		before := f.set.Rules()
		out = mitigate.Rule{FlowRule: r, Origin: mitigate.Operator, Reason: reason, Added: now}
		if ttl > 0 {
			out.Expires = now.Add(ttl)
		}
		if _, err = f.set.Add(out); err != nil {
			if errors.Is(err, mitigate.ErrFull) || errors.Is(err, rule.ErrInvalid) {
				err = fmt.Errorf("%w: %v", apiv1.ErrBadRequest, err)
			}
			return
		}
		if r.Action == rule.FlowSYNCookie {
			d.flow.syncSynproxy(now, f.set.FlowRules()) // before the rule, as in pushFlowRules
		}
		if err = f.fp.SetFlowRules(f.set.FlowRules()); err != nil {
			f.set.Reset(before)
			err = fmt.Errorf("%w: %v (nothing changed)", apiv1.ErrBadRequest, err)
			return
		}
		f.pushed, f.dirty, f.saved = f.set.FlowRules(), false, false
		d.Metrics.flowRules.Set(float64(len(f.pushed)))
		d.publishFlows()
		if why := d.rail().hitsHost(r); why != "" {
			d.event(now, "flowrule", r.Dst, "operator: %s: %s (forced: %s)", r, reason, why)
		} else {
			d.event(now, "flowrule", r.Dst, "operator: %s: %s", r, reason)
		}
		err = d.flow.saveFlowRules(now)
	})
	return out, errors.Join(derr, err)
}

// DeleteFlowRule removes the flow rule with r's match and action,
// whoever made it.
func (d *Daemon) DeleteFlowRule(ctx context.Context, r rule.FlowRule) (err error) {
	derr := d.Do(ctx, func() {
		f := &d.flow
		now := time.Now()
		before := f.set.Rules()
		var gone mitigate.Rule
		if gone, err = f.set.Remove(r); err != nil {
			err = fmt.Errorf("%w: %v", apiv1.ErrNotFound, err)
			return
		}
		if f.fp != nil {
			if err = f.fp.SetFlowRules(f.set.FlowRules()); err != nil {
				f.set.Reset(before)
				return
			}
			f.pushed = f.set.FlowRules()
			d.flow.syncSynproxy(now, f.pushed)
		}
		f.dirty, f.saved = false, false
		d.Metrics.flowRules.Set(float64(len(f.pushed)))
		d.publishFlows()
		d.event(now, "withdraw", r.Dst, "flow rule %s: removed by the operator (%s)", r, gone.Origin)
		err = d.flow.saveFlowRules(now)
	})
	return errors.Join(derr, err)
}

// VictimStatus reads the per-victim detector's view.
func (d *Daemon) VictimStatus(ctx context.Context) (out apiv1.Victims, err error) {
	derr := d.Do(ctx, func() {
		v := d.flow.victims
		if v == nil {
			return
		}
		out = apiv1.Victims{Enabled: true, Attacks: d.flow.dec.Attacks, Active: v.Active(), KnownGood: v.Good.Len(), Tracked: v.Tracked()}
	})
	return out, derr
}

// synStage is the SYN-cookie stage: the XDP program syn-cookie flow rules
// hand TCP to, and the kernel's SYNPROXY behind it that completes the
// handshakes the cookies validated. It is set up while a syn-cookie rule
// is in force, and left in place when the daemon stops: the rules stay in
// the pinned maps, and clients' ACKs need SYNPROXY to become connections.
type synStage struct {
	sp      *dpsynproxy.Synproxy
	targets []synproxy.Target // what the kernel side was set up for
	// synced: the kernel side was brought to the rules at least once
	// since start; until then what is installed is not known.
	synced bool
	// goodDirty: the known-good list changed since the kernel side's
	// sets were last written.
	goodDirty bool
}

// installXDPProxy loads the XDP SYN-cookie stage if needed and puts it in
// the filter's slot, ahead of the kernel side (pushFlowRules says why). A
// failure is syncSynproxy's to report: it tries again and fails open.
func (f *flowStage) installXDPProxy(now time.Time) {
	dpx, ok := f.dp.(*datapath.Datapath)
	if !ok || !f.loadXDPProxy() {
		return
	}
	if err := f.syn.sp.Install(dpx); err != nil {
		f.log.Debug("SYN proxy: installing the XDP stage ahead of the kernel side", "err", err)
	}
}

// loadXDPProxy loads the XDP SYN-cookie stage once; false when it cannot
// be (syncSynproxy reports why when a rule needs it).
func (f *flowStage) loadXDPProxy() bool {
	s := &f.syn
	if s.sp != nil {
		return true
	}
	if _, ok := f.dp.(*datapath.Datapath); !ok {
		return false
	}
	sp, err := dpsynproxy.Load(dpsynproxy.Options{MSS: f.cfg().Synproxy.MSS, WScale: f.cfg().Synproxy.WScale})
	if err != nil {
		return false
	}
	s.sp = sp
	return true
}

// syncSynproxy follows the syn-cookie rules in rs. When the stage cannot
// be set up, the XDP slot is left empty: the rules then pass SYNs to the
// kernel (counted as synproxy_missing), which is the kernel's own SYN
// cookies, never a refused client.
func (f *flowStage) syncSynproxy(now time.Time, rs []rule.FlowRule) {
	dpx, ok := f.dp.(*datapath.Datapath)
	if !ok {
		return
	}
	s := &f.syn
	targets := synproxy.TargetsOf(rs)
	if s.synced && slices.Equal(targets, s.targets) && (len(targets) == 0 || s.sp != nil) {
		return
	}
	s.synced = true
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if len(targets) == 0 {
		if err := synproxy.Remove(ctx, ""); err != nil {
			f.event(now, "error", netip.Prefix{}, "SYN proxy: removing the kernel side: %v", err)
		}
		s.targets = nil
		return
	}
	fail := func(format string, args ...any) {
		f.event(now, "error", netip.Prefix{}, "SYN proxy: "+format+" (syn-cookie rules pass SYNs to the kernel meanwhile)", args...)
		_ = dpx.SetSynproxy(nil)
		s.targets = nil
	}
	opts := dpsynproxy.Options{MSS: f.cfg().Synproxy.MSS, WScale: f.cfg().Synproxy.WScale}
	if s.sp == nil {
		sp, err := dpsynproxy.Load(opts)
		if err != nil {
			fail("loading: %v", err)
			return
		}
		s.sp = sp
	}
	if err := synproxy.Apply(ctx, synproxy.Config{Targets: targets, MSS: s.sp.Options().MSS, WScale: s.sp.Options().WScale, KnownGood: f.knownGoodList()}); err != nil {
		fail("setting up SYNPROXY: %v", err)
		return
	}
	s.goodDirty = false
	if err := s.sp.Install(dpx); err != nil {
		fail("installing: %v", err)
		return
	}
	s.targets = targets
	f.event(now, "mitigation", netip.Prefix{}, "SYN cookies in XDP for %d targets, SYNPROXY behind them", len(targets))
}

// verifiedClients are the known-good members, for the breaker over all
// active bans; the list is rebuilt only when the set changed.
func (f *flowStage) verifiedClients() []netip.Addr {
	v := f.victims
	if v == nil {
		return nil
	}
	if f.clientsVersion != v.Good.Version() || f.clients == nil {
		f.clients = v.Good.AppendMembers(f.clients[:0])
		f.clientsVersion = v.Good.Version()
	}
	return f.clients
}
