// SPDX-License-Identifier: Apache-2.0

package dpi

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/probe/flow"
	"github.com/tierwall/tierwall/internal/tier"
)

// Test traffic: real IPv4/IPv6 + TCP/UDP packets with valid lengths,
// checksums and TCP sequence numbers, as samples of one flow. TCP
// connections start with a three-way handshake: nDPI 4.2 gives up on TCP
// flows that do not.

const (
	tcpFIN = 0x01
	tcpSYN = 0x02
	tcpPSH = 0x08
	tcpACK = 0x10
)

// conn builds the samples of one flow between a client and a server.
type conn struct {
	proto    uint8
	cli, srv netip.AddrPort
	key      tier.FlowKey
	initDir  uint8
	seq      [2]uint32 // per side (0 client, 1 server): the next sequence number to send
	samples  []*flow.Sample
	now      time.Time
	ipID     uint16
}

func newConn(proto uint8, cli, srv string) *conn {
	c := &conn{
		proto: proto,
		cli:   netip.MustParseAddrPort(cli),
		srv:   netip.MustParseAddrPort(srv),
		seq:   [2]uint32{0x1000_0000, 0xa000_0000},
		now:   time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
	}
	key, dir := tier.NewFlowKey(proto, c.cli, c.srv)
	c.key, c.initDir = key, uint8(dir)
	return c
}

// tcpConn is a TCP connection that has completed its handshake.
func tcpConn(cli, srv string) *conn {
	c := newConn(protoTCP, cli, srv)
	c.packet(0, tcpSYN, nil)
	c.seq[0]++
	c.packet(1, tcpSYN|tcpACK, nil)
	c.seq[1]++
	c.packet(0, tcpACK, nil)
	return c
}

// send sends payload from side (0 client, 1 server), as one TCP segment
// or UDP datagram.
func (c *conn) send(side int, payload []byte) *conn {
	if c.proto == protoTCP {
		c.packet(side, tcpPSH|tcpACK, payload)
		c.seq[side] += uint32(len(payload))
		return c
	}
	c.packet(side, 0, payload)
	return c
}

// packet appends one sample; the TCP acknowledgment is the peer's next
// sequence number.
func (c *conn) packet(side int, flags uint8, payload []byte) {
	src, dst := c.cli, c.srv
	if side == 1 {
		src, dst = dst, src
	}
	var l4 []byte
	switch c.proto {
	case protoTCP:
		l4 = make([]byte, 20, 20+len(payload))
		binary.BigEndian.PutUint16(l4[0:], src.Port())
		binary.BigEndian.PutUint16(l4[2:], dst.Port())
		binary.BigEndian.PutUint32(l4[4:], c.seq[side])
		if flags&tcpACK != 0 {
			binary.BigEndian.PutUint32(l4[8:], c.seq[1-side])
		}
		l4[12] = 5 << 4
		l4[13] = flags
		binary.BigEndian.PutUint16(l4[14:], 64240)
	case protoUDP:
		l4 = make([]byte, 8, 8+len(payload))
		binary.BigEndian.PutUint16(l4[0:], src.Port())
		binary.BigEndian.PutUint16(l4[2:], dst.Port())
		binary.BigEndian.PutUint16(l4[4:], uint16(8+len(payload)))
	}
	hdrLen := len(l4)
	l4 = append(l4, payload...)
	csumOff := 16
	if c.proto == protoUDP {
		csumOff = 6
	}
	sum := checksum(pseudoHeader(src.Addr(), dst.Addr(), c.proto, len(l4)), l4)
	if c.proto == protoUDP && sum == 0 {
		sum = 0xffff
	}
	binary.BigEndian.PutUint16(l4[csumOff:], sum)

	var ip []byte
	if src.Addr().Is4() {
		ip = make([]byte, 20, 20+len(l4))
		ip[0] = 0x45
		binary.BigEndian.PutUint16(ip[2:], uint16(20+len(l4)))
		c.ipID++
		binary.BigEndian.PutUint16(ip[4:], c.ipID)
		binary.BigEndian.PutUint16(ip[6:], 0x4000) // DF
		ip[8] = 64
		ip[9] = c.proto
		s, d := src.Addr().As4(), dst.Addr().As4()
		copy(ip[12:], s[:])
		copy(ip[16:], d[:])
		binary.BigEndian.PutUint16(ip[10:], checksum(0, ip))
	} else {
		ip = make([]byte, 40, 40+len(l4))
		ip[0] = 0x60
		binary.BigEndian.PutUint16(ip[4:], uint16(len(l4)))
		ip[6] = c.proto
		ip[7] = 64
		s, d := src.Addr().As16(), dst.Addr().As16()
		copy(ip[8:], s[:])
		copy(ip[24:], d[:])
	}
	l4Off := len(ip)
	ip = append(ip, l4...)
	data := ip
	dir := c.initDir
	if side == 1 {
		dir ^= 1
	}
	c.now = c.now.Add(time.Millisecond)
	c.samples = append(c.samples, &flow.Sample{
		Key: c.key, Dir: dir, Seq: uint8(len(c.samples)), Time: c.now,
		TCPFlags: flags, L3Len: len(data), L4Off: l4Off, PayOff: l4Off + hdrLen, Data: data,
	})
}

