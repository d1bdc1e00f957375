// SPDX-License-Identifier: Apache-2.0

package trafgen

import (
	"context"
	"fmt"
	"math"
	"net/netip"
	"time"

	"github.com/tierwall/tierwall/internal/pkt"
	"github.com/tierwall/tierwall/internal/rule"
	"github.com/tierwall/tierwall/internal/testbed/gen"
	"github.com/tierwall/tierwall/internal/tier"
)

// Flow mode: the generator plays both ends of A concurrent flows.
//
// Flows are numbered 0, 1, 2, … in birth order, and everything about flow
// i derives from i: its application Apps[i % len(Apps)], its protocol, its
// client endpoint (Clients' i % hosts-th address, port ClientPorts[0] +
// (i / hosts) % ports) and its server (Dst + i % Servers, the
// application's port); gen.AddrPlan is that arithmetic, shared with the
// BPF program. The active flows are the window [b-A, b), b the flows born
// so far; a birth closes flow b-A and opens flow b.
//
// Time is counted in frames, so that a run is reproducible and its report
// exact: a birth happens every BirthEvery frames (BirthRate sets
// BirthEvery from the measured send rate before every kernel call).
// Frames that are not part of a close or an open go round-robin over the
// window's slots, one data frame to a flow per visit. A run starts by
// opening A flows back to back, so the window is full from the first data
// frame on.
//
// A TCP flow's frames: SYN (client to server), SYN-ACK, ACK; data frames
// alternating client→server and server→client, the first in each direction
// carrying the application's message (seq/ack advance with the payload);
// when it leaves the window FIN-ACK (client), FIN-ACK (server), ACK. A
// UDP flow is the data frames alone, without an end marker. Closing and
// opening frames go out back to back, FINs first.
//
// The BPF program builds the frames from a schedule this file writes
// (gen.FlowPkt), and names the frames the kernel failed to transmit; the
// report counts the rest, so it is exactly what left the interface.

// FlowStat is what one flow transmitted. Directions are those of Key
// (tier.NewFlowKey: 0 is from Key.Lo); ClientDir says which one the
// client sent in. Bytes count from the IP header on, as NICs do.
type FlowStat struct {
	Index     uint64       `json:"index"`
	Key       tier.FlowKey `json:"key"`
	App       string       `json:"app"`
	ClientDir int          `json:"client_dir"`
	Packets   [2]uint64    `json:"packets"`
	Bytes     [2]uint64    `json:"bytes"`
	TCPFlags  [2]uint8     `json:"tcp_flags"` // OR of the flags sent, per direction
	SYN       bool         `json:"syn"`       // the client's SYN left
	FIN       bool         `json:"fin"`       // the client's FIN left
	Ended     bool         `json:"ended"`     // left the window (TCP: closing frames scheduled)
}

// Client and Server return the flow's endpoints.
func (f FlowStat) Client() netip.AddrPort {
	if f.ClientDir == 0 {
		return f.Key.Lo
	}
	return f.Key.Hi
}

func (f FlowStat) Server() netip.AddrPort {
	if f.ClientDir == 0 {
		return f.Key.Hi
	}
	return f.Key.Lo
}

const (
	tcpFIN = 0x01
	tcpSYN = pkt.TCPFlagSYN
	tcpPSH = 0x08
	tcpACK = pkt.TCPFlagACK

	maxFlowBatch = 1 << 20 // frames per kernel call (24 MB of schedule)
)

