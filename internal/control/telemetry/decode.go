// SPDX-License-Identifier: Apache-2.0

package telemetry

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/netsampler/goflow2/v2/decoders/netflow"
	"github.com/netsampler/goflow2/v2/decoders/netflowlegacy"
	"github.com/netsampler/goflow2/v2/decoders/sflow"
)

// Sentinel errors of Decode; every one is counted, none stops anything.
var (
	// ErrUnknownExporter: the datagram came from an address not
	// configured (ignored: telemetry is trivially spoofed).
	ErrUnknownExporter = errors.New("exporter not configured")
	// ErrMalformed: the datagram, or part of it, did not decode.
	ErrMalformed = errors.New("malformed datagram")
)

// ExporterConfig is one router allowed to send telemetry.
type ExporterConfig struct {
	Address netip.Addr
	Name    string
	// SamplingRate is used when the datagrams say none (NetFlow v9 and
	// IPFIX without sampling options, softflowd's unscaled counts); when
	// they say another, theirs is used and the mismatch counted.
	SamplingRate uint32
}

// DecoderConfig bounds the decoder's state.
type DecoderConfig struct {
	Exporters []ExporterConfig
	// MaxTemplates per exporter, over all its observation domains (512);
	// it also bounds the sequence streams tracked per exporter.
	MaxTemplates int
	// MaxExporters bounds the configured exporters (1024).
	MaxExporters int
	// MaxRate: a sampling rate above it is taken as garbage and the
	// configured one (or 1) used (1<<20).
	MaxRate uint32
	// MaxInterfaces bounds the interfaces whose sFlow counters are kept
	// per exporter (1024), MaxInterfacesTotal over all exporters (16384).
	MaxInterfaces      int
	MaxInterfacesTotal int
	// NoFastPath sends every sFlow datagram through goflow2 (the fast
	// path's reference in its tests and in make bench).
	NoFastPath bool
}

// Decoder turns datagrams into Records. It is safe for concurrent use
// (one lock per call: a datagram is decoded whole under it).
type Decoder struct {
	cfg DecoderConfig
	log *slog.Logger

	mu      sync.Mutex
	ex      map[netip.Addr]*exporter
	unknown uint64
	lastUnk netip.Addr
	rec     Record // reused: emit must not keep it
	ifTotal int    // interfaces held over all exporters
}

// NewDecoder checks the configuration and returns a decoder.
func NewDecoder(cfg DecoderConfig, log *slog.Logger) (*Decoder, error) {
	if cfg.MaxTemplates <= 0 {
		cfg.MaxTemplates = 512
	}
	if cfg.MaxExporters <= 0 {
		cfg.MaxExporters = 1024
	}
	if cfg.MaxRate == 0 {
		cfg.MaxRate = 1 << 20
	}
	if cfg.MaxInterfaces <= 0 {
		cfg.MaxInterfaces = defaultMaxInterfaces
	}
	if cfg.MaxInterfacesTotal <= 0 {
		cfg.MaxInterfacesTotal = defaultMaxInterfacesTotal
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if len(cfg.Exporters) > cfg.MaxExporters {
		return nil, fmt.Errorf("%d exporters configured, more than max_exporters (%d)", len(cfg.Exporters), cfg.MaxExporters)
	}
	d := &Decoder{cfg: cfg, log: log, ex: map[netip.Addr]*exporter{}}
	for _, c := range cfg.Exporters {
		a := c.Address.Unmap()
		if !a.IsValid() {
			return nil, fmt.Errorf("exporter %q: no address", c.Name)
		}
		if _, dup := d.ex[a]; dup {
			return nil, fmt.Errorf("exporter %s configured twice", a)
		}
		if c.SamplingRate > cfg.MaxRate {
			return nil, fmt.Errorf("exporter %s: sampling rate %d over %d", a, c.SamplingRate, cfg.MaxRate)
		}
		d.ex[a] = &exporter{ExporterStats: ExporterStats{Address: a, Name: c.Name, Configured: c.SamplingRate},
			tmpl: newTemplates(cfg.MaxTemplates), seq: map[uint64]uint32{}, seqN: map[uint64]uint32{}, seqAlt: map[uint64]uint32{}, seqGaps: map[uint64]*recentGaps{}, optRate: map[uint64]uint32{}, ifs: map[uint32]*ifState{}}
	}
	return d, nil
}

// exporterAddrs are the configured exporters' addresses.
func (d *Decoder) exporterAddrs() []netip.Addr {
	out := make([]netip.Addr, 0, len(d.cfg.Exporters))
	for _, c := range d.cfg.Exporters {
		out = append(out, c.Address.Unmap())
	}
	return out
}

// Unknown is how many datagrams came from exporters not configured, and
// the last such address.
func (d *Decoder) Unknown() (uint64, netip.Addr) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.unknown, d.lastUnk
}

