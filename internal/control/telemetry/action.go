// SPDX-License-Identifier: Apache-2.0

package telemetry

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/tierwall/tierwall/internal/enum"
	"github.com/tierwall/tierwall/internal/rule"
)

// Mode is what network mode does with an attack.
type Mode uint8

const (
	// Enforce announces the upstream actions.
	Enforce Mode = iota
	// DryRun computes them and reports them, announces nothing.
	DryRun
	// Monitor detects and reports attacks, computes no action.
	Monitor
)

var modeNames = enum.New("mode", rule.ErrInvalid, map[Mode]string{
	Enforce: "enforce", DryRun: "dry-run", Monitor: "monitor",
}).Empty(Enforce)

func (m Mode) String() string { return modeNames.String(m) }

// MarshalText makes modes readable in JSON.
func (m Mode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// ParseMode reads a mode's name ("" is enforce).
func ParseMode(s string) (Mode, error) { return modeNames.Parse(s) }

// ActionConfig is the upstream ladder's policy.
type ActionConfig struct {
	Mode Mode
	// FlowAction is the FlowSpec action for an attack's signature:
	// rule.FlowRateLimit (to RatePPS) or rule.FlowDrop. Reflection from
	// an amplification port is dropped whatever it says: no customer
	// needs 100 kpps of DNS answers it did not ask for.
	FlowAction rule.FlowAction
	RatePPS    uint64
	// Policies give each host group its uplink capacity (RTBH above it).
	Policies map[string]GroupPolicy
	// RTBH are the communities of each host group's blackhole routes, by
	// group name: the transit provider of a customer's uplinks decides
	// which community blackholes there (and where: a large community
	// often names a region or a peer).
	RTBH map[string]Communities
}

// Communities are BGP communities as configured, validated by package
// config and encoded by the speaker (package telemetry knows nothing of
// BGP's wire): RFC 1997's "ASN:VALUE" and RFC 8092's
// "GLOBAL:LOCAL1:LOCAL2".
type Communities struct {
	Standard []string `json:"standard,omitempty"`
	Large    []string `json:"large,omitempty"`
}

// UpstreamKind is how an action goes upstream.
type UpstreamKind string

const (
	UpFlowSpec UpstreamKind = "flowspec"
	UpRTBH     UpstreamKind = "rtbh"
)

// Upstream is one action for an attack: a FlowSpec rule from its sampled
// headers, or a blackhole of its victim.
type Upstream struct {
	Attack string       `json:"attack"`
	Kind   UpstreamKind `json:"kind"`
	// Rule is a FlowSpec action's rule; Prefix an RTBH action's victim.
	Rule   rule.FlowRule `json:"rule,omitzero"`
	Prefix netip.Prefix  `json:"prefix,omitzero"`
	Reason string        `json:"reason"`
	PPS    float64       `json:"pps"`
	// Communities are the group's for an RTBH action (ActionConfig.RTBH),
	// added to the speaker's own; shown in /v1/telemetry's plan (absent
	// when the group has none).
	Communities Communities `json:"communities,omitzero"`
}

// Plan is the set of upstream actions the attacks on now call for: a
// FlowSpec rule per attacked prefix, built from the sampled headers; and,
// only for an attack on one host whose bits/s exceed its group's uplink
// capacity, a blackhole of the host (a carpet bombing is never
// blackholed: that would take a whole customer prefix off the Internet).
// An attack that ended has no action: the caller's desired-state speaker
// withdraws it. Monitor mode and monitor groups plan nothing.
func Plan(as []Attack, cfg ActionConfig) []Upstream {
	if cfg.Mode == Monitor {
		return nil
	}
	var out []Upstream
	for _, a := range as {
		if !a.Ended.IsZero() || a.Monitor {
			continue
		}
		for _, dst := range a.Dst {
			r := FlowRule(dst, a.Signature, cfg)
			out = append(out, Upstream{Attack: a.ID, Kind: UpFlowSpec, Rule: r, PPS: a.PeakPPS,
				Reason: fmt.Sprintf("network attack %s: %s, %.0f pps, %.0f bit/s", a.ID, kindList(a.Kinds), a.PeakPPS, a.PeakBPS)})
		}
		if up := cfg.Policies[a.Group].UplinkBPS; !a.Carpet && up > 0 && a.PeakBPS > up {
			out = append(out, Upstream{Attack: a.ID, Kind: UpRTBH, Prefix: a.Dst[0], PPS: a.PeakPPS,
				Reason:      fmt.Sprintf("network attack %s: %.0f bit/s over the uplinks' %.0f", a.ID, a.PeakBPS, up),
				Communities: cfg.RTBH[a.Group]})
		}
	}
	return out
}

func kindList(ks []Kind) string {
	s := ""
	for i, k := range ks {
		if i > 0 {
			s += ","
		}
		s += k.String()
	}
	return s
}

// FlowRule is the rule that matches an attack's signature on dst: its
// protocol, its source and destination port where one carries 80% of the
// packets, SYN without ACK for a SYN flood, its packet lengths, and
// fragments when they are 80% of it. Every field narrows the rule, so a
// legitimate client of the victim that does not look like the flood
// passes.
func FlowRule(dst netip.Prefix, sig Signature, cfg ActionConfig) rule.FlowRule {
	r := rule.FlowRule{Dst: dst, Proto: sig.Proto, Action: cfg.FlowAction}
	if r.Action == 0 {
		r.Action = rule.FlowRateLimit
	}
	ported := sig.Proto == protoTCP || sig.Proto == protoUDP
	frag := sig.FragShare >= 0.8
	switch {
	case frag:
		r.Fragment = rule.FragAnyFrag
	case ported:
		if sig.SrcPort != 0 {
			r.SrcPorts = rule.PortRange{Lo: sig.SrcPort, Hi: sig.SrcPort}
		}
		if sig.DstPort != 0 {
			r.DstPorts = rule.PortRange{Lo: sig.DstPort, Hi: sig.DstPort}
		}
		if sig.Proto == protoTCP && sig.SYNOnly {
			r.TCPFlags = rule.TCPFlagMatch{Mask: rule.TCPSyn | rule.TCPAck, Value: rule.TCPSyn}
		}
	}
	if sig.MinLen > 0 && sig.MaxLen >= sig.MinLen {
		r.Length = rule.Range16{Lo: sig.MinLen, Hi: sig.MaxLen}
	}
	if sig.Proto == protoUDP && slices.Contains(AmpPorts, sig.SrcPort) && !r.SrcPorts.Any() {
		r.Action = rule.FlowDrop
	}
	if r.Action == rule.FlowRateLimit {
		r.RatePPS = cfg.RatePPS
		if r.RatePPS == 0 {
			r.RatePPS = 10000
		}
	}
	if r.Action == rule.FlowSYNCookie {
		// No FlowSpec action answers SYNs: upstream it is a rate limit.
		r.Action, r.RatePPS = rule.FlowRateLimit, max(cfg.RatePPS, 10000)
	}
	return r
}

// UnmarshalText reads what MarshalText wrote (the API's clients).
func (m *Mode) UnmarshalText(b []byte) error { return modeNames.Unmarshal(m, b) }
