// SPDX-License-Identifier: Apache-2.0

package dpi

import (
	"crypto/tls"
	"encoding/binary"
	"net/netip"
	"testing"
	"unsafe"

	"github.com/tierwall/tierwall/internal/probe/flow"
	"github.com/tierwall/tierwall/internal/tier"
)

func TestBuiltinFixtures(t *testing.T) {
	testFixtures(t, NewBuiltin())
}

// The engine may hold tens of thousands of flows in DPI: a pending flow
// is its struct, plus a bounded buffer only while a ClientHello spans
// segments.
func TestBuiltinFlowSize(t *testing.T) {
	if n := unsafe.Sizeof(builtinFlow{}); n > 96 {
		t.Errorf("builtinFlow is %d bytes, want at most 96", n)
	}
}

func TestBuiltinTLSReassembly(t *testing.T) {
	const name = "split.tierwall.test"
	ch := clientHello(t, name, tls.VersionTLS13)
	for _, tc := range []struct {
		name  string
		segs  func(c *conn)
		host  string
		atEnd bool // the verdict comes from Giveup
	}{
		{"three segments", func(c *conn) { c.send(0, ch[:10]).send(0, ch[10:100]).send(0, ch[100:]) }, name, false},
		{"retransmission", func(c *conn) {
			c.send(0, ch[:50])
			c.seq[0] -= 50
			c.send(0, ch[:80]) // overlaps what was buffered
			c.send(0, ch[80:])
		}, name, false},
		{"gap", func(c *conn) {
			c.send(0, ch[:50])
			c.seq[0] += 100 // a segment the probe never saw
			c.send(0, ch[150:])
		}, "", false},
		{"server answers first", func(c *conn) { c.send(0, ch[:50]).send(1, []byte{0x16, 3, 3, 0, 4, 2, 0, 0, 0}) }, "", false},
		{"cut short", func(c *conn) { c.send(0, ch[:50]) }, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tcpConn(cli4+":40100", srv4+":443")
			tc.segs(c)
			v, n := classify(NewBuiltin(), c)
			if v.App != AppTLS || v.Host != tc.host || v.Source != SourceDPI || (n == 0) != tc.atEnd {
				t.Errorf("%s after %d samples, want tls host %q (at give-up: %v)", v, n, tc.host, tc.atEnd)
			}
		})
	}
}

// A ClientHello longer than the buffer (padded as some clients do) keeps
// only maxReassembly bytes; the SNI, early in it, is still found.
func TestBuiltinTLSLongHello(t *testing.T) {
	ch := clientHello(t, "long.tierwall.test", tls.VersionTLS13)
	// Grow the record and handshake lengths by a padding extension.
	const pad = 6000
	long := append([]byte(nil), ch...)
	long = append(long, 0, 21, byte(pad>>8), byte(pad&0xff))
	long = append(long, make([]byte, pad)...)
	grow := func(off, size int) {
		v := 0
		for i := range size {
			v = v<<8 | int(long[off+i])
		}
		v += 4 + pad
		for i := size - 1; i >= 0; i-- {
			long[off+i] = byte(v)
			v >>= 8
		}
	}
	grow(3, 2) // record length
	grow(6, 3) // handshake length
	// The extensions' length is the last two bytes before the first
	// extension: find it by walking the hello.
	b := long[5:]
	off := 4 + 2 + 32
	off += 1 + int(b[off])
	off += 2 + int(binary.BigEndian.Uint16(b[off:]))
	off += 1 + int(b[off])
	grow(5+off, 2)

	c := tcpConn(cli4+":40101", srv4+":443")
	for i := 0; i < len(long); i += 1400 {
		c.send(0, long[i:min(i+1400, len(long))])
	}
	f := NewBuiltin().NewFlow(c.key, c.initDir).(*builtinFlow)
	defer f.Close()
	var v Verdict
	for _, s := range c.samples {
		if v = f.Add(s); v.Done {
			break
		}
		if f.tls != nil && cap(f.tls.buf) > maxReassembly {
			t.Fatalf("buffer of %d bytes", cap(f.tls.buf))
		}
	}
	if v.App != AppTLS || v.Host != "long.tierwall.test" {
		t.Errorf("%s, want tls with the SNI", v)
	}
}

// A capture cut by the snap length is named from what it holds.
func TestBuiltinSnapped(t *testing.T) {
	c := tcpConn(cli4+":40102", srv4+":443").send(0, clientHello(t, "snap.tierwall.test", tls.VersionTLS13))
	s := c.samples[len(c.samples)-1]
	s.Data = s.Data[:s.PayOff+100]
	v, n := classify(NewBuiltin(), c)
	if v.App != AppTLS || n != len(c.samples) {
		t.Errorf("%s after %d samples, want tls at once", v, n)
	}
}

