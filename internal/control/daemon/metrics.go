// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"context"
	"net/netip"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/tierwall/tierwall/internal/tier"
)

// Metrics are the daemon's Prometheus metrics. Counters of the data plane
// are not copied into Go counters: the collector reads the BPF maps at
// scrape time, so /metrics is as fresh as the kernel's own numbers.
type Metrics struct {
	Registry *prometheus.Registry

	detections       *prometheus.CounterVec
	bans             prometheus.Counter
	unbans           prometheus.Counter
	refused          *prometheus.CounterVec
	mergeFallback    prometheus.Counter
	placementUpdates prometheus.Counter
	detectToDrop     prometheus.Histogram
	hwLatency        prometheus.Histogram
	victimsAttacked  prometheus.Gauge
	attacksOn        prometheus.Gauge     // victims with an attack on (tracked until withdrawn)
	entropyLearned   prometheus.Gauge     // intervals the entropy detector learned
	entropy          *prometheus.GaugeVec // its last interval and its baseline, by signal
	mitigations      *prometheus.CounterVec
	flowRules        prometheus.Gauge
	flowPolicers     prometheus.Gauge
	knownGood        prometheus.Gauge
	loopDuration     prometheus.Histogram
	stageDuration    *prometheus.HistogramVec // by stage (stages.go)
	lastInterval     prometheus.Gauge
	heavy            heavyMetrics
	bgp              bgpMetrics
	reloads          *prometheus.CounterVec // by result (reload.go)

	// What the collector reads of the loop's state, published by the loop
	// at the end of each interval (the collector runs on the scraper's
	// goroutine; placement's table is the loop's alone).
	mu        sync.Mutex
	hwEntries int
	hwRules   map[tier.Match]tier.Counters // last reading of each rule with counters
	hwTotal   map[string]tier.Counters     // by verdict, monotonic over removals
}

func newMetrics(d *Daemon) *Metrics {
	m := &Metrics{Registry: prometheus.NewRegistry()}
	m.detections = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tierwall_detections_total", Help: "Detections, by detector."}, []string{"detector"})
	m.bans = prometheus.NewCounter(prometheus.CounterOpts{Name: "tierwall_bans_total", Help: "Bans applied."})
	m.unbans = prometheus.NewCounter(prometheus.CounterOpts{Name: "tierwall_unbans_total", Help: "Bans lifted (rate monitor or expiry)."})
	m.refused = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tierwall_bans_refused_total", Help: "Detections the safety rails refused, by rail."}, []string{"rail"})
	m.mergeFallback = prometheus.NewCounter(prometheus.CounterOpts{Name: "tierwall_snapshot_merge_fallback_keys_total",
		Help: "Feature keys merged through the slow path because their probe run was too long (colliding keys: a hash-flooding attempt or bad luck)."})
	m.placementUpdates = prometheus.NewCounter(prometheus.CounterOpts{Name: "tierwall_placement_updates_total", Help: "Hardware rule installs and removals made by placement."})
	m.detectToDrop = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tierwall_detection_to_drop_seconds",
		Help:    "From the start of the interval a banned source first appeared in to its ban being applied.",
		Buckets: []float64{0.05, 0.1, 0.2, 0.5, 1, 2, 3, 5, 10, 30}})
	m.hwLatency = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tierwall_hw_update_latency_seconds",
		Help: "Measured latency of one hardware rule update.", Buckets: prometheus.ExponentialBuckets(0.0001, 2, 14)})
	m.attacksOn = prometheus.NewGauge(prometheus.GaugeOpts{Name: "tierwall_victim_attacks_on",
		Help: "Victims with an attack on, from its detection to its withdrawal: while any is on, the entropy detector learns nothing."})
	m.entropyLearned = prometheus.NewGauge(prometheus.GaugeOpts{Name: "tierwall_entropy_learned_intervals",
		Help: "Intervals the entropy detector learned its baseline from; it judges from detectors.entropy.history on."})
	m.entropy = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tierwall_entropy",
		Help: "The entropy detector's numbers: of=interval is the last interval's, of=baseline the mean it judges against; signal pps is the packet rate, src and dst the entropies in bits of sources and destinations (0: one carries all, log2 n: n alike)."}, []string{"signal", "of"})
	m.victimsAttacked = prometheus.NewGauge(prometheus.GaugeOpts{Name: "tierwall_victims_under_attack", Help: "Destinations the per-victim detector judged attacked in the last interval."})
	m.mitigations = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tierwall_mitigations_total", Help: "Mitigations the ladder chose, by rung."}, []string{"rung"})
	m.flowRules = prometheus.NewGauge(prometheus.GaugeOpts{Name: "tierwall_flow_rules", Help: "Flow rules in the data plane."})
	m.flowPolicers = prometheus.NewGauge(prometheus.GaugeOpts{Name: "tierwall_flow_rules_on_nic", Help: "Flow rules the NIC polices before the host (the emulated card's policers)."})
	m.knownGood = prometheus.NewGauge(prometheus.GaugeOpts{Name: "tierwall_known_good_sources", Help: "Sources on the data plane's known-good list."})
	m.loopDuration = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tierwall_interval_duration_seconds",
		Help:    "Time one interval of the control loop took (snapshot to save); near the interval itself, the loop falls behind.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)})
	m.stageDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "tierwall_interval_stage_duration_seconds",
		Help:    "Time each stage of the control loop took in one interval: which one to blame when tierwall_interval_duration_seconds nears the interval.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}, []string{"stage"})
	m.lastInterval = prometheus.NewGauge(prometheus.GaugeOpts{Name: "tierwall_last_interval_timestamp_seconds",
		Help: "Unix time of the last interval that completed without error: alert on time() minus this."})
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tierwall_build_info", Help: "Always 1: the build's version, Go version and commit as labels."},
		[]string{"version", "goversion", "commit"})
	build.WithLabelValues(buildInfo()).Set(1)
	// Every rail is a series from the start, so a rate() over it is 0, not
	// absent, until the first refusal.
	for _, r := range railLabels {
		m.refused.WithLabelValues(r)
	}
	m.Registry.MustRegister(m.detections, m.bans, m.unbans, m.refused, m.mergeFallback, m.placementUpdates, m.detectToDrop, m.hwLatency,
		m.victimsAttacked, m.attacksOn, m.entropyLearned, m.entropy, m.mitigations, m.flowRules, m.flowPolicers, m.knownGood, m.loopDuration, m.stageDuration, m.lastInterval, build,
		&bpfCollector{d}, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.heavy = newHeavyMetrics(m.Registry)
	m.bgp = newBGPMetrics(m.Registry, d)
	m.reloads = newReloadMetric(m.Registry)
	return m
}