// Exporters is every configured exporter's statistics, by address.
func (d *Decoder) Exporters() []ExporterStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]ExporterStats, 0, len(d.ex))
	for _, e := range d.ex {
		s := e.ExporterStats
		s.LossScale = e.loss.scale(time.Now())
		// [] before its first datagram, never null: the API's schema
		// says an array, and a configured router may be silent.
		s.Protocols = append([]Protocol{}, s.Protocols...)
		s.Templates = len(e.tmpl.m)
		s.TemplatesRefused = e.tmpl.refused
		s.Interfaces = e.interfaces()
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b ExporterStats) int { return a.Address.Compare(b.Address) })
	return out
}

// Decode decodes one datagram from an exporter and calls emit for each
// flow sample or record (the Record is reused: copy what is kept). What
// decoded before an error is emitted; the error is counted and returned
// (wrapping ErrUnknownExporter or ErrMalformed). It may rewrite b (a
// NetFlow v9 header's count).
func (d *Decoder) Decode(from netip.Addr, b []byte, now time.Time, emit func(*Record)) (err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	from = from.Unmap()
	e := d.ex[from]
	if e == nil {
		d.unknown++
		d.lastUnk = from
		return fmt.Errorf("%w: %s", ErrUnknownExporter, from)
	}
	e.Datagrams++
	e.LastSeen = now
	defer func() {
		// goflow2 is fuzzed upstream, but a panic on one router's bytes
		// must not take the collector down for every other router.
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: decoder panic: %v", ErrMalformed, p)
		}
		if err != nil {
			e.DecodeErrors++
		}
	}()
	if len(b) < 4 {
		return fmt.Errorf("%w: %d bytes", ErrMalformed, len(b))
	}
	switch v := binary.BigEndian.Uint16(b); {
	case v == 0 && binary.BigEndian.Uint32(b) == 5:
		return d.sflow(e, b, now, emit)
	case v == 5:
		return d.netflow5(e, b, now, emit)
	case v == 9, v == 10:
		return d.netflow(e, b, v, now, emit)
	default:
		return fmt.Errorf("%w: version %d", ErrMalformed, v)
	}
}

// rate is the sampling rate for a record whose datagram said said (0:
// nothing). Where the exporter has a configured rate and the datagram says
// another, the lower is used: a higher one multiplies every record the
// router sends (an options record sticks to its observation domain), and
// from a datagram spoofed from the router's address that made busy
// destinations floods, then FlowSpec rules and blackholes; a router
// whose rate really went up is read low until the configuration follows,
// which misses floods rather than stopping clients. A lower one is a
// router sampling more often: read at the configured rate its records
// would be multiplied by what it no longer skips.
func (d *Decoder) rate(e *exporter, said uint32) uint32 {
	if said > d.cfg.MaxRate {
		said = 0
	}
	r := said
	switch {
	case said == 0 && e.Configured > 0:
		r = e.Configured
	case said == 0:
		r = 1
	case e.Configured > 0 && said != e.Configured:
		e.RateMismatches++
		r = min(said, e.Configured)
		if !e.warned {
			e.warned = true
			d.log.Warn("telemetry: exporter's sampling rate differs from the configured one; using the lower",
				"exporter", e.Address, "datagram", said, "configured", e.Configured)
		}
	}
	e.SamplingRate = r
	return r
}

