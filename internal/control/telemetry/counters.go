// SPDX-License-Identifier: Apache-2.0

package telemetry

import (
	"cmp"
	"math"
	"net/netip"
	"slices"
	"time"

	"github.com/netsampler/goflow2/v2/decoders/sflow"
)

// Interface is one of an exporter's interfaces as its sFlow counter
// samples describe it (generic interface counters, RFC 3176's ifTable
// subset, and the Ethernet ones when the agent sends them): what the
// operator reads (`tierwall telemetry exporters`, /v1/telemetry, the
// per-interface metrics) and what an uplink's capacity is derived from.
type Interface struct {
	IfIndex  uint32 `json:"if_index"`
	Type     uint32 `json:"if_type"`
	SpeedBPS uint64 `json:"speed_bps"` // ifSpeed (0: unknown)
	AdminUp  bool   `json:"admin_up"`
	OperUp   bool   `json:"oper_up"`
	// The agent's counters as last sampled: octets are 64-bit, packets
	// (unicast, multicast and broadcast summed), errors and discards
	// 32-bit; a counter the agent does not have (all ones) reads 0.
	InOctets    uint64 `json:"in_octets"`
	OutOctets   uint64 `json:"out_octets"`
	InPackets   uint64 `json:"in_packets"`
	OutPackets  uint64 `json:"out_packets"`
	InErrors    uint32 `json:"in_errors"`
	OutErrors   uint32 `json:"out_errors"`
	InDiscards  uint32 `json:"in_discards"`
	OutDiscards uint32 `json:"out_discards"`
	// Ethernet is the agent's Ethernet counters record, when it sends one.
	Ethernet *EthernetCounters `json:"ethernet,omitempty"`
	// Rates between the last two samples (bits/s, packets/s); the
	// utilisations are the bit rates over SpeedBPS (0 when unknown).
	// They are zero until two samples arrived, and after a reset.
	InBPS          float64 `json:"in_bps"`
	OutBPS         float64 `json:"out_bps"`
	InPPS          float64 `json:"in_pps"`
	OutPPS         float64 `json:"out_pps"`
	InUtilisation  float64 `json:"in_utilisation"`
	OutUtilisation float64 `json:"out_utilisation"`
	Samples        uint64  `json:"samples"`
	// Resets are samples whose counters went back (the agent restarted,
	// or its counters were cleared) or implied a rate the interface
	// cannot carry: no rate is computed across one.
	Resets     uint64    `json:"counter_resets"`
	LastSample time.Time `json:"last_sample"`
}

// EthernetCounters are the error counters of sFlow's Ethernet record
// that say a link is sick (the collision counters say nothing on the
// full-duplex links that carry transit).
type EthernetCounters struct {
	AlignmentErrors   uint32 `json:"alignment_errors"`
	FCSErrors         uint32 `json:"fcs_errors"`
	FrameTooLongs     uint32 `json:"frame_too_longs"`
	MACReceiveErrors  uint32 `json:"mac_receive_errors"`
	MACTransmitErrors uint32 `json:"mac_transmit_errors"`
	SymbolErrors      uint32 `json:"symbol_errors"`
}

// ifState is an interface and what its next rates are computed from.
type ifState struct {
	Interface
	uptime time.Duration // the agent's, at the last sample
	// The 32-bit packet counters apart: each wraps on its own.
	pkts [2][3]uint32
}

// Bounds of the interface tables: an exporter's address is trivially
// spoofed, so whoever can send from it could otherwise make the
// collector keep one entry per ifIndex it invents.
const (
	defaultMaxInterfaces      = 1024  // per exporter (a large chassis)
	defaultMaxInterfacesTotal = 16384 // over all exporters
	// ifEvictAfter: an interface with no sample this long may make room
	// for a new one (a router that renumbered its interfaces).
	ifEvictAfter = 10 * time.Minute
	// UplinkFresh: an uplink whose last sample is older is unknown to
	// the capacity (agents poll every 20-30 s by default; some every
	// few minutes).
	UplinkFresh = 10 * time.Minute
	// rateSlack: a rate above the interface's speed times this is not
	// what the link carried but a counter that was cleared or garbage.
	rateSlack = 1.5
	// minFrameBits is the least an Ethernet frame takes on the wire
	// (64 bytes, preamble and inter-frame gap): the packet rate a speed
	// bounds.
	minFrameBits = 84 * 8
)

// known reads a 32-bit counter the agent may not have (all ones).
func known(v uint32) uint32 {
	if v == math.MaxUint32 {
		return 0
	}
	return v
}

// octetDelta is how far a 64-bit octet counter advanced, ok false when
// it went back. A counter that stays within 32 bits and went back is an
// agent that fills the 64-bit field from a 32-bit counter, which wrapped.
func octetDelta(prev, cur uint64) (uint64, bool) {
	switch {
	case cur >= prev:
		return cur - prev, true
	case prev <= math.MaxUint32:
		return cur + 1<<32 - prev, true
	}
	return 0, false
}

