// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tierwall/tierwall/internal/control/apiv1"
	"github.com/tierwall/tierwall/internal/control/config"
	"github.com/tierwall/tierwall/internal/control/detect"
	"github.com/tierwall/tierwall/internal/datapath"
)

// The heavy-hitter detector's control side. The data plane catches a
// source over its threshold within milliseconds and drops it provisionally
// (bpf/lib/heavy.h); each interval the daemon takes its reports as
// detections of the "heavy" detector, so the rails judge them like any
// other: a ban the rails admit confirms the catch (the ban replaces the
// entry, and placement may move it to hardware), a refusal revokes it
// (the source passes and is not caught again for detectors.heavy.exempt).
// In monitor-only mode the data plane counts instead of dropping and the
// entries expire by themselves.

// HeavyPlane is a data plane with the heavy-hitter detector.
type HeavyPlane interface {
	SetHeavyHitter(h datapath.HeavyHitter) error
	SetProtected(ps []netip.Prefix, prefix6 int) error
	// HeavyHitterReports returns the reports waiting, without waiting.
	HeavyHitterReports(max int) ([]datapath.HeavyEvent, error)
	RemoveProvisional(p netip.Prefix) error
	RevokeProvisional(p netip.Prefix, exempt time.Duration) error
	ExpireProvisionals() (int, error)
	HeavyHitterStats() (datapath.HeavyStats, error)
	Provisionals() ([]datapath.Provisional, error)
}

var _ HeavyPlane = (*datapath.Datapath)(nil)

// heavyEventsPerInterval bounds the reports taken in one interval; the
// rest wait in the ring (the data plane counts what it cannot report).
const heavyEventsPerInterval = 4096

// heavyStage owns the detector's control side: its state between
// intervals and what it does with it. The loop calls open at start and on
// reload, detections in the detect stage, followLearned after it and
// settle once the rails have judged; nothing else touches its fields. What
// it reads of the rest of the daemon comes through the functions wired by
// newHeavyStage, so the stage can be read (and tested) on its own.
type heavyStage struct {
	hp       HeavyPlane            // nil: the data plane has no detector
	pending  []datapath.HeavyEvent // taken this interval, to confirm or revoke
	deferred []datapath.HeavyEvent // caught too recently to judge: the next interval's
	pps      uint64                // the packet threshold in force (static or learned)
	// once holds the sources revoked briefly because they kept sending
	// (see revokeHeavy), with when; bounded by heavyOnceMax.
	once map[netip.Prefix]time.Time

	cfg        func() *config.Config   // the configuration in force (a reload replaces it)
	learned    func() (float64, bool)  // the rate detector's learned per-source threshold
	banned     func(netip.Prefix) bool // whether the ban store holds a prefix
	event      func(now time.Time, kind string, p netip.Prefix, format string, args ...any)
	log        *slog.Logger
	metrics    *heavyMetrics
	detections *prometheus.CounterVec // the daemon's detections per detector
}

// newHeavyStage wires the stage to the daemon's configuration, rate
// detector, ban store, events and metrics.
func (d *Daemon) newHeavyStage() heavyStage {
	return heavyStage{
		cfg:     func() *config.Config { return d.cfg },
		learned: func() (float64, bool) { return d.det.learnedPPS() },
		banned: func(p netip.Prefix) bool {
			_, ok := d.store.Get(p)
			return ok
		},
		event:      d.event,
		log:        d.log,
		metrics:    &d.Metrics.heavy,
		detections: d.Metrics.detections,
	}
}

// protected is what the data plane's detector must never catch: the
// protected and allowlisted prefixes and the management addresses.
func (d *Daemon) protected() []netip.Prefix {
	protect := slices.Concat(d.cfg.Rails.ProtectedPrefixes, d.cfg.Rails.AllowPrefixes)
	for _, m := range d.mgmt {
		protect = append(protect, netip.PrefixFrom(m.Addr, m.Addr.BitLen()))
	}
	return protect
}