// errTruncated: a sample longer than what is left of its datagram.
var errTruncated = fmt.Errorf("%w: sFlow sample cut short", ErrMalformed)

// sflowGuard refuses what goflow2 v2.2.6 would allocate without bound:
// an expanded flow sample's record count is not capped there (the other
// sample formats' are, at 1000), and make([]FlowRecord, 4e9) is a crash.
func sflowGuard(b []byte) error {
	if len(b) < 8 {
		return fmt.Errorf("%w: sFlow header", ErrMalformed)
	}
	off := 8
	switch binary.BigEndian.Uint32(b[4:]) {
	case 1:
		off += 4
	case 2:
		off += 16
	default:
		return fmt.Errorf("%w: sFlow agent address type", ErrMalformed)
	}
	off += 12 // sub-agent, sequence, uptime
	if len(b) < off+4 {
		return fmt.Errorf("%w: sFlow header", ErrMalformed)
	}
	n := binary.BigEndian.Uint32(b[off:])
	off += 4
	for i := uint32(0); i < n && len(b) >= off+8; i++ {
		format, l := binary.BigEndian.Uint32(b[off:]), binary.BigEndian.Uint32(b[off+4:])
		off += 8
		if uint64(l) > uint64(len(b)-off) {
			return errTruncated // goflow2 stops here, keeping the samples before
		}
		if format == sflow.SAMPLE_FORMAT_EXPANDED_FLOW && l >= 44 && binary.BigEndian.Uint32(b[off+40:]) > 1000 {
			return fmt.Errorf("%w: expanded flow sample with %d records", ErrMalformed, binary.BigEndian.Uint32(b[off+40:]))
		}
		off += int(l)
	}
	return nil
}

func (d *Decoder) sflow(e *exporter, b []byte, now time.Time, emit func(*Record)) error {
	e.sawProtocol(SFlow5)
	if h, ok := walkSFlow(b, nil); ok && !d.cfg.NoFastPath {
		at := e.clock.at(time.Duration(h.uptime)*time.Millisecond, now)
		e.sequence(uint64(SFlow5)<<32|uint64(h.subAgent), h.seq, 1, 1, 1, d.cfg.MaxTemplates, now)
		v := sflowVisitor{d: d, e: e, emit: emit, base: Record{Exporter: e.Address, Proto: SFlow5, Packets: 1, At: at, LossScale: e.loss.scale(now)}}
		walkSFlow(b, &v)
		return nil
	}
	gerr := sflowGuard(b)
	if gerr != nil && gerr != errTruncated { //nolint:errorlint // the sentinel itself, never wrapped
		return gerr
	}
	var p sflow.Packet
	derr := sflow.DecodeMessageVersion(bytes.NewBuffer(b), &p)
	at := e.clock.at(time.Duration(p.Uptime)*time.Millisecond, now)
	e.sequence(uint64(SFlow5)<<32|uint64(p.SubAgentId), p.SequenceNumber, 1, 1, 1, d.cfg.MaxTemplates, now)
	scale := e.loss.scale(now)
	for _, s := range p.Samples {
		var rate uint32
		var recs []sflow.FlowRecord
		switch s := s.(type) {
		case sflow.FlowSample:
			rate, recs = s.SamplingRate, s.Records
		case sflow.ExpandedFlowSample:
			rate, recs = s.SamplingRate, s.Records
		case sflow.CounterSample:
			e.Counters++
			d.counters(e, s.Records, time.Duration(p.Uptime)*time.Millisecond, now)
			continue
		default:
			continue
		}
		r := &d.rec
		*r = Record{Exporter: e.Address, Proto: SFlow5, Packets: 1, Rate: d.rate(e, rate), At: at, LossScale: scale}
		ok := false
		for _, fr := range recs {
			switch h := fr.Data.(type) {
			case sflow.SampledHeader:
				if parseHeader(h.Protocol, h.HeaderData, r) {
					ok = true
					if r.MinLen == 0 {
						r.MinLen, r.MaxLen = uint16(min(h.FrameLength, 65535)), uint16(min(h.FrameLength, 65535))
					}
					r.Bytes = uint64(r.MinLen)
				}
			case sflow.SampledIPv4:
				ok = ipBase(&h.SampledIPBase, r) || ok
			case sflow.SampledIPv6:
				ok = ipBase(&h.SampledIPBase, r) || ok
			}
		}
		if ok {
			e.Records++
			emit(r)
		}
	}
	if derr != nil {
		return fmt.Errorf("%w: sFlow: %w", ErrMalformed, derr)
	}
	return gerr
}

