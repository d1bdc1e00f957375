// SPDX-License-Identifier: Apache-2.0

package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// The testbed's daemon configurations as they were written by hand
// (internal/testbed: the demo, eval-spoof, eval-flows' probe,
// eval-network's and eval-scaleout's collectors), each read back from
// its marshalled form.
var testbedConfigs = map[string]string{
	"demo": `interface: tw-host
interval: 500ms
state_file: /run/tierwall-lab/state.json
log: {format: text, level: info}
capacity: {exact4: 65536, exact6: 4096, prefix: 4096, allow: 256, features: 65536}
hardware:
  backend: emulated
  capacity: 512
  max_rate_pps: 2000000
  emulated: {netns: tw-nic, wire: tw-wire, host: tw-hport}
detectors:
  rate: {enabled: true, learn_intervals: 10, margin: 1.5, min_pps: 100}
  entropy: {enabled: false}
  heavy: {enabled: true, window: 20ms, learned_factor: 3}
bans: {ttl: 10m, hold: 5s, unban_pps: 100}
rails:
  protected: [10.77.0.2/32]
api: {socket: /run/tierwall-lab/api.sock}
`,
	"spoof": `interface: tw-host
interval: 500ms
state_file: /tmp/x/state.json
capacity: {exact4: 65536, exact6: 4096, prefix: 4096, allow: 256, features: 262144, memory_mib: 1024}
api: {socket: /tmp/x/api.sock}
`,
	"flows": `role: probe
interface: twp-host
state_file: /tmp/f/state.json
log: {format: text, level: warn}
api:
  socket: /tmp/f/api.sock
probe:
  mode: inline
  egress: "twp-host1"
  capacity: 65536
  dpi: {engine: builtin, packets: 10, timeout: 2s, max_flows: 65536, ring_bytes: 16777216}
  timeouts: {idle: 5s, active: 120s, end_grace: 1s}
  policy: {default: offload}
  hardware:
    backend: emulated
    capacity: 65536
    learn_rate: 1000000
    learn_latency: 50us
    tcp_auto_unlearn: true
    idle_timeout: 5s
    emulated: {netns: twp-nic, wire: twp-wire, host: twp-hport, twin: "twp-twin", return: "twp-hret"}
  export:
    biflow: true
    queue_len: 1048576
    collectors: [{address: "10.9.0.1:4739", format: ipfix}]
`,
	"network": `interface: lo
hostgroups:
  - {name: carpet-198-18-5-0-24, prefixes: [198.18.5.0/24]}
telemetry:
  enabled: true
  mode: monitor
  listen: ["127.0.0.1:9995"]
  exporters:
    - {address: 127.0.0.1, name: r0}
    - {address: 127.0.0.2, name: r1}
  thresholds:
    all: {pps: 50000}
  groups:
    carpet-198-18-5-0-24: {total: {all: {pps: 50000}}}
`,
	"scaleout": `interface: lo
hostgroups:
  - {name: none, prefixes: [198.18.63.0/24]}
telemetry:
  enabled: true
  mode: monitor
  listen: ["127.0.0.1:6343"]
  exporters:
    - {address: 127.0.0.1, name: r}
  thresholds:
    all: {pps: 1e12}
`,
}

func TestMarshalRoundTrip(t *testing.T) {
	dir := t.TempDir()
	for name, src := range testbedConfigs {
		want, err := Parse([]byte(src))
		if err != nil {
			t.Fatalf("%s: the hand-written file: %v", name, err)
		}
		b, err := Marshal(want)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		path := filepath.Join(dir, name+".yaml")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := Load(path)
		if err != nil {
			t.Fatalf("%s: Load(Marshal(c)): %v\n%s", name, err, b)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: Load(Marshal(c)) differs from c:\n%s\n got  %+v\n want %+v", name, b, got, want)
		}
	}
}

func TestMarshalWritesOnlyWhatDiffers(t *testing.T) {
	c := Default()
	c.Interface = "eth0"
	c.Detectors.Entropy.Enabled = false // false is a value, not an absence
	b, err := Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	want := "interface: eth0\ndetectors:\n  entropy:\n    enabled: false\n"
	if string(b) != want {
		t.Errorf("Marshal:\n%s\nwant\n%s", b, want)
	}
	if b, err := Marshal(Default()); err != nil || strings.TrimSpace(string(b)) != "{}" {
		t.Errorf("Marshal(Default()) = %q, %v; want {}", b, err)
	}
}

func TestMarshalRefusesNilOverDefault(t *testing.T) {
	c := Default()
	c.Interface = "eth0"
	c.Probe.Hardware.Flower = FlowerFlowNIC{}
	if _, err := Marshal(c); err != nil {
		t.Fatalf("a zeroed struct is a value: %v", err)
	}
	n := 5
	d := Default()
	d.Nice = &n
	if v, err := diffNode(reflect.ValueOf(*Default()), reflect.ValueOf(*d), ""); !errors.Is(err, ErrInvalid) {
		t.Errorf("nil over a default pointer: %v, %v; want ErrInvalid", v, err)
	}
}
