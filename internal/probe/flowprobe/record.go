// SPDX-License-Identifier: Apache-2.0

package flowprobe

import (
	"time"

	"github.com/tierwall/tierwall/internal/enum"
	"github.com/tierwall/tierwall/internal/errdefs"
	"github.com/tierwall/tierwall/internal/probe/flow"
	"github.com/tierwall/tierwall/internal/tier"
)

// EndReason is why a record was emitted, numbered as IPFIX's
// flowEndReason (RFC 5102, IE 136).
type EndReason uint8

const (
	EndIdle      EndReason = 1 // idle timeout
	EndActive    EndReason = 2 // active timeout: the flow goes on
	EndOfFlow    EndReason = 3 // end of flow detected (TCP FIN/RST)
	EndForced    EndReason = 4 // forced end (shutdown, application unlearn)
	EndResources EndReason = 5 // lack of resources
)

var endReasonNames = enum.New("end reason", errdefs.ErrInvalid, map[EndReason]string{
	EndIdle: "idle", EndActive: "active", EndOfFlow: "end", EndForced: "forced", EndResources: "resources",
})

func (r EndReason) String() string { return endReasonNames.String(r) }

// MarshalText writes the reason's name.
// A zero reason (a flow still running) is written as "end-reason(0)",
// never an error that would sink a whole listing.
func (r EndReason) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText reads a reason's name.
func (r *EndReason) UnmarshalText(b []byte) error { return endReasonNames.Unmarshal(r, b) }

func reasonOf(c tier.Cause) EndReason {
	switch c {
	case tier.CauseIdle:
		return EndIdle
	case tier.CauseLifetime:
		return EndActive
	case tier.CauseTCPTerm:
		return EndOfFlow
	}
	return EndForced
}

// Record is one flow record: the counters since the flow's previous record
// (all of them in its first), merged across the tiers. Directions follow
// the key (0: sent by Key.Lo); InitDir is the direction of the flow's
// first packet, so the client is the sender of InitDir.
type Record struct {
	Key       tier.FlowKey          `json:"key"`
	InitDir   uint8                 `json:"init_dir"`
	App       string                `json:"app"`
	Host      string                `json:"host,omitempty"`
	Start     time.Time             `json:"start"`
	End       time.Time             `json:"end"`
	Packets   [2]uint64             `json:"packets"`    // every packet of the period, once
	Bytes     [2]uint64             `json:"bytes"`      // from the IP header on
	HWPackets [2]uint64             `json:"hw_packets"` // of those, what the NIC counted
	HWBytes   [2]uint64             `json:"hw_bytes"`
	TCPFlags  [2]uint8              `json:"tcp_flags"`
	Marks     [flow.NumMarks]uint64 `json:"marks"` // packets that reached the host so far, by mark (cumulative)
	Reason    EndReason             `json:"reason"`
	Final     bool                  `json:"final"`     // the flow's last record
	Offloaded bool                  `json:"offloaded"` // the NIC held the flow during the period
}

// Tier names who counted the record's packets: "hardware", "software" or
// "both".
func (r *Record) Tier() string {
	hw := r.HWPackets[0]+r.HWPackets[1] > 0
	sw := r.Packets[0]+r.Packets[1] > r.HWPackets[0]+r.HWPackets[1]
	switch {
	case hw && sw:
		return "both"
	case hw:
		return "hardware"
	}
	return "software"
}

// record builds the record of flow k from its software entry e (nil when
// the entry is gone) and what the NIC reported, counting only what earlier
// records did not.
func (t *tracked) record(k tier.FlowKey, e *flow.Entry, reason EndReason, final bool) Record {
	r := Record{Key: k, App: t.app, Host: t.host, Reason: reason, Final: final,
		Offloaded: t.hw.Packets[0]+t.hw.Packets[1] > 0}
	if r.App == "" {
		r.App = "unknown"
	}
	r.Start, r.End = t.hw.First, t.hw.Last
	for d := 0; d < 2; d++ {
		r.HWPackets[d], r.HWBytes[d] = t.hw.Packets[d], t.hw.Bytes[d]
		r.Packets[d], r.Bytes[d] = t.hw.Packets[d], t.hw.Bytes[d]
		r.TCPFlags[d] = t.hw.TCPFlags[d]
	}
	if e != nil {
		r.InitDir = e.InitDir
		for d := 0; d < 2; d++ {
			r.Packets[d] += e.Packets[d] - t.sentPkts[d]
			r.Bytes[d] += e.Bytes[d] - t.sentByts[d]
			r.TCPFlags[d] |= e.TCPFlags[d]
			t.sentPkts[d], t.sentByts[d] = e.Packets[d], e.Bytes[d]
		}
		r.Marks = e.Marks
		if r.Start.IsZero() || (!e.First.IsZero() && e.First.Before(r.Start)) {
			r.Start = e.First
		}
		if e.Last.After(r.End) {
			r.End = e.Last
		}
	}
	t.hw = tier.FlowCounters{}
	return r
}