// ipBase fills r from an sFlow sampled IPv4/IPv6 record (used when the
// agent sends no header).
func ipBase(h *sflow.SampledIPBase, r *Record) bool {
	src, ok1 := netip.AddrFromSlice(h.SrcIP)
	dst, ok2 := netip.AddrFromSlice(h.DstIP)
	if !ok1 || !ok2 || r.Dst.IsValid() {
		return r.Dst.IsValid()
	}
	r.Src, r.Dst = src, dst
	r.IPProto = uint8(h.Protocol)
	r.SrcPort, r.DstPort = uint16(h.SrcPort), uint16(h.DstPort)
	r.TCPFlags = uint8(h.TcpFlags)
	r.MinLen = uint16(min(h.Length, 65535))
	r.MaxLen, r.Bytes = r.MinLen, uint64(r.MinLen)
	return true
}

func (d *Decoder) netflow5(e *exporter, b []byte, now time.Time, emit func(*Record)) error {
	e.sawProtocol(NetFlow5)
	// The count is checked against the length first: goflow2 allocates
	// count records before reading them.
	if len(b) < 24 || int(binary.BigEndian.Uint16(b[2:]))*48+24 > len(b) {
		return fmt.Errorf("%w: NetFlow v5 count %d in %d bytes", ErrMalformed, binary.BigEndian.Uint16(b[2:min(len(b), 4)]), len(b))
	}
	var p netflowlegacy.PacketNetFlowV5
	if err := netflowlegacy.DecodeMessageVersion(bytes.NewBuffer(b), &p); err != nil {
		return fmt.Errorf("%w: NetFlow v5: %w", ErrMalformed, err)
	}
	e.sequence(uint64(NetFlow5)<<32|uint64(p.EngineType)<<8|uint64(p.EngineId), p.FlowSequence, uint32(p.Count), uint32(p.Count), uint32(p.Count), d.cfg.MaxTemplates, now)
	scale := e.loss.scale(now)
	// The top two bits are the sampling mode, the other 14 the interval.
	said := uint32(p.SamplingInterval & 0x3fff)
	for i := range p.Records {
		x := &p.Records[i]
		r := &d.rec
		*r = Record{Exporter: e.Address, Proto: NetFlow5, Flow: true, Rate: d.rate(e, said),
			Src: v4(uint32(x.SrcAddr)), Dst: v4(uint32(x.DstAddr)), IPProto: x.Proto,
			SrcPort: x.SrcPort, DstPort: x.DstPort, TCPFlags: x.TCPFlags,
			Packets: uint64(x.DPkts), Bytes: uint64(x.DOctets), LossScale: scale}
		if x.Last > x.First {
			r.Duration = time.Duration(x.Last-x.First) * time.Millisecond
		}
		meanLen(r)
		e.Records++
		emit(r)
	}
	return nil
}

func v4(a uint32) netip.Addr {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], a)
	return netip.AddrFrom4(b)
}

func meanLen(r *Record) {
	if r.MinLen == 0 && r.Packets > 0 {
		m := uint16(min(r.Bytes/r.Packets, 65535))
		r.MinLen, r.MaxLen = m, m
	}
}

// Information elements read from NetFlow v9 and IPFIX records (IANA's,
// which v9's field types share below 128).
const (
	ieOctets          = 1
	iePackets         = 2
	ieProto           = 4
	ieTCPFlags        = 6
	ieSrcPort         = 7
	ieSrc4            = 8
	ieDstPort         = 11
	ieDst4            = 12
	ieLast            = 21 // flowEndSysUpTime (ms)
	ieFirst           = 22 // flowStartSysUpTime (ms)
	ieMinLen          = 25
	ieMaxLen          = 26
	ieSrc6            = 27
	ieDst6            = 28
	ieICMP4           = 32
	ieSamplingInt     = 34
	ieSamplerRandom   = 50
	ieOctetsTotal     = 85
	iePacketsTotal    = 86
	ieFragOffset      = 88
	ieICMP6           = 139
	ieStartSec        = 150
	ieEndSec          = 151
	ieStartMs         = 152
	ieEndMs           = 153
	ieFragFlags       = 197
	ieSamplingPktInt  = 305
	ieSamplingPktSpc  = 306
	ieSamplingSize    = 309
	ieSamplingPopSize = 310
)

