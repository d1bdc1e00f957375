// SPDX-License-Identifier: Apache-2.0

package config

import (
	"errors"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/tierwall/tierwall/internal/control/telemetry"
	"github.com/tierwall/tierwall/internal/rule"
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

// telemetryOf parses y and returns its network mode's configuration.
func telemetryOf(t *testing.T, y string) telemetry.Config {
	t.Helper()
	c, err := ParseFile("tierwall.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	tc, err := c.TelemetryConfig()
	if err != nil {
		t.Fatal(err)
	}
	return tc
}

func TestTelemetryParse(t *testing.T) {
	tc := telemetryOf(t, telemetryYAML)
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

// A listen address the socket could not take is refused by the file's
// check, not first when the daemon starts.
func TestTelemetryListenChecked(t *testing.T) {
	for listen, ok := range map[string]bool{
		`["127.0.0.1:6343"]`: true, `[":6343"]`: true, `["[::]:2055"]`: true, `["127.0.0.1:0"]`: true,
		`["127.0.0.1"]`: false, `["127.0.0.1:70000"]`: false, `["127.0.0.1:sflow"]`: false,
		`["collector.example:6343"]`: false, `["300.1.1.1:6343"]`: false,
	} {
		y := strings.Replace(telemetryYAML, `listen: ["127.0.0.1:6343"]`, "listen: "+listen, 1)
		_, err := ParseFile("tierwall.yaml", []byte(y))
		if ok && err != nil || !ok && (err == nil || !strings.Contains(err.Error(), "telemetry.listen[0]")) {
			t.Errorf("listen %s: %v, want accepted %v", listen, err, ok)
		}
	}
}

// The example configurations parse and build: deploy/network.yaml's
// network mode, and deploy/tierwall.yaml's section (off).
func TestTelemetryExamples(t *testing.T) {
	for _, f := range []string{"../../../deploy/network.yaml", "../../../deploy/tierwall.yaml"} {
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

// A host group's communities go on its RTBH routes: they reach the plan's
// configuration as written, and a bad one, or one on a group that is never
// blackholed (no uplink_bps), is refused with its field.
func TestTelemetryGroupCommunities(t *testing.T) {
	y := strings.Replace(telemetryYAML, "      uplink_bps: 10e9\n",
		"      uplink_bps: 10e9\n      communities: [\"64500:666\"]\n      large_communities: [\"65000:666:1\"]\n", 1)
	c, err := ParseFile("tierwall.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	tc, err := c.TelemetryConfig()
	if err != nil {
		t.Fatal(err)
	}
	got := tc.Action.RTBH["customers"]
	if len(got.Standard) != 1 || got.Standard[0] != "64500:666" || len(got.Large) != 1 || got.Large[0] != "65000:666:1" {
		t.Errorf("RTBH communities %+v", tc.Action.RTBH)
	}
	for repl, want := range map[string]string{
		`communities: ["64500:666"]`:       ``,
		`communities: ["64500:70000"]`:     `telemetry.groups.customers.communities[0]: 64500:70000 is not ASN:VALUE`,
		`large_communities: ["65000:666"]`: `telemetry.groups.customers.large_communities[0]: 65000:666 is not GLOBAL:LOCAL1:LOCAL2`,
		`large_communities: ["65000:x:1"]`: `telemetry.groups.customers.large_communities[0]: 65000:x:1`,
		`uplink_bps: 0`:                    `telemetry.groups.customers.communities: [64500:666 65000:666:1] are for the group's RTBH routes`,
	} {
		var yy string
		switch {
		case strings.HasPrefix(repl, "large"):
			yy = strings.Replace(y, `large_communities: ["65000:666:1"]`, repl, 1)
		case strings.HasPrefix(repl, "communities"):
			yy = strings.Replace(y, `      communities: ["64500:666"]`, "      "+repl, 1)
		default:
			yy = strings.Replace(y, "uplink_bps: 10e9", repl, 1)
		}
		_, err := ParseFile("tierwall.yaml", []byte(yy))
		if want == "" {
			if err != nil {
				t.Errorf("%s: %v", repl, err)
			}
			continue
		}
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error with %q", repl, err, want)
		}
	}
}

// Network mode judges only the network it protects: telemetry.networks,
// else the host groups' prefixes and rails.protected; a configuration
// with none of them is refused. Routers export both directions, and a
// flood of SYNs spoofed from a client outside the network turned its
// servers' SYN-ACKs into an "attack" on the client.
func TestTelemetryNetworks(t *testing.T) {
	judged := func(tc telemetry.Config, addrs ...string) (out []bool) {
		for _, a := range addrs {
			out = append(out, tc.Detector.Protects(netip.MustParseAddr(a)))
		}
		return out
	}
	// Default: the host groups' prefixes and rails.protected.
	y := strings.Replace(telemetryYAML, "telemetry:\n", "rails:\n  protected: [203.0.113.0/25]\ntelemetry:\n", 1)
	got := judged(telemetryOf(t, y), "198.51.100.7", "203.0.113.9", "203.0.113.200", "192.0.2.77", "::ffff:198.51.100.7")
	if want := []bool{true, true, false, false, true}; !slices.Equal(got, want) {
		t.Errorf("from the host groups and rails.protected: judged %v, want %v", got, want)
	}
	// telemetry.networks replaces them.
	y = strings.Replace(telemetryYAML, "  thresholds:\n", "  networks: [192.0.2.0/24, 2001:db8::/32]\n  thresholds:\n", 1)
	got = judged(telemetryOf(t, y), "192.0.2.77", "2001:db8::1", "198.51.100.7")
	if want := []bool{true, true, false}; !slices.Equal(got, want) {
		t.Errorf("from telemetry.networks: judged %v, want %v", got, want)
	}
	// Many (looked up by prefix length rather than in turn).
	y = strings.Replace(telemetryYAML, "  thresholds:\n", "  networks: [192.0.2.0/24, 10.1.0.0/16, 10.2.0.0/16, 10.3.0.0/16, 10.4.0.0/16, 10.5.0.0/16, 10.6.0.0/16, 10.7.0.0/16, 10.8.0.0/16, 2001:db8::/32]\n  thresholds:\n", 1)
	got = judged(telemetryOf(t, y), "192.0.2.77", "10.8.3.4", "2001:db8::1", "10.9.0.1", "::ffff:10.1.2.3")
	if want := []bool{true, true, true, false, true}; !slices.Equal(got, want) {
		t.Errorf("from ten networks: judged %v, want %v", got, want)
	}
	// None of them: refused, with the field.
	y = strings.Replace(telemetryYAML, "hostgroups:\n  - name: customers\n    prefixes: [198.51.100.0/24]\n", "", 1)
	y = strings.Replace(y, "  groups:\n    customers:\n      total: {all: {pps: 200000}}\n      uplink_bps: 10e9\n", "", 1)
	if _, err := ParseFile("tierwall.yaml", []byte(y)); err == nil || !strings.Contains(err.Error(), "telemetry.networks") {
		t.Errorf("no network: %v, want an error naming telemetry.networks", err)
	}
	y = strings.Replace(telemetryYAML, "  thresholds:\n", "  networks: [192.0.2.0/33]\n  thresholds:\n", 1)
	if _, err := ParseFile("tierwall.yaml", []byte(y)); err == nil || !strings.Contains(err.Error(), "telemetry.networks[0]") {
		t.Errorf("a bad network: %v, want an error naming telemetry.networks[0]", err)
	}
}
