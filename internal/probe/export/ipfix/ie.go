// SPDX-License-Identifier: Apache-2.0

package ipfix

import (
	"encoding/binary"
	"net/netip"
	"time"
)

// Information elements sent, by IANA number (RFC 7012 and the IANA IPFIX
// registry; NetFlow v9 shares the numbers below 128 and collectors accept
// the IPFIX ones above).
const (
	ieOctetDeltaCount          = 1
	iePacketDeltaCount         = 2
	ieProtocolIdentifier       = 4
	ieTCPControlBits           = 6
	ieSourceTransportPort      = 7
	ieSourceIPv4Address        = 8
	ieDestinationTransportPort = 11
	ieDestinationIPv4Address   = 12
	ieLastSwitched             = 21 // NetFlow v9: sysUptime ms of the last packet
	ieFirstSwitched            = 22 // NetFlow v9: sysUptime ms of the first packet
	ieSourceIPv6Address        = 27
	ieDestinationIPv6Address   = 28
	ieApplicationName          = 96 // RFC 6759
	ieFlowEndReason            = 136
	ieFlowStartMilliseconds    = 152
	ieFlowEndMilliseconds      = 153
)

// ReversePEN is the enterprise number under which RFC 5103 biflow records
// carry the reverse direction of an IANA element (same element number).
const ReversePEN = 29305

// DefaultEnterpriseNumber is RFC 5612's enterprise number for
// documentation (32473). tierwall owns no private enterprise number; an
// operator who registers one (or whose collector is set up for another)
// configures it. The tierwall elements under it:
const DefaultEnterpriseNumber = 32473

// tierwall's enterprise-specific elements.
const (
	// IECountingTier (unsigned8) is who counted the record's packets: a
	// bit mask, 1 the host's software tier, 2 the NIC (3: both).
	IECountingTier = 1
	// IEHWPacketDeltaCount and IEHWOctetDeltaCount (unsigned64) are the
	// part of packetDeltaCount and octetDeltaCount that the NIC counted.
	IEHWPacketDeltaCount = 2
	IEHWOctetDeltaCount  = 3
	// IEReverse is added to an element number for its reverse direction
	// in biflow records, the convention RFC 5103 §6.1 suggests for
	// enterprise-specific elements.
	IEReverse = 0x4000
)

// Values of IECountingTier.
const (
	TierSoftware = 1
	TierHardware = 2
	TierBoth     = TierSoftware | TierHardware
)

const (
	varLen     = 0xffff // IPFIX variable-length field (RFC 7011 §7)
	appNameMax = 64     // bytes of applicationName kept
	appNameV9  = 32     // NetFlow v9 has no variable length: fixed, NUL-padded
)

// dir is one direction of a record as sent: counters of the packets from
// src to dst.
type dir struct {
	pkts, bytes, hwPkts, hwBytes uint64
	flags                        uint8
}

// view is one data record to send: a direction of a flow (uniflow) or the
// whole flow oriented from its initiator (biflow).
type view struct {
	src, dst   netip.AddrPort
	proto      uint8
	fwd, rev   dir
	start, end time.Time
	reason     uint8
	app        string
	tier       uint8
}

// field is one template field and how to write its value.
type field struct {
	id     uint16
	pen    uint32 // 0: IANA
	length uint16 // varLen: variable
	put    func(b []byte, v *view, e *Encoder) []byte
}

func u8(f func(*view) uint8) func([]byte, *view, *Encoder) []byte {
	return func(b []byte, v *view, _ *Encoder) []byte { return append(b, f(v)) }
}

func u16(f func(*view) uint16) func([]byte, *view, *Encoder) []byte {
	return func(b []byte, v *view, _ *Encoder) []byte { return binary.BigEndian.AppendUint16(b, f(v)) }
}

func u64(f func(*view) uint64) func([]byte, *view, *Encoder) []byte {
	return func(b []byte, v *view, _ *Encoder) []byte { return binary.BigEndian.AppendUint64(b, f(v)) }
}

func addr(f func(*view) netip.Addr) func([]byte, *view, *Encoder) []byte {
	return func(b []byte, v *view, _ *Encoder) []byte { return append(b, f(v).AsSlice()...) }
}

