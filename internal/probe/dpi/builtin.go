// SPDX-License-Identifier: Apache-2.0

package dpi

import (
	"encoding/binary"

	"github.com/tierwall/tierwall/internal/probe/flow"
	"github.com/tierwall/tierwall/internal/tier"
)

// maxReassembly bounds the bytes a flow buffers while a TLS ClientHello
// spans TCP segments. Hellos with post-quantum key shares are about 2 KiB;
// a longer one is parsed as far as the buffer goes (SNI usually comes
// early; without it the flow is still TLS).
const maxReassembly = 4096

// Builtin is the pure-Go classifier. It looks at the first payload of each
// direction (buffering a TLS ClientHello that spans segments) and is Done
// as soon as one parser matches, or with a port guess once both first
// payloads matched nothing. It holds no state of its own, so unlike nDPI
// its flows may be used from several goroutines, one flow at a time.
type Builtin struct{}

// NewBuiltin returns the built-in classifier.
func NewBuiltin() *Builtin { return &Builtin{} }

func (*Builtin) Name() string   { return "builtin" }
func (*Builtin) Close() error   { return nil }
func (*Builtin) String() string { return "builtin" }

// NewFlow implements Classifier.
func (*Builtin) NewFlow(key tier.FlowKey, initDir uint8) Flow {
	return &builtinFlow{proto: key.Proto, initDir: initDir & 1, lo: key.Lo.Port(), hi: key.Hi.Port()}
}

// Bits of builtinFlow.seen.
const (
	seenClient = 1 << 0 // the initiator's first payload was examined
	seenServer = 1 << 1
)

// builtinFlow is kept small: the engine may hold tens of thousands.
type builtinFlow struct {
	v       Verdict
	tls     *reassembly // non-nil while a ClientHello spans segments
	lo, hi  uint16
	proto   uint8
	initDir uint8
	seen    uint8
}

// reassembly collects the initiator's TCP stream up to need bytes.
type reassembly struct {
	buf  []byte
	next uint32 // TCP sequence number of the byte after buf
	need int
}

func (f *builtinFlow) Add(s *flow.Sample) Verdict {
	if f.v.Done {
		return f.v
	}
	switch f.proto {
	case protoTCP, protoUDP:
	case protoICMP:
		return f.finish(verdictFor("icmp", "", SourceDPI))
	case protoICMPv6:
		return f.finish(verdictFor("icmpv6", "", SourceDPI))
	default:
		return f.finish(f.Giveup())
	}
	p := s.Payload()
	if len(p) == 0 {
		return f.v
	}
	client := s.Dir&1 == f.initDir
	if f.tls != nil {
		if client {
			return f.continueTLS(s, p)
		}
		// The server answered: the client has sent all of its hello.
		return f.finish(f.tlsVerdict(true))
	}
	bit := uint8(seenServer)
	if client {
		bit = seenClient
	}
	if f.seen&bit != 0 {
		return f.v
	}
	f.seen |= bit
	if v, ok := f.classify(s, p, client); ok {
		return f.finish(v)
	}
	if f.tls == nil && f.seen == seenClient|seenServer {
		return f.finish(f.Giveup())
	}
	return f.v
}

