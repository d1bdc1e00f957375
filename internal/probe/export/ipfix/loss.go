// SPDX-License-Identifier: Apache-2.0

package ipfix

import "encoding/binary"

// Loss is what the probe could not report as flow records, since it
// started: the collectors see it in an options record (RFC 7011 §4.2,
// Metering Process Reliability Statistics), so that a flood the probe
// could only partly follow does not look like less traffic.
type Loss struct {
	// IgnoredPackets are packets in no flow record: their flow was
	// refused by the full software table, or could not be parsed
	// (ignoredPacketTotalCount).
	IgnoredPackets uint64
	// NotSentFlows are flow records the exporter dropped, its queue full
	// (notSentFlowTotalCount).
	NotSentFlows uint64
	// RefusedFlows are flows the full software table refused
	// (tierwall's IERefusedFlows).
	RefusedFlows uint64
	// UntrackedFlows are flows counted by the software table alone, past
	// the flows the probe tracks: their records are exact but carry no
	// application (tierwall's IEUntrackedFlows).
	UntrackedFlows uint64
}

// TemplateLoss is the options template of Loss records.
const TemplateLoss = 260

// Elements of the loss record: RFC 7012's and tierwall's.
const (
	ieIgnoredPacketTotalCount = 164
	ieNotSentFlowTotalCount   = 166
	ieObservationDomainID     = 149
	// IERefusedFlows and IEUntrackedFlows (unsigned64, tierwall's
	// enterprise number) count flows, as Loss says.
	IERefusedFlows   = 4
	IEUntrackedFlows = 5
)

// EncodeLoss returns one message with the loss options template and one
// record of l, scoped to the observation domain. NetFlow v9 sessions do
// not send it (nil): its options are another format and collectors show
// them less.
func (e *Encoder) EncodeLoss(l Loss) []Message {
	if e.opt.Format != IPFIX {
		return nil
	}
	type f struct {
		id  uint16
		pen uint32
		v   uint64
	}
	fields := []f{{ieIgnoredPacketTotalCount, 0, l.IgnoredPackets}, {ieNotSentFlowTotalCount, 0, l.NotSentFlows},
		{IERefusedFlows, e.opt.EnterpriseNumber, l.RefusedFlows}, {IEUntrackedFlows, e.opt.EnterpriseNumber, l.UntrackedFlows}}
	// Options template set (ID 3): the template, its field count with
	// the scope, and the scope count; the options templates are sent
	// with every record, as it is seldom sent.
	t := binary.BigEndian.AppendUint32(nil, 3<<16)
	t = binary.BigEndian.AppendUint16(t, TemplateLoss)
	t = binary.BigEndian.AppendUint16(t, uint16(1+len(fields)))
	t = binary.BigEndian.AppendUint16(t, 1)
	t = binary.BigEndian.AppendUint16(t, ieObservationDomainID)
	t = binary.BigEndian.AppendUint16(t, 4)
	for _, x := range fields {
		id := x.id
		if x.pen != 0 {
			id |= 0x8000
		}
		t = binary.BigEndian.AppendUint16(t, id)
		t = binary.BigEndian.AppendUint16(t, 8)
		if x.pen != 0 {
			t = binary.BigEndian.AppendUint32(t, x.pen)
		}
	}
	binary.BigEndian.PutUint16(t[2:], uint16(len(t)))
	d := binary.BigEndian.AppendUint32(nil, TemplateLoss<<16)
	d = binary.BigEndian.AppendUint32(d, e.opt.ObservationDomain)
	for _, x := range fields {
		d = binary.BigEndian.AppendUint64(d, x.v)
	}
	binary.BigEndian.PutUint16(d[2:], uint16(len(d)))
	// With the flow templates, when due, it stays well under
	// MinMessageSize.
	m := e.begin()
	m.b = append(m.b, t...)
	m.b = append(m.b, d...)
	m.records++
	return []Message{e.finish(m)}
}
