// SPDX-License-Identifier: Apache-2.0

// Package apiv1 holds the bodies of the daemon's /v1 API, its requests and
// its answers, in one place: the daemon fills the answers, internal/control/api
// serves and decodes them, and the CLI (through api.Client) reads them, so
// none of the three keeps its own copy and the OpenAPI document
// (api/openapi.json, checked by api's tests) describes these types.
// ErrBadRequest and ErrNotFound are the two errors an answer's status code
// is chosen by.
package apiv1

import (
	"encoding/json"
	"errors"
	"math"
	"net/netip"
	"time"

	"github.com/tierwall/tierwall/internal/control/ban"
	"github.com/tierwall/tierwall/internal/control/bgp"
	"github.com/tierwall/tierwall/internal/control/detect"
	"github.com/tierwall/tierwall/internal/datapath"
	"github.com/tierwall/tierwall/internal/probe/flowprobe"
	"github.com/tierwall/tierwall/internal/tier"
)

// BGPStatus is what `tierwall bgp` shows.
type BGPStatus struct {
	Enabled   bool           `json:"enabled"`
	ASN       uint32         `json:"asn,omitempty"`
	RouterID  string         `json:"router_id,omitempty"`
	Neighbors []bgp.Neighbor `json:"neighbors"`
	Announced []bgp.Route    `json:"announced"`
	Received  []bgp.Remote   `json:"received"`
}

// Event is one thing the daemon did or decided, for the API and logs.
type Event struct {
	Time   time.Time    `json:"time"`
	Kind   string       `json:"kind"`   // one of EventKinds
	Prefix netip.Prefix `json:"prefix"` // "" when the event names none
	Detail string       `json:"detail"`
	// HostGroup is the host group holding Prefix (hostgroups.go).
	HostGroup string `json:"hostgroup,omitempty"`
}

// HeavyStatus is the heavy-hitter detector as `tierwall provisional`
// shows it: its configuration, its counters, and the provisional drops in
// the data plane now.
type HeavyStatus struct {
	Enabled bool                   `json:"enabled"`
	Monitor bool                   `json:"monitor"`
	Stats   datapath.HeavyStats    `json:"stats"`
	Entries []datapath.Provisional `json:"entries"`
}

// Victims is what GET /v1/victims answers: the attacks of the last
// interval and the mitigations in force.
type Victims struct {
	Enabled   bool                `json:"enabled"`
	Attacks   []detect.Judgement  `json:"attacks"`
	Active    []detect.Mitigation `json:"active"`
	KnownGood int                 `json:"known_good"`
	Tracked   int                 `json:"tracked"`
}

// BanResult is an operator's ban as it now is and what the request did:
// added, exists (left unchanged) or updated.
type BanResult struct {
	RuleView
	Result ban.Result `json:"result"`
}

// MarshalJSON is the rule's view with result added: the embedded view's
// own MarshalJSON would otherwise be promoted and drop it.
func (r BanResult) MarshalJSON() ([]byte, error) {
	view, err := r.RuleView.MarshalJSON()
	if err != nil {
		return nil, err
	}
	res, err := json.Marshal(r.Result)
	if err != nil {
		return nil, err
	}
	// The view is one JSON object: drop its closing brace, add the field.
	out := make([]byte, 0, len(view)+len(res)+16)
	out = append(out, view[:len(view)-1]...)
	out = append(out, `,"result":`...)
	out = append(out, res...)
	return append(out, '}'), nil
}

// BatchResult is what a batch of operator bans did, entry by entry.
type BatchResult struct {
	Prefixes int          `json:"prefixes"`
	New      int          `json:"new"`
	Exists   int          `json:"exists"`
	Updated  int          `json:"updated"`
	Refused  []RefusedBan `json:"refused"`
}

// RefusedBan is one entry of a batch that was not applied, and why.
type RefusedBan struct {
	Prefix netip.Prefix `json:"prefix"`
	Reason string       `json:"reason"`
}

