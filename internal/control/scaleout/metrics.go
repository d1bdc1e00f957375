// SPDX-License-Identifier: Apache-2.0

package scaleout

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics reads a collector's or a detector's counters at scrape time
// (the daemon registers it beside its own).
type Metrics struct {
	col *Collector
	j   *Judge
}

// NewCollectorMetrics and NewJudgeMetrics are the role's Prometheus
// collector.
func NewCollectorMetrics(c *Collector) *Metrics { return &Metrics{col: c} }

// NewJudgeMetrics: see NewCollectorMetrics.
func NewJudgeMetrics(j *Judge) *Metrics { return &Metrics{j: j} }

var (
	mPubAggs    = prometheus.NewDesc("tierwall_scaleout_published_aggregates_total", "Aggregates queued for publishing to the stream.", nil, nil)
	mPubMsgs    = prometheus.NewDesc("tierwall_scaleout_published_messages_total", "Messages handed to NATS.", nil, nil)
	mPubAcked   = prometheus.NewDesc("tierwall_scaleout_acked_messages_total", "Messages the stream stored.", nil, nil)
	mPubDropped = prometheus.NewDesc("tierwall_scaleout_dropped_aggregates_total", "Aggregates dropped: the publishing queue was full.", nil, nil)
	mPubErrors  = prometheus.NewDesc("tierwall_scaleout_publish_errors_total", "Publishes the server refused or never acknowledged.", nil, nil)
	mDatagrams  = prometheus.NewDesc("tierwall_scaleout_datagrams_total", "Telemetry datagrams the collector received from its exporters.", nil, nil)
	mRecords    = prometheus.NewDesc("tierwall_scaleout_records_total", "Flow samples and records the collector decoded.", nil, nil)
	mOverflow   = prometheus.NewDesc("tierwall_scaleout_overflow_records_total", "Records past the collector's max_destinations in a tick.", nil, nil)
	mConsMsgs   = prometheus.NewDesc("tierwall_scaleout_consumed_messages_total", "Messages merged into the detector.", nil, nil)
	mConsAggs   = prometheus.NewDesc("tierwall_scaleout_consumed_aggregates_total", "Aggregates merged into the detector.", nil, nil)
	mRefused    = prometheus.NewDesc("tierwall_scaleout_refused_total", "Messages or aggregates the detector refused, by reason.", []string{"reason"}, nil)
	mCollectors = prometheus.NewDesc("tierwall_scaleout_collectors", "Collectors the detector heard from.", nil, nil)
	mIfPub      = prometheus.NewDesc("tierwall_scaleout_published_interface_reports_total", "Interface reports (the exporters' sFlow counter samples) the collector published, by result.", []string{"result"}, nil)
	mIfReports  = prometheus.NewDesc("tierwall_scaleout_interface_reports_total", "Interface reports the detector read from its collectors.", nil, nil)
	mIfKept     = prometheus.NewDesc("tierwall_scaleout_reported_interfaces_total", "Interfaces in the reports read: uplinks of a host group (kept) or other (ignored).", []string{"kind"}, nil)
	mQuiet      = prometheus.NewDesc("tierwall_scaleout_quiet_collectors", "Collectors silent for a second while others report: their routers' share is missing from every rate.", nil, nil)
)

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{mPubAggs, mPubMsgs, mPubAcked, mPubDropped, mPubErrors, mDatagrams, mRecords, mOverflow,
		mConsMsgs, mConsAggs, mRefused, mCollectors, mQuiet, mIfPub, mIfReports, mIfKept} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: the role's series only.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	c := func(d *prometheus.Desc, v uint64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), l...)
	}
	if m.col != nil {
		st := m.col.Publisher().Stats()
		c(mPubAggs, st.Aggregates)
		c(mPubMsgs, st.Messages)
		c(mPubAcked, st.Acked)
		c(mPubDropped, st.Dropped)
		c(mPubErrors, st.Errors)
		var dg, rs uint64
		for _, e := range m.col.Decoder().Exporters() {
			dg += e.Datagrams
			rs += e.Records
		}
		c(mDatagrams, dg)
		c(mRecords, rs)
		over, _ := m.col.Partial().Overflow()
		c(mOverflow, over)
		sent, failed := m.col.InterfaceReports()
		c(mIfPub, sent, "sent")
		c(mIfPub, failed, "failed")
	}
	if m.j != nil {
		st := m.j.Consumer().Stats()
		c(mConsMsgs, st.Messages)
		c(mConsAggs, st.Aggregates)
		c(mRefused, st.Malformed, "malformed")
		c(mRefused, st.WrongTick, "wrong_tick")
		c(mRefused, st.Misrouted, "misrouted")
		c(mRefused, st.Invalid, "invalid")
		us := m.j.Uplinks().Stats()
		c(mRefused, us.Malformed, "malformed_interface_report")
		c(mIfReports, us.Reports)
		c(mIfKept, us.Interfaces, "uplink")
		c(mIfKept, us.Other, "other")
		ch <- prometheus.MustNewConstMetric(mCollectors, prometheus.GaugeValue, float64(len(m.j.Consumer().Collectors())))
		ch <- prometheus.MustNewConstMetric(mQuiet, prometheus.GaugeValue, float64(len(m.j.Quiet())))
	}
}
