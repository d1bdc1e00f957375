// SPDX-License-Identifier: Apache-2.0

// Package ipfix encodes the flow probe's records as IPFIX (RFC 7011/7012,
// biflows per RFC 5103, the application per RFC 6759) or as NetFlow v9
// (RFC 3954), IPFIX's ancestor with the same template model, for older
// collectors. An Encoder is one export session: one collector's stream,
// with its own sequence numbers and template refresh (over UDP templates
// are never withdrawn, only resent: RFC 7011 §8.4).
package ipfix

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/tierwall/tierwall/internal/enum"
	"github.com/tierwall/tierwall/internal/errdefs"
)

// Format is the wire format, numbered as the header's version.
type Format uint16

const (
	NetFlow9 Format = 9
	IPFIX    Format = 10
)

var formatNames = enum.New("format", ErrInvalid, map[Format]string{NetFlow9: "netflow9", IPFIX: "ipfix"}).Alias("v9", NetFlow9)

func (f Format) String() string { return formatNames.String(f) }

// ParseFormat reads a format's name: "ipfix" or "netflow9" ("v9").
func ParseFormat(s string) (Format, error) { return formatNames.Parse(s) }

// ErrInvalid reports options an encoder cannot work with.
// It is errdefs.ErrInvalid to errors.Is.
var ErrInvalid = errdefs.Invalid("invalid export options")

// Template IDs: a uniflow and a biflow template per address family, so a
// collector that cached one never reads the other's records with it.
const (
	TemplateIPv4       = 256
	TemplateIPv6       = 257
	TemplateIPv4Biflow = 258
	TemplateIPv6Biflow = 259
)

// Defaults of Options.
const (
	DefaultMaxMessageSize          = 1400
	DefaultTemplateRefresh         = time.Minute
	DefaultTemplateRefreshMessages = 100
	MinMessageSize                 = 512
	MaxMessageSize                 = 65507 // UDP over IPv4
)

// Options configure an Encoder. Zero values take the defaults.
type Options struct {
	Format            Format // default IPFIX
	ObservationDomain uint32 // IPFIX observation domain, NetFlow v9 source id
	// Biflow sends one RFC 5103 record per flow, oriented from the
	// initiator, with the reverse direction's counters under PEN 29305.
	// The default, uniflow, sends one record per direction that has
	// packets. NetFlow v9 is always uniflow.
	Biflow bool
	// MaxMessageSize bounds a message (UDP payload), default 1400 bytes.
	MaxMessageSize int
	// Templates are resent every TemplateRefresh and every
	// TemplateRefreshMessages messages, whichever comes first; a negative
	// value turns that trigger off. Templates are sent in the first
	// message and with the next message after a refresh falls due.
	TemplateRefresh         time.Duration
	TemplateRefreshMessages int
	// EnterpriseNumber carries tierwall's elements (counting tier, NIC
	// counts); default DefaultEnterpriseNumber.
	EnterpriseNumber uint32
	// Now is the clock (default time.Now); tests inject one.
	Now func() time.Time
	// Boot is the NetFlow v9 system's start: sysUptime and the
	// first/last switched times count milliseconds from it (default: the
	// encoder's creation, on the second). Times before it are sent as 0:
	// the probe starts with its exporter, so its flows start later.
	Boot time.Time
}

// Message is one encoded message (one UDP datagram).
type Message struct {
	Bytes     []byte
	Records   int  // data records in it
	Templates bool // it carries the templates
}

// Encoder turns records into messages. It is not safe for concurrent use.
type Encoder struct {
	opt       Options
	templates map[uint16][]field
	tplSet    []byte // the template set, ready to copy

	seq       uint32    // IPFIX: data records sent; v9: messages sent
	tplAt     time.Time // when templates were last sent
	tplMsgs   int       // messages since
	tplEver   bool
	scratch   []byte
	hdrLen    int
	setHdrLen int
}

