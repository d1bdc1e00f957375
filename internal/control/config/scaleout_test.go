// SPDX-License-Identifier: Apache-2.0

package config

import (
	"errors"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/control/scaleout"
	"github.com/tierwall/tierwall/internal/control/telemetry"
)

const collectorYAML = `role: network
hostgroups:
  - name: customers
    prefixes: [198.51.100.0/24]
telemetry:
  enabled: true
  listen: ["127.0.0.1:6343"]
  exporters:
    - {address: 192.0.2.1, name: edge1}
  scaleout:
    role: collector
    nats: nats://10.0.0.5:4222
    name: col-1
    partitions: 8
`

const detectorYAML = `role: network
hostgroups:
  - name: customers
    prefixes: [198.51.100.0/24]
telemetry:
  enabled: true
  mode: enforce
  thresholds:
    all: {pps: 100000}
  scaleout:
    role: detector
    nats: nats://10.0.0.5:4222,nats://10.0.0.6:4222
    partitions: 8
    owned: "0-3,6"
    stream: AGG
    subject: tw.agg
    max_age: 1m
    replay: 5s
`

// Role network takes no interface, and each scale-out role resolves to
// its side of package scaleout: the collector's publisher, the
// detector's owned partitions, with the partitioner both share.
func TestScaleoutRoles(t *testing.T) {
	c, err := ParseFile("tierwall.yaml", []byte(collectorYAML))
	if err != nil {
		t.Fatal(err)
	}
	sc, err := c.ScaleoutConfig()
	if err != nil {
		t.Fatal(err)
	}
	if c.Role != RoleNetwork || c.Interface != "" || sc.Role != ScaleoutCollector || sc.URL != "nats://10.0.0.5:4222" ||
		sc.Publisher.Name != "col-1" || sc.Publisher.Partitioner.N != 8 || sc.Publisher.Partitioner.Groups.Len() != 1 {
		t.Errorf("collector %+v", sc)
	}
	c, err = ParseFile("tierwall.yaml", []byte(detectorYAML))
	if err != nil {
		t.Fatal(err)
	}
	if sc, err = c.ScaleoutConfig(); err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	d := sc.Detector
	if sc.Role != ScaleoutDetector || sc.Name != host || !slices.Equal(d.Owned, []int{0, 1, 2, 3, 6}) || d.Partitioner.N != 8 ||
		d.Stream.Name != "AGG" || d.Stream.Subject != "tw.agg" || d.Stream.MaxAge != time.Minute || d.Replay != 5*time.Second {
		t.Errorf("detector %+v", sc)
	}
	// A detector listens to no router: no exporters needed.
	tc, err := c.TelemetryConfig()
	if err != nil || len(tc.Listen) != 0 {
		t.Errorf("detector's network mode: %v, listen %v", err, tc.Listen)
	}
	// Without the section: one process, as before.
	c, err = ParseFile("tierwall.yaml", []byte(telemetryYAML))
	if err != nil {
		t.Fatal(err)
	}
	if sc, err := c.ScaleoutConfig(); err != nil || sc.Role != "" {
		t.Errorf("no scaleout: %+v %v", sc, err)
	}
}

