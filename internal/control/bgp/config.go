// SPDX-License-Identifier: Apache-2.0

package bgp

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/tierwall/tierwall/internal/control/bgp/community"
	"github.com/tierwall/tierwall/internal/rule"
)

// The speaker's configuration is defined, defaulted and checked here,
// with the speaker; the configuration package parses the file into it and
// reports a FieldError at its line (config.BGP is this Config). So the
// policy packages' configurations all live with their packages, and
// config imports them, never the other way.

// FieldError is a value of the bgp: section the speaker cannot use: Path
// names the field as the YAML writes it (bgp.neighbors[0].asn).
type FieldError struct {
	Path  string
	Value any
	Why   string
}

func (e *FieldError) Error() string { return fmt.Sprintf("%s: %v %s", e.Path, e.Value, e.Why) }

func bad(path string, v any, why string) error { return &FieldError{Path: path, Value: v, Why: why} }

// Config is the speaker's configuration, the bgp: section. The speaker announces what the
// tiers below cannot absorb to upstream routers (RTBH, RFC 7999, and
// FlowSpec, RFC 8955/8956) and enforces the FlowSpec a fleet's route
// reflector sends. Off while ASN is 0.
type Config struct {
	ASN      uint32 `yaml:"asn"`       // our AS (0: no BGP)
	RouterID string `yaml:"router_id"` // an IPv4 address, required with asn
	// ListenPort is where peers may connect (default 179); -1: we only
	// dial, which is what a host beside a router usually wants.
	ListenPort int32 `yaml:"listen_port"`
	// ListenAddresses bound for ListenPort (default: all).
	ListenAddresses []string         `yaml:"listen_addresses"`
	Neighbors       []NeighborConfig `yaml:"neighbors"`
	Announce        AnnounceConfig   `yaml:"announce"`
	Accept          AcceptConfig     `yaml:"accept"`

	RouterIDAddr netip.Addr `yaml:"-"`
}

// NeighborConfig is one configured peer: there are no dynamic neighbours.
type NeighborConfig struct {
	Address     string `yaml:"address"`
	ASN         uint32 `yaml:"asn"`
	Port        uint16 `yaml:"port"` // default 179
	Description string `yaml:"description"`
	// Password turns on TCP MD5 signatures (RFC 2385) on the session.
	// GoBGP has no TCP-AO (RFC 5925); a peer that needs it cannot be
	// configured here.
	Password string `yaml:"password"`
	// LocalAddress is the source of the session (default: the kernel's
	// choice).
	LocalAddress string `yaml:"local_address"`
	// Passive waits for the peer to connect.
	Passive bool `yaml:"passive"`
	// Multihop is the TTL of an eBGP session over more than one hop (0:
	// directly connected).
	Multihop uint8 `yaml:"multihop"`
	// Send lists what we announce to this peer: "rtbh" (source bans as
	// blackhole host routes), "flowspec" (source bans and flow rules as
	// FlowSpec); empty: nothing (a peer we only receive from).
	Send []string `yaml:"send"`
	// Receive accepts the peer's FlowSpec and enforces it (after
	// validation, accept.*).
	Receive bool `yaml:"receive"`
	// MaxPrefixes bounds the routes the peer may send us per family; past
	// it GoBGP takes the session down and keeps it down (administratively)
	// until tierwall restarts, and the peer's rules are lifted (after
	// accept.hold): a peer flooding us with routes is cut off, not obeyed
	// (default 1000).
	MaxPrefixes uint32 `yaml:"max_prefixes"`
	// HoldTime (default 90s) and GracefulRestart (RFC 4724, default on,
	// with RestartTime 120s): a restart of tierwall leaves our
	// announcements in place at the peer until we are back and have
	// re-announced what is still banned.
	HoldTime        time.Duration `yaml:"hold_time"`
	GracefulRestart *bool         `yaml:"graceful_restart"`
	RestartTime     time.Duration `yaml:"restart_time"`
	// Communities and LargeCommunities (RFC 8092) are added to the
	// routes sent to this neighbour only, after bgp.announce's: a
	// transit provider's blackhole community means nothing to another
	// provider, and may mean something else.
	Communities      []string `yaml:"communities"`
	LargeCommunities []string `yaml:"large_communities"`

	AddressAddr      netip.Addr `yaml:"-"`
	LocalAddressAddr netip.Addr `yaml:"-"`
}