// buildInfo is the version (the module's, "(devel)" for a plain go
// build), the Go version and the VCS commit the binary was built from.
func buildInfo() (version, goversion, commit string) {
	version, goversion, commit = "unknown", runtime.Version(), "unknown"
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return
	}
	if bi.Main.Version != "" {
		version = bi.Main.Version
	}
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			commit = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if dirty && commit != "unknown" {
		commit += "-dirty"
	}
	return
}

// railLabels are the values of tierwall_bans_refused_total's rail label.
var railLabels = []string{"allowlist", "protected", "monitor_only", "circuit_breaker", "max_new_per_interval", "max_total",
	"known_good", "too_wide", "invalid", railHostCutoff, "other"}

// refuse counts n refusals for the reason why (a ban.Refusal's Why, or
// one of railLabels).
func (m *Metrics) refuse(why string, n int) {
	m.refused.WithLabelValues(railOf(why)).Add(float64(n))
}

// railOf names the rail behind a refusal from its reason: the rails say
// why in words (ban.Store.Propose), the metric needs a bounded label.
func railOf(why string) string {
	for _, r := range railLabels {
		if why == r {
			return r
		}
	}
	switch {
	case strings.HasPrefix(why, "allowlisted"):
		return "allowlist"
	case strings.HasPrefix(why, "inside protected"):
		return "protected"
	case why == "monitor-only":
		return "monitor_only"
	case strings.HasPrefix(why, "circuit breaker"):
		return "circuit_breaker"
	case strings.Contains(why, "new bans this interval"):
		return "max_new_per_interval"
	case strings.HasPrefix(why, "ban limit"):
		return "max_total"
	case strings.HasPrefix(why, "too wide"):
		return "too_wide"
	}
	return "other"
}

