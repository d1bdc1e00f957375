// SPDX-License-Identifier: Apache-2.0

// Package pkt builds raw Ethernet frames, well-formed or deliberately
// broken, for BPF fixture tests, end-to-end tests and benchmarks. It is
// written by hand rather than with gopacket because most fixtures are
// frames no serializer will produce: lying lengths, cut headers, too many
// tags.
package pkt

import (
	"encoding/binary"
	"net/netip"
)

// IP protocol and extension-header numbers.
const (
	ProtoICMP     = 1
	ProtoTCP      = 6
	ProtoUDP      = 17
	ProtoICMPv6   = 58
	ExtHopByHop   = 0
	ExtRouting    = 43
	ExtFragment   = 44
	ExtAH         = 51
	ExtDestOpts   = 60
	EtherIPv4     = 0x0800
	EtherIPv6     = 0x86DD
	EtherARP      = 0x0806
	Ether8021Q    = 0x8100
	Ether8021AD   = 0x88A8
	TCPFlagSYN    = 0x02
	TCPFlagACK    = 0x10
	defaultTTL    = 64
	ipv4HeaderLen = 20
)

// Frame describes a packet to build.
type Frame struct {
	DstMAC, SrcMAC [6]byte
	VLANs          []uint16 // outer first; 0x88A8 outer when QinQ is set
	QinQ           bool
	EtherType      uint16 // 0: from Src's family
	Src, Dst       netip.Addr
	Proto          uint8
	TCPFlags       uint8
	TCPSeq, TCPAck uint32 // TCP sequence and acknowledgment numbers
	TCPOptions     []byte // TCP options, padded with EOL to a multiple of 4
	SrcPort        uint16
	DstPort        uint16
	Payload        []byte
	IPv4Options    int    // bytes of IPv4 options (multiple of 4)
	FragOffset     uint16 // in 8-byte units
	MoreFragments  bool
	Ext            []uint8 // IPv6 extension headers in order
}

// Build returns the frame bytes.
func (f Frame) Build() []byte {
	b := make([]byte, 0, 128)
	b = append(b, f.DstMAC[:]...)
	b = append(b, f.SrcMAC[:]...)
	for i, v := range f.VLANs {
		tpid := uint16(Ether8021Q)
		if f.QinQ && i == 0 {
			tpid = Ether8021AD
		}
		b = binary.BigEndian.AppendUint16(b, tpid)
		b = binary.BigEndian.AppendUint16(b, v&0x0fff)
	}
	et := f.EtherType
	if et == 0 {
		et = EtherIPv4
		if f.Src.Is6() {
			et = EtherIPv6
		}
	}
	b = binary.BigEndian.AppendUint16(b, et)
	if et != EtherIPv4 && et != EtherIPv6 {
		return append(b, f.Payload...)
	}
	l4 := f.l4()
	if f.FragOffset == 0 && !f.MoreFragments && len(f.Ext) == 0 && (f.Proto == ProtoUDP || f.Proto == ProtoTCP) {
		f.l4Checksum(l4)
	}
	if f.Src.Is4() {
		return append(b, f.ipv4(l4)...)
	}
	return append(b, f.ipv6(l4)...)
}

func (f Frame) l4() []byte {
	var h []byte
	nonfirst := f.FragOffset != 0
	switch {
	case nonfirst:
	case f.Proto == ProtoTCP:
		opts := (len(f.TCPOptions) + 3) &^ 3
		h = make([]byte, 20+opts)
		binary.BigEndian.PutUint16(h[0:], f.SrcPort)
		binary.BigEndian.PutUint16(h[2:], f.DstPort)
		binary.BigEndian.PutUint32(h[4:], f.TCPSeq)
		binary.BigEndian.PutUint32(h[8:], f.TCPAck)
		h[12] = uint8(5+opts/4) << 4
		copy(h[20:], f.TCPOptions)
		h[13] = f.TCPFlags
		binary.BigEndian.PutUint16(h[14:], 65535)
	case f.Proto == ProtoUDP:
		h = make([]byte, 8)
		binary.BigEndian.PutUint16(h[0:], f.SrcPort)
		binary.BigEndian.PutUint16(h[2:], f.DstPort)
		binary.BigEndian.PutUint16(h[4:], uint16(8+len(f.Payload)))
	case f.Proto == ProtoICMP || f.Proto == ProtoICMPv6:
		h = []byte{8, 0, 0, 0, 0, 1, 0, 1} // echo request
		if f.Proto == ProtoICMPv6 {
			h[0] = 128
		}
	}
	return append(h, f.Payload...)
}

