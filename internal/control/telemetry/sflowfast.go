// SPDX-License-Identifier: Apache-2.0

package telemetry

import (
	"encoding/binary"
	"net/netip"

	"github.com/netsampler/goflow2/v2/decoders/sflow"
)

// The sFlow fast path: a datagram of flow samples, what a router sends
// thousands of times a second, is read in place, allocating nothing.
//
// Why by hand: goflow2 decodes every field through reflection and boxes
// every sample and record in an interface; on a six-sample datagram that
// is 33 allocations and about 2.2 of the 2.5 µs the collector spends on
// it, and the garbage it leaves costs as much again in the collector's
// one core. FastNetMon (C++) takes about three times as many datagrams a
// second under overload. goflow2 stays the decoder of everything else:
// NetFlow, IPFIX, counter and drop samples, and any datagram the walk
// below declines, so that the two never disagree on a datagram: the walk
// accepts only datagrams that goflow2 decodes without an error, and
// reads from them exactly the fields goflow2 would give the decoder
// (FuzzSFlowFastPath and TestSFlowFastPathAgrees check it against
// goflow2 on every datagram they make).

// sflowHeader is what the decoder uses of a datagram's header.
type sflowHeader struct {
	subAgent, seq, uptime uint32
}

// sflowVisitor takes what the walk reads; nil walks only to check.
type sflowVisitor struct {
	d    *Decoder
	e    *exporter
	emit func(*Record)
	base Record // the datagram's fields every record carries
	ok   bool   // the current sample has an address
}

// sample starts a flow sample at rate, emitting the one before.
func (v *sflowVisitor) sample(rate uint32) {
	v.flush()
	r := &v.d.rec
	*r = v.base
	r.Rate = v.d.rate(v.e, rate)
}

func (v *sflowVisitor) flush() {
	if v.ok {
		v.e.Records++
		v.emit(&v.d.rec)
	}
	v.ok = false
}

// record reads one flow record of the current sample; its length was
// checked by the walk.
func (v *sflowVisitor) record(format uint32, b []byte) {
	r := &v.d.rec
	be := binary.BigEndian
	switch format {
	case sflow.FLOW_TYPE_RAW:
		if parseHeader(be.Uint32(b), b[16:], r) {
			v.ok = true
			if r.MinLen == 0 {
				fl := be.Uint32(b[4:])
				r.MinLen, r.MaxLen = uint16(min(fl, 65535)), uint16(min(fl, 65535))
			}
			r.Bytes = uint64(r.MinLen)
		}
	case sflow.FLOW_TYPE_IPV4:
		v.ok = ipFields(r, be.Uint32(b), be.Uint32(b[4:]), netip.AddrFrom4([4]byte(b[8:12])), netip.AddrFrom4([4]byte(b[12:16])), b[16:]) || v.ok
	case sflow.FLOW_TYPE_IPV6:
		v.ok = ipFields(r, be.Uint32(b), be.Uint32(b[4:]), netip.AddrFrom16([16]byte(b[8:24])), netip.AddrFrom16([16]byte(b[24:40])), b[40:]) || v.ok
	}
}

// ipFields is ipBase for a record read in place: ports and flags are the
// three words at p.
func ipFields(r *Record, length, proto uint32, src, dst netip.Addr, p []byte) bool {
	if r.Dst.IsValid() {
		return true
	}
	be := binary.BigEndian
	r.Src, r.Dst = src, dst
	r.IPProto = uint8(proto)
	r.SrcPort, r.DstPort = uint16(be.Uint32(p)), uint16(be.Uint32(p[4:]))
	r.TCPFlags = uint8(be.Uint32(p[8:]))
	r.MinLen = uint16(min(length, 65535))
	r.MaxLen, r.Bytes = r.MinLen, uint64(r.MinLen)
	return true
}

// minRecord is the length goflow2 needs of each flow record it decodes
// (shorter is its error); 0 for those it keeps raw, -1 for those the walk
// leaves to it.
func minRecord(format uint32, b []byte) int {
	switch format {
	case sflow.FLOW_TYPE_RAW:
		return 16
	case sflow.FLOW_TYPE_ETH:
		return 20
	case sflow.FLOW_TYPE_IPV4:
		return 32
	case sflow.FLOW_TYPE_IPV6:
		return 56
	case sflow.FLOW_TYPE_EXT_SWITCH:
		return 16
	case sflow.FLOW_TYPE_EXT_ROUTER:
		if len(b) < 4 {
			return 4
		}
		switch binary.BigEndian.Uint32(b) {
		case 1:
			return 4 + 4 + 8
		case 2:
			return 4 + 16 + 8
		}
		return -1
	case sflow.FLOW_TYPE_EGRESS_QUEUE:
		return 4
	case sflow.FLOW_TYPE_EXT_GATEWAY, sflow.FLOW_TYPE_EXT_ACL, sflow.FLOW_TYPE_EXT_FUNCTION:
		return -1
	}
	return 0
}

// walkSFlow walks an sFlow v5 datagram, calling v (when not nil) for
// each flow sample and record, and says whether the datagram is one the
// fast path takes: flow and expanded flow samples only, none cut short,
// each record long enough for goflow2. Anything else returns false, even
// a datagram goflow2 would decode in part. A walk may return false after
// visiting some samples, so callers walk once with v nil to check, then
// again with v to read.
func walkSFlow(b []byte, v *sflowVisitor) (sflowHeader, bool) {
	be := binary.BigEndian
	var h sflowHeader
	if len(b) < 8 || be.Uint32(b) != 5 {
		return h, false
	}
	off := 8
	switch be.Uint32(b[4:]) {
	case 1:
		off += 4
	case 2:
		off += 16
	default:
		return h, false
	}
	if len(b) < off+16 {
		return h, false
	}
	h.subAgent, h.seq, h.uptime = be.Uint32(b[off:]), be.Uint32(b[off+4:]), be.Uint32(b[off+8:])
	n := be.Uint32(b[off+12:])
	off += 16
	if n > 1000 {
		return h, false
	}
	for i := uint32(0); i < n && len(b)-off >= 8; i++ {
		format, l := be.Uint32(b[off:]), be.Uint32(b[off+4:])
		off += 8
		if uint64(l) > uint64(len(b)-off) {
			return h, false // goflow2 stops here; sflowGuard counts it
		}
		s := b[off : off+int(l)]
		off += int(l)
		var rate, nrec uint32
		switch format {
		case sflow.SAMPLE_FORMAT_FLOW:
			if len(s) < 32 {
				return h, false
			}
			rate, nrec, s = be.Uint32(s[8:]), be.Uint32(s[28:]), s[32:]
		case sflow.SAMPLE_FORMAT_EXPANDED_FLOW:
			if len(s) < 44 {
				return h, false
			}
			rate, nrec, s = be.Uint32(s[12:]), be.Uint32(s[40:]), s[44:]
		default:
			return h, false // counters, drops, unknown: goflow2's
		}
		if nrec > 1000 {
			return h, false
		}
		if v != nil {
			v.sample(rate)
		}
		for j := uint32(0); j < nrec && len(s) >= 8; j++ {
			rf, rl := be.Uint32(s), be.Uint32(s[4:])
			s = s[8:]
			if uint64(rl) > uint64(len(s)) {
				break // goflow2 leaves the sample's other records, no error
			}
			rb := s[:rl]
			s = s[rl:]
			need := minRecord(rf, rb)
			if need < 0 || len(rb) < need {
				return h, false
			}
			if v != nil {
				v.record(rf, rb)
			}
		}
	}
	if v != nil {
		v.flush()
	}
	return h, true
}
