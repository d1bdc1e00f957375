// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tierwall/tierwall/internal/control/kernel"
)

var descKernelFeature = prometheus.NewDesc("tierwall_kernel_feature",
	"1 when the running kernel has the feature, 0 when the part that needs it is off (tierwall doctor says which).",
	[]string{"feature", "release"}, nil)

// checkKernel probes the kernel once at start: a missing feature turns
// its part off with a warning naming it, never a failed start (the SYN
// proxy without nf_conntrack leaves syn-cookie rules to the kernel's own
// SYN cookies). The result is exported as tierwall_kernel_feature.
func (d *Daemon) checkKernel(log *slog.Logger) {
	d.kernelFeatures = kernel.Features()
	for _, f := range d.kernelFeatures {
		if !f.OK {
			log.Warn("kernel feature missing: its part is off", "feature", f.Name, "needed_by", f.For, "detail", f.Detail, "release", kernel.Release())
		}
	}
	d.Metrics.Registry.MustRegister(&kernelCollector{fs: d.kernelFeatures, release: kernel.Release()})
}

type kernelCollector struct {
	fs      []kernel.Feature
	release string
}

func (c *kernelCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descKernelFeature }

func (c *kernelCollector) Collect(ch chan<- prometheus.Metric) {
	for _, f := range c.fs {
		v := 0.0
		if f.OK {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(descKernelFeature, prometheus.GaugeValue, v, f.Name, c.release)
	}
}
