// SPDX-License-Identifier: Apache-2.0

package evalkit

import (
	"net/netip"

	"github.com/tierwall/tierwall/internal/control/config"
	"github.com/tierwall/tierwall/internal/testbed/harness"
)

// CollectorConfig is what the experiments' flow collectors read
// (`tierwall-lab netcollect`, `tierwall-scaleout collect`): network mode,
// monitoring only (detection is measured, nothing is announced), on
// listen, from exporters, each host judged at pps. The interface is lo:
// the configuration requires one and a collector attaches nothing. One
// host group, none, outside every run's addresses, until the caller sets
// its own. The network it protects is the runs' (Protected), as
// FastNetMon's networks_list is in the side-by-side runs.
// Protected is the network the experiments' collectors protect: every
// victim, benign destination and ingest address of the runs is in it.
var Protected = netip.MustParsePrefix("198.18.0.0/18")

func CollectorConfig(listen string, exporters []config.TelemetryExporter, pps float64) *config.Config {
	c := harness.DaemonConfig("lo", "")
	c.HostGroups = []config.HostGroup{{Name: "none", Prefixes: []string{"198.18.63.0/24"}}}
	t := &c.Telemetry
	t.Enabled, t.Mode, t.Listen = true, "monitor", []string{listen}
	t.Exporters = exporters
	t.Networks = []string{Protected.String()}
	t.Thresholds = map[string]config.TelemetryLimits{"all": {PPS: pps}}
	return c
}