// stepDone closes an interval for the metrics: its duration, the time of
// the last good one, and what the collector reads of the loop's state.
func (d *Daemon) stepDone(now, began time.Time, err error) {
	m := d.Metrics
	took := time.Since(began)
	m.loopDuration.Observe(took.Seconds())
	for i, name := range d.clock.names {
		m.stageDuration.WithLabelValues(name).Observe(d.clock.took[i].Seconds())
	}
	if took > d.cfg.Interval && len(d.clock.names) > 0 {
		d.event(now, "slow", netip.Prefix{}, "interval took %s (the interval is %s): %s", took.Round(time.Millisecond), d.cfg.Interval, d.clock.largest(3))
	}
	if err == nil {
		m.lastInterval.Set(float64(now.UnixNano()) / 1e9)
	}
	if d.card.present() {
		n := d.card.occupancy()
		m.mu.Lock()
		m.hwEntries = n
		m.mu.Unlock()
	}
}

// countingTable is the hardware table as placement sees it, summing the
// per-rule counters of tables that keep them (tc flower) into per-verdict
// totals: rules come and go, and a Prometheus counter must only grow, so
// each reading adds what a rule gained since the last, and a removal adds
// its final counters.
type countingTable struct {
	tier.Table
	m *Metrics
}

// countHW wraps t for the metrics; nil stays nil.
func (m *Metrics) countHW(t tier.Table) tier.Table {
	if t == nil {
		return nil
	}
	return &countingTable{Table: t, m: m}
}

func hwVerdict(a tier.Action) string {
	if a == tier.Forward {
		return "hit_forward"
	}
	return "hit_drop"
}

func (t *countingTable) List(ctx context.Context) ([]tier.Entry, error) {
	es, err := t.Table.List(ctx)
	if err != nil {
		return es, err
	}
	m := t.m
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := make(map[tier.Match]tier.Counters, len(es))
	for _, e := range es {
		if !e.HasCounters {
			continue
		}
		m.addHW(e.Rule.Match, hwVerdict(e.Rule.Action), e.Counters)
		seen[e.Rule.Match] = e.Counters
	}
	m.hwRules = seen
	return es, nil
}

func (t *countingTable) Remove(ctx context.Context, mt tier.Match) (tier.Counters, time.Duration, error) {
	c, lat, err := t.Table.Remove(ctx, mt)
	if err == nil && t.Caps().Counters {
		m := t.m
		m.mu.Lock()
		m.addHW(mt, "hit_drop", c) // placement removes only source rules, which drop
		delete(m.hwRules, mt)
		m.mu.Unlock()
	}
	return c, lat, err
}

// addHW adds what rule mt counted since its last reading (all of cur when
// its counter went back: a new rule in a reused slot). Under m.mu.
func (m *Metrics) addHW(mt tier.Match, verdict string, cur tier.Counters) {
	prev := m.hwRules[mt]
	d := cur
	if cur.Packets >= prev.Packets && cur.Bytes >= prev.Bytes {
		d = tier.Counters{Packets: cur.Packets - prev.Packets, Bytes: cur.Bytes - prev.Bytes}
	}
	if m.hwTotal == nil {
		m.hwTotal = map[string]tier.Counters{}
	}
	t := m.hwTotal[verdict]
	t.Packets += d.Packets
	t.Bytes += d.Bytes
	m.hwTotal[verdict] = t
	if m.hwRules == nil {
		m.hwRules = map[tier.Match]tier.Counters{}
	}
	m.hwRules[mt] = cur
}

var (
	descPackets  = prometheus.NewDesc("tierwall_packets_total", "Packets per tier and verdict.", []string{"tier", "verdict"}, nil)
	descBytes    = prometheus.NewDesc("tierwall_bytes_total", "Bytes per tier and verdict (hardware: from the IP header on).", []string{"tier", "verdict"}, nil)
	descEntries  = prometheus.NewDesc("tierwall_map_entries", "Entries per table.", []string{"table"}, nil)
	descCapacity = prometheus.NewDesc("tierwall_map_capacity", "Capacity per table.", []string{"table"}, nil)
	descOverflow = prometheus.NewDesc("tierwall_feature_overflow_packets_total", "Packets not counted in features because a buffer region was full.", nil, nil)
	descBans     = prometheus.NewDesc("tierwall_active_bans", "Active bans per tier.", []string{"tier"}, nil)
	descUp       = prometheus.NewDesc("tierwall_bpf_read_ok", "1 when the last scrape read the BPF maps.", nil, nil)

	// Flow rules are few (capacity.flow_rules), so a label per rule is
	// bounded.
	descFRPackets = prometheus.NewDesc("tierwall_flow_rule_packets_total", "Packets a flow rule matched.", []string{"rule", "origin"}, nil)
	descFRDropped = prometheus.NewDesc("tierwall_flow_rule_dropped_packets_total", "Packets a flow rule dropped (drop, or over a rate limit).", []string{"rule", "origin"}, nil)
	descFRGood    = prometheus.NewDesc("tierwall_flow_rule_known_good_packets_total", "Packets a flow rule let through because their source is known good.", []string{"rule", "origin"}, nil)
)

