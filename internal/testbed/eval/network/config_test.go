// SPDX-License-Identifier: Apache-2.0

package network

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/tierwall/tierwall/internal/testbed/harness"
)

// handWrittenConfig is netcollect's file as the experiment wrote it
// before its configuration was built from config.Config, with the
// network it protects since.
func handWrittenConfig(p Params, addr netip.AddrPort, cells []Cell) string {
	var b strings.Builder
	// The daemon's interface is required by the configuration; netcollect
	// attaches nothing.
	b.WriteString("interface: lo\nhostgroups:\n")
	var groups []string
	for _, c := range cells {
		if c.Kind == "carpet" {
			name := "carpet-" + strings.NewReplacer(".", "-", "/", "-").Replace(c.Victim)
			groups = append(groups, name)
			fmt.Fprintf(&b, "  - {name: %s, prefixes: [%s]}\n", name, c.Victim)
		}
	}
	if len(groups) == 0 {
		b.WriteString("  - {name: none, prefixes: [198.18.63.0/24]}\n")
	}
	fmt.Fprintf(&b, "telemetry:\n  enabled: true\n  mode: monitor\n  listen: [\"%s\"]\n  exporters:\n", addr)
	for i := range 101 {
		fmt.Fprintf(&b, "    - {address: 127.0.0.%d, name: r%d}\n", 1+i, i)
	}
	// Since telemetry.networks (2026-12-07): the run's network, as
	// FastNetMon's networks_list.
	b.WriteString("  networks: [198.18.0.0/18]\n")
	fmt.Fprintf(&b, "  thresholds:\n    all: {pps: %g}\n", p.Threshold)
	if len(groups) > 0 {
		b.WriteString("  groups:\n")
		for _, g := range groups {
			fmt.Fprintf(&b, "    %s: {total: {all: {pps: %g}}}\n", g, p.Threshold)
		}
	}
	return b.String()
}

// netcollect is configured as the file it was once written as, with the
// run's carpet bombings and without any.
func TestTierwallConfig(t *testing.T) {
	var p Params
	p.defaults()
	addr := netip.MustParseAddrPort("127.0.0.1:40000")
	cells := planCells(p)
	var plain []Cell
	carpets := 0
	for _, c := range cells {
		if c.Kind == "carpet" {
			carpets++
		} else {
			plain = append(plain, c)
		}
	}
	if carpets == 0 {
		t.Fatal("the run has no carpet bombing to make a host group of")
	}
	for _, cs := range [][]Cell{cells, plain} {
		want := handWrittenConfig(p, addr, cs)
		if err := harness.SameConfig(t.TempDir(), tierwallConfig(p, addr, cs), want); err != nil {
			t.Fatal(err)
		}
	}
}
