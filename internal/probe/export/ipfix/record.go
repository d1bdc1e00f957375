// SPDX-License-Identifier: Apache-2.0

package ipfix

import (
	"net/netip"
	"time"
)

// Record is one flow record as the encoder sends it: the package's own,
// so that the codec depends on nothing of the probe (the exporter fills
// it from the engine's record). Directions are those of the endpoints: 0
// is from Lo to Hi; InitDir is the direction of the flow's first packet,
// which a biflow record is oriented from.
type Record struct {
	Proto     uint8
	Lo, Hi    netip.AddrPort
	InitDir   uint8
	App       string // applicationName, cut to 64 bytes (32 in NetFlow v9)
	Start     time.Time
	End       time.Time
	Packets   [2]uint64 // every packet of the period
	Bytes     [2]uint64 // from the IP header on
	HWPackets [2]uint64 // of those, what the NIC counted
	HWBytes   [2]uint64
	TCPFlags  [2]uint8
	Reason    uint8 // flowEndReason (RFC 5102, IE 136)
	Final     bool  // the flow's last record: sent even without packets
}
