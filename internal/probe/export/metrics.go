// SPDX-License-Identifier: Apache-2.0

package export

import "github.com/prometheus/client_golang/prometheus"

var (
	descQueued   = prometheus.NewDesc("tierwall_export_records_queued_total", "Flow records accepted for export.", nil, nil)
	descDropped  = prometheus.NewDesc("tierwall_export_records_dropped_total", "Flow records dropped before export: queue full or exporter closed.", nil, nil)
	descMessages = prometheus.NewDesc("tierwall_export_messages_total", "Export messages sent, per collector.", []string{"collector", "format"}, nil)
	descRecords  = prometheus.NewDesc("tierwall_export_data_records_total", "Data records in the messages sent, per collector.", []string{"collector", "format"}, nil)
	descBytes    = prometheus.NewDesc("tierwall_export_sent_bytes_total", "UDP payload bytes sent, per collector.", []string{"collector", "format"}, nil)
	descErrors   = prometheus.NewDesc("tierwall_export_send_errors_total", "Messages not sent (collector refused, timeout), per collector.", []string{"collector", "format"}, nil)
	descLost     = prometheus.NewDesc("tierwall_export_data_records_lost_total", "Data records in messages not sent, per collector.", []string{"collector", "format"}, nil)
)

// Collector returns a Prometheus collector of the exporter's counters,
// read at scrape time.
func (x *Exporter) Collector() prometheus.Collector { return metrics{x} }

type metrics struct{ x *Exporter }

func (m metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descQueued, descDropped, descMessages, descRecords, descBytes, descErrors, descLost} {
		ch <- d
	}
}

func (m metrics) Collect(ch chan<- prometheus.Metric) {
	st := m.x.Stats()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	counter(descQueued, st.Queued)
	counter(descDropped, st.Dropped)
	for _, c := range st.Collectors {
		counter(descMessages, c.Messages, c.Address, c.Format)
		counter(descRecords, c.Records, c.Address, c.Format)
		counter(descBytes, c.Bytes, c.Address, c.Format)
		counter(descErrors, c.SendErrors, c.Address, c.Format)
		counter(descLost, c.Lost, c.Address, c.Format)
	}
}
