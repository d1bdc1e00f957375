// SPDX-License-Identifier: Apache-2.0

package nicstage

// The emulated NIC in flow mode (bpf/nic/xdp_nicflow.c): a hardware flow table
// after Napatech's Flow Manager, driven through tier.FlowTable. The data
// plane counts and acts on learned flows and marks everything else for the
// host; a "firmware" goroutine here serves learn and unlearn requests at a
// configured rate and latency, ages flows, and reports every outcome as an
// event.

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/tierwall/tierwall/internal/datapath"
	"github.com/tierwall/tierwall/internal/tier"
	"github.com/tierwall/tierwall/internal/tier/flowtab"
)

// Flow-mode defaults. Napatech's firmware learns on the order of 10^5-10^6
// flows a second with a pipeline delay of tens of microseconds; the source
// table's 2 ms serial update would cap learning at 500 flows a second.
const (
	DefaultFlowCapacity  = 1 << 20
	DefaultLearnRate     = 100_000
	DefaultLearnLatency  = 50 * time.Microsecond
	DefaultFlowQueueLen  = 64 << 10
	DefaultEventQueueLen = 1 << 20
	DefaultIdleTimeout   = 30 * time.Second
)

// FlowOptions configure the emulated NIC in flow mode.
type FlowOptions struct {
	Capacity int // K, the hardware table's size; default 1<<20
	// LearnRate is the learn and unlearn requests per second the firmware
	// completes (a token bucket with a 10 ms burst); default 1e5.
	LearnRate int
	// LearnLatency is the firmware's time per update: no request completes
	// sooner than this after it was queued. Updates are pipelined, so the
	// rate is LearnRate, not 1/LearnLatency. Default 50µs.
	LearnLatency time.Duration
	QueueLen     int // queued requests; default 64K
	// EventQueueLen bounds the undelivered events; default 1M. The
	// firmware never drops one: while the queue is full it serves no
	// request and unlearns nothing (flows stay counted in hardware), and
	// counts the stall. Learn and Unlearn then fill up and say so.
	EventQueueLen int
	IdleTimeout   time.Duration // flows' default; default 30s, <0: none
	Lifetime      time.Duration // flows' default; 0: none
	// Inline forwards a learned flow's packets out of the twin port; else
	// (passive) they go to the host marked HIT.
	Inline bool
	// Return is the port the host forwards inline traffic back through,
	// where the return path runs; default the host port itself.
	Return string
	Seed   uint32 // flow hash seed; 0: random

	hostIndex, twinIndex int          // set by AttachFlow, or tests
	manual               bool         // tests: no firmware goroutine, they call step
	now                  func() int64 // CLOCK_MONOTONIC ns; tests replace it
}

func (o *FlowOptions) defaults() error {
	o.Capacity = cmp.Or(o.Capacity, DefaultFlowCapacity)
	o.LearnRate = cmp.Or(o.LearnRate, DefaultLearnRate)
	o.LearnLatency = cmp.Or(o.LearnLatency, DefaultLearnLatency)
	o.QueueLen = cmp.Or(o.QueueLen, DefaultFlowQueueLen)
	o.EventQueueLen = cmp.Or(o.EventQueueLen, DefaultEventQueueLen)
	o.IdleTimeout = cmp.Or(o.IdleTimeout, DefaultIdleTimeout)
	if o.now == nil {
		o.now = monoNow
	}
	switch {
	case o.Capacity < 1 || o.Capacity > 1<<24:
		return fmt.Errorf("%w: flow table capacity %d out of range 1..16M", datapath.ErrInvalid, o.Capacity)
	case o.LearnRate < 1 || o.LearnRate > 100_000_000:
		return fmt.Errorf("%w: learn rate %d out of range 1..1e8", datapath.ErrInvalid, o.LearnRate)
	case o.LearnLatency < 0 || o.LearnLatency > time.Second:
		return fmt.Errorf("%w: learn latency %v out of range 0..1s", datapath.ErrInvalid, o.LearnLatency)
	case o.QueueLen < 1 || o.EventQueueLen < 1:
		return fmt.Errorf("%w: queue lengths %d, %d", datapath.ErrInvalid, o.QueueLen, o.EventQueueLen)
	case o.Lifetime < 0:
		return fmt.Errorf("%w: lifetime %v", datapath.ErrInvalid, o.Lifetime)
	case o.Inline && o.twinIndex == 0 && o.hostIndex != 0:
		return fmt.Errorf("%w: inline mode without a twin port", datapath.ErrInvalid)
	}
	return nil
}

