// SPDX-License-Identifier: Apache-2.0

package dpi

import (
	"bytes"
	"encoding/binary"
)

// The built-in classifier's parsers. Each reads a hostile, possibly
// truncated payload: every index is checked, nothing allocates except the
// host name it returns, and a parser that runs out of bytes says so rather
// than guessing.

const (
	protoICMP   = 1
	protoTCP    = 6
	protoUDP    = 17
	protoICMPv6 = 58
)

func be16(b []byte) uint16 { return binary.BigEndian.Uint16(b) }
func be32(b []byte) uint32 { return binary.BigEndian.Uint32(b) }

// parseDNS recognizes a DNS message (after TCP's length prefix) and returns
// its query name. strict is for ports other than DNS's: only a query or a
// response with one question that parses exactly, so that random payloads
// on arbitrary ports are not taken for DNS.
func parseDNS(p []byte, tcp, strict bool) (ok bool, qname string) {
	if tcp {
		if len(p) < 2 {
			return false, ""
		}
		n := int(be16(p))
		p = p[2:]
		if n < 12 {
			return false, ""
		}
		if n < len(p) {
			p = p[:n]
		}
	}
	if len(p) < 12 {
		return false, ""
	}
	flags := be16(p[2:])
	qr, opcode, rcode := flags>>15, (flags>>11)&0xf, flags&0xf
	qd, an, ns, ar := be16(p[4:]), be16(p[6:]), be16(p[8:]), be16(p[10:])
	if opcode > 6 || opcode == 3 {
		return false, ""
	}
	if strict {
		if qd != 1 || rcode > 5 || opcode != 0 {
			return false, ""
		}
		if qr == 0 && (an != 0 || ns != 0 || ar > 1) {
			return false, ""
		}
	} else if qd > 1 || (qd == 0 && (qr == 0 || an+ns+ar == 0)) {
		return false, ""
	}
	if qd == 0 {
		return true, ""
	}
	name, off, ok := dnsName(p, 12, strict)
	if !ok || off+4 > len(p) {
		// A truncated capture on DNS's port: the header was enough.
		return !strict, ""
	}
	qtype, qclass := be16(p[off:]), be16(p[off+2:])&0x7fff // mDNS: unicast-response bit
	if qtype == 0 || (qclass != 1 && qclass != 3 && qclass != 4 && qclass != 255) {
		return false, ""
	}
	off += 4
	if strict && qr == 0 {
		// Nothing after the question but an EDNS OPT record.
		switch {
		case ar == 0 && off != len(p):
			return false, ""
		case ar == 1 && (off+11 > len(p) || p[off] != 0 || be16(p[off+1:]) != 41):
			return false, ""
		}
	}
	return true, name
}

// dnsName reads an uncompressed name at off and returns it in dotted form
// and the offset after it.
func dnsName(p []byte, off int, strict bool) (string, int, bool) {
	var name []byte
	for {
		if off >= len(p) {
			return "", 0, false
		}
		l := int(p[off])
		off++
		if l == 0 {
			break
		}
		if l&0xc0 != 0 || off+l > len(p) || len(name)+l+1 > 255 {
			return "", 0, false
		}
		for _, c := range p[off : off+l] {
			if !hostByte(c) && (strict || c <= 0x20 || c >= 0x7f) {
				return "", 0, false
			}
		}
		if len(name) > 0 {
			name = append(name, '.')
		}
		name = append(name, p[off:off+l]...)
		off += l
	}
	return string(name), off, true
}

func hostByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

var httpMethods = [...]string{"GET ", "POST ", "HEAD ", "PUT ", "DELETE ", "OPTIONS ", "PATCH ", "CONNECT ", "TRACE "}

// maxHTTPHead bounds how far the HTTP parser looks for the Host header.
const maxHTTPHead = 4096

