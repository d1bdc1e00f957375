// SPDX-License-Identifier: Apache-2.0

package dpi

import (
	"fmt"
	"sort"
	"strings"

	"github.com/tierwall/tierwall/internal/probe/flow"
	"github.com/tierwall/tierwall/internal/rule"
	"github.com/tierwall/tierwall/internal/tier"
)

// Action is what the probe does with a classified flow.
type Action uint8

const (
	// Offload learns the flow into the NIC, which forwards it (passive:
	// consumes it) and counts it.
	Offload Action = 1
	// Discard learns the flow with the NIC dropping its packets.
	Discard Action = 2
	// Software keeps the flow in the software tier, which sees every
	// packet (for applications that need more inspection or accounting).
	Software Action = 3
)

func (a Action) String() string {
	switch a {
	case Offload:
		return "offload"
	case Discard:
		return "discard"
	case Software:
		return "software"
	}
	return fmt.Sprintf("action(%d)", uint8(a))
}

// ParseAction reads "offload", "discard" or "software" (any case).
func ParseAction(s string) (Action, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "offload", "forward":
		return Offload, nil
	case "discard", "drop":
		return Discard, nil
	case "software", "keep":
		return Software, nil
	}
	return 0, fmt.Errorf("%w: action %q: want offload, discard or software", rule.ErrInvalid, s)
}

// Learn is how a flow with this action is learned: in hardware with the
// returned action, or not at all (ok false: it stays in software).
func (a Action) Learn() (tier.FlowAction, bool) {
	switch a {
	case Offload:
		return tier.FlowForward, true
	case Discard:
		return tier.FlowDiscard, true
	}
	return 0, false
}

// State is the software flow state and action for this action:
// learning for what goes to the NIC, software otherwise.
func (a Action) State() (flow.State, flow.Action) {
	switch a {
	case Discard:
		return flow.StateLearning, flow.Discard
	case Software:
		return flow.StateSoftware, flow.Forward
	}
	return flow.StateLearning, flow.Forward
}

// PolicyDefault is the key of the default action in a policy map.
const PolicyDefault = "default"

// Policy maps applications to actions. The zero Policy offloads
// everything.
type Policy struct {
	Default Action
	Apps    map[string]Action // canonical names
}

// ParsePolicy reads a policy from configuration, e.g. the YAML
//
//	policy: {default: offload, dns: software, bittorrent: discard}
//
// Keys are application names in any case ("BitTorrent", "bittorrent");
// "default" (offload when absent) applies to every other application,
// including "unknown" unless it is named.
func ParsePolicy(m map[string]string) (Policy, error) {
	p := Policy{Default: Offload, Apps: make(map[string]Action, len(m))}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys) // the first bad entry is the same every time
	for _, k := range keys {
		a, err := ParseAction(m[k])
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

// Action is the action for a verdict: its App's, else its Proto's, else
// the default.
func (p Policy) Action(v Verdict) Action {
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
