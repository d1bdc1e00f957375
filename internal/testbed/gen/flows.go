// SPDX-License-Identifier: Apache-2.0

package gen

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/tierwall/tierwall/internal/datapath"
)

// The flow mode's kernel side (bpf/testbed/xdp_genflow.c): user space writes a
// schedule of frames, each a flow index plus what varies per frame, and one
// live-frames test run builds and transmits them in order. Frames the
// kernel did not transmit come back by index, so a caller can keep an
// exact account of what left.

// ErrLostTrack means the kernel reported transmit outcomes the generator
// could not attribute to frames: the per-frame account of that run is not
// exact. It should not happen; the error says what was seen.
var ErrLostTrack = errors.New("flow generator lost track of transmitted frames")

// Frame info bits (enum tw_gf_info in bpf/lib/genflow.h; bpf2go cannot
// export an enum no object uses, so they are mirrored here).
const (
	gfS2C = 1
	gfUDP = 2
)

// MaxPayload is the largest payload template (TW_GF_TMAX).
const MaxPayload = 512

const gfPktSize = 24 // sizeof(struct tw_gf_pkt), a multiple of 8 as mmap'ed

// FlowPkt is one scheduled frame (struct tw_gf_pkt).
type FlowPkt struct {
	Flow       uint32 // flow index: the endpoints derive from it (AddrPlan)
	Seq, Ack   uint32 // TCP
	IPLen      uint16 // bytes from the IP header on; the payload is what is left
	ServerPort uint16
	TCPFlags   uint8
	S2C        bool  // server to client
	UDP        bool  // else TCP
	Payload    uint8 // template index (FlowGenSpec.Payloads)
}

// AddrPlan maps a flow index to its endpoints; bpf/testbed/xdp_genflow.c does the
// same arithmetic. Clients and servers are the first addresses; offsets
// are added to the last 32 bits and must not carry out of them.
type AddrPlan struct {
	Clients  netip.Addr
	Hosts    uint32 // client addresses
	PortLo   uint16
	Ports    uint32 // client ports from PortLo
	Servers  netip.Addr
	NServers uint32 // server addresses
}

// Validate checks that every flow's endpoints fit.
func (p AddrPlan) Validate() error {
	if !p.Clients.IsValid() || !p.Servers.IsValid() || p.Clients.Is4() != p.Servers.Is4() {
		return fmt.Errorf("%w: client base %v and server base %v", datapath.ErrInvalid, p.Clients, p.Servers)
	}
	if p.Hosts == 0 || p.NServers == 0 || p.Ports == 0 || uint32(p.PortLo)+p.Ports-1 > 65535 {
		return fmt.Errorf("%w: %d hosts, %d servers, %d ports from %d", datapath.ErrInvalid, p.Hosts, p.NServers, p.Ports, p.PortLo)
	}
	if uint64(lastWord(p.Clients))+uint64(p.Hosts)-1 > 0xffffffff || uint64(lastWord(p.Servers))+uint64(p.NServers)-1 > 0xffffffff {
		return fmt.Errorf("%w: address offsets carry out of the last 32 bits", datapath.ErrInvalid)
	}
	return nil
}

// Endpoints returns flow i's client endpoint and server address.
func (p AddrPlan) Endpoints(i uint32) (netip.AddrPort, netip.Addr) {
	port := uint32(p.PortLo) + (i/p.Hosts)%p.Ports
	return netip.AddrPortFrom(addOffset(p.Clients, i%p.Hosts), uint16(port)), addOffset(p.Servers, i%p.NServers)
}

func lastWord(a netip.Addr) uint32 {
	b := a.As16()
	return binary.BigEndian.Uint32(b[12:])
}

func addOffset(a netip.Addr, off uint32) netip.Addr {
	b := a.As16()
	binary.BigEndian.PutUint32(b[12:], binary.BigEndian.Uint32(b[12:])+off)
	if a.Is4() {
		return netip.AddrFrom4([4]byte(b[12:]))
	}
	return netip.AddrFrom16(b)
}