// Every bad value is refused with its field (ErrInvalid, so that run
// --check and run exit non-zero), before anything starts.
func TestScaleoutRefused(t *testing.T) {
	for _, tc := range []struct {
		base, from, to, field string
	}{
		{collectorYAML, "role: collector", "role: judge", "telemetry.scaleout.role"},
		{collectorYAML, "    role: collector\n", "", "telemetry.scaleout.role"},
		{collectorYAML, "nats: nats://10.0.0.5:4222", "nats: ''", "telemetry.scaleout.nats"},
		{collectorYAML, "nats: nats://10.0.0.5:4222", "nats: http://10.0.0.5:4222", "telemetry.scaleout.nats"},
		{collectorYAML, "nats: nats://10.0.0.5:4222", "nats: 10.0.0.5", "telemetry.scaleout.nats"},
		{collectorYAML, "partitions: 8", "partitions: 70000", "telemetry.scaleout.partitions"},
		{collectorYAML, "partitions: 8", "partitions: 8\n    tls: {ca: /etc/tierwall/ca.pem, cert: /etc/tierwall/col.pem}", "telemetry.scaleout.tls"},
		{collectorYAML, "partitions: 8", "partitions: 8\n    tls: {ca: ca.pem}", "telemetry.scaleout.tls.ca"},
		{collectorYAML, "partitions: 8", "partitions: 8\n    credentials: col.creds", "telemetry.scaleout.credentials"},
		{collectorYAML, "partitions: 8", "partitions: -1", "telemetry.scaleout.partitions"},
		{collectorYAML, "partitions: 8", "partitions: 8\n    owned: \"1\"", "telemetry.scaleout.owned"},
		{collectorYAML, "name: col-1", "name: " + strings.Repeat("x", 65), "telemetry.scaleout.name"},
		{collectorYAML, "  exporters:\n    - {address: 192.0.2.1, name: edge1}\n", "", "telemetry.exporters"},
		{collectorYAML, "enabled: true", "enabled: false", "telemetry.enabled"},
		{strings.Replace(collectorYAML, "role: network\n", "interface: eth0\n", 1), "enabled: true", "enabled: false", "telemetry.scaleout.role"},
		{detectorYAML, `owned: "0-3,6"`, `owned: "0-8"`, "telemetry.scaleout.owned"},
		{detectorYAML, `owned: "0-3,6"`, `owned: "3-1"`, "telemetry.scaleout.owned"},
		{detectorYAML, "stream: AGG", "stream: a.b", "telemetry.scaleout.stream"},
		{detectorYAML, "subject: tw.agg", "subject: tw.*", "telemetry.scaleout.subject"},
		{detectorYAML, "max_age: 1m", "max_age: 2h", "telemetry.scaleout.max_age"},
		{detectorYAML, "replay: 5s", "replay: 2m", "telemetry.scaleout.replay"},
		{detectorYAML, "replay: 5s", "replay: 5s\n    replicas: 9", "telemetry.scaleout.replicas"},
		{detectorYAML, "replay: 5s", "replay: 5s\n    max_bytes: 1000", "telemetry.scaleout.max_bytes"},
		{detectorYAML, "  mode: enforce\n", "  mode: enforce\n  listen: [\"0.0.0.0:6343\"]\n", "telemetry.listen"},
		{detectorYAML, "  mode: enforce\n", "  mode: enforce\n  exporters: [{address: 192.0.2.1}]\n", "telemetry.exporters"},
		{detectorYAML, "  thresholds:\n    all: {pps: 100000}\n", "", "telemetry.thresholds"},
		// A detector configures no exporter: it names an uplink's by
		// address (TestScaleoutDetectorUplinksByAddress).
		{detectorYAML, "  mode: enforce\n", "  mode: enforce\n  groups:\n    customers:\n      uplinks: [{exporter: edge1, if_index: 3}]\n", "telemetry.groups.customers.uplinks[0].exporter"},
		// Role network: network mode is all it runs, on no data plane.
		{detectorYAML, "role: network\n", "role: network\ninterface: eth0\n", "interface"},
		{detectorYAML, "role: network\n", "role: network\nhardware: {backend: auto}\n", "hardware.backend"},
		{detectorYAML, "role: network\n", "role: networks\ninterface: eth0\n", "role"},
		{detectorYAML, "role: network\n", "", "interface"},
	} {
		if !strings.Contains(tc.base, tc.from) {
			t.Fatalf("%q not in the base", tc.from)
		}
		y := strings.Replace(tc.base, tc.from, tc.to, 1)
		_, err := ParseFile("tierwall.yaml", []byte(y))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.field+":") {
			t.Errorf("%q → %q: %v, want ErrInvalid naming %s", tc.from, tc.to, err, tc.field)
		}
	}
	// Role network without network mode has nothing to run.
	_, err := ParseFile("tierwall.yaml", []byte("role: network\n"))
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "telemetry.enabled:") {
		t.Errorf("role network alone: %v", err)
	}
}