// ErrBadRequest marks a request the caller must fix (4xx).
var ErrBadRequest = errors.New("bad request")

// Status is the daemon's overview.
type Status struct {
	Interface   string     `json:"interface"`
	Interval    string     `json:"interval"`
	Hardware    string     `json:"hardware"`
	Started     time.Time  `json:"started"`
	Intervals   uint64     `json:"intervals"`
	LastRun     *time.Time `json:"last_interval"` // null before the first
	Bans        int        `json:"bans"`
	MonitorOnly bool       `json:"monitor_only"`
	Breaker     bool       `json:"circuit_breaker_open"`
	UnbanPPS    float64    `json:"unban_threshold_pps"`
	LearnedPPS  *float64   `json:"learned_threshold_pps"` // null until learned (or no rate detector)
}

// RuleView is a ban with its counters: GET and POST /v1/rules answer it.
type RuleView struct {
	ban.Ban
	Packets uint64 `json:"packets"` // both tiers, since the rule was created
	// Tier is where the ban is enforced: "hw" (the NIC's table, and XDP
	// behind it) or "xdp". The daemon asks its offloader when it answers.
	Tier string `json:"tier"`
}

// MarshalJSON writes every field of the ban (ban.Ban omits the empty
// ones, for the state file), with null for no expiry and for not quiet.
func (v RuleView) MarshalJSON() ([]byte, error) {
	opt := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		return &t
	}
	return json.Marshal(struct {
		Prefix     netip.Prefix `json:"prefix"`
		Detector   string       `json:"detector"`
		Reason     string       `json:"reason"`
		FirstSeen  time.Time    `json:"first_seen"`
		LastSeen   time.Time    `json:"last_seen"`
		Rate       float64      `json:"rate_pps"`
		PeakRate   float64      `json:"peak_rate_pps"`
		Tier       string       `json:"tier"`
		Expires    *time.Time   `json:"expires"`
		QuietSince *time.Time   `json:"quiet_since"`
		Manual     bool         `json:"manual"`
		Packets    uint64       `json:"packets"`
	}{v.Prefix, v.Detector, v.Reason, v.FirstSeen, v.LastSeen, RoundRate(v.Rate), RoundRate(v.PeakRate), v.Tier,
		opt(v.Expires), opt(v.QuietSince), v.Manual, v.Packets})
}

// ListQuery narrows a list answer: only items after Since (zero: all),
// and of those the newest Limit (0: all). Lists are oldest first.
type ListQuery struct {
	Since time.Time
	Limit int
}

// ErrNotFound is a rule or entry that does not exist (404).
var ErrNotFound = errors.New("not found")

// Allowlist is the data plane's allowlist (passes whatever else matches)
// and the rails' never-ban list from the configuration.
type Allowlist struct {
	DataPlane []datapath.Rule `json:"data_plane"`
	Rails     []netip.Prefix  `json:"rails"`
}

// EventKinds are the kinds of event the daemon records.
var EventKinds = []string{"adopt", "attack", "ban", "bgp", "breaker", "error", "flowrule", "mitigation", "overflow", "provisional", "refused", "reload", "restore", "slow", "telemetry", "unban", "withdraw"}

// Detection is one detection as the API lists it: what a detector named
// in an interval, whether or not the rails let it become a ban.
type Detection struct {
	Time     time.Time    `json:"time"`
	Prefix   netip.Prefix `json:"prefix"`
	Detector string       `json:"detector"`
	Reason   string       `json:"reason"`
	Rate     float64      `json:"rate_pps"`
}

// Tiers describes each tier's capacity and use.
type Tiers struct {
	XDP      *datapath.Stats `json:"xdp"`
	Hardware *HWTier         `json:"hardware"` // null: XDP only
}

