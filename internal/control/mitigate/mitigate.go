// SPDX-License-Identifier: Apache-2.0

// Package mitigate owns the flow rules (rule.FlowRule): the operator's and
// those the mitigation ladder chose, their order, their lifetimes, what
// their counters showed, and the file that keeps them across restarts.
// The daemon pushes Set.FlowRules to the data plane as one ordered set
// after every change; nothing else decides which flow rules exist.
package mitigate

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/tierwall/tierwall/internal/rule"
)

// Origin says who made a rule.
const (
	Operator = "operator" // the CLI or API: stays until removed or its TTL ends
	Ladder   = "ladder"   // the daemon's mitigation ladder: withdrawn when the attack ends
	Remote   = "bgp"      // FlowSpec a BGP peer sent (internal/control/bgp): lifted when the route is withdrawn
)

// ErrFull means the set is at its capacity (the data plane's rule table).
var ErrFull = errors.New("flow rule table full")

// RungSYNSize is the rung of the ladder's drop of a SYN flood's sizes
// beside its cookies: a rule that knows the host's clients only by the
// sizes their SYNs had, kept to this host (never announced upstream,
// where the known-good bypass does not go with it).
const RungSYNSize = "syn-size"

// ErrNotFound means no such rule.
var ErrNotFound = errors.New("no such flow rule")

// Rule is a flow rule with why it exists and what it has done.
type Rule struct {
	rule.FlowRule
	Origin string `json:"origin"`
	// Rung is the ladder's rung ("flow-rule", "syn-cookie",
	// RungSYNSize); empty for the operator's rules.
	Rung   string    `json:"rung,omitempty"`
	Reason string    `json:"reason"`
	Added  time.Time `json:"added"`
	// Expires is when an operator's rule with a TTL ends; zero: never.
	Expires time.Time `json:"expires,omitzero"`
	// Victim and Mitigation tie a ladder rule to the attack it answers:
	// the detector withdraws by mitigation, and counts what the rule
	// dropped towards its victim's offered rate.
	Victim     netip.Addr `json:"victim,omitzero"`
	Mitigation uint64     `json:"mitigation,omitempty"`

	// What the data plane counted (summed over CPUs and tiers), and the
	// matched rate over the last interval.
	Counters   Counters `json:"counters"`
	MatchedPPS float64  `json:"matched_pps"`
	DroppedPPS float64  `json:"dropped_pps"`
	// Quiet is how many intervals in a row the rule matched little: a
	// ladder rule whose attack nobody tracks any more (a restart) goes on
	// it.
	Quiet int `json:"quiet,omitempty"`
	// NIC is the policer that stands for the rule on the card, when the
	// card holds one (the daemon's view, never kept on disk), and
	// NICDropped what the card dropped for the rule, all in Counters too.
	NIC        string `json:"nic,omitempty"`
	NICDropped uint64 `json:"nic_dropped,omitempty"`
}

// Counters are one rule's totals.
type Counters struct {
	Packets         uint64 `json:"packets"` // matched
	Bytes           uint64 `json:"bytes"`
	Dropped         uint64 `json:"dropped"`
	PassedKnownGood uint64 `json:"passed_known_good"`
}

// Set is the flow rules in force. Not safe for concurrent use: the
// daemon's goroutine owns it.
type Set struct {
	max   int
	path  string // "" keeps nothing on disk
	rules []Rule
}

// New returns an empty set of capacity max.
func New(max int, path string) *Set { return &Set{max: max, path: path} }

type file struct {
	Version int       `json:"version"`
	Saved   time.Time `json:"saved"`
	Rules   []Rule    `json:"rules"`
}

// Load reads the set saved at path (none yet: an empty set). Rules that
// no longer check, or beyond max, are dropped with a warning rather than
// failing the start: the daemon must come up during an attack.
func Load(max int, path string) (*Set, []string, error) {
	s := New(max, path)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return s, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("reading flow rules: %w", err)
	}
	var f file
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, nil, fmt.Errorf("reading flow rules %s: %w", path, err)
	}
	if f.Version != 1 {
		return nil, nil, fmt.Errorf("reading flow rules %s: version %d, want 1", path, f.Version)
	}
	var warns []string
	for _, r := range f.Rules {
		if err := r.Check(); err != nil {
			warns = append(warns, fmt.Sprintf("flow rule %s dropped: %v", r.FlowRule, err))
			continue
		}
		if len(s.rules) >= max {
			warns = append(warns, fmt.Sprintf("flow rule %s dropped: over the capacity of %d", r.FlowRule, max))
			continue
		}
		s.rules = append(s.rules, r)
	}
	return s, warns, nil
}

