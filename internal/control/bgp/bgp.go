// SPDX-License-Identifier: Apache-2.0

// Package bgp is tierwall's BGP speaker: GoBGP embedded as a library (the
// only package that imports it). It announces source bans upstream as
// RTBH (RFC 7999) or FlowSpec (RFC 8955/8956) and flow rules as FlowSpec,
// and receives FlowSpec from configured peers (a fleet's route reflector),
// validates it (RFC 8955 §6) and hands it to the daemon to enforce.
//
// The daemon owns policy (what deserves to go upstream); this package owns
// the sessions and the wire: it makes the announced set equal what the
// daemon asks for, and reports what peers sent.
package bgp

import (
	"net/netip"
	"time"

	"github.com/tierwall/tierwall/internal/control/bgp/community"
	"github.com/tierwall/tierwall/internal/enum"
	"github.com/tierwall/tierwall/internal/rule"
)

// Kind is how a route is announced.
type Kind uint8

const (
	RTBH     Kind = iota + 1 // a host route with BLACKHOLE (65535:666) and the configured next hop
	FlowSpec                 // a FlowSpec NLRI with traffic-rate 0 (discard) or a rate
)

var kindNames = enum.New("route kind", rule.ErrInvalid, map[Kind]string{RTBH: "rtbh", FlowSpec: "flowspec"})

func (k Kind) String() string { return kindNames.String(k) }

// MarshalText makes kinds readable in JSON.
func (k Kind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText reads what MarshalText wrote (the API's clients).
func (k *Kind) UnmarshalText(b []byte) error { return kindNames.Unmarshal(k, b) }

// Flow is a FlowSpec rule: a flow rule and, for source bans, the source
// prefix (FlowSpec type 2). A source ban's Dst is the configured
// destination (bgp.announce.destination) or zero.
type Flow struct {
	Src netip.Prefix `json:"src,omitzero"`
	rule.FlowRule
}

// Route is one announcement.
type Route struct {
	Kind Kind `json:"kind"`
	// Prefix is the banned source of an RTBH route.
	Prefix netip.Prefix `json:"prefix,omitzero"`
	// Flow is a FlowSpec route's rule.
	Flow Flow `json:"flow,omitzero"`
	// Reason and Rate are for the operator (`tierwall bgp routes`), not
	// sent on the wire.
	Reason string  `json:"reason,omitempty"`
	Rate   float64 `json:"rate_pps,omitempty"`
	// Communities and LargeCommunities are added to this route alone,
	// after the well-known ones and bgp.announce's: network mode's
	// per-host-group RTBH communities, which name the provider of the
	// group's uplinks. They are part of what is sent, not of the route's
	// identity (String): a changed list re-sends the route. The API and
	// `tierwall bgp routes` show them, as "ASN:VALUE" and
	// "GLOBAL:LOCAL1:LOCAL2", so that an operator can see which provider
	// an RTBH route asks to blackhole.
	Communities      []community.Standard `json:"communities,omitempty"`
	LargeCommunities []community.Large    `json:"large_communities,omitempty"`
}

// Neighbor is a configured peer as it is now.
type Neighbor struct {
	Address     netip.Addr `json:"address"`
	ASN         uint32     `json:"asn"`
	Description string     `json:"description,omitempty"`
	// State is the session's FSM state: idle, connect, active, opensent,
	// openconfirm, established.
	State string    `json:"state"`
	Since time.Time `json:"since,omitzero"` // when it entered State (established: up since)
	// Families negotiated (ipv4-unicast, ipv6-unicast, ipv4-flowspec,
	// ipv6-flowspec).
	Families []string `json:"families,omitempty"`
	// Announced: routes we sent; Received: routes it sent; Accepted:
	// those of Received that passed validation.
	Announced int `json:"announced"`
	Received  int `json:"received"`
	Accepted  int `json:"accepted"`
	// Send and Receive repeat the configuration.
	Send            []string `json:"send,omitempty"`
	Receive         bool     `json:"receive"`
	MD5             bool     `json:"md5"`
	GracefulRestart bool     `json:"graceful_restart"`
}

// Remote is a FlowSpec route a peer sent us.
type Remote struct {
	Peer     netip.Addr `json:"peer"`
	Flow     Flow       `json:"flow"`
	Received time.Time  `json:"received"`
	// Refused says why it is not enforced ("": it is); validation is
	// RFC 8955 §6 against bgp.accept.own_prefixes, what the data plane
	// can match, the action, and bgp.accept.max_rules.
	Refused string `json:"refused,omitempty"`
	// Lost is when the peer's session went down (zero: up); the route is
	// kept until Lost + bgp.accept.hold.
	Lost time.Time `json:"lost,omitzero"`
}

// Diff is what one Announce changed.
type Diff struct {
	Added, Withdrawn int
	// Refused are routes the speaker could not encode, with why.
	Refused []string
}