func TestBuiltinGiveup(t *testing.T) {
	for _, tc := range []struct {
		conn *conn
		app  string
		src  Source
	}{
		{tcpConn(cli4+":40110", srv4+":443"), AppTLS, SourcePort},
		{newConn(protoUDP, cli4+":40111", srv4+":53"), AppDNS, SourcePort},
		{tcpConn(cli4+":40112", srv4+":40113"), AppUnknown, SourceNone},
	} {
		v, n := classify(NewBuiltin(), tc.conn)
		if n != 0 || v.App != tc.app || v.Source != tc.src {
			t.Errorf("%v: %s after %d samples, want %s from %s at give-up", tc.conn.key, v, n, tc.app, tc.src)
		}
	}
	// Other protocols are decided at their first packet.
	k, dir := tier.NewFlowKey(protoICMP, netip.MustParseAddrPort(cli4+":0"), netip.MustParseAddrPort(srv4+":0"))
	f := NewBuiltin().NewFlow(k, uint8(dir))
	if v := f.Add(&flow.Sample{Key: k}); !v.Done || v.App != "icmp" {
		t.Errorf("icmp: %s", v)
	}
}

// After Done, a flow keeps its verdict.
func TestBuiltinDoneIsFinal(t *testing.T) {
	c := tcpConn(cli4+":40120", srv4+":80").send(0, []byte("GET / HTTP/1.1\r\nHost: a.test\r\n\r\n")).send(0, []byte("SSH-2.0-x\r\n"))
	f := NewBuiltin().NewFlow(c.key, c.initDir)
	var last Verdict
	for _, s := range c.samples {
		last = f.Add(s)
	}
	if g := f.Giveup(); last.App != AppHTTP || g != last {
		t.Errorf("Add %s, Giveup %s; want http from both", last, g)
	}
}

func TestParsers(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
		got  bool
	}{
		{"dns: random on another port", false, first(parseDNS(random(64, 20), false, true))},
		{"dns: header only on another port", false, first(parseDNS(dnsQuery(1, "a.test", false)[:12], false, true))},
		{"dns: query with an answer on another port", false, first(parseDNS(func() []byte {
			b := dnsQuery(1, "a.test", false)
			b[7] = 1
			return b
		}(), false, true))},
		{"dns: truncated on port 53", true, first(parseDNS(dnsQuery(1, "a.test", false)[:14], false, false))},
		{"dns: compression pointer in a question on another port", false, first(parseDNS(append(dnsQuery(1, "", false)[:12], 0xc0, 12, 0, 1, 0, 1), false, true))},
		{"http: response", true, first(parseHTTP([]byte("HTTP/1.0 404 Not Found\r\n")))},
		{"http: not a method", false, first(parseHTTP([]byte("GETS / HTTP/1.1\r\n")))},
		{"http: no version", false, first(parseHTTP([]byte("GET / FTP\r\n")))},
		{"quic: short datagram", false, parseQUIC(quicHeader(1), 600, true)},
		{"quic: padded", true, parseQUIC(quicHeader(1), 1200, true)},
		{"quic: v2 Initial type", true, parseQUIC(func() []byte { b := quicHeader(0x6b3343cf); b[0] = 0xd0; return b }(), 1200, true)},
		{"quic: v1 Handshake type", false, parseQUIC(func() []byte { b := quicHeader(1); b[0] = 0xe0; return b }(), 1200, true)},
		{"quic: unknown version", false, parseQUIC(quicHeader(0x0a0a0a0a), 1200, true)},
		{"ntp: version 0", false, parseNTP(make([]byte, 48))},
		{"ssh: 1.99", true, parseSSH([]byte("SSH-1.99-Cisco-1.25\r\n"))},
		{"banner: ftp", true, first2(parseBanner([]byte("220 ProFTPD Server ready.\r\n"), false, true)) == AppFTP},
		{"banner: 220 elsewhere", false, first2(parseBanner([]byte("220 ready\r\n"), false, false)) != ""},
		{"banner: imap", true, first2(parseBanner([]byte("* OK [CAPABILITY IMAP4rev1] Dovecot ready.\r\n"), false, false)) == AppIMAP},
		{"banner: pop3", true, first2(parseBanner([]byte("+OK Dovecot ready.\r\n"), false, false)) == AppPOP3},
	} {
		if tc.got != tc.ok {
			t.Errorf("%s: %v, want %v", tc.name, tc.got, tc.ok)
		}
	}
	if _, h := parseHTTP([]byte("GET / HTTP/1.1\r\nhOsT:  WWW.Example.test:8080 \r\n\r\n")); normHost(h) != "www.example.test" {
		t.Errorf("http host %q", h)
	}
	if _, h := parseHTTP([]byte("CONNECT [2001:db8::1]:443 HTTP/1.1\r\n\r\n")); h != "2001:db8::1" {
		t.Errorf("connect host %q", h)
	}
}

func first(ok bool, _ string) bool { return ok }

func first2(app, _ string) string { return app }

// quicHeader is the start of a client Initial of version v.
func quicHeader(v uint32) []byte {
	b := binary.BigEndian.AppendUint32([]byte{0xc3}, v)
	b = append(b, 8)
	b = append(b, random(8, 30)...)
	b = append(b, 0, 0)       // no source id, no token
	b = append(b, 0x44, 0x9e) // length 1182
	return append(b, random(64, 31)...)
}
