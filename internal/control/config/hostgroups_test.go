// SPDX-License-Identifier: Apache-2.0

package config

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

const groupsYAML = `interface: eth0
hostgroups:
  - name: dns
    prefixes: [192.0.2.0/24, 2001:db8:53::/48]
    thresholds: {pps: 200000, bps: 1e9, syn_pps: 5000}
  - name: mail
    prefixes: [192.0.2.25/32]
    thresholds: {pps: 2000, source_pps: 300}
    action: flowrule
  - name: customer
    prefixes: [198.51.100.0/24]
    action: monitor
`

func TestHostGroupsParse(t *testing.T) {
	c, err := ParseFile("tierwall.yaml", []byte(groupsYAML))
	if err != nil {
		t.Fatal(err)
	}
	h, err := c.DetectHostGroups()
	if err != nil || h.Len() != 3 {
		t.Fatalf("%v, %d groups", err, h.Len())
	}
	for addr, want := range map[string]string{"192.0.2.25": "mail", "192.0.2.1": "dns", "2001:db8:53::1": "dns", "198.51.100.9": "customer"} {
		g := h.Lookup(netip.MustParseAddr(addr))
		if g == nil || g.Name != want {
			t.Errorf("%s: %+v, want group %s", addr, g, want)
		}
	}
	if g := h.Lookup(netip.MustParseAddr("192.0.2.25")); g.PPS != 2000 || g.SourcePPS != 300 || g.Action.String() != "flowrule" {
		t.Errorf("mail: %+v", g)
	}
}

func TestHostGroupsRefused(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"interface: eth0\nhostgroups:\n  - {name: a, prefixes: [10.0.0.0/8]}\n  - name: b\n    prefixes: [10.1.0.0/16, 10.0.0.0/8]\n",
			`tierwall.yaml:5: hostgroups[1].prefixes[1]: 10.0.0.0/8 is also in host group "a"`},
		{"interface: eth0\nhostgroups:\n  - {name: a, prefixes: [10.0.0.0/8]}\n  - {name: a, prefixes: [10.1.0.0/16]}\n",
			`hostgroups[1].name: a is also hostgroups[0]'s name`},
		{"interface: eth0\nhostgroups:\n  - {name: a, prefixes: []}\n", "hostgroups[0].prefixes: [] needs at least one prefix"},
		{"interface: eth0\nhostgroups:\n  - {name: a, prefixes: [10.0.0.0/33]}\n", "hostgroups[0].prefixes[0]: 10.0.0.0/33"},
		{"interface: eth0\nhostgroups:\n  - name: a\n    prefixes: [10.0.0.0/8]\n    action: blackhole\n",
			`tierwall.yaml:5: hostgroups[0].action: blackhole is not ban, monitor or flowrule`},
		{"interface: eth0\nhostgroups:\n  - {name: a, prefixes: [10.0.0.0/8], thresholds: {pps: -1}}\n", "hostgroups[0].thresholds.pps: -1 is negative"},
		{"interface: eth0\nhostgroups:\n  - {name: a, prefixes: [10.0.0.0/8], thresholds: {ppps: 1}}\n",
			`tierwall.yaml:3: hostgroups[0].thresholds.ppps: unknown field; did you mean "pps"?`},
		{"interface: eth0\ndetectors: {victim: {enabled: false}}\nhostgroups:\n  - {name: a, prefixes: [10.0.0.0/8], thresholds: {pps: 5}}\n",
			"detectors.victim is disabled"},
	} {
		_, err := ParseFile("tierwall.yaml", []byte(tc.yaml))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.yaml, err, tc.want)
		}
	}
}