// bpfCollector reads the data plane at scrape time.
type bpfCollector struct{ d *Daemon }

func (c *bpfCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPackets, descBytes, descEntries, descCapacity, descOverflow, descBans, descUp, descFRPackets, descFRDropped, descFRGood} {
		ch <- d
	}
}

func (c *bpfCollector) Collect(ch chan<- prometheus.Metric) {
	ok := 1.0
	s, err := c.d.dp.Stats()
	if err != nil {
		ok = 0
	} else {
		for v, n := range s.Verdicts {
			ch <- prometheus.MustNewConstMetric(descPackets, prometheus.CounterValue, float64(n.Packets), "xdp", v)
			ch <- prometheus.MustNewConstMetric(descBytes, prometheus.CounterValue, float64(n.Bytes), "xdp", v)
		}
		for t, o := range s.Tables {
			ch <- prometheus.MustNewConstMetric(descEntries, prometheus.GaugeValue, float64(o.Entries), t)
			ch <- prometheus.MustNewConstMetric(descCapacity, prometheus.GaugeValue, float64(o.Capacity), t)
		}
		ch <- prometheus.MustNewConstMetric(descOverflow, prometheus.CounterValue, float64(s.FeatureOverflow))
	}
	// The hardware tier is "nic" in every metric. A table that counts
	// every packet's verdict (the emulated NIC stage) reports those; one
	// with per-rule counters only (tc flower), their sums.
	m := c.d.Metrics
	if c.d.card.present() {
		if vt, isV := c.d.card.table.(tier.Verdicts); isV {
			if st, err := vt.Verdicts(); err == nil {
				for v, n := range st {
					ch <- prometheus.MustNewConstMetric(descPackets, prometheus.CounterValue, float64(n.Packets), "nic", v)
					ch <- prometheus.MustNewConstMetric(descBytes, prometheus.CounterValue, float64(n.Bytes), "nic", v)
				}
			} else {
				ok = 0
			}
		} else if c.d.card.table.Caps().Counters {
			m.mu.Lock()
			for _, v := range []string{"hit_drop", "hit_forward"} {
				n := m.hwTotal[v]
				ch <- prometheus.MustNewConstMetric(descPackets, prometheus.CounterValue, float64(n.Packets), "nic", v)
				ch <- prometheus.MustNewConstMetric(descBytes, prometheus.CounterValue, float64(n.Bytes), "nic", v)
			}
			m.mu.Unlock()
		}
		m.mu.Lock()
		entries := m.hwEntries
		m.mu.Unlock()
		ch <- prometheus.MustNewConstMetric(descEntries, prometheus.GaugeValue, float64(entries), "nic")
		ch <- prometheus.MustNewConstMetric(descCapacity, prometheus.GaugeValue, float64(c.d.card.table.Caps().Capacity), "nic")
	}
	c.d.mu.Lock()
	tiers := map[string]int{"xdp": 0, "nic": 0}
	for t, n := range c.d.tierCounts {
		if t == "hw" { // the ban store's name for the NIC tier
			t = "nic"
		}
		tiers[t] += n
	}
	frs := c.d.flowView
	c.d.mu.Unlock()
	for _, r := range frs {
		name := r.FlowRule.String()
		ch <- prometheus.MustNewConstMetric(descFRPackets, prometheus.CounterValue, float64(r.Counters.Packets), name, r.Origin)
		ch <- prometheus.MustNewConstMetric(descFRDropped, prometheus.CounterValue, float64(r.Counters.Dropped), name, r.Origin)
		ch <- prometheus.MustNewConstMetric(descFRGood, prometheus.CounterValue, float64(r.Counters.PassedKnownGood), name, r.Origin)
	}
	for t, n := range tiers {
		ch <- prometheus.MustNewConstMetric(descBans, prometheus.GaugeValue, float64(n), t)
	}
	ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, ok)
}
