// SPDX-License-Identifier: Apache-2.0

package tier

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/tierwall/tierwall/internal/enum"
	"github.com/tierwall/tierwall/internal/rule"
)

// The hardware flow table of a flow probe (Deri et al., HPSR 2024). The
// application learns a flow once DPI is done; from then on the NIC counts
// its packets and bytes per direction and handles them itself (forward or
// discard), and reports an event with the final counters when the flow is
// unlearned. The model maps one to one onto the two vendor APIs:
//
//	tierwall                PF_RING (ZC/FPGA)              Napatech Flow Manager
//	Learn                   pfring_add_hw_rule (flow)      NT_FlowWrite (learn, gfi, tau)
//	Unlearn                 pfring_remove_hw_rule          NT_FlowWrite (unlearn)
//	LearnDone/Failed/Ignored —                             NT_FlowStatusRead
//	Unlearned + Cause       pfring_recv_flow (SW, TIMEOUT, NT_FlowRead (flow-info record,
//	                        TCP_TERM)                      cause)
//	Mark hit/miss/unhandled PKT_FLAGS_FLOW_HIT/MISS/…      color/descriptor bits
//
// Learning is asynchronous everywhere: Learn queues requests to the
// NIC's "firmware" and returns; the outcome of each arrives as an event.

// Sentinel errors of flow tables; backends wrap them with %w.
var (
	ErrQueueFull = errors.New("flow table request queue full")
	ErrClosed    = errors.New("flow table closed")
)

// FlowKey is a flow in both directions: the endpoints sorted, the lower
// (address, then port) first, as bpf/lib/flow.h sorts them. A packet from
// Lo to Hi is direction 0.
//
// It is defined here, in the NIC tier, on purpose, and once: the NIC's
// flow table (FlowTable, Learn, FlowEvent; nicstage, flower) keys on it,
// and this room sits below the probe's, so the probe's packages (flow,
// dpi, xdp, flowprobe) name it tier.FlowKey without an arrow back up,
// while a definition in internal/probe would be one the tier cannot
// import. A leaf package of its own would add a room for one type whose
// Validate speaks this tier's ErrInvalid, and move no other arrow: the
// engine drives FlowTable anyway.
type FlowKey struct {
	Proto uint8          `json:"proto"`
	Lo    netip.AddrPort `json:"lo"`
	Hi    netip.AddrPort `json:"hi"`
}

// NewFlowKey returns the key of a packet from src to dst and the packet's
// direction within it (0: src is Lo). IPv4-mapped addresses are kept as
// they are: hardware matches the header it sees.
func NewFlowKey(proto uint8, src, dst netip.AddrPort) (FlowKey, int) {
	if cmpEndpoint(src, dst) <= 0 {
		return FlowKey{Proto: proto, Lo: src, Hi: dst}, 0
	}
	return FlowKey{Proto: proto, Lo: dst, Hi: src}, 1
}

func cmpEndpoint(a, b netip.AddrPort) int {
	aa, ba := a.Addr().As16(), b.Addr().As16()
	if a.Addr().Is4() {
		// The data plane keeps IPv4 in the first four bytes.
		aa = [16]byte{}
		v := a.Addr().As4()
		copy(aa[:], v[:])
	}
	if b.Addr().Is4() {
		ba = [16]byte{}
		v := b.Addr().As4()
		copy(ba[:], v[:])
	}
	if c := bytes.Compare(aa[:], ba[:]); c != 0 {
		return c
	}
	switch {
	case a.Port() < b.Port():
		return -1
	case a.Port() > b.Port():
		return 1
	}
	return 0
}

// Validate checks that k is a sorted flow of one family without zones.
func (k FlowKey) Validate() error {
	if !k.Lo.Addr().IsValid() || !k.Hi.Addr().IsValid() {
		return fmt.Errorf("%w: flow endpoints %v, %v", ErrInvalid, k.Lo, k.Hi)
	}
	if k.Lo.Addr().Is4() != k.Hi.Addr().Is4() || k.Lo.Addr().Zone() != "" || k.Hi.Addr().Zone() != "" {
		return fmt.Errorf("%w: flow endpoints %v, %v of different families", ErrInvalid, k.Lo, k.Hi)
	}
	if k.Proto == 0 {
		return fmt.Errorf("%w: flow without a protocol", ErrInvalid)
	}
	if k.Proto != 6 && k.Proto != 17 && (k.Lo.Port() != 0 || k.Hi.Port() != 0) {
		return fmt.Errorf("%w: ports with protocol %d", ErrInvalid, k.Proto)
	}
	if cmpEndpoint(k.Lo, k.Hi) > 0 {
		return fmt.Errorf("%w: flow endpoints not sorted", ErrInvalid)
	}
	return nil
}

func (k FlowKey) String() string {
	return fmt.Sprintf("%s %s <> %s", rule.ProtoName(k.Proto), k.Lo, k.Hi)
}