// AnnounceConfig is the policy for what goes upstream: only what the local
// tiers cannot absorb, never allowlisted or protected space.
type AnnounceConfig struct {
	// MinPPS: a ban or flow rule is announced once its rate (dropped and
	// passed, both tiers) has reached this (default 100000); it stays
	// announced until it is lifted, so a rate that dips does not flap
	// the route.
	MinPPS float64 `yaml:"min_pps"`
	// Saturated: while the local tiers are saturated (the interface
	// loses packets before XDP, or the features table overflows) every
	// ban is a candidate whatever its rate (default true).
	Saturated *bool `yaml:"saturated"`
	// HostBans: a detector's ban of one address (/32, /128) is a
	// candidate too. Off by default: a source address can be spoofed,
	// and upstream (at the provider, across the fleet) its ban would cut
	// the real owner off far from where tierwall's rails can spare it;
	// the only proof an off-path packet cannot fake, a completed
	// handshake, makes a client known-good, and those are never banned.
	// Prefix bans (many sources) and flow rules (the victim's side) go
	// up as before; an operator's ban always may (the operator is the
	// evidence).
	HostBans bool `yaml:"host_bans"`
	// MaxRoutes is the top-N by rate announced per family (default 100):
	// the upstream's FlowSpec and blackhole capacity is small.
	MaxRoutes int `yaml:"max_routes"`
	// NextHop4/NextHop6 are the next hops of RTBH routes: the address the
	// upstream maps to its discard route (RFC 7999 §3.2). Loopback and
	// unspecified addresses are refused by many peers, so they are
	// refused here; required when a neighbour is sent rtbh.
	NextHop4 string `yaml:"next_hop4"`
	NextHop6 string `yaml:"next_hop6"`
	// Communities are added to every announcement (e.g. "65000:666" for
	// a provider's own blackhole community), besides BLACKHOLE
	// (65535:666) on RTBH routes and NO_EXPORT on both.
	Communities []string `yaml:"communities"`
	// LargeCommunities (RFC 8092, "65000:666:1") are added to every
	// announcement too: a provider with a 4-byte ASN can only name its
	// blackhole community in one.
	LargeCommunities []string `yaml:"large_communities"`
	// Destination: FlowSpec source bans carry this destination prefix
	// (the fleet's service prefix), so that receivers can validate them
	// against their own prefixes (RFC 8955 §6); empty: none.
	Destination string `yaml:"destination"`

	NextHop4Addr      netip.Addr   `yaml:"-"`
	NextHop6Addr      netip.Addr   `yaml:"-"`
	DestinationPrefix netip.Prefix `yaml:"-"`
}

// AcceptConfig is the validation of received FlowSpec (RFC 8955 §6): a rule
// is enforced only when its destination lies within our own prefixes.
type AcceptConfig struct {
	// OwnPrefixes are the destinations received rules may cover;
	// required when a neighbour has receive.
	OwnPrefixes []string `yaml:"own_prefixes"`
	// MaxRules bounds the remote rules enforced, all peers together
	// (default 1000); the rest are refused and counted.
	MaxRules int `yaml:"max_rules"`
	// Hold keeps a peer's rules enforced this long after its session
	// drops (default 0: lifted at once).
	Hold time.Duration `yaml:"hold"`

	OwnPrefixesParsed []netip.Prefix `yaml:"-"`
}

// Enabled reports whether the speaker runs.
func (b *Config) Enabled() bool { return b.ASN != 0 }

// GracefulRestartOn reports whether graceful restart is on for n.
func (n *NeighborConfig) GracefulRestartOn() bool {
	return n.GracefulRestart == nil || *n.GracefulRestart
}

// SaturatedOn reports whether saturation makes every ban a candidate.
func (a *AnnounceConfig) SaturatedOn() bool { return a.Saturated == nil || *a.Saturated }

// Sends reports whether n is sent kind ("rtbh" or "flowspec").
func (n *NeighborConfig) Sends(kind string) bool {
	for _, s := range n.Send {
		if s == kind {
			return true
		}
	}
	return false
}

