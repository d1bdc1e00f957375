// SPDX-License-Identifier: Apache-2.0

package bgp

import (
	"errors"
	"testing"
	"time"
)

// Resolve names the field it refuses as the YAML writes it (the
// configuration places it at its line), and fills in the defaults the
// speaker relies on.
func TestResolve(t *testing.T) {
	c := Config{ASN: 65000, RouterID: "192.0.2.1", Neighbors: []NeighborConfig{{Address: "192.0.2.2", ASN: 65001, Send: []string{"flowspec", "rtbh"}}}}
	var fe *FieldError
	if err := c.Resolve(); !errors.As(err, &fe) || fe.Path != "bgp.announce.next_hop4" {
		t.Fatalf("rtbh without a next hop: %v, want a field error on bgp.announce.next_hop4", err)
	}
	c.Announce.NextHop4 = "192.0.2.254"
	c.Neighbors[0].Send = []string{"flowspec", "blackhole"}
	if err := c.Resolve(); !errors.As(err, &fe) || fe.Path != "bgp.neighbors[0].send[1]" {
		t.Fatalf("an unknown send: %v, want a field error on bgp.neighbors[0].send[1]", err)
	}
	c.Neighbors[0].Send = []string{"rtbh"}
	if err := c.Resolve(); err != nil {
		t.Fatal(err)
	}
	n := c.Neighbors[0]
	if n.Port != 179 || n.HoldTime != 90*time.Second || n.MaxPrefixes != 1000 || !n.AddressAddr.IsValid() || c.Announce.MaxRoutes != 100 || c.Accept.MaxRules != 1000 {
		t.Errorf("defaults not filled in: %+v, %+v, %+v", n, c.Announce, c.Accept)
	}
}