func monoNow() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) // cannot fail for this clock
	return ts.Nano()
}

// FlowTable is the emulated NIC's flow table: tier.FlowTable.
type FlowTable struct {
	Iface string // wire-facing port, "" when detached

	o      FlowOptions
	objs   nicflowObjects
	links  []link.Link
	term   *ringbuf.Reader
	rcu    *ebpf.Map // a one-slot ARRAY_OF_MAPS: updating it waits out an RCU grace period
	rcuIn  *ebpf.Map
	now    func() int64
	mono0  int64 // mono0 on the firmware's clock is wall0
	wall0  time.Time
	q      *flowtab.Queues // requests (Ready on the firmware's clock), events, the firmware's goroutine
	closer sync.Once

	mu        sync.Mutex
	flows     map[uint64]*hwFlow // in hardware, until its Unlearned event
	keys      map[nicflowTwFlowKey]uint64
	occupancy int
	stats     FirmwareStats

	// The firmware goroutine's own.
	credit    int64 // token bucket, in request-nanoseconds (1e9 per request)
	lastFill  int64
	cursor    ebpf.MapBatchCursor
	lastSweep int64
	sweepK    []nicflowTwFlowKey
	sweepV    []nicflowTwNicflowEntry
}

type hwFlow struct {
	key        tier.FlowKey
	bkey       nicflowTwFlowKey
	unlearning bool
}

// FirmwareStats count what the firmware did.
type FirmwareStats struct {
	flowtab.Counts        // the events it reported
	Stalls         uint64 // steps that served nothing: event queue full
	GracePeriods   uint64 // RCU grace periods waited (one per unlearn batch)
	SweepPasses    uint64 // full passes of the ageing sweep
	Orphans        uint64 // flows gone from the table behind the firmware's back
}

var _ tier.FlowTable = (*FlowTable)(nil)

// LoadFlow loads the flow-mode NIC attached nowhere, passing to the host
// as XDP_PASS: for BPF_PROG_TEST_RUN and benchmarks.
func LoadFlow(o FlowOptions) (*FlowTable, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	spec, err := loadNicflow()
	if err != nil {
		return nil, fmt.Errorf("loading NIC flow spec: %w", err)
	}
	spec.Maps["tw_nicflow_table"].MaxEntries = uint32(o.Capacity)
	if o.Seed == 0 {
		var b [4]byte
		if _, err := unix.Getrandom(b[:], 0); err != nil {
			return nil, fmt.Errorf("drawing flow hash seed: %w", err)
		}
		o.Seed = binary.LittleEndian.Uint32(b[:]) | 1
	}
	inline := uint32(0)
	if o.Inline {
		inline = 1
	}
	for name, v := range map[string]uint32{"tw_nicflow_seed": o.Seed, "tw_nicflow_capacity": uint32(o.Capacity),
		"tw_nicflow_host": uint32(o.hostIndex), "tw_nicflow_twin": uint32(o.twinIndex), "tw_nicflow_inline": inline} {
		if err := spec.Variables[name].Set(v); err != nil {
			return nil, fmt.Errorf("setting %s: %w", name, err)
		}
	}
	t := &FlowTable{o: o, now: o.now, flows: map[uint64]*hwFlow{}, keys: map[nicflowTwFlowKey]uint64{},
		q: flowtab.New(o.QueueLen, o.EventQueueLen)}
	if err := spec.LoadAndAssign(&t.objs, nil); err != nil {
		return nil, fmt.Errorf("loading NIC flow stage: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			t.release()
		}
	}()
	if t.term, err = ringbuf.NewReader(t.objs.TwNicflowTerm); err != nil {
		return nil, fmt.Errorf("opening auto-unlearn ring: %w", err)
	}
	inner := &ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1}
	if t.rcuIn, err = ebpf.NewMap(inner); err != nil {
		return nil, fmt.Errorf("creating grace-period map: %w", err)
	}
	if t.rcu, err = ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.ArrayOfMaps, KeySize: 4, ValueSize: 4, MaxEntries: 1, InnerMap: inner}); err != nil {
		return nil, fmt.Errorf("creating grace-period map: %w", err)
	}
	t.mono0, t.wall0 = t.now(), time.Now()
	t.lastFill, t.lastSweep = t.mono0, t.mono0
	t.credit = t.burst()
	ok = true
	if !o.manual {
		t.q.Start(t.run)
	}
	return t, nil
}