// parseHTTP recognizes an HTTP/1.x request (returning its Host) or a
// response.
func parseHTTP(p []byte) (ok bool, host string) {
	if len(p) > maxHTTPHead {
		p = p[:maxHTTPHead]
	}
	if len(p) >= 12 && bytes.HasPrefix(p, []byte("HTTP/1.")) && (p[7] == '0' || p[7] == '1') &&
		p[8] == ' ' && isDigit(p[9]) && isDigit(p[10]) && isDigit(p[11]) {
		return true, ""
	}
	var method string
	for _, m := range httpMethods {
		if bytes.HasPrefix(p, []byte(m)) {
			method = m
			break
		}
	}
	if method == "" || len(p) <= len(method) {
		return false, ""
	}
	rest := p[len(method):]
	line := rest
	if i := bytes.IndexByte(rest, '\n'); i >= 0 {
		line = bytes.TrimSuffix(rest[:i], []byte("\r"))
		v := bytes.LastIndexByte(line, ' ')
		if v < 0 || !bytes.HasPrefix(line[v+1:], []byte("HTTP/")) {
			return false, ""
		}
		line = line[:v]
		rest = rest[i+1:]
	} else {
		rest = nil
	}
	if len(line) == 0 {
		return false, ""
	}
	if method == "CONNECT " {
		host = string(line)
	} else if c := line[0]; c != '/' && c != '*' && c != 'h' && c != 'H' {
		return false, ""
	}
	for len(rest) > 0 {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			break // the header is cut: no Host in what was captured
		}
		h := bytes.TrimSuffix(rest[:i], []byte("\r"))
		rest = rest[i+1:]
		if len(h) == 0 {
			break
		}
		if len(h) > 5 && bytes.EqualFold(h[:5], []byte("host:")) {
			host = string(bytes.TrimSpace(h[5:]))
			break
		}
	}
	return true, stripPort(host)
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// stripPort drops ":port" from "name:port" and "[v6]:port".
func stripPort(h string) string {
	if len(h) > 0 && h[0] == '[' {
		if i := bytes.IndexByte([]byte(h), ']'); i > 0 {
			return h[1:i]
		}
		return h
	}
	if i := bytes.LastIndexByte([]byte(h), ':'); i >= 0 && bytes.IndexByte([]byte(h[:i]), ':') < 0 {
		return h[:i]
	}
	return h
}

// TLS record and handshake types.
const (
	tlsHandshake   = 0x16
	tlsClientHello = 1
	tlsServerHello = 2
	tlsMaxRecord   = 16384 + 2048
	tlsExtSNI      = 0
)

// tlsHello is what parseTLS learns from the start of a TLS stream.
type tlsHello struct {
	ok     bool // a TLS handshake record
	client bool // a ClientHello
	need   int  // bytes of the stream the ClientHello's record ends at
	sni    string
	done   bool // the ClientHello was parsed to its end (or cannot be)
}

// parseTLS reads the first record of a TLS stream. A ClientHello's SNI is
// returned once the bytes up to its extension are in p; done is false
// while more of the record would help.
func parseTLS(p []byte) tlsHello {
	var h tlsHello
	if len(p) < 6 || p[0] != tlsHandshake || p[1] != 3 || p[2] > 4 {
		return h
	}
	rec := int(be16(p[3:]))
	if rec < 4 || rec > tlsMaxRecord {
		return h
	}
	switch p[5] {
	case tlsServerHello:
		h.ok, h.done = true, true
		return h
	case tlsClientHello:
	default:
		return h
	}
	h.need = 5 + rec
	body := p[5:min(len(p), h.need)]
	if len(body) >= 6 {
		hs := int(body[1])<<16 | int(body[2])<<8 | int(body[3])
		if hs < 38 || body[4] != 3 || body[5] > 4 {
			return h
		}
		// A ClientHello longer than its record continues in the next
		// record; the first one holds its start, which is enough.
		if 4+hs < len(body) {
			body = body[:4+hs]
		}
	}
	h.ok, h.client = true, true
	sni, complete := helloSNI(body)
	h.sni = sni
	h.done = complete || len(p) >= h.need
	return h
}

// helloSNI walks a ClientHello handshake message (from its type byte) to
// the server_name extension. complete: the walk ended inside p (found the
// name, or met the end of the extensions or malformed data), so more bytes
// would not change the answer.
func helloSNI(b []byte) (sni string, complete bool) {
	off := 4 + 2 + 32 // type, length, client_version, random
	if off >= len(b) {
		return "", false
	}
	off += 1 + int(b[off]) // session id
	if off+2 > len(b) {
		return "", false
	}
	off += 2 + int(be16(b[off:])) // cipher suites
	if off >= len(b) {
		return "", false
	}
	off += 1 + int(b[off]) // compression methods
	if off+2 > len(b) {
		return "", off == len(b) // no extensions at all
	}
	end := off + 2 + int(be16(b[off:]))
	off += 2
	for off+4 <= min(end, len(b)) {
		typ, l := be16(b[off:]), int(be16(b[off+2:]))
		off += 4
		if typ != tlsExtSNI {
			off += l
			continue
		}
		if off+l > len(b) {
			return "", false
		}
		return sniName(b[off : off+l]), true
	}
	return "", off >= end
}

// sniName reads the host_name entry of a server_name extension.
func sniName(e []byte) string {
	if len(e) < 2 {
		return ""
	}
	list := int(be16(e))
	e = e[2:]
	if list < len(e) {
		e = e[:list]
	}
	for len(e) >= 3 {
		typ, l := e[0], int(be16(e[1:]))
		e = e[3:]
		if l > len(e) {
			return ""
		}
		if typ == 0 {
			return string(e[:l])
		}
		e = e[l:]
	}
	return ""
}

