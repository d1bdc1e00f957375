// SPDX-License-Identifier: Apache-2.0

// Package ipfixtest reads back what package ipfix sends with an
// independent decoder, goflow2's (github.com/netsampler/goflow2/v2/
// decoders/netflow, standard library only), so that tests do not check
// the encoder against itself.
package ipfixtest

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/netsampler/goflow2/v2/decoders/netflow"
)

// Flow is one decoded data record, every element tierwall sends, with
// NetFlow v9's uptimes already turned into times.
type Flow struct {
	TemplateID         uint16
	Src, Dst           netip.AddrPort
	Proto              uint8
	TCPFlags           uint16
	Packets, Bytes     uint64
	Start, End         time.Time // millisecond precision
	Reason             uint8
	App                string
	Tier               uint8
	HWPackets, HWBytes uint64
	// RFC 5103 reverse direction (biflow only).
	RevTCPFlags                  uint16
	RevPackets, RevBytes         uint64
	RevHWPackets, RevHWBytes     uint64
	Unknown                      []string // elements not recognised, as "pen/id"
	HasRev, HasV9Times, HasTimes bool
}

// Message is one decoded message.
type Message struct {
	Version    uint16
	Length     int    // IPFIX header length; NetFlow v9: the datagram's
	Count      uint16 // NetFlow v9 header count
	ExportTime time.Time
	Uptime     uint32 // NetFlow v9 sysUptime
	Sequence   uint32
	Domain     uint32
	Templates  []uint16 // template IDs defined in it
	Flows      []Flow
	// Options are the options records, each element by "pen/id" (pen 0
	// for IANA's) as an unsigned integer, the scope's included.
	Options []map[string]uint64
	Raw     int // sets that could not be decoded (no template)
}

// Decoder keeps templates across messages, as a collector does.
type Decoder struct {
	// PEN is the enterprise number of tierwall's elements (default 32473).
	PEN       uint32
	templates netflow.NetFlowTemplateSystem
}

// NewDecoder returns a decoder with no templates.
func NewDecoder(pen uint32) *Decoder {
	if pen == 0 {
		pen = 32473
	}
	return &Decoder{PEN: pen, templates: netflow.CreateTemplateSystem()}
}

// Decode decodes one message.
func (d *Decoder) Decode(b []byte) (Message, error) {
	var p9 netflow.NFv9Packet
	var p10 netflow.IPFIXPacket
	if err := netflow.DecodeMessageVersion(bytes.NewBuffer(b), d.templates, &p9, &p10); err != nil {
		return Message{}, fmt.Errorf("decoding: %w", err)
	}
	var m Message
	var sets []any
	if p10.Version == 10 {
		m = Message{Version: 10, Length: int(p10.Length), ExportTime: time.Unix(int64(p10.ExportTime), 0),
			Sequence: p10.SequenceNumber, Domain: p10.ObservationDomainId}
		sets = p10.FlowSets
	} else {
		m = Message{Version: p9.Version, Length: len(b), Count: p9.Count, ExportTime: time.Unix(int64(p9.UnixSeconds), 0),
			Uptime: p9.SystemUptime, Sequence: p9.SequenceNumber, Domain: p9.SourceId}
		sets = p9.FlowSets
	}
	for _, s := range sets {
		switch s := s.(type) {
		case netflow.TemplateFlowSet:
			for _, r := range s.Records {
				m.Templates = append(m.Templates, r.TemplateId)
			}
		case netflow.DataFlowSet:
			for _, r := range s.Records {
				f, err := d.flow(&m, s.Id, r.Values)
				if err != nil {
					return m, err
				}
				m.Flows = append(m.Flows, f)
			}
		case netflow.IPFIXOptionsTemplateFlowSet:
			for _, r := range s.Records {
				m.Templates = append(m.Templates, r.TemplateId)
			}
		case netflow.OptionsDataFlowSet:
			for _, r := range s.Records {
				o := map[string]uint64{}
				for _, v := range append(append([]netflow.DataField(nil), r.ScopesValues...), r.OptionsValues...) {
					b, _ := v.Value.([]byte)
					var n uint64
					for _, c := range b {
						n = n<<8 | uint64(c)
					}
					// goflow2 leaves the enterprise bit in an option's type.
					o[fmt.Sprintf("%d/%d", v.Pen, v.Type&^0x8000)] = n
				}
				m.Options = append(m.Options, o)
			}
		case netflow.RawFlowSet:
			m.Raw++
		default:
			return m, fmt.Errorf("unexpected set %T", s)
		}
	}
	return m, nil
}

