// SPDX-License-Identifier: Apache-2.0

package probed

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tierwall/tierwall/internal/probe/flow"
	"github.com/tierwall/tierwall/internal/probe/flowprobe"
)

var (
	descMarks      = prometheus.NewDesc("tierwall_flow_packets_total", "Packets that reached the host's flow tier, by the NIC's mark (hit, miss, unhandled, none).", []string{"mark"}, nil)
	descRefused    = prometheus.NewDesc("tierwall_flow_refused_total", "New flows the software flow table refused (full).", nil, nil)
	descUntracked  = prometheus.NewDesc("tierwall_flow_untracked_packets_total", "Packets not tracked: refused flows, fragments, non-IP.", nil, nil)
	descDPILost    = prometheus.NewDesc("tierwall_flow_dpi_queue_drops_total", "DPI samples the ring buffer refused.", nil, nil)
	descEntries    = prometheus.NewDesc("tierwall_flow_table_entries", "Flows per tier.", []string{"tier"}, nil)
	descCapacity   = prometheus.NewDesc("tierwall_flow_table_capacity", "Flow table capacity per tier.", []string{"tier"}, nil)
	descLearns     = prometheus.NewDesc("tierwall_flow_learns_total", "Learn requests and their outcomes.", []string{"result"}, nil)
	descLatency    = prometheus.NewDesc("tierwall_flow_learn_latency_seconds", "From a learn request to the NIC's learn-done.", nil, nil)
	descEvents     = prometheus.NewDesc("tierwall_flow_unlearned_total", "Flows the NIC unlearned, by cause.", []string{"cause"}, nil)
	descRecords    = prometheus.NewDesc("tierwall_flow_records_total", "Flow records, by end reason.", []string{"reason"}, nil)
	descClassified = prometheus.NewDesc("tierwall_flow_classified_total", "Flows classified, by application.", []string{"app"}, nil)
	descDPI        = prometheus.NewDesc("tierwall_flow_dpi_total", "DPI outcomes besides a verdict.", []string{"outcome"}, nil)
	descInDPI      = prometheus.NewDesc("tierwall_flow_in_dpi", "Flows waiting for a DPI verdict.", nil, nil)
	descUp         = prometheus.NewDesc("tierwall_flow_read_ok", "1 when the last scrape read the software flow tier.", nil, nil)
)

// collector reads the tiers at scrape time and the engine's counters as of
// its last step.
type collector struct{ p *Probed }

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descMarks, descRefused, descUntracked, descDPILost, descEntries, descCapacity,
		descLearns, descLatency, descEvents, descRecords, descClassified, descDPI, descInDPI, descUp} {
		ch <- d
	}
}

func counter(ch chan<- prometheus.Metric, d *prometheus.Desc, v uint64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
}

func gauge(ch chan<- prometheus.Metric, d *prometheus.Desc, v int, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	st, err := c.p.Status()
	if err != nil {
		gauge(ch, descUp, 0)
	} else {
		gauge(ch, descUp, 1)
		for m := flow.Mark(0); m < flow.NumMarks; m++ {
			counter(ch, descMarks, st.Software.Packets[m], m.String())
		}
		counter(ch, descRefused, st.Software.Refused)
		counter(ch, descUntracked, st.Software.Untracked)
		counter(ch, descDPILost, st.Software.DPILost)
		gauge(ch, descEntries, st.Software.Flows, "software")
		gauge(ch, descCapacity, st.Software.Capacity, "software")
		if st.NIC != nil {
			gauge(ch, descEntries, st.NIC.Occupancy, "nic")
			gauge(ch, descCapacity, st.NIC.Caps.Capacity, "nic")
		}
	}
	e := c.p.Engine.Stats()
	for result, v := range map[string]uint64{"requested": e.LearnRequests, "done": e.LearnDone, "failed": e.LearnFailed,
		"table_full": e.LearnTableFull, "ignored": e.LearnIgnored, "queue_full": e.LearnQueueFull, "stale": e.LearnStale} {
		counter(ch, descLearns, v, result)
	}
	buckets := map[float64]uint64{}
	var cum uint64
	for i, b := range flowprobe.LatencyBuckets {
		cum += e.LearnLatency[i]
		buckets[b.Seconds()] = cum
	}
	ch <- prometheus.MustNewConstHistogram(descLatency, e.LearnLatencyN, e.LearnLatencySum.Seconds(), buckets)
	for cause, v := range e.Unlearned {
		counter(ch, descEvents, v, cause.String())
	}
	for r, v := range e.RecordsByReason {
		counter(ch, descRecords, v, r.String())
	}
	for app, v := range e.Classified {
		counter(ch, descClassified, v, app)
	}
	counter(ch, descDPI, e.DPIGiveups, "giveup")
	counter(ch, descDPI, e.DPISkipped, "skipped")
	counter(ch, descDPI, e.SamplesLate, "late_sample")
	counter(ch, descDPI, e.Orphans, "orphan")
	gauge(ch, descInDPI, e.InDPI)
}
