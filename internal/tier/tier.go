// SPDX-License-Identifier: Apache-2.0

// Package tier is tierwall's NIC tier: one interface over the hardware
// tables of real NICs (tc flower with skip_sw, ethtool ntuple) and of the
// emulated SmartNIC the tests, benchmarks and demo run on. A table is small
// (K of 512-2K entries) and slow to update (~2 ms per rule), but what it
// drops never costs a host CPU cycle.
//
// The rule model carries a 5-tuple and a forward action from the start:
// besides source drops (Miano et al. 2019) a flow probe offloads flows it
// has classified and wants only counted (Deri et al. 2024).
package tier

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/tierwall/tierwall/internal/enum"
	"github.com/tierwall/tierwall/internal/errdefs"
	"github.com/tierwall/tierwall/internal/rule"
)

// Sentinel errors; backends wrap them with %w.
var (
	ErrTableFull     = errors.New("hardware table full")
	ErrUnsupported   = errors.New("not supported by this NIC")
	ErrNotInHardware = errors.New("rule did not reach hardware")
	ErrNoRule        = errors.New("no such hardware rule")
	// ErrInvalid is errdefs.ErrInvalid to errors.Is, worded for the NIC.
	ErrInvalid = errdefs.Invalid("invalid hardware rule")
)

// Match is what a rule matches. A source rule sets Src only; a flow rule
// also sets Dst, Proto and, for TCP and UDP, both ports.
type Match struct {
	Src     netip.Addr
	Dst     netip.Addr
	Proto   uint8
	SrcPort uint16
	DstPort uint16
}

// SourceMatch matches every packet from src.
func SourceMatch(src netip.Addr) Match { return Match{Src: src} }

// IsFlow reports whether m is a 5-tuple rule.
func (m Match) IsFlow() bool { return m.Dst.IsValid() }

// Validate checks that m is a well-formed source or flow match.
func (m Match) Validate() error {
	if !m.Src.IsValid() || m.Src.Zone() != "" {
		return fmt.Errorf("%w: source address %v", ErrInvalid, m.Src)
	}
	if m.Src.Is4In6() {
		return fmt.Errorf("%w: IPv4-mapped source %v: use the IPv4 form", ErrInvalid, m.Src)
	}
	if !m.IsFlow() {
		if m.Proto != 0 || m.SrcPort != 0 || m.DstPort != 0 {
			return fmt.Errorf("%w: protocol or ports without a destination", ErrInvalid)
		}
		return nil
	}
	if m.Dst.Zone() != "" || m.Dst.Is4() != m.Src.Is4() || m.Dst.Is4In6() {
		return fmt.Errorf("%w: destination %v does not match source family", ErrInvalid, m.Dst)
	}
	if m.Proto == 0 {
		return fmt.Errorf("%w: flow rule without a protocol", ErrInvalid)
	}
	if (m.SrcPort != 0 || m.DstPort != 0) && m.Proto != 6 && m.Proto != 17 {
		return fmt.Errorf("%w: ports with protocol %d", ErrInvalid, m.Proto)
	}
	return nil
}

func (m Match) String() string {
	if !m.IsFlow() {
		return m.Src.String()
	}
	return fmt.Sprintf("%s %s:%d > %s:%d", rule.ProtoName(m.Proto), m.Src, m.SrcPort, m.Dst, m.DstPort)
}

// Action is what hardware does with a matching packet.
type Action uint8

const (
	Drop    Action = 1 // drop at line rate: the host never sees it
	Forward Action = 2 // count and deliver (flow offload after DPI)
)

var actionNames = enum.New("action", ErrInvalid, map[Action]string{Drop: "drop", Forward: "forward"})

func (a Action) String() string { return actionNames.String(a) }

// Rule is one hardware table entry.
type Rule struct {
	Match  Match
	Action Action
}

// Validate checks the match and the action.
func (r Rule) Validate() error {
	if r.Action != Drop && r.Action != Forward {
		return fmt.Errorf("%w: action %d", ErrInvalid, r.Action)
	}
	return r.Match.Validate()
}

// Counters are a rule's hardware counters. Bytes count from the IP header
// on: NICs' hardware byte counters exclude the Ethernet header.
type Counters struct {
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
}

// Entry is a rule as the hardware reports it.
type Entry struct {
	Rule     Rule
	Counters Counters
	// HasCounters is false where the hardware keeps none (ntuple):
	// placement then cannot rate the entry from the NIC side.
	HasCounters bool
}

// Caps describe a backend on one interface, as probed at start.
type Caps struct {
	Backend  string `json:"backend"`
	Iface    string `json:"iface"`
	Capacity int    `json:"capacity"`
	Counters bool   `json:"counters"` // per-rule packet/byte counters
	Flows    bool   `json:"flows"`    // 5-tuple matches
	Forward  bool   `json:"forward"`  // the Forward action
}

// Table is a NIC's hardware rule table.
type Table interface {
	Caps() Caps
	// Install returns once the rule is confirmed in hardware, with the
	// time that took. A rule that did not reach hardware is an error
	// (ErrNotInHardware), never a success.
	Install(ctx context.Context, r Rule) (time.Duration, error)
	// Remove deletes the rule for m (ErrNoRule when there is none) and
	// returns its last counters, read as it left the table, so no packet
	// it dropped goes unaccounted.
	Remove(ctx context.Context, m Match) (Counters, time.Duration, error)
	// List returns every rule this tierwall owns, with counters.
	List(ctx context.Context) ([]Entry, error)
	// Close releases handles; installed rules stay (re-adopted next start).
	Close() error
}

// Flush removes every rule the table lists: what shutdown does.
func Flush(ctx context.Context, t Table) error {
	es, err := t.List(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range es {
		if _, _, err := t.Remove(ctx, e.Rule.Match); err != nil && !errors.Is(err, ErrNoRule) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Verdicts is implemented by tables that count what they did with every
// packet, beside per-rule counters (the emulated NIC stage): the metrics
// collector exports them when the table has them.
type Verdicts interface {
	Verdicts() (map[string]Counters, error)
}

// Policers is implemented by tables that police flow rules in hardware:
// a flood whose sources cannot be listed, matched by destination and
// packet shape (rule.FlowRule), dropped or held to a rate on the card, so
// that the host's CPU never receives what the host would drop anyway. A
// policer does what the card can without the host: no known-good bypass,
// no SYN cookies; the control plane chooses which rules may go there.
type Policers interface {
	// PolicerCapacity is how many policers the table holds.
	PolicerCapacity() int
	// SetPolicers replaces the policers with rs, in order (the first
	// match decides): each a drop or rate-limit rule without bypass. All
	// or nothing: on an error the policers in force stay. A rule kept
	// from the set in force keeps its counters and bucket.
	SetPolicers(ctx context.Context, rs []rule.FlowRule) error
	// PolicerCounters returns the policers in force with their counters.
	PolicerCounters(ctx context.Context) ([]PolicerCounters, error)
}

// PolicerCounters is one policer's counters, summed over the card.
type PolicerCounters struct {
	Rule    rule.FlowRule
	Matched Counters
	Dropped uint64
}
