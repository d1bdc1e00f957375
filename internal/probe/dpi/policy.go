// SPDX-License-Identifier: Apache-2.0

package dpi

import (
	"fmt"
	"sort"
	"strings"

	"github.com/tierwall/tierwall/internal/enum"
	"github.com/tierwall/tierwall/internal/rule"
)

// Decision is what the probe does with a classified flow: the value of a
// policy entry (the configuration calls them actions). The engine carries
// it out as the NIC's tier.FlowAction and the software tier's flow.Action.
type Decision uint8

const (
	// Offload learns the flow into the NIC, which forwards it (passive:
	// consumes it) and counts it.
	Offload Decision = 1
	// Discard learns the flow with the NIC dropping its packets.
	Discard Decision = 2
	// Software keeps the flow in the software tier, which sees every
	// packet (for applications that need more inspection or accounting).
	Software Decision = 3
)

var decisionNames = enum.New("action", rule.ErrInvalid, map[Decision]string{
	Offload: "offload", Discard: "discard", Software: "software",
}).Alias("forward", Offload).Alias("drop", Discard).Alias("keep", Software)

func (a Decision) String() string { return decisionNames.String(a) }

// ParseDecision reads "offload", "discard" or "software" (any case).
func ParseDecision(s string) (Decision, error) {
	return decisionNames.Parse(strings.ToLower(strings.TrimSpace(s)))
}

// PolicyDefault is the key of the default action in a policy map.
const PolicyDefault = "default"

// Policy maps applications to decisions. The zero Policy offloads
// everything.
type Policy struct {
	Default Decision
	Apps    map[string]Decision // canonical names
}

// ParsePolicy reads a policy from configuration, e.g. the YAML
//
//	policy: {default: offload, dns: software, bittorrent: discard}
//
// Keys are application names in any case ("BitTorrent", "bittorrent");
// "default" (offload when absent) applies to every other application,
// including "unknown" unless it is named.
func ParsePolicy(m map[string]string) (Policy, error) {
	p := Policy{Default: Offload, Apps: make(map[string]Decision, len(m))}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys) // the first bad entry is the same every time
	for _, k := range keys {
		a, err := ParseDecision(m[k])
		if err != nil {
			return Policy{}, fmt.Errorf("policy entry %q: %w", k, err)
		}
		name := Canonical(k)
		if strings.TrimSpace(k) == "" || strings.ContainsAny(name, ".:/ \t") {
			return Policy{}, fmt.Errorf("policy entry %q: %w: not an application name", k, rule.ErrInvalid)
		}
		if name == PolicyDefault {
			p.Default = a
			continue
		}
		if prev, dup := p.Apps[name]; dup && prev != a {
			return Policy{}, fmt.Errorf("policy entry %q: %w: %s is already %s", k, rule.ErrInvalid, name, prev)
		}
		p.Apps[name] = a
	}
	return p, nil
}

// Decide is the decision for a verdict: its App's, else its Proto's, else
// the default.
func (p Policy) Decide(v Verdict) Decision {
	if a, ok := p.Apps[v.App]; ok {
		return a
	}
	if a, ok := p.Apps[v.Proto]; ok {
		return a
	}
	if p.Default == 0 {
		return Offload
	}
	return p.Default
}