// counters folds one counter sample's records into the exporter's
// interface table; at is when the agent sent it (its uptime), now when
// it arrived.
func (d *Decoder) counters(e *exporter, recs []sflow.CounterRecord, uptime time.Duration, now time.Time) {
	var ic *sflow.IfCounters
	var eth *sflow.EthernetCounters
	for i := range recs {
		switch v := recs[i].Data.(type) {
		case sflow.IfCounters:
			ic = &v
		case sflow.EthernetCounters:
			eth = &v
		}
	}
	if ic == nil {
		// Ethernet counters name no interface: the sample's source ID
		// does, but only beside the generic record do they mean much.
		return
	}
	s := e.ifs[ic.IfIndex]
	if s == nil {
		if s = d.newIf(e, ic.IfIndex, now); s == nil {
			return
		}
	}
	in := [3]uint32{known(ic.IfInUcastPkts), known(ic.IfInMulticastPkts), known(ic.IfInBroadcastPkts)}
	out := [3]uint32{known(ic.IfOutUcastPkts), known(ic.IfOutMulticastPkts), known(ic.IfOutBroadcastPkts)}
	if s.Samples > 0 {
		d.rates(s, ic, in, out, uptime, now)
	}
	x := &s.Interface
	x.Type, x.SpeedBPS = ic.IfType, ic.IfSpeed
	if x.SpeedBPS == math.MaxUint64 {
		x.SpeedBPS = 0
	}
	x.AdminUp, x.OperUp = ic.IfStatus&1 != 0, ic.IfStatus&2 != 0
	x.InOctets, x.OutOctets = ic.IfInOctets, ic.IfOutOctets
	x.InPackets = uint64(in[0]) + uint64(in[1]) + uint64(in[2])
	x.OutPackets = uint64(out[0]) + uint64(out[1]) + uint64(out[2])
	x.InErrors, x.OutErrors = known(ic.IfInErrors), known(ic.IfOutErrors)
	x.InDiscards, x.OutDiscards = known(ic.IfInDiscards), known(ic.IfOutDiscards)
	if eth != nil {
		x.Ethernet = &EthernetCounters{AlignmentErrors: known(eth.Dot3StatsAlignmentErrors), FCSErrors: known(eth.Dot3StatsFCSErrors),
			FrameTooLongs: known(eth.Dot3StatsFrameTooLongs), MACReceiveErrors: known(eth.Dot3StatsInternalMacReceiveErrors),
			MACTransmitErrors: known(eth.Dot3StatsInternalMacTransmitErrors), SymbolErrors: known(eth.Dot3StatsSymbolErrors)}
	}
	x.Samples++
	x.LastSample = now
	s.uptime = uptime
	s.pkts = [2][3]uint32{in, out}
}

// rates computes s's rates from its last sample to ic. The interval is
// the agent's (its uptime at each), which a datagram held on the way
// does not stretch; the arrival times when the uptime did not move.
func (d *Decoder) rates(s *ifState, ic *sflow.IfCounters, in, out [3]uint32, uptime time.Duration, now time.Time) {
	x := &s.Interface
	reset := func() {
		x.Resets++
		x.InBPS, x.OutBPS, x.InPPS, x.OutPPS, x.InUtilisation, x.OutUtilisation = 0, 0, 0, 0, 0, 0
	}
	if uptime < s.uptime {
		// The agent restarted: its counters started again. (Its uptime,
		// in 32-bit milliseconds, also wraps every 49.7 days: one rate
		// is lost then.)
		reset()
		return
	}
	dt := uptime - s.uptime
	if dt == 0 {
		dt = now.Sub(x.LastSample)
	}
	if dt <= 0 {
		return // the same instant twice says nothing of a rate
	}
	dIn, ok1 := octetDelta(x.InOctets, ic.IfInOctets)
	dOut, ok2 := octetDelta(x.OutOctets, ic.IfOutOctets)
	if !ok1 || !ok2 {
		reset()
		return
	}
	var pIn, pOut uint64
	for i := range 3 {
		// Modulo 2^32: a wrap between two samples is read right, and a
		// cleared counter is caught by the octets or the bound below.
		pIn += uint64(in[i] - s.pkts[0][i])
		pOut += uint64(out[i] - s.pkts[1][i])
	}
	sec := dt.Seconds()
	inBPS, outBPS := float64(dIn)*8/sec, float64(dOut)*8/sec
	inPPS, outPPS := float64(pIn)/sec, float64(pOut)/sec
	if sp := float64(ic.IfSpeed); ic.IfSpeed > 0 && ic.IfSpeed != math.MaxUint64 &&
		(max(inBPS, outBPS) > sp*rateSlack || max(inPPS, outPPS) > sp/minFrameBits*rateSlack) {
		reset()
		return
	}
	x.InBPS, x.OutBPS, x.InPPS, x.OutPPS = inBPS, outBPS, inPPS, outPPS
	x.InUtilisation, x.OutUtilisation = 0, 0
	if ic.IfSpeed > 0 && ic.IfSpeed != math.MaxUint64 {
		x.InUtilisation, x.OutUtilisation = inBPS/float64(ic.IfSpeed), outBPS/float64(ic.IfSpeed)
	}
}

