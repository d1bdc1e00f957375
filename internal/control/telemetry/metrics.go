// SPDX-License-Identifier: Apache-2.0

package telemetry

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics reads the decoder's and detector's counters at scrape time, one
// series per configured exporter.
type Metrics struct{ s *Service }

// NewMetrics is the service's Prometheus collector.
func NewMetrics(s *Service) *Metrics { return &Metrics{s: s} }

var (
	exLabels  = []string{"exporter"}
	mDatagram = prometheus.NewDesc("tierwall_telemetry_datagrams_total", "Telemetry datagrams received from the exporter.", exLabels, nil)
	mRecords  = prometheus.NewDesc("tierwall_telemetry_records_total", "Flow samples and flow records decoded from the exporter.", exLabels, nil)
	mCounters = prometheus.NewDesc("tierwall_telemetry_counter_samples_total", "sFlow counter samples received from the exporter.", exLabels, nil)
	mErrors   = prometheus.NewDesc("tierwall_telemetry_decode_errors_total", "Datagrams from the exporter that did not decode, whole or in part.", exLabels, nil)
	mGaps     = prometheus.NewDesc("tierwall_telemetry_sequence_gaps_total", "Datagrams (sFlow, NetFlow v9) or records (NetFlow v5, IPFIX) the exporter's sequence numbers say were lost.", exLabels, nil)
	mResets   = prometheus.NewDesc("tierwall_telemetry_sequence_resets_total", "Times the exporter's sequence numbers went back (a restart).", exLabels, nil)
	mTmpl     = prometheus.NewDesc("tierwall_telemetry_templates", "NetFlow v9 and IPFIX templates held for the exporter.", exLabels, nil)
	mTmplRef  = prometheus.NewDesc("tierwall_telemetry_templates_refused_total", "Templates refused: past the per-exporter cap, or unusable.", exLabels, nil)
	mNoTmpl   = prometheus.NewDesc("tierwall_telemetry_no_template_total", "Data sets that arrived before their template.", exLabels, nil)
	mRate     = prometheus.NewDesc("tierwall_telemetry_sampling_rate", "Sampling rate last applied to the exporter's records (1 in N).", exLabels, nil)
	mMismatch = prometheus.NewDesc("tierwall_telemetry_sampling_rate_mismatches_total", "Records whose datagram's sampling rate differed from the configured one.", exLabels, nil)
	mLast     = prometheus.NewDesc("tierwall_telemetry_last_seen_timestamp_seconds", "When the exporter's last datagram arrived.", exLabels, nil)
	mUnknown  = prometheus.NewDesc("tierwall_telemetry_unknown_datagrams_total", "Datagrams from exporters not configured (ignored).", nil, nil)
	mUntrack  = prometheus.NewDesc("tierwall_telemetry_untracked_records_total", "Records to destinations past the detector's max_destinations (counted in their group only).", nil, nil)
	mAttacks  = prometheus.NewDesc("tierwall_telemetry_attacks", "Attacks the feed shows now.", nil, nil)
	mPlan     = prometheus.NewDesc("tierwall_telemetry_actions", "Upstream actions planned now, by kind.", []string{"kind"}, nil)
)

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{mDatagram, mRecords, mCounters, mErrors, mGaps, mResets, mTmpl, mTmplRef, mNoTmpl, mRate, mMismatch, mLast, mUnknown, mUntrack, mAttacks, mPlan} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	c := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, l...)
	}
	g := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	for _, e := range m.s.dec.Exporters() {
		a := e.Address.String()
		c(mDatagram, float64(e.Datagrams), a)
		c(mRecords, float64(e.Records), a)
		c(mCounters, float64(e.Counters), a)
		c(mErrors, float64(e.DecodeErrors), a)
		c(mGaps, float64(e.SequenceGaps), a)
		c(mResets, float64(e.Resets), a)
		g(mTmpl, float64(e.Templates), a)
		c(mTmplRef, float64(e.TemplatesRefused), a)
		c(mNoTmpl, float64(e.NoTemplate), a)
		g(mRate, float64(e.SamplingRate), a)
		c(mMismatch, float64(e.RateMismatches), a)
		if !e.LastSeen.IsZero() {
			g(mLast, float64(e.LastSeen.UnixNano())/1e9, a)
		}
	}
	n, _ := m.s.dec.Unknown()
	c(mUnknown, float64(n))
	c(mUntrack, float64(m.s.det.Untracked()))
	on := 0
	for _, a := range m.s.det.Attacks() {
		if a.Ended.IsZero() {
			on++
		}
	}
	g(mAttacks, float64(on))
	m.s.mu.Lock()
	kinds := map[UpstreamKind]int{UpFlowSpec: 0, UpRTBH: 0}
	for _, u := range m.s.plan {
		kinds[u.Kind]++
	}
	m.s.mu.Unlock()
	for k, v := range kinds {
		g(mPlan, float64(v), string(k))
	}
}