// fields returns the template of records of one address family.
func (e *Encoder) fields(v6, biflow bool) []field {
	src, dst, alen := uint16(ieSourceIPv4Address), uint16(ieDestinationIPv4Address), uint16(4)
	if v6 {
		src, dst, alen = ieSourceIPv6Address, ieDestinationIPv6Address, 16
	}
	v9 := e.opt.Format == NetFlow9
	fs := []field{
		{id: src, length: alen, put: addr(func(v *view) netip.Addr { return v.src.Addr() })},
		{id: dst, length: alen, put: addr(func(v *view) netip.Addr { return v.dst.Addr() })},
		{id: ieSourceTransportPort, length: 2, put: u16(func(v *view) uint16 { return v.src.Port() })},
		{id: ieDestinationTransportPort, length: 2, put: u16(func(v *view) uint16 { return v.dst.Port() })},
		{id: ieProtocolIdentifier, length: 1, put: u8(func(v *view) uint8 { return v.proto })},
	}
	if biflow {
		// Before the forward flags: nfdump 1.7 reads a reverse element it
		// has no reverse for as the forward one, and the last value wins.
		fs = append(fs, field{id: ieTCPControlBits, pen: ReversePEN, length: 2, put: u16(func(v *view) uint16 { return uint16(v.rev.flags) })})
	}
	if v9 {
		// NetFlow v9's TCP_FLAGS is one byte.
		fs = append(fs, field{id: ieTCPControlBits, length: 1, put: u8(func(v *view) uint8 { return v.fwd.flags })})
	} else {
		fs = append(fs, field{id: ieTCPControlBits, length: 2, put: u16(func(v *view) uint16 { return uint16(v.fwd.flags) })})
	}
	fs = append(fs,
		field{id: iePacketDeltaCount, length: 8, put: u64(func(v *view) uint64 { return v.fwd.pkts })},
		field{id: ieOctetDeltaCount, length: 8, put: u64(func(v *view) uint64 { return v.fwd.bytes })},
	)
	if biflow {
		fs = append(fs,
			field{id: iePacketDeltaCount, pen: ReversePEN, length: 8, put: u64(func(v *view) uint64 { return v.rev.pkts })},
			field{id: ieOctetDeltaCount, pen: ReversePEN, length: 8, put: u64(func(v *view) uint64 { return v.rev.bytes })},
		)
	}
	if v9 {
		fs = append(fs,
			field{id: ieFirstSwitched, length: 4, put: func(b []byte, v *view, e *Encoder) []byte {
				return binary.BigEndian.AppendUint32(b, e.uptime(v.start))
			}},
			field{id: ieLastSwitched, length: 4, put: func(b []byte, v *view, e *Encoder) []byte {
				return binary.BigEndian.AppendUint32(b, e.uptime(v.end))
			}},
		)
	} else {
		fs = append(fs,
			field{id: ieFlowStartMilliseconds, length: 8, put: u64(func(v *view) uint64 { return uint64(v.start.UnixMilli()) })},
			field{id: ieFlowEndMilliseconds, length: 8, put: u64(func(v *view) uint64 { return uint64(v.end.UnixMilli()) })},
		)
	}
	fs = append(fs, field{id: ieFlowEndReason, length: 1, put: u8(func(v *view) uint8 { return v.reason })})
	if v9 {
		fs = append(fs, field{id: ieApplicationName, length: appNameV9, put: func(b []byte, v *view, _ *Encoder) []byte {
			n := len(b)
			b = append(b, make([]byte, appNameV9)...)
			copy(b[n:], v.app)
			return b
		}})
	} else {
		fs = append(fs, field{id: ieApplicationName, length: varLen, put: func(b []byte, v *view, _ *Encoder) []byte {
			return append(append(b, byte(len(v.app))), v.app...) // len(v.app) <= appNameMax < 255
		}})
	}
	// NetFlow v9 has no enterprise numbers: its collectors see tierwall's
	// elements as the IPFIX enterprise bit with the element number, a
	// field type they do not know and skip by its length.
	pen := e.opt.EnterpriseNumber
	fs = append(fs,
		field{id: IECountingTier, pen: pen, length: 1, put: u8(func(v *view) uint8 { return v.tier })},
		field{id: IEHWPacketDeltaCount, pen: pen, length: 8, put: u64(func(v *view) uint64 { return v.fwd.hwPkts })},
		field{id: IEHWOctetDeltaCount, pen: pen, length: 8, put: u64(func(v *view) uint64 { return v.fwd.hwBytes })},
	)
	if biflow {
		fs = append(fs,
			field{id: IEReverse | IEHWPacketDeltaCount, pen: pen, length: 8, put: u64(func(v *view) uint64 { return v.rev.hwPkts })},
			field{id: IEReverse | IEHWOctetDeltaCount, pen: pen, length: 8, put: u64(func(v *view) uint64 { return v.rev.hwBytes })},
		)
	}
	return fs
}