func (s *Spec) flowDefaults() error {
	if s.Duration == 0 && s.Packets > 0 {
		s.Duration = MaxDuration
	}
	if s.Duration <= 0 || s.Duration > MaxDuration {
		return fmt.Errorf("%w: duration %v outside (0, %v]", rule.ErrInvalid, s.Duration, MaxDuration)
	}
	if !s.Dst.IsValid() {
		return fmt.Errorf("%w: destination (first server) address", rule.ErrInvalid)
	}
	if s.Flows > 1<<24 {
		return fmt.Errorf("%w: %d active flows (at most %d)", rule.ErrInvalid, s.Flows, 1<<24)
	}
	switch {
	case s.BirthEvery > 0 && s.BirthRate > 0:
		return fmt.Errorf("%w: both a birth rate and a birth interval", rule.ErrInvalid)
	case s.BirthEvery == 0 && s.BirthRate == 0:
		return fmt.Errorf("%w: flow mode needs a birth rate or interval", rule.ErrInvalid)
	case s.BirthEvery < 0 || s.BirthRate < 0 || (s.BirthEvery > 0 && s.BirthEvery < 1):
		return fmt.Errorf("%w: birth every %v frames, %v per second", rule.ErrInvalid, s.BirthEvery, s.BirthRate)
	}
	if s.PacketSize == 0 {
		s.PacketSize = 64
	}
	if s.PacketSize < 64 || s.PacketSize > 1518 {
		return fmt.Errorf("%w: packet size %d outside 64..1518", rule.ErrInvalid, s.PacketSize)
	}
	switch s.Proto {
	case "":
		s.Proto = "tcp"
	case "tcp", "udp", "mixed":
	default:
		return fmt.Errorf("%w: protocol %q (want tcp, udp or mixed)", rule.ErrInvalid, s.Proto)
	}
	if len(s.Apps) == 0 {
		s.Apps = []string{AppGeneric}
	}
	if !s.Clients.IsValid() {
		s.Clients = netip.MustParsePrefix("10.128.0.0/16")
		if s.Dst.Is6() {
			s.Clients = netip.MustParsePrefix("fd00:100::/112")
		}
	}
	if s.Clients.Addr().Is4() != s.Dst.Is4() {
		return fmt.Errorf("%w: clients %s and server %s differ in family", rule.ErrInvalid, s.Clients, s.Dst)
	}
	if s.ClientPorts == [2]uint16{} {
		s.ClientPorts = [2]uint16{1024, 65535}
	}
	if s.ClientPorts[0] == 0 || s.ClientPorts[1] < s.ClientPorts[0] {
		return fmt.Errorf("%w: client ports %d..%d", rule.ErrInvalid, s.ClientPorts[0], s.ClientPorts[1])
	}
	if s.Servers == 0 {
		s.Servers = 1
	}
	if s.Host == "" {
		s.Host = "www.example.com"
	}
	return nil
}

// flowPlan is a flow-mode spec turned into numbers.
type flowPlan struct {
	addr     gen.AddrPlan
	apps     []appTemplate
	payloads [][]byte // templates: [0] empty, then each app's request and response
	reqPL    []uint8  // per app: template index of the request, of the response
	respPL   []uint8
	mixed    bool
	udp      bool // generic flows' protocol unless mixed
	iphl     int
	dataPL   [2]int // payload of a data frame of PacketSize: TCP, UDP
	maxIPLen int
}

func newFlowPlan(s *Spec) (*flowPlan, error) {
	p := &flowPlan{payloads: [][]byte{nil}, mixed: s.Proto == "mixed", udp: s.Proto == "udp", iphl: 20}
	if s.Dst.Is6() {
		p.iphl = 40
	}
	hostBits := s.Clients.Addr().BitLen() - s.Clients.Bits()
	hosts := uint64(1) << min(hostBits, 32)
	if hostBits >= 2 && hostBits <= 32 {
		hosts -= 2 // not the network nor the broadcast address
	}
	first := s.Clients.Masked().Addr()
	if hostBits >= 2 {
		first = first.Next()
	}
	p.addr = gen.AddrPlan{
		Clients: first, Hosts: uint32(min(hosts, math.MaxUint32)),
		PortLo: s.ClientPorts[0], Ports: uint32(s.ClientPorts[1]) - uint32(s.ClientPorts[0]) + 1,
		Servers: s.Dst, NServers: uint32(s.Servers),
	}
	if err := p.addr.Validate(); err != nil {
		return nil, err
	}
	wire := s.PacketSize - 4 - 14 - p.iphl // FCS, Ethernet, IP
	p.dataPL = [2]int{max(wire-20, 0), max(wire-8, 0)}
	p.maxIPLen = p.iphl + 20 + max(p.dataPL[0], p.dataPL[1]-12)
	for _, name := range s.Apps {
		a, err := buildApp(name, s.Host)
		if err != nil {
			return nil, err
		}
		if a.udp == 0 && s.Proto == "udp" {
			return nil, fmt.Errorf("%w: application %s runs over TCP, the spec asks for UDP only", rule.ErrInvalid, name)
		}
		p.apps = append(p.apps, a)
		for _, m := range []struct {
			b  []byte
			pl *[]uint8
		}{{a.req, &p.reqPL}, {a.resp, &p.respPL}} {
			idx := 0
			if len(m.b) > 0 {
				if len(m.b) > gen.MaxPayload {
					return nil, fmt.Errorf("%w: %s message of %d bytes (at most %d)", rule.ErrInvalid, name, len(m.b), gen.MaxPayload)
				}
				idx = len(p.payloads)
				p.payloads = append(p.payloads, m.b)
				p.maxIPLen = max(p.maxIPLen, p.iphl+20+len(m.b))
			}
			*m.pl = append(*m.pl, uint8(idx))
		}
	}
	if p.maxIPLen > 1500 {
		return nil, fmt.Errorf("%w: frames of %d IP bytes", rule.ErrInvalid, p.maxIPLen)
	}
	return p, nil
}

