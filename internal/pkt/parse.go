// SPDX-License-Identifier: Apache-2.0

package pkt

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// ErrMalformed is returned by Parse for a frame a receiving stack would
// refuse: cut headers, lengths that lie, a wrong checksum.
var ErrMalformed = errors.New("malformed frame")

// Parsed is an untagged TCP or UDP frame over IPv4 (no options) or IPv6
// (no extension headers), as a receiver sees it.
type Parsed struct {
	Src, Dst netip.AddrPort
	Proto    uint8
	IPLen    int // bytes from the IP header on (the IP length fields)
	TCPFlags uint8
	Seq, Ack uint32
	Payload  []byte // L4 payload, Ethernet padding excluded
}

// Parse checks a frame the way a receiving stack would — lengths, the
// IPv4 header checksum, the TCP or UDP checksum over the pseudo-header —
// and returns its fields. It is for tests that check generated traffic, so
// it is stricter than a stack in one place: a UDP datagram must carry a
// checksum over IPv4 too.
func Parse(f []byte) (Parsed, error) {
	var p Parsed
	if len(f) < 14 {
		return p, fmt.Errorf("%w: %d bytes", ErrMalformed, len(f))
	}
	ip := f[14:]
	var l4, ph []byte
	switch binary.BigEndian.Uint16(f[12:]) {
	case EtherIPv4:
		if len(ip) < 20 || ip[0] != 0x45 {
			return p, fmt.Errorf("%w: IPv4 header", ErrMalformed)
		}
		p.IPLen = int(binary.BigEndian.Uint16(ip[2:]))
		if p.IPLen < 20 || p.IPLen > len(ip) {
			return p, fmt.Errorf("%w: IPv4 total length %d in %d bytes", ErrMalformed, p.IPLen, len(ip))
		}
		if Checksum(ip[:20]) != 0 {
			return p, fmt.Errorf("%w: IPv4 header checksum", ErrMalformed)
		}
		p.Proto = ip[9]
		p.Src = netip.AddrPortFrom(netip.AddrFrom4([4]byte(ip[12:16])), 0)
		p.Dst = netip.AddrPortFrom(netip.AddrFrom4([4]byte(ip[16:20])), 0)
		l4 = ip[20:p.IPLen]
		ph = append(append(ph, ip[12:20]...), 0, p.Proto)
		ph = binary.BigEndian.AppendUint16(ph, uint16(len(l4)))
	case EtherIPv6:
		if len(ip) < 40 || ip[0]>>4 != 6 {
			return p, fmt.Errorf("%w: IPv6 header", ErrMalformed)
		}
		p.IPLen = 40 + int(binary.BigEndian.Uint16(ip[4:]))
		if p.IPLen > len(ip) {
			return p, fmt.Errorf("%w: IPv6 payload length %d in %d bytes", ErrMalformed, p.IPLen-40, len(ip)-40)
		}
		p.Proto = ip[6]
		p.Src = netip.AddrPortFrom(netip.AddrFrom16([16]byte(ip[8:24])), 0)
		p.Dst = netip.AddrPortFrom(netip.AddrFrom16([16]byte(ip[24:40])), 0)
		l4 = ip[40:p.IPLen]
		ph = append(ph, ip[8:40]...)
		ph = binary.BigEndian.AppendUint32(ph, uint32(len(l4)))
		ph = append(ph, 0, 0, 0, p.Proto)
	default:
		return p, fmt.Errorf("%w: ethertype %#04x", ErrMalformed, binary.BigEndian.Uint16(f[12:]))
	}
	switch p.Proto {
	case ProtoTCP:
		if len(l4) < 20 || int(l4[12]>>4)*4 < 20 || int(l4[12]>>4)*4 > len(l4) {
			return p, fmt.Errorf("%w: TCP header", ErrMalformed)
		}
		p.Seq, p.Ack = binary.BigEndian.Uint32(l4[4:]), binary.BigEndian.Uint32(l4[8:])
		p.TCPFlags = l4[13]
		p.Payload = l4[int(l4[12]>>4)*4:]
	case ProtoUDP:
		if len(l4) < 8 || int(binary.BigEndian.Uint16(l4[4:])) != len(l4) {
			return p, fmt.Errorf("%w: UDP length", ErrMalformed)
		}
		if binary.BigEndian.Uint16(l4[6:]) == 0 {
			return p, fmt.Errorf("%w: UDP without a checksum", ErrMalformed)
		}
		p.Payload = l4[8:]
	default:
		return p, fmt.Errorf("%w: protocol %d", ErrMalformed, p.Proto)
	}
	if Checksum(append(ph, l4...)) != 0 {
		return p, fmt.Errorf("%w: %d checksum", ErrMalformed, p.Proto)
	}
	p.Src = netip.AddrPortFrom(p.Src.Addr(), binary.BigEndian.Uint16(l4[0:]))
	p.Dst = netip.AddrPortFrom(p.Dst.Addr(), binary.BigEndian.Uint16(l4[2:]))
	return p, nil
}
