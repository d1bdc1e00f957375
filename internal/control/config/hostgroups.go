// SPDX-License-Identifier: Apache-2.0

package config

import (
	"fmt"
	"net/netip"

	"github.com/tierwall/tierwall/internal/control/detect"
)

// HostGroup is a named part of the protected network with its own
// thresholds and action (FastNetMon's hostgroups). A destination belongs
// to the group of the most specific prefix holding it.
type HostGroup struct {
	Name       string              `yaml:"name"`
	Prefixes   []string            `yaml:"prefixes"`
	Thresholds HostGroupThresholds `yaml:"thresholds"`
	// Action: ban (default: the mitigation ladder from source bans),
	// monitor (report only) or flowrule (a flow rule for the victim,
	// no source banned).
	Action string `yaml:"action"`

	Parsed []netip.Prefix `yaml:"-"`
}

// HostGroupThresholds: zero fields leave that test to the detectors'
// learned and default thresholds.
type HostGroupThresholds struct {
	PPS       float64 `yaml:"pps"`        // packets/s to one host of the group
	BPS       float64 `yaml:"bps"`        // bits/s (not bytes) to one host
	SYNPPS    float64 `yaml:"syn_pps"`    // SYN/s to one host
	SourcePPS float64 `yaml:"source_pps"` // packets/s from one source to one host (rate detector)
}

// validateHostGroups checks the groups and resolves their prefixes; the
// same prefix in two groups is refused (neither would be more specific).
func (c *Config) validateHostGroups() error {
	names := map[string]int{}
	for i := range c.HostGroups {
		g := &c.HostGroups[i]
		f := fmt.Sprintf("hostgroups[%d]", i)
		if g.Name == "" {
			return bad(f+".name", `""`, "is required")
		}
		if j, dup := names[g.Name]; dup {
			return bad(f+".name", g.Name, fmt.Sprintf("is also hostgroups[%d]'s name", j))
		}
		names[g.Name] = i
		if len(g.Prefixes) == 0 {
			return bad(f+".prefixes", "[]", "needs at least one prefix")
		}
		var err error
		if g.Parsed, err = prefixes(f+".prefixes", g.Prefixes); err != nil {
			return err
		}
		th := g.Thresholds
		for k, v := range map[string]float64{"pps": th.PPS, "bps": th.BPS, "syn_pps": th.SYNPPS, "source_pps": th.SourcePPS} {
			if v < 0 {
				return bad(f+".thresholds."+k, v, "is negative")
			}
		}
		if _, err := detect.ParseGroupAction(g.Action); err != nil {
			return bad(f+".action", g.Action, "is not ban, monitor or flowrule")
		}
		if (th.PPS > 0 || th.BPS > 0 || th.SYNPPS > 0) && !c.Detectors.Victim.Enabled {
			return bad(f+".thresholds", g.Name, "sets per-host thresholds but detectors.victim is disabled")
		}
		if th.SourcePPS > 0 && !c.Detectors.Rate.Enabled {
			return bad(f+".thresholds.source_pps", th.SourcePPS, "needs detectors.rate enabled")
		}
	}
	seen := map[netip.Prefix]string{}
	for i, g := range c.HostGroups {
		for j, p := range g.Parsed {
			p = p.Masked()
			if o, dup := seen[p]; dup {
				return bad(fmt.Sprintf("hostgroups[%d].prefixes[%d]", i, j), g.Prefixes[j],
					fmt.Sprintf("is also in host group %q: same length, neither would be more specific", o))
			}
			seen[p] = g.Name
		}
	}
	_, err := c.DetectHostGroups()
	return err
}

// DetectHostGroups is the groups for the detectors (nil without groups).
func (c *Config) DetectHostGroups() (*detect.HostGroups, error) {
	if len(c.HostGroups) == 0 {
		return nil, nil
	}
	gs := make([]detect.HostGroup, len(c.HostGroups))
	for i, g := range c.HostGroups {
		a, err := detect.ParseGroupAction(g.Action)
		if err != nil {
			return nil, fmt.Errorf("%w: hostgroups[%d]: %w", ErrInvalid, i, err)
		}
		th := g.Thresholds
		gs[i] = detect.HostGroup{Name: g.Name, Prefixes: g.Parsed, PPS: th.PPS, BPS: th.BPS, SYNPPS: th.SYNPPS,
			SourcePPS: th.SourcePPS, Action: a}
	}
	h, err := detect.NewHostGroups(gs)
	if err != nil {
		return nil, fmt.Errorf("%w: hostgroups: %w", ErrInvalid, err)
	}
	return h, nil
}
