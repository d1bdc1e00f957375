// SPDX-License-Identifier: Apache-2.0

// Package flow holds the flow probe's shared vocabulary: the marks, states
// and actions of bpf/lib/flow.h, a DPI sample, a software flow entry and the
// interface of the software flow tier. It sits below the probe engine
// (internal/probe/flowprobe) and the tiers that implement it
// (internal/probe/xdp, fakes in tests), so neither has to import the other.
// Flows are keyed by tier.FlowKey, the NIC flow table's key, which the
// probe shares rather than redefines (see its comment in internal/tier).
package flow

import (
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tierwall/tierwall/internal/tier"
)

// Mark is how the NIC handled a packet that reached the host (enum
// tw_flow_mark).
type Mark uint8

const (
	MarkNone      Mark = 0 // no NIC stage marked it
	MarkHit       Mark = 1
	MarkMiss      Mark = 2
	MarkUnhandled Mark = 3
	NumMarks           = 4
)

func (m Mark) String() string {
	switch m {
	case MarkNone:
		return "none"
	case MarkHit:
		return "hit"
	case MarkMiss:
		return "miss"
	case MarkUnhandled:
		return "unhandled"
	}
	return fmt.Sprintf("mark(%d)", uint8(m))
}

// State is a software flow's state (enum tw_flow_state).
type State uint8

const (
	StateNew       State = 0
	StateDPI       State = 1
	StateLearning  State = 2
	StateOffloaded State = 3
	StateSoftware  State = 4
	StateEnded     State = 5
)

func (s State) String() string {
	switch s {
	case StateNew:
		return "new"
	case StateDPI:
		return "dpi"
	case StateLearning:
		return "learning"
	case StateOffloaded:
		return "offloaded"
	case StateSoftware:
		return "software"
	case StateEnded:
		return "ended"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// Action is what software does with a flow's packets (enum tw_flow_action);
// it matters inline only, a passive probe consumes every packet.
type Action uint8

const (
	Forward Action = 0
	Discard Action = 1
)

// Sample is one packet of a new flow handed to user space for DPI. Data is
// the IP packet from its header on, at most the snap length; it is only
// valid during the callback that receives the sample.
type Sample struct {
	Key      tier.FlowKey
	Dir      uint8
	Seq      uint8 // sample number within the flow, from 0
	Time     time.Time
	Hash     uint32
	Mark     Mark
	TCPFlags uint8
	L3Len    int // the datagram's length, of which Data holds a prefix
	L4Off    int // offsets within Data; 0: no L4 header
	PayOff   int
	Data     []byte
}

// Payload is the captured L4 payload (possibly cut by the snap length).
func (s *Sample) Payload() []byte {
	if s.L4Off == 0 || s.PayOff > len(s.Data) || s.PayOff <= 0 {
		return nil
	}
	return s.Data[s.PayOff:]
}

// Entry is a software flow's state and counters (struct tw_flow).
type Entry struct {
	Packets  [2]uint64
	Bytes    [2]uint64
	TCPFlags [2]uint8
	First    time.Time
	Last     time.Time
	Hash     uint32
	DPISent  uint32
	DPILost  uint32
	State    State
	Action   Action
	InitDir  uint8
	Marks    [NumMarks]uint64
}

// TierStats are the software tier's totals.
type TierStats struct {
	Packets   [NumMarks]uint64 `json:"packets"`   // packets seen per mark
	Refused   uint64           `json:"refused"`   // new flows refused: table full
	Untracked uint64           `json:"untracked"` // packets of refused or unparsed flows
	DPILost   uint64           `json:"dpi_lost"`  // samples the ring buffer refused
	Flows     int              `json:"flows"`     // entries now
	Capacity  int              `json:"capacity"`
}

// SoftwareTier is the probe's flow table in XDP.
type SoftwareTier interface {
	// ReadSamples waits until deadline for samples, then hands those
	// available (at most max) to fn without waiting further.
	ReadSamples(deadline time.Time, max int, fn func(*Sample)) (int, error)
	// SetState moves a flow to state s with software action a.
	SetState(k tier.FlowKey, s State, a Action) error
	Lookup(k tier.FlowKey) (Entry, error)
	// Delete removes a flow and returns its last counters.
	Delete(k tier.FlowKey) (Entry, error)
	// Walk visits every flow; fn returns false to stop.
	Walk(fn func(tier.FlowKey, *Entry) bool) error
	Stats() (TierStats, error)
	Close() error
}

// Op is one state change or delete of a batch (Batcher).
type Op struct {
	Key    tier.FlowKey
	Delete bool   // delete the flow and return its last counters in Entry; else SetState
	State  State  // SetState
	Action Action // SetState
	Entry  Entry  // Delete: the flow's last counters
	Err    error  // the op's own failure (a flow not in the table), set by Apply
}

// Batcher is a SoftwareTier that runs many SetState and Delete operations
// in one call: one system call for a batch where each alone costs one.
type Batcher interface {
	// Apply runs ops in order, each with its own outcome in Err; the
	// error returned is for the batch as a whole (nothing was applied
	// past the op where it stopped, which holds it in Err too).
	Apply(ops []Op) error
}

// MonoTime converts a CLOCK_MONOTONIC reading in nanoseconds (what
// bpf_ktime_get_ns returns) to wall-clock time.
func MonoTime(ns uint64) time.Time { return NewMonoBase().Time(ns) }

// MonoBase is one reading of both clocks, for converting many monotonic
// times: a walk over a million flows reads the clock once, not twice per
// flow (unix.ClockGettime is a real system call, not the vDSO).
type MonoBase struct {
	mono int64
	wall time.Time
}

// NewMonoBase reads both clocks now.
func NewMonoBase() MonoBase {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return MonoBase{mono: ts.Nano(), wall: time.Now()}
}

// Time converts a CLOCK_MONOTONIC reading in nanoseconds; 0 is no time.
func (b MonoBase) Time(ns uint64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return b.wall.Add(time.Duration(int64(ns) - b.mono))
}