// heavyOnceMax bounds heavyState.once: an attacker cycling sources fills
// it, and then the oldest half is forgotten (those sources get the brief
// exemption once more, which only helps the defence).
const heavyOnceMax = 1 << 16

type heavyMetrics struct {
	outcomes *prometheus.CounterVec
	stats    *prometheus.GaugeVec
}

func newHeavyMetrics(reg *prometheus.Registry) heavyMetrics {
	m := heavyMetrics{
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tierwall_provisional_drops_total",
			Help: "Sources the XDP heavy-hitter detector caught, and what the daemon did with them (confirmed: a ban replaced it; revoked: a rail refused it; monitored: monitor-only)."},
			[]string{"outcome"}),
		stats: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tierwall_heavy_hitter_events",
			Help: "What the XDP heavy-hitter detector did since the filter was loaded (table_full: caught with no room; ring_full: report lost; exempt_*: over threshold but exempt)."},
			[]string{"event"}),
	}
	for _, o := range []string{"caught", "confirmed", "revoked", "monitored", "expired"} {
		m.outcomes.WithLabelValues(o)
	}
	reg.MustRegister(m.outcomes, m.stats)
	return m
}

// openHeavy configures the data plane's detector from the configuration
// (again on reload) and opens its report ring once.
func (h *heavyStage) open(dp any, protect []netip.Prefix) error {
	if h.hp == nil {
		h.hp, _ = dp.(HeavyPlane)
		if h.hp == nil {
			return nil
		}
	}
	if err := h.set(h.threshold()); err != nil {
		return err
	}
	// The rails in the data plane itself: spoofing a protected or
	// allowlisted source never produces a provisional drop.
	if err := h.hp.SetProtected(protect, max(h.cfg().Detectors.Heavy.Prefix6, 32)); err != nil {
		return fmt.Errorf("giving the heavy-hitter detector the protected prefixes: %w", err)
	}
	return nil
}

// heavyPPS is the packet threshold: the static one, or the rate
// detector's learned per-source threshold times learned_factor (never
// under two packets per window: the detector would catch every packet).
func (h *heavyStage) threshold() uint64 {
	c := h.cfg().Detectors.Heavy
	if c.LearnedFactor <= 0 {
		return c.PPS
	}
	l, ok := h.learned()
	if !ok {
		return c.PPS
	}
	floor := uint64(2*time.Second/c.Window) + 1
	return max(uint64(l*c.LearnedFactor), floor)
}

// setHeavy configures the data plane's detector with the packet
// threshold pps.
func (h *heavyStage) set(pps uint64) error {
	c := h.cfg().Detectors.Heavy
	cfg := datapath.HeavyHitter{}
	if c.Enabled {
		cfg = datapath.HeavyHitter{Window: c.Window, TTL: c.TTL, PacketsPerSec: pps, SYNsPerSec: c.SYNPPS,
			Prefix6: c.Prefix6, Monitor: h.cfg().Rails.MonitorOnly}
	}
	if err := h.hp.SetHeavyHitter(cfg); err != nil {
		return fmt.Errorf("configuring the heavy-hitter detector: %w", err)
	}
	h.pps = pps
	return nil
}

// followLearned moves the detector's threshold with the rate detector's
// learned one (learned_factor), once it changes.
func (h *heavyStage) followLearned(now time.Time) {
	if h.hp == nil || !h.cfg().Detectors.Heavy.Enabled {
		return
	}
	if pps := h.threshold(); pps != h.pps {
		if err := h.set(pps); err != nil {
			h.event(now, "error", netip.Prefix{}, "%v", err)
			return
		}
		h.log.Info("heavy-hitter threshold follows the learned rate", "pps", pps)
	}
}