// flowApp returns flow i's application and whether it runs over UDP.
func (p *flowPlan) flowApp(i uint64) (int, bool) {
	a := int(i % uint64(len(p.apps)))
	switch p.apps[a].udp {
	case 1:
		return a, true
	case 0:
		return a, false
	}
	if p.mixed {
		return a, (i/uint64(len(p.apps)))%2 == 1
	}
	return a, p.udp
}

// key returns flow i's flow key and the client's direction in it.
func (p *flowPlan) key(i uint64, app int, udp bool) (tier.FlowKey, int) {
	c, srv := p.addr.Endpoints(uint32(i))
	proto := uint8(pkt.ProtoTCP)
	if udp {
		proto = pkt.ProtoUDP
	}
	return tier.NewFlowKey(proto, c, netip.AddrPortFrom(srv, p.apps[app].port))
}

// flowSlot is an active flow's scheduling state.
type flowSlot struct {
	idx  uint32
	app  uint8
	udp  bool
	data uint32    // data frames scheduled
	next [2]uint32 // next sequence number: client, server
}

// flowCtr is what a flow sent, by client→server (0) and server→client
// (1); pointer-free, so millions cost the garbage collector nothing.
// FlowStat is made from it at the end of the run.
type flowCtr struct {
	pk, by          [2]uint64
	flags           [2]uint8
	syn, fin, ended bool
}

// flowCtrs holds one flowCtr per flow index, in chunks so that growing
// never copies.
type flowCtrs struct{ chunks [][]flowCtr }

const ctrChunk = 1 << 16

func (c *flowCtrs) add() {
	if n := len(c.chunks); n == 0 || len(c.chunks[n-1]) == ctrChunk {
		c.chunks = append(c.chunks, make([]flowCtr, 0, ctrChunk))
	}
	last := &c.chunks[len(c.chunks)-1]
	*last = append(*last, flowCtr{})
}

func (c *flowCtrs) at(i uint32) *flowCtr { return &c.chunks[i/ctrChunk][i%ctrChunk] }

// stats turns the counters into the report's flows.
func (s *scheduler) stats() []FlowStat {
	out := make([]FlowStat, 0, s.born)
	for i := uint64(0); i < s.born; i++ {
		c := s.ctrs.at(uint32(i))
		app, udp := s.p.flowApp(i)
		k, cd := s.p.key(i, app, udp)
		st := FlowStat{Index: i, Key: k, App: s.p.apps[app].name, ClientDir: cd, SYN: c.syn, FIN: c.fin, Ended: c.ended}
		for d := range 2 {
			st.Packets[cd^d], st.Bytes[cd^d], st.TCPFlags[cd^d] = c.pk[d], c.by[d], c.flags[d]
		}
		out = append(out, st)
	}
	return out
}

// scheduler turns the flow model into frames.
type scheduler struct {
	p       *flowPlan
	a       int
	every   float64 // frames per birth
	since   float64 // frames since the last birth
	born    uint64
	slots   []flowSlot
	cursor  int
	pending []gen.FlowPkt // the rest of a close and an open
	ph      int
	rep     *Report
	perFlow bool     // count per flow
	ctrs    flowCtrs // by flow index
	full    bool     // the window has filled
}

func newScheduler(p *flowPlan, a int, every float64, rep *Report, perFlow bool) *scheduler {
	return &scheduler{p: p, a: a, every: every, slots: make([]flowSlot, a), rep: rep, perFlow: perFlow}
}