func uintOf(v any) uint64 {
	b, _ := v.([]byte)
	if len(b) > 8 {
		b = b[len(b)-8:]
	}
	var x uint64
	for _, c := range b {
		x = x<<8 | uint64(c)
	}
	return x
}

func addrOf(v any) netip.Addr {
	b, _ := v.([]byte)
	a, _ := netip.AddrFromSlice(b)
	return a
}

func (d *Decoder) netflow(e *exporter, b []byte, version uint16, now time.Time, emit func(*Record)) error {
	if version == 9 && len(b) >= 4 {
		// goflow2 reads a v9 header's count as the number of flowsets and
		// stops after that many; RFC 3954 makes it the number of records,
		// and softflowd 1.1 counts only the data records, so a datagram
		// of templates, options and two flows says 2 and its flows were
		// never read. Each flowset takes at least 4 bytes, so reading
		// them all is bounded by the datagram. (The buffer is the
		// collector's own.)
		binary.BigEndian.PutUint16(b[2:], 0xffff)
	}
	var p9 netflow.NFv9Packet
	var p10 netflow.IPFIXPacket
	derr := netflow.DecodeMessageVersion(bytes.NewBuffer(b), e.tmpl, &p9, &p10)
	proto, sets, domain, seq := NetFlow9, p9.FlowSets, p9.SourceId, p9.SequenceNumber
	if version == 10 {
		proto, sets, domain, seq = IPFIX, p10.FlowSets, p10.ObservationDomainId, p10.SequenceNumber
	}
	e.sawProtocol(proto)
	stream := uint64(proto)<<32 | uint64(domain)
	// The loss measured up to this datagram: its own sequence number is
	// checked after its records are counted (an IPFIX number counts
	// them).
	scale := e.loss.scale(now)
	// Options first: a datagram that brings a new sampling rate applies it
	// to its own records.
	var data, opts uint32
	raw := false
	for _, s := range sets {
		if o, ok := s.(netflow.OptionsDataFlowSet); ok {
			data += uint32(len(o.Records))
			opts += uint32(len(o.Records))
			for _, rec := range o.Records {
				if r := samplingOf(rec.OptionsValues); r > 0 {
					if len(e.optRate) < d.cfg.MaxTemplates || e.optRate[stream] > 0 {
						e.optRate[stream] = r
					}
				}
			}
		}
	}
	for _, s := range sets {
		switch s := s.(type) {
		case netflow.DataFlowSet:
			data += uint32(len(s.Records))
			for _, rec := range s.Records {
				r := &d.rec
				*r = Record{Exporter: e.Address, Proto: proto, Flow: true, LossScale: scale}
				said := e.optRate[stream]
				var first, last uint64
				var haveFirst, haveLast bool
				var unit time.Duration
				for _, f := range rec.Values {
					if f.PenProvided {
						continue
					}
					switch f.Type {
					case ieOctets, ieOctetsTotal:
						r.Bytes = max(r.Bytes, uintOf(f.Value))
					case iePackets, iePacketsTotal:
						r.Packets = max(r.Packets, uintOf(f.Value))
					case ieProto:
						r.IPProto = uint8(uintOf(f.Value))
					case ieTCPFlags:
						r.TCPFlags = uint8(uintOf(f.Value))
					case ieSrcPort:
						r.SrcPort = uint16(uintOf(f.Value))
					case ieDstPort:
						r.DstPort = uint16(uintOf(f.Value))
					case ieICMP4, ieICMP6:
						r.DstPort = uint16(uintOf(f.Value))
					case ieSrc4, ieSrc6:
						r.Src = addrOf(f.Value)
					case ieDst4, ieDst6:
						r.Dst = addrOf(f.Value)
					case ieMinLen:
						r.MinLen = uint16(uintOf(f.Value))
					case ieMaxLen:
						r.MaxLen = uint16(uintOf(f.Value))
					case ieFragFlags, ieFragOffset:
						r.Fragment = r.Fragment || uintOf(f.Value) != 0
					case ieFirst, ieStartMs:
						first, haveFirst, unit = uintOf(f.Value), true, time.Millisecond
					case ieLast, ieEndMs:
						last, haveLast, unit = uintOf(f.Value), true, time.Millisecond
					case ieStartSec:
						first, haveFirst, unit = uintOf(f.Value), true, time.Second
					case ieEndSec:
						last, haveLast, unit = uintOf(f.Value), true, time.Second
					case ieSamplingInt, ieSamplerRandom:
						if v := uint32(min(uintOf(f.Value), 1<<31)); v > 0 {
							said = v
						}
					}
				}
				if !r.Dst.IsValid() {
					continue
				}
				if haveFirst && haveLast && last > first && last-first < 1<<40 {
					r.Duration = time.Duration(last-first) * unit
				}
				if r.MaxLen < r.MinLen {
					r.MaxLen = r.MinLen
				}
				meanLen(r)
				r.Rate = d.rate(e, said)
				e.Records++
				emit(r)
			}
		case netflow.RawFlowSet:
			e.NoTemplate++
			raw = true
		}
	}
	// NetFlow v9 counts export packets, IPFIX data records (options
	// records included), per source ID / observation domain.
	switch {
	case proto == NetFlow9:
		e.sequence(stream, seq, 1, 1, 1, d.cfg.MaxTemplates, now)
	case raw:
		// Records whose template is unknown cannot be counted: the next
		// sequence number is not known either, and no loss is claimed.
		delete(e.seq, stream)
		delete(e.seqN, stream)
		delete(e.seqAlt, stream)
		delete(e.seqGaps, stream)
	default:
		e.sequence(stream, seq, data, data-opts, data, d.cfg.MaxTemplates, now)
	}
	if derr != nil && !onlyNoTemplate(derr) {
		return fmt.Errorf("%w: %s: %w", ErrMalformed, proto, derr)
	}
	return nil
}

