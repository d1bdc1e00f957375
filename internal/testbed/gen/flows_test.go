// SPDX-License-Identifier: Apache-2.0

package gen

import (
	"bytes"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/tierwall/tierwall/internal/pkt"
	"github.com/tierwall/tierwall/internal/testutil"
)

// TestFlowGenBuild runs the program without transmitting, on buffers full
// of garbage (live-frame pages come back holding whatever was last in
// them), and checks every frame as a receiving stack would.
func TestFlowGenBuild(t *testing.T) {
	testutil.RequireRoot(t)
	payloads := [][]byte{nil, []byte("GET / HTTP/1.1\r\nHost: a.example\r\n\r\n"), bytes.Repeat([]byte{0xa5}, 301), {0xff}}
	// Without templates, 64-byte frames: the smallest buffer there is.
	small := []FlowPkt{
		{Flow: 1, Seq: 1, IPLen: 40, ServerPort: 9000, TCPFlags: 0x02},
		{Flow: 2, Seq: 1, Ack: 2, IPLen: 46, ServerPort: 9000, TCPFlags: 0x18, S2C: true},
		{Flow: 3, IPLen: 46, ServerPort: 9000, UDP: true},
	}
	for _, fam := range []struct {
		name        string
		clients     netip.Addr
		servers     netip.Addr
		iphl, hosts uint32
		small       bool
	}{
		{"ipv4", netip.MustParseAddr("10.128.0.1"), netip.MustParseAddr("192.0.2.10"), 20, 1000, false},
		{"ipv6", netip.MustParseAddr("fd00:100::1"), netip.MustParseAddr("fd00:200::10"), 40, 70000, false},
		{"ipv4-small", netip.MustParseAddr("10.128.0.1"), netip.MustParseAddr("192.0.2.10"), 20, 1000, true},
	} {
		t.Run(fam.name, func(t *testing.T) {
			plan := AddrPlan{Clients: fam.clients, Hosts: fam.hosts, PortLo: 1024, Ports: 64512, Servers: fam.servers, NServers: 3}
			spec := FlowGenSpec{
				SrcMAC: [6]byte{2, 0, 0, 0, 0, 1}, DstMAC: [6]byte{2, 0, 0, 0, 0, 2},
				Plan: plan, Payloads: payloads, MaxIPLen: 1500, Capacity: 64,
			}
			if fam.small {
				spec.Payloads, spec.MaxIPLen = [][]byte{nil}, 46
			}
			g, err := NewFlowGen(spec)
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			ih := uint16(fam.iphl)
			pkts := []FlowPkt{
				{Flow: 0, Seq: 100, IPLen: ih + 20, ServerPort: 80, TCPFlags: 0x02},
				{Flow: 0, Seq: 7, Ack: 101, IPLen: ih + 20, ServerPort: 80, TCPFlags: 0x12, S2C: true},
				{Flow: 123456, Seq: 0xfffffff0, Ack: 9, IPLen: ih + 20 + uint16(len(payloads[1])), ServerPort: 80, TCPFlags: 0x18, Payload: 1},
				{Flow: 99999, IPLen: ih + 8 + 301, ServerPort: 53, UDP: true, Payload: 2},
				{Flow: 99999, IPLen: ih + 8 + 1, ServerPort: 53, UDP: true, S2C: true, Payload: 3},
				{Flow: 5, IPLen: 1500, ServerPort: 9000, UDP: true},
				{Flow: 5, IPLen: 1500, ServerPort: 9000, TCPFlags: 0x11, S2C: true},
				{Flow: 4000000000, IPLen: ih + 8 + 18, ServerPort: 9000, UDP: true},
			}
			if fam.small {
				pkts = small
			}
			// Beyond the region every frame rewrites, a page keeps the
			// zeros it was initialised with.
			garbage := make([]byte, len(g.buf))
			rng := rand.New(rand.NewPCG(1, 2))
			for i := range g.dirty {
				garbage[i] = byte(rng.Uint32())
			}
			frames, err := g.Build(pkts, garbage)
			if err != nil {
				t.Fatal(err)
			}
			for i, f := range frames {
				want := pkts[i]
				if f == nil {
					t.Fatalf("frame %d refused", i)
				}
				if wl := max(60, 14+int(want.IPLen)); len(f) != wl {
					t.Errorf("frame %d: %d bytes, want %d", i, len(f), wl)
				}
				if !bytes.Equal(f[:12], []byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1}) {
					t.Errorf("frame %d: MACs % x", i, f[:12])
				}
				p, err := pkt.Parse(f)
				if err != nil {
					t.Fatalf("frame %d: %v", i, err)
				}
				c, s := plan.Endpoints(want.Flow)
				src, dst := c, netip.AddrPortFrom(s, want.ServerPort)
				if want.S2C {
					src, dst = dst, src
				}
				proto := uint8(pkt.ProtoTCP)
				if want.UDP {
					proto = pkt.ProtoUDP
				}
				if p.Src != src || p.Dst != dst || p.Proto != proto || p.IPLen != int(want.IPLen) {
					t.Errorf("frame %d: %v > %v proto %d len %d, want %v > %v proto %d len %d", i, p.Src, p.Dst, p.Proto, p.IPLen, src, dst, proto, want.IPLen)
				}
				if !want.UDP && (p.Seq != want.Seq || p.Ack != want.Ack || p.TCPFlags != want.TCPFlags) {
					t.Errorf("frame %d: seq %d ack %d flags %#x", i, p.Seq, p.Ack, p.TCPFlags)
				}
				tmpl := spec.Payloads[want.Payload]
				if !bytes.HasPrefix(p.Payload, tmpl) || len(bytes.Trim(p.Payload[len(tmpl):], "\x00")) != 0 {
					t.Errorf("frame %d: payload %q, want %q and zeros", i, p.Payload, tmpl)
				}
				if tail := f[14+int(want.IPLen):]; len(bytes.Trim(tail, "\x00")) != 0 {
					t.Errorf("frame %d: padding % x", i, tail)
				}
			}
		})
	}
}