// Resolve checks c, fills in its defaults and parses what the speaker
// uses (the fields tagged yaml:"-"): New takes only a resolved Config. An
// error is a *FieldError naming the field as the YAML writes it.
func (b *Config) Resolve() error {
	if !b.Enabled() {
		if len(b.Neighbors) > 0 {
			return bad("bgp.asn", 0, "is required with neighbors")
		}
		return nil
	}
	if b.ASN == 23456 {
		return bad("bgp.asn", b.ASN, "is AS_TRANS (RFC 6793), not an AS")
	}
	id, err := netip.ParseAddr(b.RouterID)
	if err != nil || !id.Is4() || id.IsUnspecified() {
		return bad("bgp.router_id", b.RouterID, "is not a non-zero IPv4 address")
	}
	b.RouterIDAddr = id
	if b.ListenPort == 0 {
		b.ListenPort = 179
	}
	if b.ListenPort < -1 || b.ListenPort > 65535 {
		return bad("bgp.listen_port", b.ListenPort, "outside 1..65535 (-1: do not listen)")
	}
	for i, a := range b.ListenAddresses {
		if _, err := netip.ParseAddr(a); err != nil {
			return bad(fmt.Sprintf("bgp.listen_addresses[%d]", i), a, "is not an IP address")
		}
	}
	sendsRTBH, receives := false, false
	seen := map[netip.Addr]bool{}
	for i := range b.Neighbors {
		n := &b.Neighbors[i]
		f := fmt.Sprintf("bgp.neighbors[%d]", i)
		a, err := netip.ParseAddr(n.Address)
		if err != nil || a.Zone() != "" {
			return bad(f+".address", n.Address, "is not an IP address")
		}
		a = a.Unmap()
		if a.IsUnspecified() || a.IsMulticast() {
			return bad(f+".address", n.Address, "is not a unicast address")
		}
		if seen[a] {
			return bad(f+".address", n.Address, "is configured twice")
		}
		seen[a] = true
		n.AddressAddr = a
		if n.ASN == 0 || n.ASN == 23456 {
			return bad(f+".asn", n.ASN, "is required (and not AS_TRANS)")
		}
		if n.LocalAddress != "" {
			la, err := netip.ParseAddr(n.LocalAddress)
			if err != nil || la.Unmap().Is4() != a.Is4() {
				return bad(f+".local_address", n.LocalAddress, "is not an address of the neighbour's family")
			}
			n.LocalAddressAddr = la.Unmap()
		}
		if n.Port == 0 {
			n.Port = 179
		}
		if len(n.Password) > 80 {
			return bad(f+".password", "…", "is longer than the 80 bytes of a TCP MD5 key")
		}
		for j, s := range n.Send {
			switch s {
			case "rtbh":
				sendsRTBH = true
			case "flowspec":
			default:
				return bad(fmt.Sprintf("%s.send[%d]", f, j), s, "is not rtbh or flowspec")
			}
		}
		receives = receives || n.Receive
		if n.MaxPrefixes == 0 {
			n.MaxPrefixes = 1000
		}
		if n.HoldTime == 0 {
			n.HoldTime = 90 * time.Second
		}
		if n.HoldTime < 3*time.Second || n.HoldTime > 65535*time.Second {
			return bad(f+".hold_time", n.HoldTime, "outside 3s..65535s (RFC 4271 §4.2)")
		}
		if n.RestartTime == 0 {
			n.RestartTime = 120 * time.Second
		}
		if n.RestartTime < time.Second || n.RestartTime > 4095*time.Second {
			return bad(f+".restart_time", n.RestartTime, "outside 1s..4095s (RFC 4724 §3)")
		}
		if err := CheckCommunities(f, n.Communities, n.LargeCommunities); err != nil {
			return err
		}
		if len(n.Send) == 0 && len(n.Communities)+len(n.LargeCommunities) > 0 {
			return bad(f+".communities", fmt.Sprint(append(slices.Clone(n.Communities), n.LargeCommunities...)), "are set on a neighbour that is sent nothing (send is empty)")
		}
	}
	an := &b.Announce
	if an.MinPPS == 0 {
		an.MinPPS = 100000
	}
	if an.MinPPS < 0 {
		return bad("bgp.announce.min_pps", an.MinPPS, "is negative")
	}
	if an.MaxRoutes == 0 {
		an.MaxRoutes = 100
	}
	if an.MaxRoutes < 0 || an.MaxRoutes > 100000 {
		return bad("bgp.announce.max_routes", an.MaxRoutes, "outside 1..100000")
	}
	for f, s := range map[string]*string{"bgp.announce.next_hop4": &an.NextHop4, "bgp.announce.next_hop6": &an.NextHop6} {
		if *s == "" {
			continue
		}
		a, err := netip.ParseAddr(*s)
		switch {
		case err != nil:
			return bad(f, *s, "is not an IP address")
		case a.IsLoopback() || a.IsUnspecified() || a.IsMulticast():
			return bad(f, *s, "is a loopback, unspecified or multicast address (peers refuse it as a next hop)")
		case f == "bgp.announce.next_hop4" && !a.Unmap().Is4(), f == "bgp.announce.next_hop6" && (!a.Is6() || a.Is4In6()):
			return bad(f, *s, "is of the other family")
		}
		if f == "bgp.announce.next_hop4" {
			an.NextHop4Addr = a.Unmap()
		} else {
			an.NextHop6Addr = a
		}
	}
	if sendsRTBH && !an.NextHop4Addr.IsValid() && !an.NextHop6Addr.IsValid() {
		return bad("bgp.announce.next_hop4", `""`, "is required when a neighbour is sent rtbh")
	}
	if err := CheckCommunities("bgp.announce", an.Communities, an.LargeCommunities); err != nil {
		return err
	}
	// GoBGP appends a neighbour's communities to the route's without
	// looking, so one that bgp.announce already adds would go twice.
	for i, n := range b.Neighbors {
		for _, l := range []struct {
			field     string
			own, glob []string
		}{{"communities", n.Communities, an.Communities}, {"large_communities", n.LargeCommunities, an.LargeCommunities}} {
			for j, c := range l.own {
				if slices.Contains(l.glob, c) {
					return bad(fmt.Sprintf("bgp.neighbors[%d].%s[%d]", i, l.field, j), c, "is in bgp.announce."+l.field+" already (every route carries it)")
				}
			}
		}
	}
	if an.Destination != "" {
		p, err := netip.ParsePrefix(an.Destination)
		if err != nil || p != p.Masked() {
			return bad("bgp.announce.destination", an.Destination, "is not a prefix (address/length, host bits zero)")
		}
		an.DestinationPrefix = p
	}
	ac := &b.Accept
	own, i, err := rule.ParseList(ac.OwnPrefixes)
	if err != nil {
		return bad(fmt.Sprintf("bgp.accept.own_prefixes[%d]", i), ac.OwnPrefixes[i], "is not an address or prefix: "+err.Error())
	}
	ac.OwnPrefixesParsed = own
	if receives && len(own) == 0 {
		return bad("bgp.accept.own_prefixes", "[]", "is required when a neighbour has receive (RFC 8955 §6: only rules for our own destinations are enforced)")
	}
	if ac.MaxRules == 0 {
		ac.MaxRules = 1000
	}
	if ac.MaxRules < 0 || ac.MaxRules > 1<<20 {
		return bad("bgp.accept.max_rules", ac.MaxRules, "outside 1..1048576")
	}
	if ac.Hold < 0 || ac.Hold > 24*time.Hour {
		return bad("bgp.accept.hold", ac.Hold, "outside 0..24h")
	}
	return nil
}

// CheckCommunities validates the communities and large_communities
// fields under parent (network mode's RTBH communities too).
func CheckCommunities(parent string, std, large []string) error {
	for i, c := range std {
		if _, err := community.ParseStandard(c); err != nil {
			why := "is not ASN:VALUE (two numbers 0..65535)"
			if strings.Count(c, ":") == 2 {
				why += "; a large community (three numbers) goes in large_communities"
			}
			return bad(fmt.Sprintf("%s.communities[%d]", parent, i), quoted(c), why)
		}
	}
	for i, c := range large {
		if _, err := community.ParseLarge(c); err != nil {
			return bad(fmt.Sprintf("%s.large_communities[%d]", parent, i), quoted(c), "is not GLOBAL:LOCAL1:LOCAL2 (three numbers 0..4294967295, RFC 8092)")
		}
	}
	return nil
}

// quoted shows an empty value as "" rather than nothing.
func quoted(s string) string {
	if s == "" || strings.TrimSpace(s) != s {
		return fmt.Sprintf("%q", s)
	}
	return s
}
