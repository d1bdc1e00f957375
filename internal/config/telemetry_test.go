// SPDX-License-Identifier: Apache-2.0

package config

import (
	"os"
	"strings"
	"testing"

	"github.com/tierwall/tierwall/internal/rule"
	"github.com/tierwall/tierwall/internal/telemetry"
)

const telemetryYAML = `interface: eth0
hostgroups:
  - name: customers
    prefixes: [198.51.100.0/24]
telemetry:
  enabled: true
  listen: ["127.0.0.1:6343"]
  mode: dry-run
  exporters:
    - {address: 192.0.2.1, name: edge1, sampling_rate: 1000}
  thresholds:
    all: {pps: 100000, bps: 1e9}
    syn: {pps: 20000}
    amp: {pps: 10000}
    "amp:53": {pps: 30000}
  groups:
    customers:
      total: {all: {pps: 200000}}
      uplink_bps: 10e9
  flowspec: {action: drop}
`

func TestTelemetryParse(t *testing.T) {
	c, err := ParseFile("tierwall.yaml", []byte(telemetryYAML))
	if err != nil {
		t.Fatal(err)
	}
	tc, err := c.TelemetryConfig()
	if err != nil {
		t.Fatal(err)
	}
	k53, _ := telemetry.ParseKind("amp:53")
	k123, _ := telemetry.ParseKind("amp:123")
	th := tc.Detector.Host
	if th[telemetry.KindAll].PPS != 100000 || th[telemetry.KindAll].BPS != 1e9 || th[telemetry.KindSYN].PPS != 20000 ||
		th[k53].PPS != 30000 || th[k123].PPS != 10000 {
		t.Errorf("thresholds %+v", th)
	}
	p := tc.Detector.Policies["customers"]
	if p.Total[telemetry.KindAll].PPS != 200000 || p.UplinkBPS != 10e9 || tc.Action.Mode != telemetry.DryRun ||
		tc.Action.FlowAction != rule.FlowDrop || tc.Decoder.Exporters[0].SamplingRate != 1000 || tc.Detector.Groups.Len() != 1 {
		t.Errorf("config %+v", tc)
	}
}

func TestTelemetryRefused(t *testing.T) {
	for bad, want := range map[string]string{
		"mode: dry-run":            "telemetry.mode",
		"syn: {pps: 20000}":        "telemetry.thresholds.bogus",
		"customers:":               "telemetry.groups.nobody",
		"address: 192.0.2.1,":      "telemetry.exporters[0].address",
		"flowspec: {action: drop}": "telemetry.flowspec.action",
	} {
		repl := map[string]string{
			"mode: dry-run":            "mode: sometimes",
			"syn: {pps: 20000}":        "bogus: {pps: 1}",
			"customers:":               "nobody:",
			"address: 192.0.2.1,":      "address: edge1,",
			"flowspec: {action: drop}": "flowspec: {action: redirect}",
		}[bad]
		y := strings.Replace(telemetryYAML, bad, repl, 1)
		if bad == "customers:" {
			y = strings.Replace(telemetryYAML, "    customers:\n", "    nobody:\n", 1)
		}
		_, err := ParseFile("tierwall.yaml", []byte(y))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s → %s: %v, want an error naming %s", bad, repl, err, want)
		}
	}
}

// The example configurations parse and build: deploy/network.yaml's
// network mode, and deploy/tierwall.yaml's section (off).
func TestTelemetryExamples(t *testing.T) {
	for _, f := range []string{"../../deploy/network.yaml", "../../deploy/tierwall.yaml"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		c, err := ParseFile(f, b)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if c.Telemetry.Enabled {
			tc, err := c.TelemetryConfig()
			if err != nil || len(tc.Decoder.Exporters) != 2 || tc.Action.Mode != telemetry.DryRun || tc.Detector.Policies["customers"].UplinkBPS != 10e9 {
				t.Errorf("%s: %v %+v", f, err, tc)
			}
		}
	}
}