// words returns an address as the program's four host-order words, IPv4
// in word 0.
func words(a netip.Addr) [4]uint32 {
	var w [4]uint32
	if a.Is4() {
		b := a.As4()
		w[0] = binary.BigEndian.Uint32(b[:])
		return w
	}
	b := a.As16()
	for i := range w {
		w[i] = binary.BigEndian.Uint32(b[4*i:])
	}
	return w
}

// FlowGenSpec configures a FlowGen.
type FlowGenSpec struct {
	Iface          string // transmit out of this interface; "" for Build only
	SrcMAC, DstMAC [6]byte
	Plan           AddrPlan
	// Payloads are the templates FlowPkt.Payload indexes (at most 256, each
	// at most MaxPayload bytes). A frame's payload is its template followed
	// by zeros.
	Payloads [][]byte
	MaxIPLen int // the largest FlowPkt.IPLen that will be sent (<= 1500)
	Capacity int // frames per Send, at most 1<<24
}

// FlowGen sends scheduled frames of flows.
type FlowGen struct {
	objs    genflowObjects
	links   []link.Link
	ifindex int
	cap     int
	buf     []byte // the initial frame: all zeros
	dirty   int    // bytes of it every frame rewrites
	enc     []byte
	sched   *ebpf.Memory
	drops   *ebpf.Memory
}

// NewFlowGen loads the flow generator and attaches its tracepoints.
func NewFlowGen(spec FlowGenSpec) (*FlowGen, error) {
	g := &FlowGen{cap: spec.Capacity}
	if spec.Iface != "" {
		ifc, err := net.InterfaceByName(spec.Iface)
		if err != nil {
			return nil, fmt.Errorf("%w: %s", datapath.ErrNoInterface, spec.Iface)
		}
		g.ifindex = ifc.Index
	}
	if err := spec.Plan.Validate(); err != nil {
		return nil, err
	}
	if spec.Capacity <= 0 || spec.Capacity > 1<<24 {
		return nil, fmt.Errorf("%w: capacity %d", datapath.ErrInvalid, spec.Capacity)
	}
	if len(spec.Payloads) == 0 || len(spec.Payloads) > 256 {
		return nil, fmt.Errorf("%w: %d payload templates (want 1..256)", datapath.ErrInvalid, len(spec.Payloads))
	}
	longest := 0
	for i, p := range spec.Payloads {
		if len(p) > MaxPayload {
			return nil, fmt.Errorf("%w: payload template %d of %d bytes (at most %d)", datapath.ErrInvalid, i, len(p), MaxPayload)
		}
		longest = max(longest, len(p))
	}
	// The region rewritten on every frame: the longest template, rounded
	// up, plus the difference between TCP and UDP headers.
	region := max((longest+7)&^7, 16) + 12
	family, iphl := uint32(4), 20
	if spec.Plan.Clients.Is6() {
		family, iphl = 6, 40
	}
	if spec.MaxIPLen < iphl+20 || spec.MaxIPLen > 1500 {
		return nil, fmt.Errorf("%w: largest IP packet %d bytes", datapath.ErrInvalid, spec.MaxIPLen)
	}
	g.dirty = 14 + iphl + 8 + region
	g.buf = make([]byte, max(14+spec.MaxIPLen, g.dirty, 60))

	cs, err := loadGenflow()
	if err != nil {
		return nil, err
	}
	cs.Maps["tw_gf_sched"].MaxEntries = uint32(spec.Capacity)
	cs.Maps["tw_gf_drops"].MaxEntries = uint32(spec.Capacity)
	p := spec.Plan
	var mac [12]byte
	copy(mac[:6], spec.DstMAC[:])
	copy(mac[6:], spec.SrcMAC[:])
	for name, v := range map[string]any{
		"tw_gf_family": family, "tw_gf_client": words(p.Clients), "tw_gf_server": words(p.Servers),
		"tw_gf_hosts": p.Hosts, "tw_gf_servers": p.NServers, "tw_gf_port_lo": uint32(p.PortLo),
		"tw_gf_ports": p.Ports, "tw_gf_region": uint32(region), "tw_gf_mac": mac,
	} {
		if err := cs.Variables[name].Set(v); err != nil {
			return nil, fmt.Errorf("setting %s: %w", name, err)
		}
	}
	if err := cs.LoadAndAssign(&g.objs, nil); err != nil {
		return nil, fmt.Errorf("loading flow generator: %w", err)
	}
	if err := g.init(spec.Payloads); err != nil {
		g.Close()
		return nil, err
	}
	return g, nil
}