// fill schedules len(out) frames.
func (s *scheduler) fill(out []gen.FlowPkt) error {
	for k := range out {
		for s.ph == len(s.pending) {
			s.pending, s.ph = s.pending[:0], 0
			switch {
			case !s.full:
				s.birth()
				s.full = s.born == uint64(s.a)
			case s.since >= s.every:
				s.since -= s.every
				s.birth()
			default:
				s.pending = append(s.pending, s.data())
			}
		}
		if s.born > math.MaxUint32 {
			return fmt.Errorf("%w: more than 2^32 flows in one run", rule.ErrInvalid)
		}
		out[k] = s.pending[s.ph]
		s.ph++
		if s.full {
			s.since++
		}
	}
	return nil
}

// isn returns flow i's initial sequence numbers (client, server).
func isn(i uint32) [2]uint32 {
	c := i*2654435761 + 0x7477
	return [2]uint32{c, c ^ 0x5a5a5a5a}
}

func (s *scheduler) birth() {
	if s.born >= uint64(s.a) {
		f := &s.slots[(s.born-uint64(s.a))%uint64(s.a)]
		if !f.udp {
			s.tcp(f, false, tcpFIN|tcpACK)
			f.next[0]++
			s.tcp(f, true, tcpFIN|tcpACK)
			f.next[1]++
			s.tcp(f, false, tcpACK)
		}
		if s.perFlow {
			s.ctrs.at(f.idx).ended = true
		}
		s.rep.Ended++
	}
	i := s.born
	app, udp := s.p.flowApp(i)
	f := &s.slots[i%uint64(s.a)]
	*f = flowSlot{idx: uint32(i), app: uint8(app), udp: udp, next: isn(uint32(i))}
	if s.perFlow {
		s.ctrs.add()
	}
	s.born++
	s.rep.Born++
	if !udp {
		isn := f.next
		s.pending = append(s.pending, s.frame(f, false, tcpSYN, isn[0], 0, 0, 0))
		s.pending = append(s.pending, s.frame(f, true, tcpSYN|tcpACK, isn[1], isn[0]+1, 0, 0))
		f.next = [2]uint32{isn[0] + 1, isn[1] + 1}
		s.tcp(f, false, tcpACK)
	}
}

// tcp queues a frame without payload at the flow's current numbers.
func (s *scheduler) tcp(f *flowSlot, s2c bool, flags uint8) {
	d := b2i(s2c)
	s.pending = append(s.pending, s.frame(f, s2c, flags, f.next[d], f.next[1-d], 0, 0))
}

func (s *scheduler) frame(f *flowSlot, s2c bool, flags uint8, seq, ack uint32, pl uint8, plen int) gen.FlowPkt {
	l4 := 20
	if f.udp {
		l4 = 8
	}
	return gen.FlowPkt{
		Flow: f.idx, Seq: seq, Ack: ack, IPLen: uint16(s.p.iphl + l4 + plen),
		ServerPort: s.p.apps[f.app].port, TCPFlags: flags, S2C: s2c, UDP: f.udp, Payload: pl,
	}
}