func pseudoHeader(src, dst netip.Addr, proto uint8, n int) uint32 {
	var b []byte
	if src.Is4() {
		s, d := src.As4(), dst.As4()
		b = append(append(b, s[:]...), d[:]...)
		b = append(b, 0, proto, byte(n>>8), byte(n))
	} else {
		s, d := src.As16(), dst.As16()
		b = append(append(b, s[:]...), d[:]...)
		b = binary.BigEndian.AppendUint32(b, uint32(n))
		b = append(b, 0, 0, 0, proto)
	}
	var sum uint32
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(b[i])<<8 | uint32(b[i+1])
	}
	return sum
}

func checksum(sum uint32, b []byte) uint16 {
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}

// dnsQuery is a recursive query for name's A record, with an EDNS OPT
// record when edns.
func dnsQuery(id uint16, name string, edns bool) []byte {
	b := binary.BigEndian.AppendUint16(nil, id)
	b = append(b, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0) // RD, one question
	if edns {
		b[11] = 1
	}
	b = appendName(b, name)
	b = append(b, 0, 1, 0, 1) // A, IN
	if edns {
		b = append(b, 0, 0, 41, 0x10, 0, 0, 0, 0, 0, 0, 0)
	}
	return b
}

// dnsResponse answers dnsQuery(id, name, false) with one A record.
func dnsResponse(id uint16, name string, a netip.Addr) []byte {
	b := binary.BigEndian.AppendUint16(nil, id)
	b = append(b, 0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0)
	b = appendName(b, name)
	b = append(b, 0, 1, 0, 1)
	b = append(b, 0xc0, 12, 0, 1, 0, 1, 0, 0, 0x0e, 0x10, 0, 4)
	v := a.As4()
	return append(b, v[:]...)
}

func appendName(b []byte, name string) []byte {
	for _, l := range splitDots(name) {
		b = append(b, byte(len(l)))
		b = append(b, l...)
	}
	return append(b, 0)
}

func splitDots(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == '.' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return out
}

// tcpDNS frames a DNS message for TCP.
func tcpDNS(m []byte) []byte {
	return append(binary.BigEndian.AppendUint16(nil, uint16(len(m))), m...)
}

