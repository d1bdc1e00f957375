// SPDX-License-Identifier: Apache-2.0

package telemetry

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

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
	mReorder  = prometheus.NewDesc("tierwall_telemetry_sequence_reordered_total", "Of the sequence gaps, datagrams or records that came after all, behind a later one: late, not lost.", exLabels, nil)
	mResets   = prometheus.NewDesc("tierwall_telemetry_sequence_resets_total", "Times the exporter's sequence numbers went back (a restart).", exLabels, nil)
	mLossScl  = prometheus.NewDesc("tierwall_telemetry_loss_scale", "What the exporter's records are scaled by for the loss its sequence numbers showed over the last 1-2 s (1: none; at most 2).", exLabels, nil)
	mTmpl     = prometheus.NewDesc("tierwall_telemetry_templates", "NetFlow v9 and IPFIX templates held for the exporter.", exLabels, nil)
	mTmplRef  = prometheus.NewDesc("tierwall_telemetry_templates_refused_total", "Templates refused: past the per-exporter cap, or unusable.", exLabels, nil)
	mNoTmpl   = prometheus.NewDesc("tierwall_telemetry_no_template_total", "Data sets that arrived before their template.", exLabels, nil)
	mRate     = prometheus.NewDesc("tierwall_telemetry_sampling_rate", "Sampling rate last applied to the exporter's records (1 in N).", exLabels, nil)
	mMismatch = prometheus.NewDesc("tierwall_telemetry_sampling_rate_mismatches_total", "Records whose datagram's sampling rate differed from the configured one.", exLabels, nil)
	mLast     = prometheus.NewDesc("tierwall_telemetry_last_seen_timestamp_seconds", "When the exporter's last datagram arrived.", exLabels, nil)
	mUnknown  = prometheus.NewDesc("tierwall_telemetry_unknown_datagrams_total", "Datagrams from exporters not configured (ignored): the 1 in 1,024 of them the socket's filter lets through.", nil, nil)
	mUntrack  = prometheus.NewDesc("tierwall_telemetry_untracked_records_total", "Records to destinations past the detector's max_destinations (counted in their group only).", nil, nil)
	mOutside  = prometheus.NewDesc("tierwall_telemetry_outside_records_total", "Records to destinations outside the protected network (telemetry.networks, or the host groups' prefixes), judged nowhere.", nil, nil)
	mAttacks  = prometheus.NewDesc("tierwall_telemetry_attacks", "Attacks the feed shows now.", nil, nil)
	mPlan     = prometheus.NewDesc("tierwall_telemetry_actions", "Upstream actions planned now, by kind.", []string{"kind"}, nil)

	// Per interface of a configured exporter, from its sFlow counter
	// samples: the labels are bounded by the exporters configured and
	// the interface tables' bounds (max_interfaces each).
	ifLabels   = []string{"exporter", "ifindex"}
	dirLabels  = []string{"exporter", "ifindex", "direction"}
	mIfRefused = prometheus.NewDesc("tierwall_telemetry_interfaces_refused_total", "sFlow counter samples of interfaces past the interface tables' bounds (not kept).", exLabels, nil)
	mIfSpeed   = prometheus.NewDesc("tierwall_telemetry_interface_speed_bps", "The interface's ifSpeed from its sFlow counter samples (bits/s; 0: unknown).", ifLabels, nil)
	mIfUp      = prometheus.NewDesc("tierwall_telemetry_interface_up", "Whether the interface is operationally up (sFlow ifStatus).", ifLabels, nil)
	mIfResets  = prometheus.NewDesc("tierwall_telemetry_interface_counter_resets_total", "sFlow counter samples whose counters went back or implied more than the interface carries (no rate across them).", ifLabels, nil)
	mIfOctets  = prometheus.NewDesc("tierwall_telemetry_interface_octets_total", "The interface's octet counter as the agent last sent it, by direction.", dirLabels, nil)
	mIfPackets = prometheus.NewDesc("tierwall_telemetry_interface_packets_total", "The interface's packet counters (unicast, multicast, broadcast) as the agent last sent them, by direction.", dirLabels, nil)
	mIfErrors  = prometheus.NewDesc("tierwall_telemetry_interface_errors_total", "The interface's error counter as the agent last sent it, by direction.", dirLabels, nil)
	mIfDiscard = prometheus.NewDesc("tierwall_telemetry_interface_discards_total", "The interface's discard counter as the agent last sent it, by direction.", dirLabels, nil)
	mIfBPS     = prometheus.NewDesc("tierwall_telemetry_interface_bits_per_second", "The interface's bit rate between its last two counter samples, by direction.", dirLabels, nil)
	mIfUtil    = prometheus.NewDesc("tierwall_telemetry_interface_utilisation_ratio", "The interface's bit rate over its ifSpeed (0: unknown), by direction.", dirLabels, nil)
	mCapacity  = prometheus.NewDesc("tierwall_telemetry_uplink_capacity_bps", "The host group's uplink capacity RTBH is judged against (configured, or the uplinks' ifSpeed; 0: never RTBH).", []string{"group"}, nil)
)

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	ExporterMetrics{m.s.dec}.Describe(ch)
	for _, d := range []*prometheus.Desc{mUntrack, mOutside, mAttacks, mPlan, mCapacity} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	ExporterMetrics{m.s.dec}.Collect(ch)
	c := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, l...)
	}
	g := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	c(mUntrack, float64(m.s.det.Untracked()))
	c(mOutside, float64(m.s.det.Outside()))
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
	_, caps := m.s.capacities(m.s.action, time.Now())
	m.s.mu.Unlock()
	for _, gu := range caps {
		g(mCapacity, gu.CapacityBPS, gu.Group)
	}
	for k, v := range kinds {
		g(mPlan, float64(v), string(k))
	}
}