// NewEncoder returns an encoder of one export session.
func NewEncoder(o Options) (*Encoder, error) {
	if o.Format == 0 {
		o.Format = IPFIX
	}
	if o.Format != IPFIX && o.Format != NetFlow9 {
		return nil, fmt.Errorf("%w: format %d", ErrInvalid, o.Format)
	}
	if o.Format == NetFlow9 {
		o.Biflow = false
	}
	if o.MaxMessageSize == 0 {
		o.MaxMessageSize = DefaultMaxMessageSize
	}
	if o.MaxMessageSize < MinMessageSize || o.MaxMessageSize > MaxMessageSize {
		return nil, fmt.Errorf("%w: message size %d not in %d..%d", ErrInvalid, o.MaxMessageSize, MinMessageSize, MaxMessageSize)
	}
	if o.TemplateRefresh == 0 {
		o.TemplateRefresh = DefaultTemplateRefresh
	}
	if o.TemplateRefreshMessages == 0 {
		o.TemplateRefreshMessages = DefaultTemplateRefreshMessages
	}
	if o.EnterpriseNumber == 0 {
		o.EnterpriseNumber = DefaultEnterpriseNumber
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Boot.IsZero() {
		// On a whole second: sysUptime is sent at whole seconds.
		o.Boot = o.Now().Truncate(time.Second)
	}
	e := &Encoder{opt: o, templates: map[uint16][]field{}, hdrLen: 16, setHdrLen: 4}
	if o.Format == NetFlow9 {
		e.hdrLen = 20
	}
	if o.Biflow {
		e.templates[TemplateIPv4Biflow] = e.fields(false, true)
		e.templates[TemplateIPv6Biflow] = e.fields(true, true)
	} else {
		e.templates[TemplateIPv4] = e.fields(false, false)
		e.templates[TemplateIPv6] = e.fields(true, false)
	}
	e.tplSet = e.templateSet()
	return e, nil
}

// Options returns the options in force, defaults filled in.
func (e *Encoder) Options() Options { return e.opt }

func (e *Encoder) templateIDs() (v4, v6 uint16) {
	if e.opt.Biflow {
		return TemplateIPv4Biflow, TemplateIPv6Biflow
	}
	return TemplateIPv4, TemplateIPv6
}

// templateSet encodes both templates in one set: IPFIX set ID 2, NetFlow
// v9 flowset ID 0.
func (e *Encoder) templateSet() []byte {
	id := uint16(2)
	if e.opt.Format == NetFlow9 {
		id = 0
	}
	b := binary.BigEndian.AppendUint32(nil, uint32(id)<<16)
	v4, v6 := e.templateIDs()
	for _, t := range []uint16{v4, v6} {
		fs := e.templates[t]
		b = binary.BigEndian.AppendUint16(b, t)
		b = binary.BigEndian.AppendUint16(b, uint16(len(fs)))
		for _, f := range fs {
			id := f.id
			if f.pen != 0 {
				id |= 0x8000
			}
			b = binary.BigEndian.AppendUint16(b, id)
			b = binary.BigEndian.AppendUint16(b, f.length)
			if f.pen != 0 && e.opt.Format == IPFIX {
				b = binary.BigEndian.AppendUint32(b, f.pen)
			}
		}
	}
	b = e.pad(b)
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	return b
}

// pad aligns a NetFlow v9 flowset to 4 bytes, as RFC 3954 §5.3 asks;
// IPFIX sets go unpadded.
func (e *Encoder) pad(b []byte) []byte {
	if e.opt.Format == NetFlow9 {
		for len(b)%4 != 0 {
			b = append(b, 0)
		}
	}
	return b
}

// uptime is a time as NetFlow v9 milliseconds since Boot.
func (e *Encoder) uptime(t time.Time) uint32 {
	d := t.Sub(e.opt.Boot)
	if d < 0 {
		return 0
	}
	return uint32(d.Milliseconds())
}

// Views splits a record into the data records it is sent as. Uniflow:
// one per direction that has packets, the initiator's first, oriented by
// direction; a final record without packets still goes out, as the
// initiator's direction, to carry the end reason. Biflow: one, oriented
// from the initiator. A non-final record without packets sends nothing.
func views(r *Record, biflow bool) []view {
	init := int(r.InitDir & 1)
	d := func(i int) dir {
		return dir{pkts: r.Packets[i], bytes: r.Bytes[i], hwPkts: r.HWPackets[i], hwBytes: r.HWBytes[i], flags: r.TCPFlags[i]}
	}
	base := view{proto: r.Proto, start: r.Start, end: r.End, reason: r.Reason, app: r.App}
	if base.start.IsZero() {
		base.start = base.end
	}
	if base.end.IsZero() {
		base.end = base.start
	}
	if len(base.app) > appNameMax {
		base.app = base.app[:appNameMax]
	}
	orient := func(v view, i int) view {
		v.src, v.dst = r.Lo, r.Hi
		if i == 1 {
			v.src, v.dst = r.Hi, r.Lo
		}
		return v
	}
	none := r.Packets[0]+r.Packets[1] == 0
	if none && !r.Final {
		return nil
	}
	if biflow {
		v := orient(base, init)
		v.fwd, v.rev = d(init), d(1-init)
		v.tier = tierOf(v.fwd.pkts+v.rev.pkts, v.fwd.hwPkts+v.rev.hwPkts)
		return []view{v}
	}
	var vs []view
	for _, i := range []int{init, 1 - init} {
		if r.Packets[i] == 0 && !(none && i == init) {
			continue
		}
		v := orient(base, i)
		v.fwd = d(i)
		v.tier = tierOf(v.fwd.pkts, v.fwd.hwPkts)
		vs = append(vs, v)
	}
	return vs
}

// tierOf is the counting tier as the probe's record tells it, as the
// IECountingTier bit mask.
func tierOf(pkts, hw uint64) uint8 {
	t := uint8(0)
	if hw > 0 {
		t |= TierHardware
	}
	if pkts > hw || t == 0 {
		t |= TierSoftware
	}
	return t
}

// message is a message being filled.
type message struct {
	b       []byte
	records int // data records
	count   int // NetFlow v9 header count: template and data records
	tpl     bool
	set     int    // offset of the open data set's header, or -1
	setID   uint16 // its template
}

// Encode packs the records into messages of at most MaxMessageSize
// bytes, full but for the last. With no records it returns a message of
// templates alone when a refresh is due (so an idle exporter still
// refreshes them), else nothing. Every message returned counts as sent for
// sequence numbers and refresh.
func (e *Encoder) Encode(rs []Record) []Message {
	var out []Message
	var m *message
	for i := range rs {
		for _, v := range views(&rs[i], e.opt.Biflow) {
			tid := e.templateOf(&v)
			e.scratch = e.record(e.scratch[:0], tid, &v)
			if m != nil && !m.fits(e, tid, len(e.scratch)) {
				out = append(out, e.finish(m))
				m = nil
			}
			if m == nil {
				m = e.begin()
			}
			m.add(e, tid, e.scratch)
		}
	}
	if m == nil && e.refreshDue() {
		m = e.begin()
	}
	if m != nil {
		out = append(out, e.finish(m))
	}
	return out
}

func (e *Encoder) templateOf(v *view) uint16 {
	v4, v6 := e.templateIDs()
	if v.src.Addr().Is4() {
		return v4
	}
	return v6
}

func (e *Encoder) record(b []byte, tid uint16, v *view) []byte {
	for _, f := range e.templates[tid] {
		b = f.put(b, v, e)
	}
	return b
}

func (e *Encoder) refreshDue() bool {
	if !e.tplEver {
		return true
	}
	if n := e.opt.TemplateRefreshMessages; n > 0 && e.tplMsgs >= n {
		return true
	}
	d := e.opt.TemplateRefresh
	return d > 0 && e.opt.Now().Sub(e.tplAt) >= d
}

// begin starts a message: room for the header, then the templates if a
// refresh is due.
func (e *Encoder) begin() *message {
	m := &message{b: make([]byte, e.hdrLen, e.opt.MaxMessageSize), set: -1}
	if e.refreshDue() {
		m.b = append(m.b, e.tplSet...)
		m.tpl = true
		m.count = 2
	}
	return m
}

// fits tells whether a data record of n bytes with template tid still
// fits: in the open set if it is tid's, else in a new set after the open
// one is closed (and, in NetFlow v9, padded).
func (m *message) fits(e *Encoder, tid uint16, n int) bool {
	size, setLen := len(m.b), 0
	if m.set >= 0 && m.setID == tid {
		setLen = size - m.set + n
		size += n
	} else {
		if m.set >= 0 {
			size += padding(e, size-m.set)
		}
		setLen = e.setHdrLen + n
		size += setLen
	}
	return size+padding(e, setLen) <= e.opt.MaxMessageSize
}

func padding(e *Encoder, n int) int {
	if e.opt.Format != NetFlow9 {
		return 0
	}
	return (4 - n%4) % 4
}

func (m *message) add(e *Encoder, tid uint16, rec []byte) {
	if m.set < 0 || m.setID != tid {
		m.closeSet(e)
		m.set, m.setID = len(m.b), tid
		m.b = binary.BigEndian.AppendUint32(m.b, uint32(tid)<<16)
	}
	m.b = append(m.b, rec...)
	m.records++
	m.count++
}

func (m *message) closeSet(e *Encoder) {
	if m.set < 0 {
		return
	}
	m.b = e.pad(m.b)
	binary.BigEndian.PutUint16(m.b[m.set+2:], uint16(len(m.b)-m.set))
	m.set = -1
}

// finish closes the message, writes its header and accounts it.
func (e *Encoder) finish(m *message) Message {
	m.closeSet(e)
	now := e.opt.Now()
	h := m.b[:0]
	if e.opt.Format == NetFlow9 {
		h = binary.BigEndian.AppendUint16(h, 9)
		h = binary.BigEndian.AppendUint16(h, uint16(m.count))
		// sysUptime at the whole second of unix_secs: collectors compute
		// a packet's time as unix_secs - sysUptime + switched, exact so.
		sec := now.Truncate(time.Second)
		h = binary.BigEndian.AppendUint32(h, e.uptime(sec))
		h = binary.BigEndian.AppendUint32(h, uint32(sec.Unix()))
		h = binary.BigEndian.AppendUint32(h, e.seq)
		_ = binary.BigEndian.AppendUint32(h, e.opt.ObservationDomain)
		e.seq++ // RFC 3954: export packets sent
	} else {
		h = binary.BigEndian.AppendUint16(h, 10)
		h = binary.BigEndian.AppendUint16(h, uint16(len(m.b)))
		h = binary.BigEndian.AppendUint32(h, uint32(now.Unix()))
		h = binary.BigEndian.AppendUint32(h, e.seq)
		_ = binary.BigEndian.AppendUint32(h, e.opt.ObservationDomain)
		e.seq += uint32(m.records) // RFC 7011: data records sent before this message
	}
	if m.tpl {
		e.tplEver, e.tplAt, e.tplMsgs = true, now, 0
	}
	e.tplMsgs++
	return Message{Bytes: m.b, Records: m.records, Templates: m.tpl}
}