// newIf makes room for an interface in e's table, or counts it refused.
func (d *Decoder) newIf(e *exporter, idx uint32, now time.Time) *ifState {
	if len(e.ifs) >= d.cfg.MaxInterfaces || d.ifTotal >= d.cfg.MaxInterfacesTotal {
		// One look a second for an entry gone quiet: a stream of
		// invented indexes must not make every sample a scan.
		if now.Sub(e.ifScan) < time.Second || !d.evictIf(e, now) {
			e.InterfacesRefused++
			return nil
		}
	}
	s := &ifState{Interface: Interface{IfIndex: idx}}
	e.ifs[idx] = s
	d.ifTotal++
	return s
}

// evictIf drops e's quietest interface if it has been quiet for
// ifEvictAfter; only e's own, so that one exporter cannot push out
// another's.
func (d *Decoder) evictIf(e *exporter, now time.Time) bool {
	e.ifScan = now
	var old *ifState
	for _, s := range e.ifs {
		if old == nil || s.LastSample.Before(old.LastSample) {
			old = s
		}
	}
	if old == nil || now.Sub(old.LastSample) < ifEvictAfter {
		return false
	}
	delete(e.ifs, old.IfIndex)
	d.ifTotal--
	return true
}

// interfaces is e's table, by ifIndex.
func (e *exporter) interfaces() []Interface {
	out := make([]Interface, 0, len(e.ifs))
	for _, s := range e.ifs {
		x := s.Interface
		if x.Ethernet != nil {
			c := *x.Ethernet
			x.Ethernet = &c
		}
		out = append(out, x)
	}
	slices.SortFunc(out, func(a, b Interface) int { return cmp.Compare(a.IfIndex, b.IfIndex) })
	return out
}

// Uplink is an interface of an exporter that carries a host group's
// traffic from its upstreams.
type Uplink struct {
	Exporter netip.Addr `json:"exporter"`
	IfIndex  uint32     `json:"if_index"`
}

// UplinkState is an uplink as the counter samples show it.
type UplinkState struct {
	Uplink
	// Known: a counter sample came within UplinkFresh.
	Known          bool    `json:"known"`
	OperUp         bool    `json:"oper_up"`
	SpeedBPS       uint64  `json:"speed_bps"`
	InBPS          float64 `json:"in_bps"`
	InUtilisation  float64 `json:"in_utilisation"`
	OutBPS         float64 `json:"out_bps"`
	OutUtilisation float64 `json:"out_utilisation"`
}

// UplinkSource gives the uplinks' states: the decoder of the routers'
// own counter samples in one process (Decoder), or in a scale-out
// detector what its collectors publish of theirs.
type UplinkSource interface {
	Uplinks(ups []Uplink, now time.Time) (float64, []UplinkState)
}

// Uplinks reads the uplinks' state, and the capacity their ifSpeed
// says (SumUplinks).
func (d *Decoder) Uplinks(ups []Uplink, now time.Time) (float64, []UplinkState) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]UplinkState, 0, len(ups))
	for _, u := range ups {
		st := UplinkState{Uplink: u}
		if e := d.ex[u.Exporter.Unmap()]; e != nil {
			if s := e.ifs[u.IfIndex]; s != nil && s.Samples > 0 && now.Sub(s.LastSample) < UplinkFresh {
				st.Known, st.OperUp, st.SpeedBPS = true, s.OperUp, s.SpeedBPS
				st.InBPS, st.InUtilisation, st.OutBPS, st.OutUtilisation = s.InBPS, s.InUtilisation, s.OutBPS, s.OutUtilisation
			}
		}
		out = append(out, st)
	}
	return SumUplinks(out), out
}

// SumUplinks is the capacity the uplinks' ifSpeed says: the sum over
// those operationally up (a link that is down carries nothing), when
// every one of them is known; else 0, unknown, and the group is never
// blackholed on it. Reading a capacity from part of the uplinks would
// make it smaller than it is, and a blackhole is the victim's whole
// outage.
func SumUplinks(ups []UplinkState) float64 {
	var sum float64
	for _, st := range ups {
		// An uplink up at an unknown speed is as unknown as a silent one.
		if !st.Known || st.OperUp && st.SpeedBPS == 0 {
			return 0
		}
		if st.OperUp {
			sum += float64(st.SpeedBPS)
		}
	}
	return sum
}