// data is the next data frame of the flow at the cursor.
func (s *scheduler) data() gen.FlowPkt {
	f := &s.slots[s.cursor]
	s.cursor++
	if s.cursor == s.a {
		s.cursor = 0
	}
	n := f.data
	f.data++
	s2c := n%2 == 1
	var pl uint8
	switch n {
	case 0:
		pl = s.p.reqPL[f.app]
	case 1:
		pl = s.p.respPL[f.app]
	}
	plen := max(len(s.p.payloads[pl]), s.p.dataPL[b2i(f.udp)])
	if f.udp {
		return s.frame(f, s2c, 0, 0, 0, pl, plen)
	}
	d := b2i(s2c)
	p := s.frame(f, s2c, tcpACK|tcpPSH, f.next[d], f.next[1-d], pl, plen)
	f.next[d] += uint32(plen)
	return p
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// account adds the frames of a batch that left to the report.
func (s *scheduler) account(batch []gen.FlowPkt, dropped []uint32, mark []bool) {
	for _, k := range dropped {
		mark[k] = true
	}
	s.rep.Scheduled += uint64(len(batch))
	s.rep.Dropped += uint64(len(dropped))
	s.rep.Sent += uint64(len(batch) - len(dropped))
	if !s.perFlow {
		for _, k := range dropped {
			mark[k] = false
		}
		return
	}
	for k := range batch {
		if mark[k] {
			mark[k] = false
			continue
		}
		p := &batch[k]
		c := s.ctrs.at(p.Flow)
		d := b2i(p.S2C)
		c.pk[d]++
		c.by[d] += uint64(p.IPLen)
		c.flags[d] |= p.TCPFlags
		if !p.S2C {
			c.syn = c.syn || p.TCPFlags == tcpSYN
			c.fin = c.fin || p.TCPFlags&tcpFIN != 0
		}
	}
}

// flowGenSpec is the kernel side's configuration for a plan.
func (p *flowPlan) genSpec(s *Spec) gen.FlowGenSpec {
	return gen.FlowGenSpec{
		Iface: s.Iface, SrcMAC: s.SrcMAC, DstMAC: s.DstMAC, Plan: p.addr,
		Payloads: p.payloads, MaxIPLen: p.maxIPLen, Capacity: maxFlowBatch,
	}
}

// runFlows is Run in flow mode.
func runFlows(ctx context.Context, s Spec) (*Report, error) {
	if err := s.flowDefaults(); err != nil {
		return nil, err
	}
	p, err := newFlowPlan(&s)
	if err != nil {
		return nil, err
	}
	g, err := gen.NewFlowGen(p.genSpec(&s))
	if err != nil {
		return nil, err
	}
	defer g.Close()

	rep := &Report{Window: s.Flows, Epochs: 1}
	rate := 1e6 // frames/s until measured
	every := s.BirthEvery
	if every == 0 {
		every = max(1, rate/s.BirthRate)
	}
	sch := newScheduler(p, s.Flows, every, rep, !s.NoFlowReport)
	batch := make([]gen.FlowPkt, maxFlowBatch)
	mark := make([]bool, maxFlowBatch)
	// Calls of ~200 ms: long against the ~20 ms each call ends with,
	// short enough for a smooth rate cap and a timely stop.
	const slot = 200 * time.Millisecond
	start := time.Now()
	end := start.Add(s.Duration)
	var fullAt time.Time
	var bornFull, schedFull uint64
	for ctx.Err() == nil {
		now := time.Now()
		if !now.Before(end) || (s.Packets > 0 && rep.Scheduled >= s.Packets) {
			break
		}
		n := uint64(rate * min(slot, end.Sub(now)).Seconds())
		if s.Rate > 0 {
			n = s.Rate * uint64(slot/time.Millisecond) / 1000
		}
		n = min(max(n, 1024), maxFlowBatch)
		if s.Packets > 0 {
			n = min(n, s.Packets-rep.Scheduled)
		}
		if s.BirthRate > 0 && !fullAt.IsZero() && rep.Scheduled > schedFull {
			// Births paced on the rate frames have been leaving at since
			// the window filled.
			sch.every = max(1, float64(rep.Scheduled-schedFull)/time.Since(fullAt).Seconds()/s.BirthRate)
		}
		if err := sch.fill(batch[:n]); err != nil {
			return rep, err
		}
		if sch.full && fullAt.IsZero() {
			fullAt, bornFull, schedFull = time.Now(), rep.Born, rep.Scheduled
		}
		callStart := time.Now()
		res, err := g.Send(batch[:n])
		if err != nil {
			return rep, err
		}
		if d := time.Since(callStart); d > 0 {
			rate = float64(n) / d.Seconds()
		}
		sch.account(batch[:n], res.Dropped, mark)
		if res.Refused > 0 {
			return rep, fmt.Errorf("the generator could not build %d frames of %d (reported dropped)", res.Refused, n)
		}
		rep.Elapsed = time.Since(start)
		if s.Rate > 0 {
			if ahead := time.Duration(rep.Scheduled*uint64(time.Second)/s.Rate) - time.Since(start); ahead > 0 {
				select {
				case <-time.After(min(ahead, time.Until(end))):
				case <-ctx.Done():
				}
			}
		}
	}
	rep.Elapsed = time.Since(start)
	rep.PPS = float64(rep.Sent) / rep.Elapsed.Seconds()
	if !fullAt.IsZero() {
		if d := time.Since(fullAt).Seconds(); d > 0 {
			rep.BirthRate = float64(rep.Born-bornFull) / d
		}
	}
	if sch.perFlow {
		rep.Flows = sch.stats()
	}
	return rep, nil
}