type HWTier struct {
	Backend       string  `json:"backend"`
	Iface         string  `json:"iface"`
	Capacity      int     `json:"capacity"`
	Occupancy     int     `json:"occupancy"`
	Counters      bool    `json:"counters"`
	UpdateLatency string  `json:"update_latency_estimate"`
	Updates       uint64  `json:"placement_updates"`
	MaxRate       float64 `json:"max_rate_pps"`
	// Verdicts are the table's packet counters by verdict, as the
	// metrics export them: the NIC's own (emulated stage), or the sums of
	// its per-rule counters (hit_drop, hit_forward); empty without either.
	Verdicts map[string]tier.Counters `json:"verdicts"`
}

// UnbanResult is what a batch of operator unbans did.
type UnbanResult struct {
	Prefixes int `json:"prefixes"` // bans lifted
}

// ErrorBody is every error answer.
type ErrorBody struct {
	Error string `json:"error"`
}

// BatchRequest is the body of POST /v1/rules/batch: many operator bans,
// each judged on its own (one refused entry is reported and the others
// applied) unless AllOrNothing.
type BatchRequest struct {
	Prefixes     []string `json:"prefixes"`
	Reason       string   `json:"reason"`
	TTL          string   `json:"ttl"`
	Force        bool     `json:"force,omitempty"`          // past the rails' width limit
	Update       bool     `json:"update,omitempty"`         // replace reason and expiry of existing bans
	AllOrNothing bool     `json:"all_or_nothing,omitempty"` // any refusal changes nothing (400)
}

// UnbanRequest is the body of POST /v1/rules/delete: lift the bans on
// every prefix, all or nothing (a prefix without a ban is a 404 and
// nothing changes), or, with All and no prefixes, every ban in force.
type UnbanRequest struct {
	Prefixes []string `json:"prefixes"`
	All      bool     `json:"all,omitempty"`
}

// AllowBatchRequest is the body of POST /v1/allowlist/batch: allowlist
// every prefix (or, with Delete, take each off the allowlist), all or
// nothing.
type AllowBatchRequest struct {
	Prefixes []string `json:"prefixes"`
	Delete   bool     `json:"delete,omitempty"`
	Force    bool     `json:"force,omitempty"` // past the rails' width limit for the allowlist
}

// RuleRequest is the body of POST /v1/rules. Re-adding a banned prefix
// leaves its ban as it is (200, result "exists") unless Update asks to
// replace its reason and expiry (200, "updated"); a new ban is 201,
// "added".
type RuleRequest struct {
	Prefix string `json:"prefix"`
	Reason string `json:"reason"`
	// TTL is a Go duration; empty: no expiry for a new ban, the current
	// one kept by an update; "0s": no expiry.
	TTL    string `json:"ttl"`
	Force  bool   `json:"force,omitempty"`  // past the rails' width limit (never past this host's addresses)
	Update bool   `json:"update,omitempty"` // replace reason and expiry of an existing ban
}

// FlowRuleRequest is the body of POST and DELETE /v1/flowrules: the rule
// in the CLI's words (rule.ParseFlowRule), e.g.
// "dst 198.51.100.7/32 proto udp sport 53 drop".
type FlowRuleRequest struct {
	Rule   string `json:"rule"`
	Reason string `json:"reason,omitempty"`
	TTL    string `json:"ttl,omitempty"` // Go duration; empty: no expiry (POST only)
	// Force takes a rule that stops traffic to this host's own addresses
	// (POST only); one that can stop its BGP or management sessions is
	// refused even so.
	Force bool `json:"force,omitempty"`
}

// AllowRequest is the body of POST /v1/allowlist.
type AllowRequest struct {
	Prefix string `json:"prefix"`
	Force  bool   `json:"force,omitempty"` // past the rails' width limit for the allowlist
}

// RecordsPage is one answer of GET /v1/flows/records: at most 10000
// records numbered from since, and the number to ask for next.
type RecordsPage struct {
	Records []flowprobe.Record `json:"records"`
	Next    uint64             `json:"next"`
}

// RoundRate rounds a rate (per second) to one decimal, as every answer
// shows rates: their last digits are noise.
func RoundRate(x float64) float64 { return math.Round(x*10) / 10 }