// QUIC versions with the RFC 9000 long header whose Initial packets the
// classifier recognizes.
func quicVersion(v uint32) (initialType byte, ok bool) {
	switch {
	case v == 0x00000001: // RFC 9000
		return 0, true
	case v == 0x6b3343cf: // RFC 9369, QUIC v2
		return 1, true
	case v >= 0xff00001d && v <= 0xff000022: // drafts 29-34
		return 0, true
	}
	return 0, false
}

// parseQUIC recognizes a QUIC Initial packet at the start of a UDP
// datagram of dgram bytes (the UDP payload length, even if the capture
// holds less). A client's Initial must be padded to 1200 bytes and carry a
// destination connection id of at least 8 bytes (RFC 9000 §14.1, §7.2),
// which keeps random datagrams from passing.
func parseQUIC(p []byte, dgram int, fromClient bool) bool {
	if len(p) < 7 || p[0]&0xc0 != 0xc0 {
		return false
	}
	it, ok := quicVersion(be32(p[1:]))
	if !ok || (p[0]>>4)&3 != it {
		return false
	}
	off := 5
	dcid := int(p[off])
	if dcid > 20 || (fromClient && (dcid < 8 || dgram < 1200)) {
		return false
	}
	off += 1 + dcid
	if off >= len(p) {
		return false
	}
	scid := int(p[off])
	if scid > 20 {
		return false
	}
	off += 1 + scid
	if off >= len(p) {
		return false
	}
	token, n := quicVarint(p[off:])
	if n == 0 || token > uint64(dgram) {
		return false
	}
	off += n + int(token)
	if off > len(p) {
		return true // the capture ends in the token; the header held so far
	}
	length, n := quicVarint(p[off:])
	if n == 0 {
		return off >= len(p)
	}
	off += n
	return length >= 20 && uint64(off)+length <= uint64(dgram)
}

// quicVarint decodes a QUIC variable-length integer; n is 0 if p is too
// short.
func quicVarint(p []byte) (v uint64, n int) {
	if len(p) == 0 {
		return 0, 0
	}
	n = 1 << (p[0] >> 6)
	if len(p) < n {
		return 0, 0
	}
	v = uint64(p[0] & 0x3f)
	for _, c := range p[1:n] {
		v = v<<8 | uint64(c)
	}
	return v, n
}

func parseSSH(p []byte) bool {
	return bytes.HasPrefix(p, []byte("SSH-2.0-")) || bytes.HasPrefix(p, []byte("SSH-1.99-")) ||
		bytes.HasPrefix(p, []byte("SSH-1.5-"))
}

// parseNTP recognizes NTP on its port: a 48-byte header of version 1-4
// and an association mode, or a control (6) or private (7) message.
func parseNTP(p []byte) bool {
	if len(p) < 12 {
		return false
	}
	v, mode := (p[0]>>3)&7, p[0]&7
	if v < 1 || v > 4 || mode == 0 {
		return false
	}
	return mode >= 6 || len(p) >= 48
}

// parseDHCP recognizes a BOOTP message with DHCP's magic cookie.
func parseDHCP(p []byte) bool {
	return len(p) >= 240 && (p[0] == 1 || p[0] == 2) && p[2] <= 16 && be32(p[236:]) == 0x63825363
}

// parseBanner recognizes the first line of a mail or FTP session: a
// server's greeting or a client's SMTP hello. An SMTP greeting names its
// server ("220 mail.example.org ESMTP"): host.
func parseBanner(p []byte, fromClient bool, ftpPort bool) (app, host string) {
	if len(p) > 512 {
		p = p[:512]
	}
	if i := bytes.IndexByte(p, '\n'); i >= 0 {
		p = p[:i]
	}
	if fromClient {
		if len(p) > 5 && (bytes.EqualFold(p[:5], []byte("EHLO ")) || bytes.EqualFold(p[:5], []byte("HELO "))) {
			return AppSMTP, ""
		}
		return "", ""
	}
	switch {
	case len(p) >= 4 && bytes.HasPrefix(p, []byte("220")) && (p[3] == ' ' || p[3] == '-'):
		up := bytes.ToUpper(p)
		if bytes.Contains(up, []byte("SMTP")) {
			name, _, _ := bytes.Cut(p[4:], []byte(" "))
			if bytes.IndexByte(name, '.') < 0 {
				name = nil
			}
			return AppSMTP, string(bytes.TrimSpace(name))
		}
		if ftpPort || bytes.Contains(up, []byte("FTP")) {
			return AppFTP, ""
		}
	case bytes.HasPrefix(p, []byte("* OK")) || bytes.HasPrefix(p, []byte("* PREAUTH")):
		return AppIMAP, ""
	case bytes.HasPrefix(p, []byte("+OK")):
		return AppPOP3, ""
	}
	return "", ""
}
