// SPDX-License-Identifier: Apache-2.0

package config

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

const bgpCommunitiesYAML = `interface: eth0
bgp:
  asn: 65001
  router_id: 10.0.0.2
  neighbors:
    - address: 10.0.0.1
      asn: 65000
      send: [rtbh]
      communities: ["65000:9999"]
      large_communities: ["4200000000:666:0"]
    - {address: 10.0.0.3, asn: 65003, send: [flowspec]}
  announce:
    next_hop4: 192.0.2.254
    communities: ["64500:666"]
    large_communities: ["65000:666:1", "4294967295:4294967295:4294967295"]
`

// Large communities (RFC 8092) and a neighbour's own communities are
// read and kept as written: the speaker gives them to GoBGP as text.
func TestBGPCommunitiesParse(t *testing.T) {
	c, err := Parse([]byte(bgpCommunitiesYAML))
	if err != nil {
		t.Fatal(err)
	}
	an := c.BGP.Announce
	if !slices.Equal(an.LargeCommunities, []string{"65000:666:1", "4294967295:4294967295:4294967295"}) || !slices.Equal(an.Communities, []string{"64500:666"}) {
		t.Errorf("announce %+v", an)
	}
	n := c.BGP.Neighbors[0]
	if !slices.Equal(n.Communities, []string{"65000:9999"}) || !slices.Equal(n.LargeCommunities, []string{"4200000000:666:0"}) {
		t.Errorf("neighbour %+v", n)
	}
	if len(c.BGP.Neighbors[1].Communities)+len(c.BGP.Neighbors[1].LargeCommunities) != 0 {
		t.Errorf("second neighbour %+v", c.BGP.Neighbors[1])
	}
}

// A bad community is refused with its field, its value and what it should
// be, so that tierwall check (and the daemon's start) fail on it.
func TestBGPCommunitiesRefused(t *testing.T) {
	for _, tc := range []struct{ old, new, want string }{
		{`large_communities: ["65000:666:1",`, `large_communities: ["65000:666",`, `bgp.announce.large_communities[0]: 65000:666 is not GLOBAL:LOCAL1:LOCAL2`},
		{`"4294967295:4294967295:4294967295"`, `"4294967296:1:1"`, `bgp.announce.large_communities[1]: 4294967296:1:1 is not`},
		{`large_communities: ["65000:666:1",`, `large_communities: ["65000:-1:1",`, `bgp.announce.large_communities[0]: 65000:-1:1`},
		{`large_communities: ["65000:666:1",`, `large_communities: ["",`, `bgp.announce.large_communities[0]: "" is not`},
		{`large_communities: ["65000:666:1",`, `large_communities: ["blackhole",`, `bgp.announce.large_communities[0]: blackhole`},
		{`large_communities: ["65000:666:1",`, `large_communities: ["065000:666:1",`, `bgp.announce.large_communities[0]: 065000:666:1`},
		{`communities: ["64500:666"]`, `communities: ["64500:666:1"]`, `bgp.announce.communities[0]: 64500:666:1 is not ASN:VALUE (two numbers 0..65535); a large community (three numbers) goes in large_communities`},
		{`communities: ["65000:9999"]`, `communities: ["65536:1"]`, `bgp.neighbors[0].communities[0]: 65536:1`},
		{`large_communities: ["4200000000:666:0"]`, `large_communities: ["4200000000:666"]`, `bgp.neighbors[0].large_communities[0]: 4200000000:666`},
		{`communities: ["65000:9999"]`, `communities: ["64500:666"]`, `bgp.neighbors[0].communities[0]: 64500:666 is in bgp.announce.communities already`},
		{`large_communities: ["4200000000:666:0"]`, `large_communities: ["65000:666:1"]`, `bgp.neighbors[0].large_communities[0]: 65000:666:1 is in bgp.announce.large_communities already`},
		{`{address: 10.0.0.3, asn: 65003, send: [flowspec]}`, `{address: 10.0.0.3, asn: 65003, receive: true, communities: ["1:1"]}`, `bgp.neighbors[1].communities: [1:1] are set on a neighbour that is sent nothing`},
	} {
		y := strings.Replace(bgpCommunitiesYAML, tc.old, tc.new, 1)
		if y == bgpCommunitiesYAML {
			t.Fatalf("%q is not in the YAML", tc.old)
		}
		y = strings.Replace(y, "  announce:\n", "  accept: {own_prefixes: [192.0.2.0/24]}\n  announce:\n", 1)
		_, err := Parse([]byte(y))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s → %s: %v, want an error with %q", tc.old, tc.new, err, tc.want)
		}
	}
}