// heavyDetections takes the reports since the last interval as detections.
// A catch is judged on what the source did after it, not on the window
// that caught it: a client's burst of a few milliseconds (a download's
// ACKs, a retry storm) crosses a short window's threshold and then stops,
// and banning it for bans.ttl would be the detector's false positive. So a
// catch becomes a detection only while its entry has gone on counting at
// the threshold's rate since the catch (dropped, or passed in monitor-only
// mode); otherwise it is revoked at once, with the exemption, and the
// interval's own detectors still judge the source on its full rate.
func (h *heavyStage) takeDetections(now time.Time) []detect.Detection {
	h.pending = h.pending[:0]
	if h.hp == nil {
		return nil
	}
	evs, err := h.hp.HeavyHitterReports(heavyEventsPerInterval)
	if err != nil {
		h.event(now, "error", netip.Prefix{}, "heavy-hitter reports: %v", err)
	}
	// Those deferred last interval first (they were reported then).
	evs = append(h.deferred, evs...)
	h.deferred = nil
	if len(evs) == 0 {
		return nil
	}
	entries := map[netip.Prefix]datapath.Provisional{}
	if ps, err := h.hp.Provisionals(); err != nil {
		h.event(now, "error", netip.Prefix{}, "reading provisional drops: %v", err)
	} else {
		for _, p := range ps {
			entries[p.Prefix] = p
		}
	}
	c := h.cfg().Detectors.Heavy
	// A catch younger than half an interval has not shown yet whether it
	// goes on; it keeps dropping while it waits for the next interval
	// (its TTL is at least two intervals).
	judgeAfter := h.cfg().Interval / 2
	var ds []detect.Detection
	for _, e := range evs {
		thr := h.pps
		if e.Kind == "syns" {
			thr = c.SYNPPS
		}
		x, ok := entries[e.Prefix]
		if ok && now.Sub(x.Added) < judgeAfter && len(h.deferred) < heavyEventsPerInterval {
			h.deferred = append(h.deferred, e)
			continue
		}
		h.metrics.outcomes.WithLabelValues("caught").Inc()
		h.event(now, "provisional", e.Prefix, "caught in XDP at %s: %d %s in %v (threshold %d/s)%s",
			e.At.Format(time.RFC3339Nano), e.Count, e.Kind, c.Window, thr, map[bool]string{true: ", monitor-only: counted, not dropped"}[e.Monitor])
		rate := float64(e.Count) / c.Window.Seconds()
		if ok {
			// The entry's own clock: from the catch to now, at least one
			// window (a catch just made has had no time to count).
			since := max(now.Sub(x.Added), c.Window)
			rate = float64(x.Packets) / since.Seconds()
			if rate < float64(thr) && !e.Monitor && !h.cfg().Rails.MonitorOnly {
				h.revoke(now, e.Prefix, fmt.Sprintf("a burst, not a flood: %.0f pps since the catch, under the threshold of %d/s", rate, thr),
					rate >= float64(thr)/4)
				continue
			}
		}
		h.pending = append(h.pending, e)
		h.detections.WithLabelValues("heavy").Inc()
		ds = append(ds, detect.Detection{Prefix: e.Prefix, Detector: "heavy", Rate: rate,
			Reason: fmt.Sprintf("%d %s in %v in XDP (threshold %d/s), %.0f pps since", e.Count, e.Kind, c.Window, thr, rate)})
	}
	return ds
}