// Save writes the set atomically (temporary file, fsync, rename).
func (s *Set) Save(now time.Time) error {
	if s.path == "" {
		return nil
	}
	b, err := json.MarshalIndent(file{Version: 1, Saved: now.UTC(), Rules: s.rules}, "", " ")
	if err != nil {
		return fmt.Errorf("saving flow rules: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(s.path), filepath.Base(s.path)+".tmp*")
	if err != nil {
		return fmt.Errorf("saving flow rules: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("saving flow rules: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("saving flow rules: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("saving flow rules: %w", err)
	}
	if err := os.Rename(tmp.Name(), s.path); err != nil {
		return fmt.Errorf("saving flow rules: %w", err)
	}
	return nil
}

// Add puts r in the set; a rule with the same match and action is
// updated instead (its counters kept). The set is left unchanged on error.
func (s *Set) Add(r Rule) (added bool, err error) {
	if err := r.Check(); err != nil {
		return false, err
	}
	if i := s.find(r.FlowRule); i >= 0 {
		old := s.rules[i]
		r.Counters, r.MatchedPPS, r.DroppedPPS = old.Counters, old.MatchedPPS, old.DroppedPPS
		if old.Origin == Operator && r.Origin != Operator || old.Origin == Ladder && r.Origin == Remote {
			// The operator's rule stands; a local rule stands over a
			// peer's copy of it, so the peer's withdrawal cannot lift it.
			return false, nil
		}
		s.rules[i] = r
		return false, nil
	}
	if len(s.rules) >= s.max {
		return false, fmt.Errorf("adding flow rule %s: %w (%d rules)", r.FlowRule, ErrFull, s.max)
	}
	s.rules = append(s.rules, r)
	return true, nil
}

// Remove takes out the rule with fr's match and action.
func (s *Set) Remove(fr rule.FlowRule) (Rule, error) {
	i := s.find(fr)
	if i < 0 {
		return Rule{}, fmt.Errorf("removing flow rule %s: %w", fr, ErrNotFound)
	}
	r := s.rules[i]
	s.rules = slices.Delete(s.rules, i, i+1)
	return r, nil
}

func (s *Set) find(fr rule.FlowRule) int {
	return slices.IndexFunc(s.rules, func(r Rule) bool { return r.FlowRule == fr })
}

// Reset makes rs the set (a copy of Rules taken earlier: an undo).
func (s *Set) Reset(rs []Rule) { s.rules = slices.Clone(rs) }

// Len is the number of rules.
func (s *Set) Len() int { return len(s.rules) }

// Cap is the set's capacity.
func (s *Set) Cap() int { return s.max }

// Rules returns a copy of the rules, in the data plane's order.
func (s *Set) Rules() []Rule {
	out := slices.Clone(s.rules)
	order(out)
	return out
}

// FlowRules is what the data plane gets: the first match wins, so the
// operator's rules come first in the order given, then the ladder's,
// narrowest first (a port rule before the whole-victim rule it refines).
func (s *Set) FlowRules() []rule.FlowRule {
	rs := s.Rules()
	out := make([]rule.FlowRule, len(rs))
	for i := range rs {
		out[i] = rs[i].FlowRule
	}
	return out
}

func order(rs []Rule) {
	slices.SortStableFunc(rs, func(a, b Rule) int {
		if (a.Origin == Operator) != (b.Origin == Operator) {
			if a.Origin == Operator {
				return -1
			}
			return 1
		}
		if a.Origin == Operator {
			return 0 // as given
		}
		if d := specificity(b.FlowRule) - specificity(a.FlowRule); d != 0 {
			return d
		}
		// Equally narrow: SYN cookies first. The ladder adds them on top
		// of a rate limit with the same match when a SYN flood follows a
		// TCP surge; behind the limit they would never see a packet, and
		// the limit would pass its rate of spoofed SYNs.
		return cookieLast(a.FlowRule) - cookieLast(b.FlowRule)
	})
}

func cookieLast(r rule.FlowRule) int {
	if r.Action == rule.FlowSYNCookie {
		return 0
	}
	return 1
}

// specificity ranks how narrow a rule is: its prefix length (scaled to
// IPv6's), then each match field it sets.
func specificity(r rule.FlowRule) int {
	n := r.Dst.Bits()
	if r.Dst.Addr().Is4() {
		n += 96
	}
	n *= 8
	for _, set := range []bool{r.Proto != 0, !r.DstPorts.Any(), !r.SrcPorts.Any(), r.TCPFlags.Mask != 0, !r.Length.Any(), r.Fragment != rule.FragAny} {
		if set {
			n++
		}
	}
	return n
}

// Observe records the rules' counters, cs[i] for the rule FlowRules()[i]
// returned, read dt after the previous reading; a rule whose counters
// went backwards (a reload of the data plane) starts over. quietPPS is the
// matched rate below which an interval counts as quiet.
func (s *Set) Observe(fr []rule.FlowRule, cs []Counters, dt time.Duration, quietPPS float64) {
	secs := dt.Seconds()
	for i, f := range fr {
		j := s.find(f)
		if j < 0 || i >= len(cs) {
			continue
		}
		r := &s.rules[j]
		c := cs[i]
		if secs > 0 && c.Packets >= r.Counters.Packets && c.Dropped >= r.Counters.Dropped {
			r.MatchedPPS = float64(c.Packets-r.Counters.Packets) / secs
			r.DroppedPPS = float64(c.Dropped-r.Counters.Dropped) / secs
		}
		r.Counters = c
		if r.MatchedPPS < quietPPS {
			r.Quiet++
		} else {
			r.Quiet = 0
		}
	}
}

// Expire removes the operator's rules whose TTL has ended and returns them.
func (s *Set) Expire(now time.Time) []Rule {
	var gone []Rule
	s.rules = slices.DeleteFunc(s.rules, func(r Rule) bool {
		if !r.Expires.IsZero() && !now.Before(r.Expires) {
			gone = append(gone, r)
			return true
		}
		return false
	})
	return gone
}

// WithdrawIf removes the rules for which gone is true and returns them.
func (s *Set) WithdrawIf(gone func(Rule) bool) []Rule {
	var out []Rule
	s.rules = slices.DeleteFunc(s.rules, func(r Rule) bool {
		if gone(r) {
			out = append(out, r)
			return true
		}
		return false
	})
	return out
}
