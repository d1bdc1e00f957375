// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"testing"

	"github.com/tierwall/tierwall/internal/control/config"
)

// A host group's threshold reaches the per-victim detector through the
// daemon: 2 × 800 pps to a host of a group allowing 500 bans both sources
// (the static per-source limit is 1000, and a cold victim needs 50000),
// and the events name the group.
func TestHostGroupThresholdsReachTheDetectors(t *testing.T) {
	cfg := testConfig(t)
	cfg.Detectors.Victim.Enabled = true
	cfg.HostGroups = []config.HostGroup{{Name: "web", Prefixes: []string{"192.0.2.0/24"},
		Thresholds: config.HostGroupThresholds{PPS: 500}}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, cfg, false)
	h.dp.send(800, addrs(203, 0, 2)...)
	h.step(t)
	if h.d.store.Len() != 2 {
		t.Fatalf("%d bans, want the 2 sources", h.d.store.Len())
	}
	if !hasEvent(h.d, "ban", "host group web") {
		t.Errorf("no ban event naming the host group: %+v", h.d.events)
	}
	named := false
	for _, e := range h.d.events {
		named = named || e.HostGroup == "web"
	}
	if !named {
		t.Errorf("no event with hostgroup web: %+v", h.d.events)
	}
}
