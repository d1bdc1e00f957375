// SPDX-License-Identifier: Apache-2.0

package telemetry

import (
	"encoding/binary"
	"net/netip"
)

// sFlow's header_protocol values (sFlow v5, "sampled_header").
const (
	headerEthernet = 1
	headerIPv4     = 11
	headerIPv6     = 12
)

// parseHeader reads what the detector needs from an sFlow sampled header:
// the first bytes of a frame, cut anywhere (128 by default). goflow2's own
// packet parser fills a protobuf message per sample through a registry of
// layer parsers; this is the hot path of a flood at 1:1 sampling, so it is
// a bounds-checked walk with no allocation instead. A header cut before
// the addresses is refused (ok false); one cut before the ports keeps the
// addresses and protocol.
func parseHeader(proto uint32, b []byte, r *Record) (ok bool) {
	switch proto {
	case headerEthernet:
		if len(b) < 14 {
			return false
		}
		et := binary.BigEndian.Uint16(b[12:])
		b = b[14:]
		for i := 0; i < 2 && (et == 0x8100 || et == 0x88a8 || et == 0x9100); i++ {
			if len(b) < 4 {
				return false
			}
			et = binary.BigEndian.Uint16(b[2:])
			b = b[4:]
		}
		switch et {
		case 0x0800:
			return parseIPv4(b, r)
		case 0x86dd:
			return parseIPv6(b, r)
		}
		return false
	case headerIPv4:
		return parseIPv4(b, r)
	case headerIPv6:
		return parseIPv6(b, r)
	}
	return false
}

func parseIPv4(b []byte, r *Record) bool {
	if len(b) < 20 || b[0]>>4 != 4 {
		return false
	}
	ihl := int(b[0]&0x0f) * 4
	if ihl < 20 {
		return false
	}
	r.Src = netip.AddrFrom4([4]byte(b[12:16]))
	r.Dst = netip.AddrFrom4([4]byte(b[16:20]))
	r.IPProto = b[9]
	r.MinLen = binary.BigEndian.Uint16(b[2:])
	r.MaxLen = r.MinLen
	frag := binary.BigEndian.Uint16(b[6:])
	r.Fragment = frag&0x3fff != 0 // more fragments, or an offset
	if frag&0x1fff != 0 || len(b) < ihl {
		return true // a later fragment carries no L4 header
	}
	parseL4(b[ihl:], r)
	return true
}

func parseIPv6(b []byte, r *Record) bool {
	if len(b) < 40 || b[0]>>4 != 6 {
		return false
	}
	r.Src = netip.AddrFrom16([16]byte(b[8:24]))
	r.Dst = netip.AddrFrom16([16]byte(b[24:40]))
	r.MinLen = 40 + binary.BigEndian.Uint16(b[4:])
	r.MaxLen = r.MinLen
	next := b[6]
	b = b[40:]
	// Extension headers, at most a few: a chain longer than a sampled
	// header holds is cut anyway.
	for i := 0; i < 8; i++ {
		switch next {
		case 0, 43, 60: // hop-by-hop, routing, destination options
			if len(b) < 8 {
				r.IPProto = next
				return true
			}
			next, b = b[0], b[min(len(b), 8+int(b[1])*8):]
			continue
		case 44: // fragment
			if len(b) < 8 {
				r.IPProto = next
				return true
			}
			r.Fragment = true
			off := binary.BigEndian.Uint16(b[2:]) &^ 7
			r.IPProto = b[0]
			if off != 0 {
				return true
			}
			next, b = b[0], b[8:]
			continue
		}
		break
	}
	r.IPProto = next
	parseL4(b, r)
	return true
}

func parseL4(b []byte, r *Record) {
	switch r.IPProto {
	case protoTCP:
		if len(b) >= 14 {
			r.TCPFlags = b[13]
		}
		fallthrough
	case protoUDP:
		if len(b) >= 4 {
			r.SrcPort = binary.BigEndian.Uint16(b)
			r.DstPort = binary.BigEndian.Uint16(b[2:])
		}
	case protoICMP, protoICMPv6:
		if len(b) >= 2 {
			// Ports carry ICMP type and code, as NetFlow's do.
			r.DstPort = uint16(b[0])<<8 | uint16(b[1])
		}
	}
}
