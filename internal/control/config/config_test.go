// SPDX-License-Identifier: Apache-2.0

package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestDefaultsAndOverrides(t *testing.T) {
	c, err := Parse([]byte("interface: eth0\ninterval: 100ms\nrails:\n  allow: [10.0.0.0/8, 2001:db8::1]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Interval != 100*time.Millisecond || c.Bans.Hold != 30*time.Second || !c.Detectors.Rate.Enabled {
		t.Errorf("%+v", c)
	}
	if len(c.Rails.AllowPrefixes) != 2 || c.Rails.AllowPrefixes[1].String() != "2001:db8::1/128" {
		t.Errorf("allow %v", c.Rails.AllowPrefixes)
	}
	if c.NiceOrDefault() != DefaultNice {
		t.Errorf("nice %d, want the default %d", c.NiceOrDefault(), DefaultNice)
	}
	if c, err := Parse([]byte("interface: eth0\nnice: 0\n")); err != nil || c.NiceOrDefault() != 0 {
		t.Errorf("nice: 0 read as %v, %v (0 is a niceness, not unset)", c, err)
	}
	if c.Detectors.Victim.SYNGuardPPS != DefaultSYNGuardPPS {
		t.Errorf("SYN guard %d, want the default %d", c.Detectors.Victim.SYNGuardPPS, DefaultSYNGuardPPS)
	}
	if c, err := Parse([]byte("interface: eth0\ndetectors:\n  victim: {enabled: true, syn_guard_pps: 0}\n")); err != nil || c.Detectors.Victim.SYNGuardPPS != 0 {
		t.Errorf("syn_guard_pps: 0 read as %v, %v (0 turns the guard off)", c, err)
	}
}

func TestErrorsNameFieldAndValue(t *testing.T) {
	dir := t.TempDir()
	short := filepath.Join(dir, "tok")
	if err := os.WriteFile(short, []byte("abc\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"interval: 1s\n", "interface"},
		{"interface: eth0\ninterval: 50ms\n", "interval: 50ms"},
		{"interface: eth0\nnice: -21\n", "nice: -21 outside -20..19"},
		{"interface: eth0\nintervall: 1s\n", "intervall"},
		{"interface: eth0\nrails:\n  protected: [10.0.0.300/8]\n", "rails.protected[0]: 10.0.0.300/8"},
		{"interface: eth0\nhardware:\n  backend: smartnic\n", "hardware.backend: smartnic"},
		{"interface: eth0\nhardware:\n  backend: emulated\n", "hardware.emulated"},
		{"interface: eth0\napi:\n  tcp: 0.0.0.0:9480\n  token_file: x\n", "api.tcp: 0.0.0.0:9480"},
		{"interface: eth0\napi:\n  tcp: 127.0.0.1:9480\n  token_file: " + short + "\n", "shorter than 16"},
		{"interface: eth0\nlog:\n  format: xml\n", "log.format: xml"},
		{"interface: eth0\ncapacity: {memory_mib: 16}\n", "capacity.memory_mib: 16"},
		{"interface: eth0\ndetectors:\n  rate: {enabled: false}\n  entropy: {enabled: false}\n  victim: {enabled: false}\n", "all are disabled"},
		{"interface: eth0\ndetectors:\n  lists: {enabled: true, paths: [/nonexistent/feed]}\n", "detectors.lists.paths[0]: /nonexistent/feed"},
		{"interface: eth0\nrails:\n  max_established_share: 2\n", "rails.max_established_share: 2"},
		{"interface: eth0\ndetectors:\n  heavy: {window: 0s}\n", "detectors.heavy.window: 0s"},
		{"interface: eth0\ndetectors:\n  victim: {syn_guard_pps: -1}\n", "detectors.victim.syn_guard_pps: -1 is negative"},
		{"interface: eth0\ndetectors:\n  victim: {syn_guard_pps: 100000001}\n", "detectors.victim.syn_guard_pps: 100000001 above 100000000"},
		{"interface: eth0\ndetectors:\n  heavy: {window: 10ms, pps: 100}\n", "under two packets per 10ms window"},
		{"interface: eth0\ndetectors:\n  heavy: {pps: 0, syn_pps: 0}\n", "set a threshold or disable"},
		{"interface: eth0\ndetectors:\n  heavy: {prefix6: 16}\n", "detectors.heavy.prefix6: 16"},
		{"interface: eth0\ndetectors:\n  heavy: {learned_factor: 0.5}\n", "detectors.heavy.learned_factor: 0.5"},
		{"interface: eth0\ninterval: 10s\ndetectors:\n  heavy: {ttl: 15s}\n", "detectors.heavy.ttl: 15s is under two intervals"},
		{"interface: eth0\nbgp:\n  neighbors: [{address: 10.0.0.1, asn: 65000}]\n", "bgp.asn: 0 is required with neighbors"},
		{"interface: eth0\nbgp: {asn: 65001, router_id: 2001:db8::1}\n", "bgp.router_id: 2001:db8::1"},
		{"interface: eth0\nbgp: {asn: 23456, router_id: 10.0.0.2}\n", "AS_TRANS"},
		{"interface: eth0\nbgp:\n  asn: 65001\n  router_id: 10.0.0.2\n  neighbors: [{address: 10.0.0.1}]\n", "bgp.neighbors[0].asn: 0"},
		{"interface: eth0\nbgp:\n  asn: 65001\n  router_id: 10.0.0.2\n  neighbors: [{address: 10.0.0.300, asn: 65000}]\n", "bgp.neighbors[0].address: 10.0.0.300"},
		{"interface: eth0\nbgp:\n  asn: 65001\n  router_id: 10.0.0.2\n  neighbors: [{address: 10.0.0.1, asn: 65000}, {address: 10.0.0.1, asn: 65000}]\n", "configured twice"},
		{"interface: eth0\nbgp:\n  asn: 65001\n  router_id: 10.0.0.2\n  neighbors: [{address: 10.0.0.1, asn: 65000, send: [blackhole]}]\n", "bgp.neighbors[0].send[0]: blackhole"},
		{"interface: eth0\nbgp:\n  asn: 65001\n  router_id: 10.0.0.2\n  neighbors: [{address: 10.0.0.1, asn: 65000, send: [rtbh]}]\n", "bgp.announce.next_hop4"},
		{"interface: eth0\nbgp:\n  asn: 65001\n  router_id: 10.0.0.2\n  neighbors: [{address: 10.0.0.1, asn: 65000, send: [rtbh]}]\n  announce: {next_hop4: 127.0.0.1}\n", "loopback"},
		{"interface: eth0\nbgp:\n  asn: 65001\n  router_id: 10.0.0.2\n  neighbors: [{address: 10.0.0.1, asn: 65000, receive: true}]\n", "bgp.accept.own_prefixes"},
		{"interface: eth0\nbgp:\n  asn: 65001\n  router_id: 10.0.0.2\n  neighbors: [{address: 10.0.0.1, asn: 65000, hold_time: 1s}]\n", "bgp.neighbors[0].hold_time: 1s"},
		{"interface: eth0\nbgp:\n  asn: 65001\n  router_id: 10.0.0.2\n  announce: {communities: [\"65000:666:1\"]}\n", "bgp.announce.communities[0]"},
		{"interface: eth0\nbgp:\n  asn: 65001\n  router_id: 10.0.0.2\n  announce: {destination: 192.0.2.1/24}\n", "bgp.announce.destination: 192.0.2.1/24"},
	} {
		_, err := Parse([]byte(tc.yaml))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error naming %q", tc.yaml, err, tc.want)
		}
	}
}

// The shipped defaults suit a real link: a learned per-source threshold
// never under 1000 pps, entropy bans only above it; and the example file,
// which says it shows the defaults, shows these.
func TestDefaultsAreSafeForARealLink(t *testing.T) {
	d := Default()
	if r := d.Detectors.Rate; r.MinPPS < 1000 || r.CeilingPPS < r.MinPPS {
		t.Errorf("rate floor %v ceiling %v", r.MinPPS, r.CeilingPPS)
	}
	if f := d.EntropySourceFloor(); f < 1000 {
		t.Errorf("entropy names sources from %v pps", f)
	}
	c, err := Load("../../../deploy/tierwall.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Detectors.Rate.MinPPS != d.Detectors.Rate.MinPPS || c.Detectors.Rate.CeilingPPS != d.Detectors.Rate.CeilingPPS ||
		c.Detectors.Entropy != d.Detectors.Entropy || c.Bans != d.Bans {
		t.Errorf("deploy/tierwall.yaml does not show the defaults:\n%+v\n%+v", c.Detectors, d.Detectors)
	}
}