// CapacityMetrics serves the host groups' uplink capacities
// (tierwall_telemetry_uplink_capacity_bps) where no Service runs: a
// scale-out detector, whose capacities come from its collectors'
// interface reports.
type CapacityMetrics struct{ Caps func() []GroupUplinks }

// Describe implements prometheus.Collector.
func (m CapacityMetrics) Describe(ch chan<- *prometheus.Desc) { ch <- mCapacity }

// Collect implements prometheus.Collector.
func (m CapacityMetrics) Collect(ch chan<- prometheus.Metric) {
	for _, gu := range m.Caps() {
		ch <- prometheus.MustNewConstMetric(mCapacity, prometheus.GaugeValue, gu.CapacityBPS, gu.Group)
	}
}

// ExporterMetrics is the decoder's share of the metrics: one series per
// configured exporter (datagrams, records, errors, gaps, templates, the
// sampling rate, last seen, the interfaces of its counter samples) and the
// datagrams of exporters not configured. Network mode's collector and the
// scale-out collector role both serve it.
type ExporterMetrics struct{ Dec *Decoder }

// Describe implements prometheus.Collector.
func (m ExporterMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{mDatagram, mRecords, mCounters, mErrors, mGaps, mReorder, mResets, mLossScl, mTmpl, mTmplRef, mNoTmpl, mRate, mMismatch, mLast, mUnknown,
		mIfRefused, mIfSpeed, mIfUp, mIfResets, mIfOctets, mIfPackets, mIfErrors, mIfDiscard, mIfBPS, mIfUtil} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (m ExporterMetrics) Collect(ch chan<- prometheus.Metric) {
	c := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, l...)
	}
	g := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	for _, e := range m.Dec.Exporters() {
		a := e.Address.String()
		c(mDatagram, float64(e.Datagrams), a)
		c(mRecords, float64(e.Records), a)
		c(mCounters, float64(e.Counters), a)
		c(mErrors, float64(e.DecodeErrors), a)
		c(mGaps, float64(e.SequenceGaps), a)
		c(mReorder, float64(e.Reordered), a)
		c(mResets, float64(e.Resets), a)
		g(mLossScl, e.LossScale, a)
		g(mTmpl, float64(e.Templates), a)
		c(mTmplRef, float64(e.TemplatesRefused), a)
		c(mNoTmpl, float64(e.NoTemplate), a)
		g(mRate, float64(e.SamplingRate), a)
		c(mMismatch, float64(e.RateMismatches), a)
		if !e.LastSeen.IsZero() {
			g(mLast, float64(e.LastSeen.UnixNano())/1e9, a)
		}
		c(mIfRefused, float64(e.InterfacesRefused), a)
		for _, x := range e.Interfaces {
			i := strconv.FormatUint(uint64(x.IfIndex), 10)
			g(mIfSpeed, float64(x.SpeedBPS), a, i)
			g(mIfUp, b2f(x.OperUp), a, i)
			c(mIfResets, float64(x.Resets), a, i)
			for _, d := range []struct {
				dir                 string
				oct, pkt, bps, util float64
				errs, discards      uint32
			}{{"in", float64(x.InOctets), float64(x.InPackets), x.InBPS, x.InUtilisation, x.InErrors, x.InDiscards},
				{"out", float64(x.OutOctets), float64(x.OutPackets), x.OutBPS, x.OutUtilisation, x.OutErrors, x.OutDiscards}} {
				c(mIfOctets, d.oct, a, i, d.dir)
				c(mIfPackets, d.pkt, a, i, d.dir)
				c(mIfErrors, float64(d.errs), a, i, d.dir)
				c(mIfDiscard, float64(d.discards), a, i, d.dir)
				g(mIfBPS, d.bps, a, i, d.dir)
				g(mIfUtil, d.util, a, i, d.dir)
			}
		}
	}
	n, _ := m.Dec.Unknown()
	c(mUnknown, float64(n))
}