func (d *Decoder) flow(m *Message, tid uint16, vs []netflow.DataField) (Flow, error) {
	f := Flow{TemplateID: tid}
	var src, dst netip.Addr
	var sport, dport uint16
	var first, last uint32
	for _, v := range vs {
		b, ok := v.Value.([]byte)
		if !ok {
			return f, fmt.Errorf("element %d: value %T", v.Type, v.Value)
		}
		id, pen := v.Type&0x7fff, uint32(0)
		if m.Version == 10 && v.PenProvided {
			pen = v.Pen
		} else if m.Version == 9 && v.Type&0x8000 != 0 {
			pen = d.PEN // NetFlow v9: tierwall's elements carry the enterprise bit alone
		}
		u := uint64(0)
		if len(b) <= 8 {
			for _, c := range b {
				u = u<<8 | uint64(c)
			}
		}
		switch {
		case pen == 0 && (id == 8 || id == 27):
			src, _ = netip.AddrFromSlice(b)
		case pen == 0 && (id == 12 || id == 28):
			dst, _ = netip.AddrFromSlice(b)
		case pen == 0 && id == 7:
			sport = uint16(u)
		case pen == 0 && id == 11:
			dport = uint16(u)
		case pen == 0 && id == 4:
			f.Proto = uint8(u)
		case pen == 0 && id == 6:
			f.TCPFlags = uint16(u)
		case pen == 0 && id == 2:
			f.Packets = u
		case pen == 0 && id == 1:
			f.Bytes = u
		case pen == 0 && id == 152:
			f.Start, f.HasTimes = time.UnixMilli(int64(u)), true
		case pen == 0 && id == 153:
			f.End = time.UnixMilli(int64(u))
		case pen == 0 && id == 22:
			first, f.HasV9Times = uint32(u), true
		case pen == 0 && id == 21:
			last = uint32(u)
		case pen == 0 && id == 136:
			f.Reason = uint8(u)
		case pen == 0 && id == 96:
			f.App = strings.TrimRight(string(b), "\x00")
		case pen == 29305 && id == 6:
			f.RevTCPFlags, f.HasRev = uint16(u), true
		case pen == 29305 && id == 2:
			f.RevPackets = u
		case pen == 29305 && id == 1:
			f.RevBytes = u
		case pen == d.PEN && id == 1:
			f.Tier = uint8(u)
		case pen == d.PEN && id == 2:
			f.HWPackets = u
		case pen == d.PEN && id == 3:
			f.HWBytes = u
		case pen == d.PEN && id == 0x4002:
			f.RevHWPackets = u
		case pen == d.PEN && id == 0x4003:
			f.RevHWBytes = u
		default:
			f.Unknown = append(f.Unknown, fmt.Sprintf("%d/%d", pen, id))
		}
	}
	f.Src, f.Dst = netip.AddrPortFrom(src, sport), netip.AddrPortFrom(dst, dport)
	if f.HasV9Times {
		// RFC 3954: switched times are sysUptime milliseconds; the
		// header ties sysUptime to unix_secs.
		boot := m.ExportTime.Add(-time.Duration(m.Uptime) * time.Millisecond)
		f.Start = boot.Add(time.Duration(first) * time.Millisecond)
		f.End = boot.Add(time.Duration(last) * time.Millisecond)
	}
	return f, nil
}

// SetLengths returns the (id, length) of each set of an IPFIX or NetFlow v9
// message, read from the bytes: a check of the framing independent of any
// decoder's leniency.
func SetLengths(b []byte) ([][2]int, error) {
	hdr := 16
	if binary.BigEndian.Uint16(b) == 9 {
		hdr = 20
	}
	var out [][2]int
	for off := hdr; off < len(b); {
		if off+4 > len(b) {
			return out, fmt.Errorf("set header at %d past the end (%d)", off, len(b))
		}
		id, n := int(binary.BigEndian.Uint16(b[off:])), int(binary.BigEndian.Uint16(b[off+2:]))
		if n < 4 || off+n > len(b) {
			return out, fmt.Errorf("set %d at %d: length %d past the end (%d)", id, off, n, len(b))
		}
		out = append(out, [2]int{id, n})
		off += n
	}
	return out, nil
}