// FlowAction is what the NIC does with a learned flow's packets once it
// has counted them.
type FlowAction uint8

const (
	FlowForward FlowAction = 1 // passive: counted, to the host marked hit; inline: to the twin port
	FlowDiscard FlowAction = 2 // counted and dropped: a passive probe's offload (the NIC consumes it)
)

var flowActionNames = enum.New("flow action", ErrInvalid, map[FlowAction]string{FlowForward: "forward", FlowDiscard: "discard"})

func (a FlowAction) String() string { return flowActionNames.String(a) }

// LearnOptions are a learned flow's options; zero values take the
// table's defaults.
type LearnOptions struct {
	TCPAutoUnlearn bool          // unlearn on FIN from both sides or RST
	IdleTimeout    time.Duration // unlearn after this long without packets
	Lifetime       time.Duration // unlearn this long after learning
}

// Learn asks the NIC to take a flow over.
type Learn struct {
	ID      uint64 // the application's flow id, unique among learned flows
	Key     FlowKey
	Action  FlowAction
	Options LearnOptions
}

// FlowEventKind says what a FlowEvent reports.
type FlowEventKind uint8

const (
	LearnDone    FlowEventKind = 1 // the flow is in hardware
	LearnFailed  FlowEventKind = 2 // not learned: Err says why (ErrTableFull, …)
	LearnIgnored FlowEventKind = 3 // a duplicate id or key, or an unlearn of an unknown id
	Unlearned    FlowEventKind = 4 // left hardware: Cause and the final counters
)

var eventNames = enum.New("event", ErrInvalid, map[FlowEventKind]string{
	LearnDone: "learn-done", LearnFailed: "learn-failed", LearnIgnored: "learn-ignored", Unlearned: "unlearned",
})

func (k FlowEventKind) String() string { return eventNames.String(k) }

// Cause is why a flow was unlearned (PF_RING's update causes, Napatech's
// flow-info causes).
type Cause uint8

const (
	CauseIdle     Cause = 1 // idle timeout
	CauseLifetime Cause = 2 // lifetime (active) timeout
	CauseTCPTerm  Cause = 3 // TCP FIN from both sides or RST (auto-unlearn)
	CauseApp      Cause = 4 // the application's Unlearn
	CauseFlush    Cause = 5 // the table was closed or reset
)

var causeNames = enum.New("unlearn cause", ErrInvalid, map[Cause]string{
	CauseIdle: "idle", CauseLifetime: "lifetime", CauseTCPTerm: "tcp-term", CauseApp: "app", CauseFlush: "flush",
})

func (c Cause) String() string { return causeNames.String(c) }

// MarshalText writes the cause's name (JSON map keys, logs).
func (c Cause) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// UnmarshalText reads a cause's name.
func (c *Cause) UnmarshalText(b []byte) error { return causeNames.Unmarshal(c, b) }

// FlowCounters are a learned flow's hardware counters, per direction of
// its key. Bytes count from the IP header on, as NICs do.
type FlowCounters struct {
	Packets  [2]uint64
	Bytes    [2]uint64
	TCPFlags [2]uint8 // OR of the flags seen, where the NIC keeps them
	First    time.Time
	Last     time.Time
}

// FlowEvent is one outcome reported by the NIC.
type FlowEvent struct {
	Kind     FlowEventKind
	ID       uint64
	Key      FlowKey
	Cause    Cause // Unlearned only
	Err      error // LearnFailed, LearnIgnored: why
	Counters FlowCounters
	At       time.Time
}

// FlowCaps is what a flow table can do.
type FlowCaps struct {
	Name           string `json:"name"`
	Capacity       int    `json:"capacity"`
	Directions     bool   `json:"directions"` // counters per direction (else all in Packets[0])
	Discard        bool   `json:"discard"`
	TCPAutoUnlearn bool   `json:"tcp_auto_unlearn"`
	Timeouts       bool   `json:"timeouts"`   // ages flows itself (else the backend polls)
	Marks          bool   `json:"marks"`      // packets reaching the host carry hit/miss/unhandled
	LearnRate      int    `json:"learn_rate"` // learns per second the firmware sustains, 0: unknown
}

// FlowTable is a NIC's flow table. Implementations are safe for use by one
// goroutine at a time (the probe's); Learn and Unlearn never block on the
// NIC: they queue and return ErrQueueFull (wrapped, with the number
// queued) when the firmware queue is full. An Unlearned event is the last
// word on a flow: after it the id may be reused.
type FlowTable interface {
	Caps() FlowCaps
	Learn(reqs []Learn) (queued int, err error)
	Unlearn(ids []uint64) (queued int, err error)
	// Events copies up to len(buf) pending events into buf; never blocks.
	Events(buf []FlowEvent) (int, error)
	// Read returns the current counters of learned flows, ErrNoRule
	// (wrapped) for an id not in hardware.
	Read(id uint64) (FlowCounters, error)
	// Occupancy is the number of flows in hardware now.
	Occupancy() int
	Close() error
}
