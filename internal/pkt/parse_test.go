// SPDX-License-Identifier: Apache-2.0

package pkt

import (
	"errors"
	"net/netip"
	"testing"
)

func TestParseRoundTrip(t *testing.T) {
	for _, f := range []Frame{
		{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"), Proto: ProtoUDP, SrcPort: 1, DstPort: 53, Payload: []byte("abc")},
		{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"), Proto: ProtoTCP, TCPFlags: TCPFlagSYN, SrcPort: 1000, DstPort: 80},
		{Src: netip.MustParseAddr("fd00::1"), Dst: netip.MustParseAddr("fd00::2"), Proto: ProtoTCP, TCPFlags: TCPFlagACK, SrcPort: 1000, DstPort: 443, Payload: []byte("hello")},
		{Src: netip.MustParseAddr("fd00::1"), Dst: netip.MustParseAddr("fd00::2"), Proto: ProtoUDP, SrcPort: 5, DstPort: 6, Payload: []byte("x")},
	} {
		b := f.Build()
		p, err := Parse(b)
		if err != nil {
			t.Fatalf("%v: %v", f, err)
		}
		if p.Src != netip.AddrPortFrom(f.Src, f.SrcPort) || p.Dst != netip.AddrPortFrom(f.Dst, f.DstPort) ||
			p.Proto != f.Proto || p.TCPFlags != f.TCPFlags || string(p.Payload) != string(f.Payload) {
			t.Errorf("parsed %+v from %+v", p, f)
		}
		b[len(b)-1] ^= 0xff // payload or L4 header: the L4 checksum catches it
		if _, err := Parse(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("corrupted %v: %v", f, err)
		}
	}
}