// onlyNoTemplate reports whether err is only data sets whose template has
// not arrived yet: normal after a collector or exporter restart, counted
// as NoTemplate rather than as an error.
func onlyNoTemplate(err error) bool {
	var fe *netflow.FlowError
	if !errors.As(err, &fe) {
		return false
	}
	for _, e := range unjoin(err) {
		if !errors.Is(e, netflow.ErrorTemplateNotFound) {
			return false
		}
	}
	return true
}

// unjoin flattens the errors.Join inside goflow2's wrapping.
func unjoin(err error) []error {
	for {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			var out []error
			for _, e := range j.Unwrap() {
				out = append(out, unjoin(e)...)
			}
			return out
		}
		u := errors.Unwrap(err)
		if u == nil {
			return []error{err}
		}
		err = u
	}
}

// samplingOf is the sampling rate an options record states, 0 for none:
// samplingInterval / samplerRandomInterval (1-in-N), PSAMP's
// (interval+space)/interval, or population/size.
func samplingOf(vs []netflow.DataField) uint32 {
	var rate, pint, pspc, size, pop uint64
	for _, f := range vs {
		if f.PenProvided {
			continue
		}
		switch f.Type {
		case ieSamplingInt, ieSamplerRandom:
			rate = uintOf(f.Value)
		case ieSamplingPktInt:
			pint = uintOf(f.Value)
		case ieSamplingPktSpc:
			pspc = uintOf(f.Value)
		case ieSamplingSize:
			size = uintOf(f.Value)
		case ieSamplingPopSize:
			pop = uintOf(f.Value)
		}
	}
	switch {
	case rate > 0:
	case pint > 0:
		rate = (pint + pspc) / pint
	case size > 0:
		rate = pop / size
	}
	return uint32(min(rate, 1<<31))
}