func (f Frame) ipv4(l4 []byte) []byte {
	hl := ipv4HeaderLen + f.IPv4Options
	h := make([]byte, hl, hl+len(l4))
	h[0] = 4<<4 | uint8(hl/4)
	binary.BigEndian.PutUint16(h[2:], uint16(hl+len(l4)))
	binary.BigEndian.PutUint16(h[4:], 0x1234)
	frag := f.FragOffset & 0x1fff
	if f.MoreFragments {
		frag |= 0x2000
	}
	binary.BigEndian.PutUint16(h[6:], frag)
	h[8] = defaultTTL
	h[9] = f.Proto
	s, d := f.Src.As4(), f.Dst.As4()
	copy(h[12:], s[:])
	copy(h[16:], d[:])
	for i := ipv4HeaderLen; i < hl; i++ {
		h[i] = 1 // NOP options
	}
	binary.BigEndian.PutUint16(h[10:], Checksum(h))
	return append(h, l4...)
}

func (f Frame) ipv6(l4 []byte) []byte {
	var ext []byte
	for i, t := range f.Ext {
		next := f.Proto
		if i+1 < len(f.Ext) {
			next = f.Ext[i+1]
		}
		switch t {
		case ExtFragment:
			e := make([]byte, 8)
			e[0] = next
			off := f.FragOffset << 3
			if f.MoreFragments {
				off |= 1
			}
			binary.BigEndian.PutUint16(e[2:], off)
			binary.BigEndian.PutUint32(e[4:], 0xabcd)
			ext = append(ext, e...)
		case ExtAH:
			e := make([]byte, 16) // payload len 2 -> (2+2)*4 = 16 bytes
			e[0], e[1] = next, 2
			ext = append(ext, e...)
		default: // hop-by-hop, routing, destination options: 8 bytes, PadN
			e := []byte{next, 0, 1, 4, 0, 0, 0, 0}
			if t == ExtRouting {
				e = []byte{next, 0, 0, 0, 0, 0, 0, 0}
			}
			ext = append(ext, e...)
		}
	}
	h := make([]byte, 40, 40+len(ext)+len(l4))
	h[0] = 6 << 4
	binary.BigEndian.PutUint16(h[4:], uint16(len(ext)+len(l4)))
	h[6] = f.Proto
	if len(f.Ext) > 0 {
		h[6] = f.Ext[0]
	}
	h[7] = defaultTTL
	s, d := f.Src.As16(), f.Dst.As16()
	copy(h[8:], s[:])
	copy(h[24:], d[:])
	h = append(h, ext...)
	return append(h, l4...)
}

// l4Checksum fills the TCP or UDP checksum over the pseudo-header, so the
// receiving stack accepts the datagram (IPv6 UDP must carry one).
func (f Frame) l4Checksum(l4 []byte) {
	var ph []byte
	if f.Src.Is4() {
		s, d := f.Src.As4(), f.Dst.As4()
		ph = append(append(ph, s[:]...), d[:]...)
		ph = append(ph, 0, f.Proto)
		ph = binary.BigEndian.AppendUint16(ph, uint16(len(l4)))
	} else {
		s, d := f.Src.As16(), f.Dst.As16()
		ph = append(append(ph, s[:]...), d[:]...)
		ph = binary.BigEndian.AppendUint32(ph, uint32(len(l4)))
		ph = append(ph, 0, 0, 0, f.Proto)
	}
	off := 6
	if f.Proto == ProtoTCP {
		off = 16
	}
	c := Checksum(append(ph, l4...))
	if c == 0 && f.Proto == ProtoUDP {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(l4[off:], c)
}

// Checksum is the Internet checksum (RFC 1071) of b.
func Checksum(b []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// L3Offset returns where the IP header starts in a frame built from f.
func (f Frame) L3Offset() int { return 14 + 4*len(f.VLANs) }
