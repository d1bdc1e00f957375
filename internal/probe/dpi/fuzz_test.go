// SPDX-License-Identifier: Apache-2.0

package dpi

import (
	"crypto/tls"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/tierwall/tierwall/internal/probe/flow"
	"github.com/tierwall/tierwall/internal/tier"
)

// The parsers read hostile input: no input may panic or make a flow
// buffer more than maxReassembly bytes. Run longer with
// go test -run '^$' -fuzz FuzzBuiltin -fuzztime 1m ./internal/probe/dpi.

func FuzzParsers(f *testing.F) {
	for _, fx := range fixtures() {
		for _, s := range fx.conn(f).samples {
			if p := s.Payload(); len(p) > 0 {
				f.Add(p)
			}
		}
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		for _, tcp := range []bool{false, true} {
			for _, strict := range []bool{false, true} {
				parseDNS(p, tcp, strict)
			}
		}
		parseHTTP(p)
		if h := parseTLS(p); h.ok && h.need > 5+tlsMaxRecord {
			t.Fatalf("need %d", h.need)
		}
		helloSNI(p)
		sniName(p)
		parseQUIC(p, len(p), true)
		parseQUIC(p, 1500, false)
		parseSSH(p)
		parseNTP(p)
		parseDHCP(p)
		parseBanner(p, false, true)
		parseBanner(p, true, false)
	})
}

// FuzzBuiltin feeds a flow a first segment and a continuation on a port
// that enables every parser, as TCP (with sequence numbers from the
// input) and as UDP.
func FuzzBuiltin(f *testing.F) {
	ch := clientHello(f, "fuzz.tierwall.test", tls.VersionTLS13)
	f.Add(ch[:60], ch[60:], uint32(60), uint16(443))
	f.Add(ch[:6], ch[3:], uint32(3), uint16(443))
	f.Add([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), []byte{}, uint32(0), uint16(80))
	f.Add(dnsQuery(1, "a.b", true), []byte{0}, uint32(0), uint16(53))
	f.Add([]byte{0x16, 3, 1, 0xff, 0xff, 1, 0, 0xff, 0xff}, make([]byte, 5000), uint32(9), uint16(123))
	f.Fuzz(func(t *testing.T, a, b []byte, delta uint32, port uint16) {
		for _, proto := range []uint8{protoTCP, protoUDP} {
			key, dir := tier.NewFlowKey(proto, netip.MustParseAddrPort("192.0.2.1:40000"), netip.AddrPortFrom(netip.MustParseAddr("192.0.2.2"), port))
			fl := NewBuiltin().NewFlow(key, uint8(dir)).(*builtinFlow)
			for i, p := range [][]byte{a, b, a} {
				s := rawSample(key, uint8(dir), proto, uint32(i)*delta, p)
				if i == 2 {
					s.Dir ^= 1
				}
				fl.Add(s)
				if fl.tls != nil && (len(fl.tls.buf) > maxReassembly || cap(fl.tls.buf) > maxReassembly) {
					t.Fatalf("buffer of %d bytes", cap(fl.tls.buf))
				}
			}
			if v := fl.Giveup(); !v.Done || v.App == "" || v.Category == "" {
				t.Fatalf("give-up verdict %+v", v)
			}
			fl.Close()
		}
	})
}

// FuzzSample hands a flow samples whose offsets do not match their data,
// which the engine never does, but nothing may index out of range if it
// did.
func FuzzSample(f *testing.F) {
	f.Add([]byte{0x45, 0, 0, 40}, 20, 40, 60)
	f.Fuzz(func(t *testing.T, data []byte, l4, pay, l3 int) {
		for _, proto := range []uint8{protoTCP, protoUDP} {
			key, dir := tier.NewFlowKey(proto, netip.MustParseAddrPort("192.0.2.1:443"), netip.MustParseAddrPort("192.0.2.2:53"))
			fl := NewBuiltin().NewFlow(key, uint8(dir))
			s := &flow.Sample{Key: key, Dir: uint8(dir), L4Off: l4, PayOff: pay, L3Len: l3, Data: data}
			fl.Add(s)
			fl.Add(s)
			fl.Giveup()
		}
	})
}

// rawSample is an IPv4 packet with a TCP or UDP header and payload p.
func rawSample(key tier.FlowKey, dir, proto uint8, seq uint32, p []byte) *flow.Sample {
	hl := 20
	if proto == protoUDP {
		hl = 8
	}
	d := make([]byte, 20+hl, 20+hl+len(p))
	d[0] = 0x45
	d[9] = proto
	binary.BigEndian.PutUint16(d[2:], uint16(len(d)+len(p)))
	if proto == protoTCP {
		binary.BigEndian.PutUint32(d[24:], seq)
		d[32] = 5 << 4
	} else {
		binary.BigEndian.PutUint16(d[24:], uint16(8+len(p)))
	}
	d = append(d, p...)
	return &flow.Sample{Key: key, Dir: dir, L3Len: len(d), L4Off: 20, PayOff: 20 + hl, Data: d}
}