// clientHello is the first TLS record a crypto/tls client writes: a real
// ClientHello for sni, of TLS 1.2 only or up to 1.3, with ALPN protos.
func clientHello(t testing.TB, sni string, maxVersion uint16, alpn ...string) []byte {
	t.Helper()
	c, s := net.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		cfg := &tls.Config{ServerName: sni, MaxVersion: maxVersion, NextProtos: alpn, InsecureSkipVerify: true} //nolint:gosec // never completes
		if maxVersion == tls.VersionTLS13 {
			cfg.MinVersion = tls.VersionTLS13
		}
		_ = tls.Client(c, cfg).Handshake()
	}()
	hdr := make([]byte, 5)
	if _, err := io.ReadFull(s, hdr); err != nil {
		t.Fatalf("reading the ClientHello: %v", err)
	}
	rec := make([]byte, 5+int(binary.BigEndian.Uint16(hdr[3:])))
	copy(rec, hdr)
	if _, err := io.ReadFull(s, rec[5:]); err != nil {
		t.Fatalf("reading the ClientHello: %v", err)
	}
	_ = s.Close()
	_ = c.Close()
	<-done
	return rec
}

// quicInitial is a client's QUIC v1 Initial packet carrying hello (a TLS
// handshake message, without the record header) in a CRYPTO frame,
// protected with the Initial keys of dcid (RFC 9001 §5) and padded to
// 1200 bytes: what nDPI decrypts to read the SNI.
func quicInitial(t testing.TB, dcid, scid, hello []byte) []byte {
	t.Helper()
	salt := []byte{0x38, 0x76, 0x2c, 0xf7, 0xf5, 0x59, 0x34, 0xb3, 0x4d, 0x17, 0x9a, 0xe6, 0xa4, 0xc8, 0x0c, 0xad, 0xcc, 0xbb, 0x7f, 0x0a}
	initial, err := hkdf.Extract(sha256.New, dcid, salt)
	if err != nil {
		t.Fatal(err)
	}
	client := expandLabel(t, initial, "client in", 32)
	key, iv, hp := expandLabel(t, client, "quic key", 16), expandLabel(t, client, "quic iv", 12), expandLabel(t, client, "quic hp", 16)

	const pnLen = 4
	frames := []byte{0x06, 0x00} // CRYPTO, offset 0
	frames = appendVarint(frames, uint64(len(hello)))
	frames = append(frames, hello...)
	hdr := []byte{0xc0 | (pnLen - 1), 0, 0, 0, 1, byte(len(dcid))}
	hdr = append(hdr, dcid...)
	hdr = append(hdr, byte(len(scid)))
	hdr = append(hdr, scid...)
	hdr = append(hdr, 0) // no token
	// Pad the frames (PADDING is 0x00) so the datagram is 1200 bytes.
	const lenField = 2
	if n := 1200 - (len(hdr) + lenField + pnLen + len(frames) + 16); n > 0 {
		frames = append(frames, make([]byte, n)...)
	}
	length := pnLen + len(frames) + 16
	hdr = append(hdr, 0x40|byte(length>>8), byte(length))
	pnOff := len(hdr)
	hdr = append(hdr, 0, 0, 0, 0) // packet number 0

	block, err := aes.NewCipher(key)
	if err != nil {
		t.Fatal(err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		t.Fatal(err)
	}
	pkt := aead.Seal(hdr, iv, frames, hdr) // nonce: iv XOR packet number 0

	hpBlock, err := aes.NewCipher(hp)
	if err != nil {
		t.Fatal(err)
	}
	mask := make([]byte, 16)
	hpBlock.Encrypt(mask, pkt[pnOff+4:pnOff+4+16])
	pkt[0] ^= mask[0] & 0x0f
	for i := range pnLen {
		pkt[pnOff+i] ^= mask[1+i]
	}
	return pkt
}

// expandLabel is TLS 1.3's HKDF-Expand-Label with an empty context.
func expandLabel(t testing.TB, secret []byte, label string, n int) []byte {
	t.Helper()
	l := "tls13 " + label
	info := []byte{byte(n >> 8), byte(n), byte(len(l))}
	info = append(info, l...)
	info = append(info, 0)
	out, err := hkdf.Expand(sha256.New, secret, string(info), n)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func appendVarint(b []byte, v uint64) []byte {
	switch {
	case v < 1<<6:
		return append(b, byte(v))
	case v < 1<<14:
		return append(b, 0x40|byte(v>>8), byte(v))
	}
	return binary.BigEndian.AppendUint32(b, 0x80000000|uint32(v))
}
