// SPDX-License-Identifier: Apache-2.0

package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestProbeRole(t *testing.T) {
	c, err := Parse([]byte("role: probe\ninterface: eth0\ndetectors:\n  rate: {enabled: false}\n  entropy: {enabled: false}\n" +
		"probe:\n  policy: {default: offload, dns: software, bittorrent: discard}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Probe.Mode != "passive" || c.Probe.DPI.Packets != 10 || c.Probe.Policy["dns"] != "software" {
		t.Fatalf("%+v", c.Probe)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"role: router\ninterface: eth0\n", "role: router"},
		{"role: probe\ninterface: eth0\nprobe: {mode: tap}\n", "probe.mode: tap"},
		{"role: probe\ninterface: eth0\nprobe: {mode: inline}\n", "probe.egress"},
		{"role: probe\ninterface: eth0\nprobe: {dpi: {packets: 33}}\n", "probe.dpi.packets: 33"},
		{"role: probe\ninterface: eth0\nprobe: {dpi: {engine: magic}}\n", "probe.dpi.engine: magic"},
		{"role: probe\ninterface: eth0\nprobe: {dpi: {ring_bytes: 5000}}\n", "probe.dpi.ring_bytes: 5000"},
		{"role: probe\ninterface: eth0\nprobe: {policy: {http: forward-to-mars}}\n", "forward-to-mars"},
		{"role: probe\ninterface: eth0\nprobe: {hardware: {backend: emulated}}\n", "probe.hardware.emulated"},
		{"role: probe\ninterface: eth0\nprobe: {mode: inline, egress: e1, hardware: {backend: emulated, emulated: {wire: w, host: h}}}\n", "twin"},
		{"role: probe\ninterface: eth0\nprobe: {timeouts: {idle: 0s}}\n", "probe.timeouts"},
		{"role: probe\ninterface: eth0\nprobe: {hardware: {passive_action: mirror}}\n", "probe.hardware.passive_action: mirror"},
		{"role: probe\ninterface: eth0\nprobe: {hardware: {backend: flower, passive_action: forward}}\n", "probe.hardware.passive_action: forward"},
		{"role: probe\ninterface: eth0\nprobe: {mode: inline, egress: e1, hardware: {passive_action: forward}}\n", "probe.hardware.passive_action"},
	} {
		_, err := Parse([]byte(tc.yaml))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an invalid-config error naming %q", tc.yaml, err, tc.want)
		}
	}
}

func TestDeployedProbeConfigParses(t *testing.T) {
	c, err := Load("../../../deploy/probe.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Role != RoleProbe || len(c.Probe.Export.Collectors) != 1 || c.Probe.Policy["dns"] != "software" {
		t.Fatalf("%+v", c.Probe)
	}
}

func TestProbeFlowerBackend(t *testing.T) {
	c, err := Parse([]byte("role: probe\ninterface: eth0\nprobe:\n  hardware:\n    backend: flower\n    idle_timeout: 10s\n" +
		"    flower: {iface: eth1, poll: 500ms}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if f := c.Probe.Hardware.Flower; f.Iface != "eth1" || f.Poll != 500*time.Millisecond || f.Capacity != 65536 {
		t.Fatalf("%+v", f)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"probe: {hardware: {backend: flower, flower: {capacity: 0}}}", "probe.hardware.flower.capacity: 0"},
		{"probe: {hardware: {backend: flower, flower: {capacity: 2000000}}}", "probe.hardware.flower.capacity: 2000000"},
		{"probe: {hardware: {backend: flower, flower: {poll: 1ms}}}", "probe.hardware.flower.poll: 1ms"},
		{"probe: {hardware: {backend: flower, idle_timeout: 2s, flower: {poll: 5s}}}", "shorter than probe.hardware.flower.poll 5s"},
		{"probe: {hardware: {backend: flower, lifetime: 1s, flower: {poll: 5s}}}", "lifetime=1s"},
		{"probe: {mode: inline, egress: e1, hardware: {backend: flower}}", "passive only"},
		{"probe: {hardware: {backend: napatech}}", "is not none, emulated or flower"},
	} {
		_, err := Parse([]byte("role: probe\ninterface: eth0\n" + tc.yaml + "\n"))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an invalid-config error naming %q", tc.yaml, err, tc.want)
		}
	}
}
