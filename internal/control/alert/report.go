// SPDX-License-Identifier: Apache-2.0

// Package alert tells operators about attacks: it follows each attack
// from its first detection to its end (Tracker), keeps a report of it in a
// bounded JSON-lines log with a pcap of sampled packets beside it (Log,
// WritePcap), and sends each start, escalation and end to webhooks and an
// exec hook from a bounded queue that never blocks the caller (Notifier).
// It knows nothing of the daemon or the data plane: the daemon feeds it
// observations and samples each interval.
package alert

import (
	"math"
	"net/netip"
	"time"
)

// Event is what a notification is about.
type Event string

const (
	// EventStart is the first detection for a victim.
	EventStart Event = "start"
	// EventEscalation is a higher rung of the mitigation ladder or a
	// detector that had not fired for the attack yet.
	EventEscalation Event = "escalation"
	// EventEnd is sent once the victim has gone EndAfter intervals
	// without a detection and its mitigations are withdrawn.
	EventEnd Event = "end"
)

// Source is one of an attack's heaviest sources, at the interval it was
// heaviest.
type Source struct {
	Addr netip.Addr `json:"addr"`
	PPS  float64    `json:"pps"`
}

// Report is an attack as it stands: what a notification carries, what
// the log keeps (the last report of an attack is its record) and what the
// API serves.
type Report struct {
	ID    string `json:"id"`
	Event Event  `json:"event"`
	// Victim is the destination attacked; the zero address when the
	// detections named sources only (rate, entropy and list detectors
	// judge sources, not victims) and none could be tied to a destination.
	Victim netip.Addr `json:"victim,omitzero"`
	// Group is the host group (hostgroups:) of the victim, or in network
	// mode of the attacked prefixes; empty when in none: which customer
	// or service was hit, and whose policy applied.
	Group     string    `json:"group,omitempty"`
	Started   time.Time `json:"started"`
	Updated   time.Time `json:"updated"`
	Ended     time.Time `json:"ended,omitzero"`
	Duration  float64   `json:"duration_seconds"`
	Detectors []string  `json:"detectors"`
	// Rung is the highest rung of the mitigation ladder used
	// (source-bans, prefix, flow-rule), empty when none was.
	Rung       string   `json:"rung,omitempty"`
	Reason     string   `json:"reason,omitempty"` // the latest detection's
	PeakPPS    float64  `json:"peak_pps"`
	PeakBPS    float64  `json:"peak_bps"`
	TopSources []Source `json:"top_sources"`
	// Bans are the first MaxBans bans of the attack; BanCount counts
	// them all (a botnet's may be tens of thousands).
	Bans      []netip.Prefix `json:"bans"`
	BanCount  int            `json:"ban_count"`
	FlowRules []string       `json:"flow_rules"`
	// Packets is how many sampled packets the attack's pcap holds.
	Packets int `json:"pcap_packets"`
	// Pcap is the file's path on the daemon's host (empty: no packets).
	Pcap string `json:"pcap,omitempty"`
}

// Rounded is r with its rates and duration to one decimal (three for
// the duration): what the API serves, as every other rate it serves.
func (r Report) Rounded() Report {
	one := func(x float64) float64 { return math.Round(x*10) / 10 }
	r.PeakPPS, r.PeakBPS = one(r.PeakPPS), one(r.PeakBPS)
	r.Duration = math.Round(r.Duration*1000) / 1000
	if r.TopSources != nil {
		top := make([]Source, len(r.TopSources))
		for i, s := range r.TopSources {
			top[i] = Source{Addr: s.Addr, PPS: one(s.PPS)}
		}
		r.TopSources = top
	}
	return r
}

// Active says whether the attack is still going on.
func (r *Report) Active() bool { return r.Ended.IsZero() }
