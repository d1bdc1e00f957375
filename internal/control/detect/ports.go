// SPDX-License-Identifier: Apache-2.0

package detect

// PortProfile is one interval's packets per port, for TCP and UDP, by
// source and by destination port: what the ladder reads to name a port in
// a FlowRule (a reflection flood comes from one well-known source port; a
// SYN flood goes to one service port). Fixed arrays, 2 MiB, reused with
// Reset: the data plane's per-port counters map onto them directly and
// no number of ports or sources makes it grow. The daemon may hand the
// detector one profile of all passed traffic or one per victim; with one
// for all, shares are of all traffic, which a flood dominates anyway.
type PortProfile struct {
	TCPSrc, TCPDst, UDPSrc, UDPDst, SYNLen [65536]uint64
}

// The SYN-length columns (bpf/lib/consts.h TW_SYNLEN_*).
const (
	SYNLenV6  = 0x8000
	SYNLenMax = 0x7fff
)

// SYNLenIndex is the SYNLen column of a SYN of IP length n in family 4 or
// 6.
func SYNLenIndex(family uint8, n int) uint16 {
	i := uint16(min(max(n, 0), SYNLenMax))
	if family == 6 {
		i |= SYNLenV6
	}
	return i
}

// AddSYN counts packets SYNs of IP length n in family 4 or 6.
func (p *PortProfile) AddSYN(family uint8, n int, packets uint64) {
	p.SYNLen[SYNLenIndex(family, n)] += packets
}

// Port directions.
const (
	SrcPort = iota
	DstPort
)

// Add counts packets of IP protocol proto from sport to dport; other
// protocols than TCP and UDP are ignored (they have no ports).
func (p *PortProfile) Add(proto uint8, sport, dport uint16, packets uint64) {
	switch proto {
	case 6:
		p.TCPSrc[sport] += packets
		p.TCPDst[dport] += packets
	case 17:
		p.UDPSrc[sport] += packets
		p.UDPDst[dport] += packets
	}
}

// Reset zeroes every count for the next interval.
func (p *PortProfile) Reset() { *p = PortProfile{} }

// table is the array for proto (6 or 17) and dir (SrcPort or DstPort).
func (p *PortProfile) table(proto uint8, dir int) *[65536]uint64 {
	switch {
	case proto == 6 && dir == SrcPort:
		return &p.TCPSrc
	case proto == 6:
		return &p.TCPDst
	case dir == SrcPort:
		return &p.UDPSrc
	}
	return &p.UDPDst
}

// Port is the packets of proto on one port in direction dir.
func (p *PortProfile) Port(proto uint8, dir int, port uint16) uint64 {
	return p.table(proto, dir)[port]
}

// Top is the busiest port of proto in direction dir, its packets, and the
// packets of proto in all (every packet has one port each way, so the
// total is the same for both directions).
func (p *PortProfile) Top(proto uint8, dir int) (port uint16, packets, total uint64) {
	t := p.table(proto, dir)
	for i, n := range t {
		total += n
		if n > packets {
			port, packets = uint16(i), n
		}
	}
	return port, packets, total
}
