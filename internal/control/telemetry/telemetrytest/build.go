// SPDX-License-Identifier: Apache-2.0

// Package telemetrytest builds the datagrams routers send (sFlow v5,
// NetFlow v5, NetFlow v9 and IPFIX) for the collector's tests and the
// fuzzer's seed corpus. It writes the formats from their specifications,
// not through goflow2, so that the decoder is not checked against itself.
package telemetrytest

import (
	"encoding/binary"
	"net/netip"
)

// Packet is one sampled packet of an sFlow flow sample.
type Packet struct {
	Src, Dst         netip.Addr
	Proto            uint8
	SrcPort, DstPort uint16
	TCPFlags         uint8
	Length           uint16 // IP total length
	// FragOffset (in 8-byte units) and MoreFragments make it a fragment.
	FragOffset    uint16
	MoreFragments bool
}

// Frame is the packet's first bytes as an sFlow agent samples them:
// Ethernet, IPv4 or IPv6, and the TCP/UDP header.
func (p Packet) Frame() []byte {
	b := make([]byte, 14, 128)
	if p.Dst.Is4() {
		binary.BigEndian.PutUint16(b[12:], 0x0800)
		ip := make([]byte, 20)
		ip[0] = 0x45
		binary.BigEndian.PutUint16(ip[2:], p.Length)
		f := p.FragOffset
		if p.MoreFragments {
			f |= 0x2000
		}
		binary.BigEndian.PutUint16(ip[6:], f)
		ip[8], ip[9] = 64, p.Proto
		s, d := p.Src.As4(), p.Dst.As4()
		copy(ip[12:], s[:])
		copy(ip[16:], d[:])
		b = append(b, ip...)
	} else {
		binary.BigEndian.PutUint16(b[12:], 0x86dd)
		ip := make([]byte, 40)
		ip[0] = 0x60
		binary.BigEndian.PutUint16(ip[4:], max(p.Length, 40)-40)
		ip[6], ip[7] = p.Proto, 64
		s, d := p.Src.As16(), p.Dst.As16()
		copy(ip[8:], s[:])
		copy(ip[24:], d[:])
		b = append(b, ip...)
	}
	if p.FragOffset != 0 {
		return b
	}
	l4 := make([]byte, 20)
	binary.BigEndian.PutUint16(l4, p.SrcPort)
	binary.BigEndian.PutUint16(l4[2:], p.DstPort)
	if p.Proto == 6 {
		l4[12], l4[13] = 5<<4, p.TCPFlags
	} else {
		l4 = l4[:8]
	}
	return append(b, l4...)
}

func u32(b []byte, v uint32) []byte { return binary.BigEndian.AppendUint32(b, v) }
func u16(b []byte, v uint16) []byte { return binary.BigEndian.AppendUint16(b, v) }