// classify runs the parsers on a direction's first payload, most
// specific first; a TLS ClientHello that needs more segments starts a
// reassembly and is not a verdict yet.
func (f *builtinFlow) classify(s *flow.Sample, p []byte, client bool) (Verdict, bool) {
	tcp := f.proto == protoTCP
	on := func(port uint16) bool { return f.lo == port || f.hi == port }
	if tcp {
		if h := parseTLS(p); h.ok {
			if h.done || !h.client || !client || truncated(s) {
				return verdictFor(AppTLS, h.sni, SourceDPI), true
			}
			seq, ok := tcpSeq(s)
			if !ok {
				return verdictFor(AppTLS, h.sni, SourceDPI), true
			}
			f.tls = &reassembly{need: min(h.need, maxReassembly), next: seq + uint32(len(p))}
			f.tls.buf = append(make([]byte, 0, f.tls.need), p[:min(len(p), f.tls.need)]...)
			return Verdict{}, false
		}
		if ok, host := parseHTTP(p); ok {
			return verdictFor(AppHTTP, host, SourceDPI), true
		}
		if parseSSH(p) {
			return verdictFor(AppSSH, "", SourceDPI), true
		}
		if app, host := parseBanner(p, client, on(21)); app != "" {
			return verdictFor(app, host, SourceDPI), true
		}
	} else {
		if parseQUIC(p, udpPayloadLen(s, len(p)), client) {
			return verdictFor(AppQUIC, "", SourceDPI), true
		}
		if on(123) && parseNTP(p) {
			return verdictFor(AppNTP, "", SourceDPI), true
		}
		if (on(67) || on(68)) && parseDHCP(p) {
			return verdictFor(AppDHCP, "", SourceDPI), true
		}
	}
	dnsPort := on(53) || (!tcp && on(5353))
	if ok, name := parseDNS(p, tcp, !dnsPort); ok {
		return verdictFor(AppDNS, name, SourceDPI), true
	}
	return Verdict{}, false
}

// continueTLS appends an initiator's segment to the ClientHello being
// reassembled; a gap (a lost sample, a cut capture) ends it with what
// arrived.
func (f *builtinFlow) continueTLS(s *flow.Sample, p []byte) Verdict {
	r := f.tls
	seq, ok := tcpSeq(s)
	if !ok {
		return f.finish(f.tlsVerdict(true))
	}
	d := int32(r.next - seq) // bytes of p already in buf
	switch {
	case d < 0:
		return f.finish(f.tlsVerdict(true))
	case int(d) >= len(p):
		return f.v // a retransmission
	}
	p = p[d:]
	n := min(len(p), r.need-len(r.buf))
	r.buf = append(r.buf, p[:n]...)
	r.next += uint32(len(p))
	if len(r.buf) >= r.need || truncated(s) {
		return f.finish(f.tlsVerdict(true))
	}
	if v := f.tlsVerdict(false); v.Done {
		return f.finish(v)
	}
	return f.v
}

// tlsVerdict parses the reassembled ClientHello; unless final, it is only
// a verdict once the SNI is known or known to be absent.
func (f *builtinFlow) tlsVerdict(final bool) Verdict {
	h := parseTLS(f.tls.buf)
	if !final && !h.done {
		return Verdict{}
	}
	return verdictFor(AppTLS, h.sni, SourceDPI)
}

func (f *builtinFlow) finish(v Verdict) Verdict {
	f.v = v
	f.tls = nil
	return v
}

func (f *builtinFlow) Giveup() Verdict {
	if f.v.Done {
		return f.v
	}
	if f.tls != nil {
		return f.finish(f.tlsVerdict(true))
	}
	if app := portGuess(f.proto, f.lo, f.hi); app != "" {
		return f.finish(verdictFor(app, "", SourcePort))
	}
	return f.finish(verdictFor(AppUnknown, "", SourceNone))
}

func (f *builtinFlow) Close() { f.tls = nil }

// tcpSeq is a TCP sample's sequence number.
func tcpSeq(s *flow.Sample) (uint32, bool) {
	if s.L4Off <= 0 || s.L4Off+8 > len(s.Data) {
		return 0, false
	}
	return binary.BigEndian.Uint32(s.Data[s.L4Off+4:]), true
}

// udpPayloadLen is the datagram's payload length from the UDP header,
// which may exceed the captured payload.
func udpPayloadLen(s *flow.Sample, captured int) int {
	if s.L4Off <= 0 || s.L4Off+6 > len(s.Data) {
		return captured
	}
	n := int(binary.BigEndian.Uint16(s.Data[s.L4Off+4:])) - 8
	if n < captured {
		return captured
	}
	return n
}

// truncated: the snap length cut the packet.
func truncated(s *flow.Sample) bool { return s.L3Len > len(s.Data) }