func (g *FlowGen) init(payloads [][]byte) error {
	for i, p := range payloads {
		v := genflowTwGfPayload{Sum: uint32(sum16(p)), Len: uint32(len(p))}
		copy(v.B[:], p)
		if err := g.objs.TwGfPl.Put(uint32(i), &v); err != nil {
			return fmt.Errorf("writing payload template %d: %w", i, err)
		}
	}
	var err error
	if g.sched, err = g.objs.TwGfSched.Memory(); err != nil {
		return fmt.Errorf("mapping the schedule: %w", err)
	}
	if g.drops, err = g.objs.TwGfDrops.Memory(); err != nil {
		return fmt.Errorf("mapping the drop list: %w", err)
	}
	for _, prog := range []*ebpf.Program{g.objs.TwGenflowXmit, g.objs.TwGenflowRerr} {
		l, err := link.AttachTracing(link.TracingOptions{Program: prog})
		if err != nil {
			return fmt.Errorf("attaching transmit tracepoint: %w", err)
		}
		g.links = append(g.links, l)
	}
	return nil
}

// sum16 is the ones'-complement sum of b as big-endian 16-bit words,
// folded, not inverted; an odd last byte is padded with zero.
func sum16(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

func (g *FlowGen) write(pkts []FlowPkt) error {
	if len(pkts) > g.cap {
		return fmt.Errorf("%w: %d frames, capacity %d", datapath.ErrInvalid, len(pkts), g.cap)
	}
	if cap(g.enc) < len(pkts)*gfPktSize {
		g.enc = make([]byte, len(pkts)*gfPktSize)
	}
	b := g.enc[:len(pkts)*gfPktSize]
	for i, p := range pkts {
		e := b[i*gfPktSize : (i+1)*gfPktSize : (i+1)*gfPktSize]
		binary.LittleEndian.PutUint32(e[0:], p.Flow)
		binary.LittleEndian.PutUint32(e[4:], p.Seq)
		binary.LittleEndian.PutUint32(e[8:], p.Ack)
		binary.LittleEndian.PutUint16(e[12:], p.IPLen)
		binary.LittleEndian.PutUint16(e[14:], p.ServerPort)
		e[16] = p.TCPFlags
		var info uint8
		if p.S2C {
			info |= gfS2C
		}
		if p.UDP {
			info |= gfUDP
		}
		e[17] = info
		e[18] = p.Payload
	}
	if _, err := g.sched.WriteAt(b, 0); err != nil {
		return fmt.Errorf("writing the schedule: %w", err)
	}
	return nil
}

// SendResult is what became of one Send's frames.
type SendResult struct {
	Dropped      []uint32 // indices of frames not transmitted, unordered
	XmitDrops    uint32   // of them, refused by the driver
	RedirectErrs uint32   // of them, refused before queueing
	Refused      uint32   // of them, the program could not build (a bug)
}

// Send transmits pkts in order in one live-frames test run (pinned to the
// calling goroutine's thread) and names the frames that did not leave.
func (g *FlowGen) Send(pkts []FlowPkt) (SendResult, error) {
	var res SendResult
	if len(pkts) == 0 {
		return res, nil
	}
	if g.ifindex == 0 {
		return res, fmt.Errorf("%w: flow generator without an interface", datapath.ErrInvalid)
	}
	if err := g.write(pkts); err != nil {
		return res, err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	st := genflowTwGfState{Tid: uint64(unix.Getpid())<<32 | uint64(unix.Gettid()), N: uint32(len(pkts))}
	if err := g.objs.TwGfSt.Put(uint32(0), &st); err != nil {
		return res, fmt.Errorf("resetting generator state: %w", err)
	}
	// cilium/ebpf repeats an interrupted run from the start; the program
	// carries on from the state's seq and drops repetitions past the end.
	_, err := g.objs.TwGenflow.Run(&ebpf.RunOptions{
		Data:    g.buf,
		Repeat:  uint32(len(pkts)),
		Flags:   bpfTestXDPLiveFrames,
		Context: &xdpMDLive{Data: 0, DataEnd: uint32(len(g.buf)), IngressIfindex: uint32(g.ifindex)},
	})
	if err != nil {
		return res, fmt.Errorf("live-frames run: %w", err)
	}
	if err := g.objs.TwGfSt.Lookup(uint32(0), &st); err != nil {
		return res, fmt.Errorf("reading generator state: %w", err)
	}
	if st.Seq != st.N || st.Qhead != st.Qtail || st.Lost != 0 {
		return res, fmt.Errorf("%w: %d of %d frames built, %d unflushed, %d unexplained events",
			ErrLostTrack, st.Seq, st.N, st.Qtail-st.Qhead, st.Lost)
	}
	res.XmitDrops, res.RedirectErrs = st.XmitDrops, st.RedirectErrs
	res.Refused = st.Ndrop - st.XmitDrops - st.RedirectErrs
	var err2 error
	if res.Dropped, err2 = g.readDrops(st.Ndrop); err2 != nil {
		return res, err2
	}
	return res, nil
}

func (g *FlowGen) readDrops(n uint32) ([]uint32, error) {
	if n == 0 {
		return nil, nil
	}
	b := make([]byte, 8*int(n)) // array elements are 8-byte aligned
	if _, err := g.drops.ReadAt(b, 0); err != nil {
		return nil, fmt.Errorf("reading the drop list: %w", err)
	}
	out := make([]uint32, n)
	for i := range out {
		out[i] = binary.LittleEndian.Uint32(b[8*i:])
	}
	return out, nil
}

// Build runs the program once per frame without transmitting, each time
// on a copy of in (nil: the zero buffer; pass garbage to check that every
// byte that matters is rewritten), and returns the frames it built (nil
// for a frame it refused).
func (g *FlowGen) Build(pkts []FlowPkt, in []byte) ([][]byte, error) {
	if err := g.write(pkts); err != nil {
		return nil, err
	}
	if in == nil {
		in = g.buf
	}
	st := genflowTwGfState{N: uint32(len(pkts))}
	if err := g.objs.TwGfSt.Put(uint32(0), &st); err != nil {
		return nil, fmt.Errorf("resetting generator state: %w", err)
	}
	out := make([][]byte, len(pkts))
	for i := range pkts {
		data := append([]byte(nil), in...)
		res := make([]byte, len(in)+256)
		opts := &ebpf.RunOptions{Data: data, DataOut: res, Repeat: 1}
		ret, err := g.objs.TwGenflow.Run(opts)
		if err != nil {
			return nil, fmt.Errorf("building frame %d: %w", i, err)
		}
		if ret == 3 { // XDP_TX
			out[i] = res[:len(opts.DataOut)]
		}
	}
	return out, nil
}

// Close detaches and releases the generator.
func (g *FlowGen) Close() error {
	for _, l := range g.links {
		l.Close()
	}
	return g.objs.Close()
}
