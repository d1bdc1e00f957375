// SPDX-License-Identifier: Apache-2.0

package datapath

import (
	"sort"
	"unsafe"
)

// The port profile (bpf/lib/features.h): packets that passed, by protocol,
// side and port, counted per CPU in the feature buffers after the CPU
// headers and swapped with them, so it covers exactly a Snapshot's
// interval. It shows what a flood shares when its sources share nothing —
// "most of it is UDP from source port 53" — which is what a flow rule can
// name. Its fifth row counts the SYNs by IP length: what a SYN flood's
// packets share when they share no port but the victim's service.

// portSlots is TW_PORT_SLOTS: per CPU, five rows of 65536 counters (TCP
// source, TCP destination, UDP source, UDP destination, SYN length),
// eight to a slot.
const portSlots = 5 * 65536 / 8

// The SYN-length row's columns (TW_SYNLEN_*): IPv4 SYNs at their IP
// length, IPv6 ones at SYNLenV6 | length, lengths from SYNLenMax at it.
const (
	SYNLenV6  = 0x8000
	SYNLenMax = 0x7fff
)

// PortProfile is the packets that passed in one snapshot interval, by
// port, and the SYNs (without ACK) among them by IP length (SYNLenV6,
// SYNLenMax). Non-first fragments carry no ports and are not in it.
type PortProfile struct {
	TCPSrc, TCPDst, UDPSrc, UDPDst, SYNLen [65536]uint64
}

// PortCount is one port's packets.
type PortCount struct {
	Port    uint16 `json:"port"`
	Packets uint64 `json:"packets"`
}

// Row is the counters of one protocol (6 or 17) and side; nil for other
// protocols.
func (p *PortProfile) Row(proto uint8, source bool) *[65536]uint64 {
	switch {
	case proto == 6 && source:
		return &p.TCPSrc
	case proto == 6:
		return &p.TCPDst
	case proto == 17 && source:
		return &p.UDPSrc
	case proto == 17:
		return &p.UDPDst
	}
	return nil
}

// Top returns the n ports of a row with the most packets, most first (ties
// by port), and the row's total: e.g. Top(17, true, 5) for the source
// ports of UDP traffic.
func (p *PortProfile) Top(proto uint8, source bool, n int) (top []PortCount, total uint64) {
	row := p.Row(proto, source)
	if row == nil {
		return nil, 0
	}
	for port, c := range row {
		if c == 0 {
			continue
		}
		total += c
		top = append(top, PortCount{Port: uint16(port), Packets: c})
	}
	sort.Slice(top, func(i, j int) bool {
		if top[i].Packets != top[j].Packets {
			return top[i].Packets > top[j].Packets
		}
		return top[i].Port < top[j].Port
	})
	if len(top) > n {
		top = top[:n]
	}
	return top, total
}

// drainPorts sums the per-CPU port profiles of a quiescent feature buffer
// and zeroes them, touching only counters that moved.
func (b *drainBufs) drainPorts(buf []filterTwFeatSlot, sz sizes) *PortProfile {
	p := &b.ports
	*p = PortProfile{}
	rows := [...]*[65536]uint64{&p.TCPSrc, &p.TCPDst, &p.UDPSrc, &p.UDPDst, &p.SYNLen}
	base := int(sz.portBase())
	for cpu := 0; cpu < int(sz.ncpu); cpu++ {
		region := buf[base+cpu*portSlots : base+(cpu+1)*portSlots]
		ctrs := unsafe.Slice((*uint64)(unsafe.Pointer(&region[0])), portSlots*8)
		for i, c := range ctrs {
			if c != 0 {
				rows[i>>16][i&0xffff] += c
				ctrs[i] = 0
			}
		}
	}
	return p
}
