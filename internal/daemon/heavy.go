package daemon

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tierwall/tierwall/internal/datapath"
	"github.com/tierwall/tierwall/internal/detect"
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
}

var _ HeavyPlane = (*datapath.Datapath)(nil)

// heavyEventsPerInterval bounds the reports taken in one interval; the
// rest wait in the ring (the data plane counts what it cannot report).
const heavyEventsPerInterval = 4096

type heavyState struct {
	hp      HeavyPlane            // nil: the data plane has no detector
	pending []datapath.HeavyEvent // taken this interval, to confirm or revoke
}

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
func (d *Daemon) openHeavy(now time.Time) error {
	h := &d.heavy
	if h.hp == nil {
		h.hp, _ = d.dp.(HeavyPlane)
		if h.hp == nil {
			return nil
		}
	}
	c := d.cfg.Detectors.Heavy
	cfg := datapath.HeavyHitter{}
	if c.Enabled {
		cfg = datapath.HeavyHitter{Window: c.Window, TTL: c.TTL, PacketsPerSec: c.PPS, SYNsPerSec: c.SYNPPS,
			Prefix6: c.Prefix6, Monitor: d.cfg.Rails.MonitorOnly}
	}
	if err := h.hp.SetHeavyHitter(cfg); err != nil {
		return fmt.Errorf("configuring the heavy-hitter detector: %w", err)
	}
	// The rails in the data plane itself: spoofing a protected or
	// allowlisted source never produces a provisional drop.
	protect := slices.Concat(d.cfg.Rails.ProtectedPrefixes, d.cfg.Rails.AllowPrefixes)
	for _, m := range d.mgmt {
		protect = append(protect, netip.PrefixFrom(m.Addr, m.Addr.BitLen()))
	}
	if err := h.hp.SetProtected(protect, max(c.Prefix6, 32)); err != nil {
		return fmt.Errorf("giving the heavy-hitter detector the protected prefixes: %w", err)
	}
	return nil
}

// heavyDetections takes the reports since the last interval as detections.
func (d *Daemon) heavyDetections(now time.Time) []detect.Detection {
	h := &d.heavy
	h.pending = h.pending[:0]
	if h.hp == nil {
		return nil
	}
	evs, err := h.hp.HeavyHitterReports(heavyEventsPerInterval)
	if err != nil {
		d.event(now, "error", netip.Prefix{}, "heavy-hitter reports: %v", err)
	}
	c := d.cfg.Detectors.Heavy
	var ds []detect.Detection
	for _, e := range evs {
		h.pending = append(h.pending, e)
		d.Metrics.heavy.outcomes.WithLabelValues("caught").Inc()
		d.Metrics.detections.WithLabelValues("heavy").Inc()
		thr := c.PPS
		if e.Kind == "syns" {
			thr = c.SYNPPS
		}
		rate := float64(e.Count) / c.Window.Seconds()
		d.event(now, "provisional", e.Prefix, "caught in XDP at %s: %d %s in %v (threshold %d/s)%s",
			e.At.Format(time.RFC3339Nano), e.Count, e.Kind, c.Window, thr, map[bool]string{true: ", monitor-only: counted, not dropped"}[e.Monitor])
		ds = append(ds, detect.Detection{Prefix: e.Prefix, Detector: "heavy", Rate: rate,
			Reason: fmt.Sprintf("%d %s in %v in XDP (threshold %d/s)", e.Count, e.Kind, c.Window, thr)})
	}
	return ds
}

// settleHeavy confirms or revokes this interval's catches, once the rails
// have judged them (ban), and removes expired entries.
func (d *Daemon) settleHeavy(now time.Time) {
	h := &d.heavy
	if h.hp == nil {
		return
	}
	for _, e := range h.pending {
		switch _, banned := d.store.Get(e.Prefix); {
		case banned:
			if err := h.hp.RemoveProvisional(e.Prefix); err != nil {
				d.event(now, "error", e.Prefix, "confirming the provisional drop: %v", err)
				continue
			}
			d.Metrics.heavy.outcomes.WithLabelValues("confirmed").Inc()
			d.event(now, "provisional", e.Prefix, "confirmed: a ban replaces the provisional drop")
		case e.Monitor || d.cfg.Rails.MonitorOnly:
			d.Metrics.heavy.outcomes.WithLabelValues("monitored").Inc()
		default:
			exempt := d.cfg.Detectors.Heavy.Exempt
			if err := h.hp.RevokeProvisional(e.Prefix, exempt); err != nil {
				d.event(now, "error", e.Prefix, "revoking the provisional drop: %v", err)
				continue
			}
			d.Metrics.heavy.outcomes.WithLabelValues("revoked").Inc()
			d.event(now, "provisional", e.Prefix, "revoked: no ban (a rail refused it, see the refusal); the source passes and is not caught again for %v", exempt)
		}
	}
	h.pending = h.pending[:0]
	if n, err := h.hp.ExpireProvisionals(); err != nil {
		d.event(now, "error", netip.Prefix{}, "expiring provisional drops: %v", err)
	} else {
		d.Metrics.heavy.outcomes.WithLabelValues("expired").Add(float64(n))
	}
	if st, err := h.hp.HeavyHitterStats(); err == nil {
		for k, v := range map[string]uint64{"caught": st.Caught, "table_full": st.TableFull, "ring_full": st.RingFull,
			"exempt_good": st.ExemptGood, "exempt_protected": st.ExemptProtect, "expired": st.Expired, "checks": st.Checks} {
			d.Metrics.heavy.stats.WithLabelValues(k).Set(float64(v))
		}
	}
}
