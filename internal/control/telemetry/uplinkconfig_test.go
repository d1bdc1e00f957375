// SPDX-License-Identifier: Apache-2.0

package telemetry_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/tierwall/tierwall/internal/control/config"
	"github.com/tierwall/tierwall/internal/control/telemetry"
)

// The configuration's telemetry.groups.NAME.uplinks, by exporter name
// or address: resolved to the exporter's address, or refused with the
// field named. (Here rather than in package config: the uplinks are
// this package's feature; config only resolves them.)
func TestUplinksConfig(t *testing.T) {
	const base = `interface: eth0
hostgroups:
  - {name: customers, prefixes: [198.51.100.0/24]}
telemetry:
  enabled: true
  exporters:
    - {address: 192.0.2.1, name: edge1}
    - {address: 192.0.2.2}
  thresholds: {all: {pps: 100000}}
  groups:
    customers:
      communities: ["64500:666"]
      uplinks: `
	c, err := config.ParseFile("tierwall.yaml", []byte(base+`[{exporter: edge1, if_index: 3}, {exporter: 192.0.2.2, if_index: 7}]`))
	if err != nil {
		t.Fatal(err)
	}
	tc, err := c.TelemetryConfig()
	if err != nil {
		t.Fatal(err)
	}
	want := []telemetry.Uplink{{Exporter: netip.MustParseAddr("192.0.2.1"), IfIndex: 3}, {Exporter: netip.MustParseAddr("192.0.2.2"), IfIndex: 7}}
	got := tc.Action.Policies["customers"].Uplinks
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] || tc.Action.Policies["customers"].UplinkBPS != 0 || len(tc.Action.RTBH["customers"].Standard) != 1 {
		t.Errorf("policy %+v, RTBH %+v", tc.Action.Policies["customers"], tc.Action.RTBH)
	}
	for _, c := range []struct{ ups, want string }{
		{`[{exporter: edge9, if_index: 3}]`, "uplinks[0].exporter"},
		{`[{exporter: edge1}]`, "uplinks[0].if_index"},
		{`[{exporter: edge1, if_index: 3}, {exporter: 192.0.2.1, if_index: 3}]`, "uplinks[1]"},
	} {
		cfg, err := config.ParseFile("tierwall.yaml", []byte(base+c.ups))
		if err == nil {
			_, err = cfg.TelemetryConfig()
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("uplinks %s: %v, want an error on %s", c.ups, err, c.want)
		}
	}
}
