package daemon

import (
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
	refused          prometheus.Counter
	mergeFallback    prometheus.Counter
	placementUpdates prometheus.Counter
	detectToDrop     prometheus.Histogram
	hwLatency        prometheus.Histogram
	victimsAttacked  prometheus.Gauge
	mitigations      *prometheus.CounterVec
	flowRules        prometheus.Gauge
	knownGood        prometheus.Gauge
}

func newMetrics(d *Daemon) *Metrics {
	m := &Metrics{Registry: prometheus.NewRegistry()}
	m.detections = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tierwall_detections_total", Help: "Detections, by detector."}, []string{"detector"})
	m.bans = prometheus.NewCounter(prometheus.CounterOpts{Name: "tierwall_bans_total", Help: "Bans applied."})
	m.unbans = prometheus.NewCounter(prometheus.CounterOpts{Name: "tierwall_unbans_total", Help: "Bans lifted (rate monitor or expiry)."})
	m.refused = prometheus.NewCounter(prometheus.CounterOpts{Name: "tierwall_bans_refused_total", Help: "Detections the safety rails refused."})
	m.mergeFallback = prometheus.NewCounter(prometheus.CounterOpts{Name: "tierwall_snapshot_merge_fallback_keys_total",
		Help: "Feature keys merged through the slow path because their probe run was too long (colliding keys: a hash-flooding attempt or bad luck)."})
	m.placementUpdates = prometheus.NewCounter(prometheus.CounterOpts{Name: "tierwall_placement_updates_total", Help: "Hardware rule installs and removals made by placement."})
	m.detectToDrop = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tierwall_detection_to_drop_seconds",
		Help:    "From the start of the interval a banned source first appeared in to its ban being applied.",
		Buckets: []float64{0.05, 0.1, 0.2, 0.5, 1, 2, 3, 5, 10, 30}})
	m.hwLatency = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tierwall_hw_update_latency_seconds",
		Help: "Measured latency of one hardware rule update.", Buckets: prometheus.ExponentialBuckets(0.0001, 2, 14)})
	m.victimsAttacked = prometheus.NewGauge(prometheus.GaugeOpts{Name: "tierwall_victims_under_attack", Help: "Destinations the per-victim detector judged attacked in the last interval."})
	m.mitigations = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tierwall_mitigations_total", Help: "Mitigations the ladder chose, by rung."}, []string{"rung"})
	m.flowRules = prometheus.NewGauge(prometheus.GaugeOpts{Name: "tierwall_flow_rules", Help: "Flow rules in the data plane."})
	m.knownGood = prometheus.NewGauge(prometheus.GaugeOpts{Name: "tierwall_known_good_sources", Help: "Sources on the data plane's known-good list."})
	m.Registry.MustRegister(m.detections, m.bans, m.unbans, m.refused, m.mergeFallback, m.placementUpdates, m.detectToDrop, m.hwLatency,
		m.victimsAttacked, m.mitigations, m.flowRules, m.knownGood,
		&bpfCollector{d}, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
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
	if vt, isV := c.d.hw.(tier.Verdicts); isV {
		if st, err := vt.Verdicts(); err == nil {
			for v, n := range st {
				ch <- prometheus.MustNewConstMetric(descPackets, prometheus.CounterValue, float64(n.Packets), "nic", v)
				ch <- prometheus.MustNewConstMetric(descBytes, prometheus.CounterValue, float64(n.Bytes), "nic", v)
			}
		} else {
			ok = 0
		}
	}
	if c.d.hw != nil {
		ch <- prometheus.MustNewConstMetric(descCapacity, prometheus.GaugeValue, float64(c.d.hw.Caps().Capacity), "hw")
	}
	c.d.mu.Lock()
	tiers := map[string]int{"xdp": 0, "hw": 0}
	for t, n := range c.d.tierCounts {
		tiers[t] = n
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