func pad4(b []byte) []byte {
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// SFlow is an sFlow v5 datagram being built.
type SFlow struct {
	Agent    netip.Addr
	SubAgent uint32
	Sequence uint32
	// Uptime is the agent's uptime in milliseconds when it sends the
	// datagram (0: 1000, the same in every datagram).
	Uptime  uint32
	samples [][]byte
}

// Flow adds a flow sample of one packet at the sampling rate.
func (s *SFlow) Flow(rate uint32, p Packet) {
	h := p.Frame()
	rec := u32(nil, 1)  // sampled header
	body := u32(nil, 1) // header protocol: Ethernet
	body = u32(body, uint32(p.Length)+14+4)
	body = u32(body, 4) // stripped FCS
	body = u32(body, uint32(len(h)))
	body = pad4(append(body, h...))
	rec = u32(rec, uint32(len(body)))
	rec = append(rec, body...)
	sm := u32(nil, uint32(len(s.samples))+1) // sample sequence
	sm = u32(sm, 3)                          // ifIndex 3
	sm = u32(sm, rate)
	sm = u32(sm, rate*uint32(len(s.samples)+1)) // pool
	sm = u32(sm, 0)                             // drops
	sm = u32(sm, 3)
	sm = u32(sm, 4)
	sm = u32(sm, 1) // one record
	sm = append(sm, rec...)
	s.samples = append(s.samples, append(u32(u32(nil, 1), uint32(len(sm))), sm...))
}

// Counter adds a counter sample with a generic interface record.
func (s *SFlow) Counter(ifIndex uint32, inOctets, outOctets uint64) {
	s.Interface(IfCounters{Index: ifIndex, Speed: 10_000_000_000, Status: 3, InOctets: inOctets, OutOctets: outOctets}, nil)
}

// IfCounters is sFlow's generic interface counters record (sFlow v5,
// counter data format 1: RFC 2233's ifTable as an agent polls it).
type IfCounters struct {
	Index  uint32
	Type   uint32 // 0: 6, ethernetCsmacd
	Speed  uint64 // bits/s
	Status uint32 // bit 0 admin up, bit 1 operationally up
	// Octets are 64-bit counters, the others 32-bit, as on the wire.
	InOctets, OutOctets                   uint64
	InUcast, InMulticast, InBroadcast     uint32
	InDiscards, InErrors, InUnknownProtos uint32
	OutUcast, OutMulticast, OutBroadcast  uint32
	OutDiscards, OutErrors                uint32
}

// EthCounters is sFlow's Ethernet interface counters record (format 2):
// the first six dot3Stats counters, the others zero.
type EthCounters struct {
	Alignment, FCS, SingleCollision, MultipleCollision, SQETest, Deferred uint32
}

// Interface adds a counter sample of the interface's generic counters
// and, when eth is not nil, its Ethernet counters.
func (s *SFlow) Interface(ic IfCounters, eth *EthCounters) {
	t := ic.Type
	if t == 0 {
		t = 6
	}
	c := u32(nil, ic.Index)
	c = u32(c, t)
	c = binary.BigEndian.AppendUint64(c, ic.Speed)
	c = u32(c, 1) // full duplex
	c = u32(c, ic.Status)
	c = binary.BigEndian.AppendUint64(c, ic.InOctets)
	for _, v := range []uint32{ic.InUcast, ic.InMulticast, ic.InBroadcast, ic.InDiscards, ic.InErrors, ic.InUnknownProtos} {
		c = u32(c, v)
	}
	c = binary.BigEndian.AppendUint64(c, ic.OutOctets)
	for _, v := range []uint32{ic.OutUcast, ic.OutMulticast, ic.OutBroadcast, ic.OutDiscards, ic.OutErrors, 0} { // … promiscuous
		c = u32(c, v)
	}
	rec := u32(u32(nil, 1), uint32(len(c)))
	rec = append(rec, c...)
	n := uint32(1)
	if eth != nil {
		e := make([]byte, 0, 52)
		for _, v := range []uint32{eth.Alignment, eth.FCS, eth.SingleCollision, eth.MultipleCollision, eth.SQETest, eth.Deferred} {
			e = u32(e, v)
		}
		e = append(e, make([]byte, 7*4)...)
		rec = append(u32(u32(rec, 2), uint32(len(e))), e...)
		n++
	}
	sm := u32(nil, uint32(len(s.samples))+1)
	sm = u32(sm, ic.Index) // source ID: type 0 (ifIndex), the index
	sm = u32(sm, n)
	sm = append(sm, rec...)
	s.samples = append(s.samples, append(u32(u32(nil, 2), uint32(len(sm))), sm...))
}

// Bytes is the datagram.
func (s *SFlow) Bytes() []byte {
	b := u32(nil, 5)
	if s.Agent.Is4() {
		a := s.Agent.As4()
		b = append(u32(b, 1), a[:]...)
	} else {
		a := s.Agent.As16()
		b = append(u32(b, 2), a[:]...)
	}
	b = u32(b, s.SubAgent)
	b = u32(b, s.Sequence)
	up := s.Uptime
	if up == 0 {
		up = 1000
	}
	b = u32(b, up)
	b = u32(b, uint32(len(s.samples)))
	for _, sm := range s.samples {
		b = append(b, sm...)
	}
	return b
}

// Flow is one flow of a NetFlow or IPFIX record.
type Flow struct {
	Src, Dst         netip.Addr // IPv4
	Proto            uint8
	SrcPort, DstPort uint16
	TCPFlags         uint8
	Packets, Bytes   uint32
	// Start and End are milliseconds of the exporter's uptime.
	Start, End uint32
}

// NetFlow5 is a NetFlow v5 datagram of flows.
func NetFlow5(seq uint32, samplingInterval uint16, fs ...Flow) []byte {
	b := u16(nil, 5)
	b = u16(b, uint16(len(fs)))
	b = u32(b, 100000) // uptime
	b = u32(b, 1700000000)
	b = u32(b, 0)
	b = u32(b, seq)
	b = append(b, 0, 0)
	b = u16(b, samplingInterval)
	for _, f := range fs {
		s, d := f.Src.As4(), f.Dst.As4()
		b = append(b, s[:]...)
		b = append(b, d[:]...)
		b = u32(b, 0)       // next hop
		b = u32(b, 1<<16|2) // input, output
		b = u32(b, f.Packets)
		b = u32(b, f.Bytes)
		b = u32(b, f.Start)
		b = u32(b, f.End)
		b = u16(b, f.SrcPort)
		b = u16(b, f.DstPort)
		b = append(b, 0, f.TCPFlags, f.Proto, 0)
		b = u32(b, 0) // AS
		b = u32(b, 0) // masks, pad
	}
	return b
}

// Field is a template field.
type Field struct{ Type, Length uint16 }

// FlowFields is the template of Record: IPv4 addresses, ports, protocol,
// flags, packets, bytes and the uptimes of the first and last packet.
var FlowFields = []Field{{8, 4}, {12, 4}, {4, 1}, {7, 2}, {11, 2}, {6, 1}, {2, 4}, {1, 4}, {22, 4}, {21, 4}}

// Record encodes f for FlowFields.
func Record(f Flow) []byte {
	s, d := f.Src.As4(), f.Dst.As4()
	b := append(append([]byte(nil), s[:]...), d[:]...)
	b = append(b, f.Proto)
	b = u16(b, f.SrcPort)
	b = u16(b, f.DstPort)
	b = append(b, f.TCPFlags)
	b = u32(b, f.Packets)
	b = u32(b, f.Bytes)
	b = u32(b, f.Start)
	return u32(b, f.End)
}

// NF is a NetFlow v9 (Version 9) or IPFIX (Version 10) message being
// built.
type NF struct {
	Version  uint16
	Domain   uint32 // v9 source ID, IPFIX observation domain
	Sequence uint32
	sets     [][]byte
}

func (m *NF) set(id uint16, body []byte) {
	body = pad4(body)
	m.sets = append(m.sets, append(u16(u16(nil, id), uint16(len(body)+4)), body...))
}

// Template adds a template set of one template.
func (m *NF) Template(id uint16, fs []Field) {
	b := u16(u16(nil, id), uint16(len(fs)))
	for _, f := range fs {
		b = u16(u16(b, f.Type), f.Length)
	}
	sid := uint16(0)
	if m.Version == 10 {
		sid = 2
	}
	m.set(sid, b)
}

// OptionsTemplate adds an options template of scope and option fields.
func (m *NF) OptionsTemplate(id uint16, scope, opts []Field) {
	var b []byte
	sid := uint16(1)
	if m.Version == 10 {
		sid = 3
		b = u16(u16(u16(nil, id), uint16(len(scope)+len(opts))), uint16(len(scope)))
	} else {
		b = u16(u16(u16(nil, id), uint16(4*len(scope))), uint16(4*len(opts)))
	}
	for _, f := range append(append([]Field(nil), scope...), opts...) {
		b = u16(u16(b, f.Type), f.Length)
	}
	m.set(sid, b)
}

// Data adds a data set of encoded records.
func (m *NF) Data(id uint16, records ...[]byte) {
	var b []byte
	for _, r := range records {
		b = append(b, r...)
	}
	m.set(id, b)
}

// Bytes is the message.
func (m *NF) Bytes() []byte {
	var body []byte
	for _, s := range m.sets {
		body = append(body, s...)
	}
	b := u16(nil, m.Version)
	if m.Version == 10 {
		b = u16(b, uint16(16+len(body)))
		b = u32(b, 1700000000)
	} else {
		b = u16(b, uint16(len(m.sets)))
		b = u32(b, 100000) // uptime
		b = u32(b, 1700000000)
	}
	b = u32(b, m.Sequence)
	b = u32(b, m.Domain)
	return append(b, body...)
}

// FlowRecord is an sFlow flow record of the format with body (padded).
func FlowRecord(format uint32, body []byte) []byte {
	body = pad4(body)
	return append(u32(u32(nil, format), uint32(len(body))), body...)
}

// HeaderRecord is a sampled header record (format 1) of p's frame.
func HeaderRecord(p Packet) []byte {
	h := p.Frame()
	body := u32(nil, 1) // Ethernet
	body = u32(body, uint32(p.Length)+14+4)
	body = u32(body, 4) // stripped FCS
	body = u32(body, uint32(len(h)))
	return FlowRecord(1, append(body, h...))
}

// IPRecord is a sampled IPv4 (format 3) or IPv6 (format 4) record of p.
func IPRecord(p Packet) []byte {
	body := u32(u32(nil, uint32(p.Length)), uint32(p.Proto))
	format := uint32(3)
	if p.Dst.Is4() {
		s, d := p.Src.As4(), p.Dst.As4()
		body = append(append(body, s[:]...), d[:]...)
	} else {
		format = 4
		s, d := p.Src.As16(), p.Dst.As16()
		body = append(append(body, s[:]...), d[:]...)
	}
	body = u32(u32(u32(body, uint32(p.SrcPort)), uint32(p.DstPort)), uint32(p.TCPFlags))
	return FlowRecord(format, u32(body, 0)) // tos or priority
}

// Sample adds a flow sample (format 1, or 3 when expanded) at the
// sampling rate holding records as they are.
func (s *SFlow) Sample(expanded bool, rate uint32, records ...[]byte) {
	seq := uint32(len(s.samples)) + 1
	var sm []byte
	format := uint32(1)
	if expanded {
		format = 3
		sm = u32(u32(u32(nil, seq), 0), 3) // source ID type, index
		sm = u32(u32(u32(sm, rate), rate*seq), 0)
		sm = u32(u32(u32(u32(sm, 0), 3), 0), 4) // input, output formats and values
	} else {
		sm = u32(u32(nil, seq), 3)
		sm = u32(u32(u32(sm, rate), rate*seq), 0)
		sm = u32(u32(sm, 3), 4)
	}
	sm = u32(sm, uint32(len(records)))
	for _, r := range records {
		sm = append(sm, r...)
	}
	s.samples = append(s.samples, append(u32(u32(nil, format), uint32(len(sm))), sm...))
}