// AttachFlow puts the flow-mode NIC on wire, passing to host; in inline
// mode learned flows leave by twin and the host's returns on host are sent
// out of twin too (one direction of the wire: the other is a second table
// with the ports swapped). All three ports are in the current network
// namespace. The state is this process's: Close detaches and flushes.
func AttachFlow(wire, host, twin string, o FlowOptions) (_ *FlowTable, err error) {
	wi, err := net.InterfaceByName(wire)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", datapath.ErrNoInterface, wire)
	}
	hi, err := net.InterfaceByName(host)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", datapath.ErrNoInterface, host)
	}
	o.hostIndex = hi.Index
	if o.Inline || twin != "" {
		ti, err := net.InterfaceByName(twin)
		if err != nil {
			return nil, fmt.Errorf("%w: twin port %q", datapath.ErrNoInterface, twin)
		}
		o.twinIndex = ti.Index
	}
	t, err := LoadFlow(o)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			t.Close()
		}
	}()
	t.Iface = wire
	// Native XDP, as the source-rule stage: veth supports it.
	l, err := link.AttachXDP(link.XDPOptions{Program: t.objs.TwNicflow, Interface: wi.Index, Flags: link.XDPDriverMode})
	if err != nil {
		return nil, fmt.Errorf("attaching NIC flow stage to %s: %w", wire, err)
	}
	t.links = append(t.links, l)
	if o.Inline {
		ret := hi
		if o.Return != "" {
			if ret, err = net.InterfaceByName(o.Return); err != nil {
				return nil, fmt.Errorf("%w: return port %q", datapath.ErrNoInterface, o.Return)
			}
		}
		l, err := link.AttachXDP(link.XDPOptions{Program: t.objs.TwNicflowRet, Interface: ret.Index, Flags: link.XDPDriverMode})
		if err != nil {
			return nil, fmt.Errorf("attaching NIC return path to %s: %w", ret.Name, err)
		}
		t.links = append(t.links, l)
	}
	return t, nil
}

// Program is the wire-port program; ReturnProgram the host-port one.
func (t *FlowTable) Program() *ebpf.Program       { return t.objs.TwNicflow }
func (t *FlowTable) ReturnProgram() *ebpf.Program { return t.objs.TwNicflowRet }

// Seed is the flow hash seed (see FlowHash).
func (t *FlowTable) Seed() uint32 { return t.o.Seed }

func (t *FlowTable) Caps() tier.FlowCaps {
	return tier.FlowCaps{Name: "emulated", Capacity: t.o.Capacity, Directions: true, Discard: true,
		TCPAutoUnlearn: true, Timeouts: true, Marks: true, LearnRate: t.o.LearnRate}
}

// Learn queues learn requests in order, as many as fit.
func (t *FlowTable) Learn(reqs []tier.Learn) (int, error) { return t.q.Learn(reqs, t.ready()) }

// Unlearn queues unlearn requests, in order with the learns.
func (t *FlowTable) Unlearn(ids []uint64) (int, error) { return t.q.Unlearn(ids, t.ready()) }

// ready is when a request queued now may be served: LearnLatency on.
func (t *FlowTable) ready() int64 { return t.now() + int64(t.o.LearnLatency) }

// Events hands out pending events, oldest first. After Close it still
// hands out what is left (the flush's Unlearned events), then ErrClosed.
func (t *FlowTable) Events(buf []tier.FlowEvent) (int, error) { return t.q.Events(buf) }

// Read returns a learned flow's counters now.
func (t *FlowTable) Read(id uint64) (tier.FlowCounters, error) {
	t.mu.Lock()
	f := t.flows[id]
	t.mu.Unlock()
	if f == nil {
		return tier.FlowCounters{}, fmt.Errorf("%w: flow %d", tier.ErrNoRule, id)
	}
	var e nicflowTwNicflowEntry
	if err := t.objs.TwNicflowTable.Lookup(&f.bkey, &e); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return tier.FlowCounters{}, fmt.Errorf("%w: flow %d", tier.ErrNoRule, id)
		}
		return tier.FlowCounters{}, fmt.Errorf("reading flow %d: %w", id, err)
	}
	return t.counters(&e), nil
}

// Occupancy is the flows in the table, those being unlearned included.
func (t *FlowTable) Occupancy() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.occupancy
}