// A detector's uplinks name their exporters by address: the collectors
// report those exporters' interfaces over the bus.
func TestScaleoutDetectorUplinksByAddress(t *testing.T) {
	y := strings.Replace(detectorYAML, "  mode: enforce\n", "  mode: enforce\n  groups:\n    customers:\n      uplinks: [{exporter: 192.0.2.1, if_index: 3}, {exporter: \"::ffff:192.0.2.2\", if_index: 4}]\n      communities: [\"64500:666\"]\n", 1)
	tc := telemetryOf(t, y)
	want := []telemetry.Uplink{{Exporter: netip.MustParseAddr("192.0.2.1"), IfIndex: 3}, {Exporter: netip.MustParseAddr("192.0.2.2"), IfIndex: 4}}
	if got := tc.Action.Policies["customers"].Uplinks; !slices.Equal(got, want) {
		t.Fatalf("uplinks %v, want %v", got, want)
	}
}

// A collector counts and publishes: thresholds are its detectors'.
func TestScaleoutCollectorNeedsNoThresholds(t *testing.T) {
	if strings.Contains(collectorYAML, "thresholds") {
		t.Fatal("the collector's example has thresholds")
	}
	if _, err := ParseFile("tierwall.yaml", []byte(collectorYAML)); err != nil {
		t.Fatal(err)
	}
}

// The examples in deploy/ load: network mode alone (no interface) and
// each scale-out role.
func TestScaleoutExamples(t *testing.T) {
	for f, role := range map[string]string{"network.yaml": "", "scaleout-collector.yaml": ScaleoutCollector, "scaleout-detector.yaml": ScaleoutDetector} {
		c, err := Load("../../../deploy/" + f)
		if err != nil {
			t.Fatal(err)
		}
		sc, err := c.ScaleoutConfig()
		if err != nil || c.Role != RoleNetwork || c.Interface != "" || sc.Role != role {
			t.Errorf("%s: role %s, scaleout %q, %v", f, c.Role, sc.Role, err)
		}
		if role == ScaleoutDetector && (!slices.Equal(sc.Detector.Owned, []int{0, 1, 2, 3, 4, 5, 6, 7}) || !c.BGP.Enabled()) {
			t.Errorf("%s: %+v", f, sc.Detector)
		}
	}
}

// A detector's group takes its capacity in bits/s: RTBH stays possible.
func TestScaleoutDetectorUplinkBPS(t *testing.T) {
	y := strings.Replace(detectorYAML, "  mode: enforce\n", "  mode: enforce\n  groups:\n    customers:\n      uplink_bps: 10000000000\n", 1)
	c, err := ParseFile("tierwall.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	tc, err := c.TelemetryConfig()
	if err != nil || tc.Detector.Policies["customers"].UplinkBPS != 1e10 {
		t.Fatalf("%+v %v", tc.Detector.Policies, err)
	}
}

// TLS files and a credentials file reach package scaleout as given.
func TestScaleoutAuth(t *testing.T) {
	y := strings.Replace(collectorYAML, "partitions: 8", "partitions: 8\n    tls: {ca: /etc/tierwall/ca.pem, cert: /etc/tierwall/col.pem, key: /etc/tierwall/col.key}\n    credentials: /etc/tierwall/col.creds", 1)
	c, err := ParseFile("tierwall.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	sc, err := c.ScaleoutConfig()
	if err != nil {
		t.Fatal(err)
	}
	if want := (scaleout.Auth{CA: "/etc/tierwall/ca.pem", Cert: "/etc/tierwall/col.pem", Key: "/etc/tierwall/col.key", Credentials: "/etc/tierwall/col.creds"}); sc.Auth != want {
		t.Fatalf("auth %+v, want %+v", sc.Auth, want)
	}
}