// revokeHeavy lets a caught source pass again and exempts it. A source
// that went quiet after its catch (a client's burst) is exempt for
// detectors.heavy.exempt at once. One that kept sending at a good share
// of the threshold (sending) may be an attacker whose flood is still
// ramping up, or one who learned that a burst buys ten minutes of
// freedom from the detector: the first time it is exempt for two
// intervals only, so it is caught again once over the threshold; a
// second revocation within the exemption gives the full one, so a client
// sitting just under the threshold is caught at most twice, not on every
// burst.
func (h *heavyStage) revoke(now time.Time, p netip.Prefix, why string, sending bool) {
	exempt := h.cfg().Detectors.Heavy.Exempt
	if sending {
		if at, ok := h.once[p]; !ok || now.Sub(at) > exempt {
			if h.once == nil {
				h.once = map[netip.Prefix]time.Time{}
			}
			if len(h.once) >= heavyOnceMax {
				forgetOldest(h.once, heavyOnceMax/2)
			}
			h.once[p] = now
			exempt = min(exempt, 2*h.cfg().Interval)
			why += "; it kept sending, so only briefly"
		} else {
			delete(h.once, p)
		}
	}
	if err := h.hp.RevokeProvisional(p, exempt); err != nil {
		h.event(now, "error", p, "revoking the provisional drop: %v", err)
		return
	}
	h.metrics.outcomes.WithLabelValues("revoked").Inc()
	h.event(now, "provisional", p, "revoked: %s; the source passes and is not caught again for %v", why, exempt)
}

// settleHeavy confirms or revokes this interval's catches, once the rails
// have judged them (ban), and removes expired entries.
func (h *heavyStage) settle(now time.Time) {
	if h.hp == nil {
		return
	}
	for _, e := range h.pending {
		switch {
		case h.banned(e.Prefix):
			if err := h.hp.RemoveProvisional(e.Prefix); err != nil {
				h.event(now, "error", e.Prefix, "confirming the provisional drop: %v", err)
				continue
			}
			h.metrics.outcomes.WithLabelValues("confirmed").Inc()
			h.event(now, "provisional", e.Prefix, "confirmed: a ban replaces the provisional drop")
		case e.Monitor || h.cfg().Rails.MonitorOnly:
			h.metrics.outcomes.WithLabelValues("monitored").Inc()
		default:
			h.revoke(now, e.Prefix, "no ban (a rail refused it, see the refusal)", false)
		}
	}
	h.pending = h.pending[:0]
	if n, err := h.hp.ExpireProvisionals(); err != nil {
		h.event(now, "error", netip.Prefix{}, "expiring provisional drops: %v", err)
	} else {
		h.metrics.outcomes.WithLabelValues("expired").Add(float64(n))
	}
	if st, err := h.hp.HeavyHitterStats(); err == nil {
		for k, v := range map[string]uint64{"caught": st.Caught, "table_full": st.TableFull, "ring_full": st.RingFull,
			"exempt_good": st.ExemptGood, "exempt_protected": st.ExemptProtect, "expired": st.Expired, "checks": st.Checks, "marked": st.Marked, "candidates": st.Candidates} {
			h.metrics.stats.WithLabelValues(k).Set(float64(v))
		}
	}
}

// Heavy reads the detector's state from the data plane (on the loop, so
// it never sees an entry the interval is halfway through settling).
func (d *Daemon) Heavy(ctx context.Context) (st apiv1.HeavyStatus, err error) {
	st.Entries = []datapath.Provisional{}
	derr := d.Do(ctx, func() {
		hp := d.heavy.hp
		if hp == nil || !d.cfg.Detectors.Heavy.Enabled {
			return
		}
		st.Enabled, st.Monitor = true, d.cfg.Rails.MonitorOnly
		if st.Stats, err = hp.HeavyHitterStats(); err != nil {
			return
		}
		var ps []datapath.Provisional
		if ps, err = hp.Provisionals(); err == nil && ps != nil {
			st.Entries = ps
		}
	})
	if derr != nil {
		return st, derr
	}
	return st, err
}

// forgetOldest deletes the oldest entries of m until keep remain.
func forgetOldest(m map[netip.Prefix]time.Time, keep int) {
	if len(m) <= keep {
		return
	}
	ts := make([]time.Time, 0, len(m))
	for _, t := range m {
		ts = append(ts, t)
	}
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	cut := ts[len(ts)-keep]
	for p, t := range m {
		if t.Before(cut) {
			delete(m, p)
		}
	}
}
