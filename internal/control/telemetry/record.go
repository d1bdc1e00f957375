// SPDX-License-Identifier: Apache-2.0

package telemetry

import (
	"net/netip"
	"time"

	"github.com/tierwall/tierwall/internal/enum"
	"github.com/tierwall/tierwall/internal/rule"
)

// Protocol is the telemetry protocol a datagram spoke.
type Protocol uint8

const (
	SFlow5 Protocol = iota + 1
	NetFlow5
	NetFlow9
	IPFIX
)

var protocolNames = enum.New("telemetry protocol", rule.ErrInvalid, map[Protocol]string{
	SFlow5: "sflow5", NetFlow5: "netflow5", NetFlow9: "netflow9", IPFIX: "ipfix",
})

func (p Protocol) String() string { return protocolNames.String(p) }

// MarshalText makes protocols readable in JSON.
func (p Protocol) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// IP protocol numbers the detector tells apart.
const (
	protoICMP   = 1
	protoTCP    = 6
	protoUDP    = 17
	protoICMPv6 = 58
)

// TCP flag bits.
const (
	flagSYN = 0x02
	flagACK = 0x10
)

// Record is one flow sample (sFlow) or flow record (NetFlow, IPFIX) as the
// detector needs it. Packets and Bytes are what the router counted, not
// yet scaled: Rate is the sampling rate that applies (1: unsampled), so
// the traffic it stands for is Packets·Rate packets.
type Record struct {
	Exporter netip.Addr
	Proto    Protocol
	Src, Dst netip.Addr
	// IPProto is the IP protocol (the upper layer of the first fragment).
	IPProto          uint8
	SrcPort, DstPort uint16
	// TCPFlags is the sample's flags, or the OR of a flow's packets'.
	TCPFlags uint8
	// Fragment: the sample is an IP fragment (non-first fragments carry
	// no ports), or the flow record says it holds fragments.
	Fragment       bool
	Packets, Bytes uint64
	Rate           uint32
	// LossScale corrects for the exporter's datagrams lost on the way,
	// as its sequence numbers show them (lossMeter): the record stands
	// for Packets·Rate·LossScale packets. 0 reads as 1.
	LossScale float64
	// MinLen and MaxLen are the IP packet lengths seen: the sample's own,
	// a record's min/max elements, else its mean.
	MinLen, MaxLen uint16
	// Duration is how long a flow record's flow lasted (zero for samples
	// and for records without times): a record of a long flow is spread
	// over it, not counted as if it all arrived now.
	Duration time.Duration
	// Flow reports a flow record (it stands for one flow, Rate flows once
	// scaled), not a packet sample.
	Flow bool
	// At is when the exporter sent the record, on this host's clock
	// (exporterClock), when its datagram says (sFlow's uptime); zero: on
	// arrival. A burst of datagrams held back on the way then counts
	// where it belongs, not as a flood.
	At time.Time
}

// UnmarshalText reads what MarshalText wrote (the API's clients).
func (p *Protocol) UnmarshalText(b []byte) error { return protocolNames.Unmarshal(p, b) }