// Stats returns what the firmware did so far.
func (t *FlowTable) Stats() FirmwareStats {
	t.mu.Lock()
	st := t.stats
	t.mu.Unlock()
	st.Counts = t.q.Counts()
	return st
}

// FlowVerdicts names the data plane's verdict counters, in enum order.
var FlowVerdicts = []string{"hit_discard", "hit_host", "hit_twin", "miss", "unhandled_full", "unhandled_proto",
	"unhandled_frag", "unhandled_ext", "unhandled_parse", "return", "tx_error", "no_meta", "term_lost", "unlearning"}

// Verdicts returns the data plane's per-verdict counters, summed over CPUs.
func (t *FlowTable) Verdicts() (map[string]tier.Counters, error) {
	return sumVerdicts[nicflowTwCtr, tier.Counters](t.objs.TwNicflowStats, FlowVerdicts, "NIC flow stats")
}

// Close stops the firmware, unlearns every flow (Unlearned, CauseFlush,
// with final counters; queued learns fail with ErrClosed), detaches and
// releases the stage. Events keeps handing out what is left.
func (t *FlowTable) Close() error {
	var err error
	t.closer.Do(func() {
		t.q.Close(func() time.Time { return t.wall(t.now()) })
		t.mu.Lock()
		var all []unlearnReq
		for id, f := range t.flows {
			if !f.unlearning {
				all = append(all, unlearnReq{id: id, cause: tier.CauseFlush})
			}
		}
		t.mu.Unlock()
		err = t.unlearn(t.now(), all)
		t.release()
	})
	return err
}

func (t *FlowTable) release() {
	for _, l := range t.links {
		l.Close()
	}
	if t.term != nil {
		t.term.Close()
	}
	if t.rcu != nil {
		t.rcu.Close()
	}
	if t.rcuIn != nil {
		t.rcuIn.Close()
	}
	t.objs.Close()
}

func (t *FlowTable) wall(mono int64) time.Time { return t.wall0.Add(time.Duration(mono - t.mono0)) }

func (t *FlowTable) counters(e *nicflowTwNicflowEntry) tier.FlowCounters {
	return tier.FlowCounters{Packets: e.Packets, Bytes: e.Bytes,
		TCPFlags: [2]uint8{uint8(e.TcpFlags), uint8(e.TcpFlags >> 8)},
		First:    t.wall(int64(e.LearnedNs)), Last: t.wall(int64(e.LastNs))}
}

// bpfKey is k as the data plane keys it (flow.h: IPv4 in the first four
// bytes, ports in network order).
func bpfKey(k tier.FlowKey) nicflowTwFlowKey {
	b := nicflowTwFlowKey{Proto: k.Proto, Family: 6, PortLo: htons(k.Lo.Port()), PortHi: htons(k.Hi.Port())}
	put := func(dst *[16]uint8, a netip.Addr) {
		if a.Is4() {
			v := a.As4()
			copy(dst[:], v[:])
			return
		}
		*dst = a.As16()
	}
	if k.Lo.Addr().Is4() {
		b.Family = 4
	}
	put(&b.AddrLo, k.Lo.Addr())
	put(&b.AddrHi, k.Hi.Addr())
	return b
}

// FlowHash is the NIC's flow hash of k under seed (bpf/lib/nicflow.h:
// MurmurHash3 x86_32 of the key's ten little-endian words), the hash in a
// packet's tw_flow_meta.
func FlowHash(k tier.FlowKey, seed uint32) uint32 {
	b := bpfKey(k)
	var raw [40]byte
	raw[0], raw[1] = b.Family, b.Proto
	binary.LittleEndian.PutUint16(raw[4:], b.PortLo)
	binary.LittleEndian.PutUint16(raw[6:], b.PortHi)
	copy(raw[8:], b.AddrLo[:])
	copy(raw[24:], b.AddrHi[:])
	rotl := func(x uint32, r uint) uint32 { return x<<r | x>>(32-r) }
	h := seed
	for i := 0; i < len(raw); i += 4 {
		k := binary.LittleEndian.Uint32(raw[i:]) * 0xcc9e2d51
		k = rotl(k, 15) * 0x1b873593
		h ^= k
		h = rotl(h, 13)*5 + 0xe6546b64
	}
	h ^= uint32(len(raw))
	h ^= h >> 16
	h *= 0x85ebca6b
	h ^= h >> 13
	h *= 0xc2b2ae35
	h ^= h >> 16
	return h
}
