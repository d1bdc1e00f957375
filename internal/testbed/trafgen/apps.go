// SPDX-License-Identifier: Apache-2.0

package trafgen

import (
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/tierwall/tierwall/internal/rule"
)

// Applications of flow mode: what the first data frame in each direction
// carries, so that DPI (nDPI and the like) recognises the flow. The bytes
// are real protocol messages built once per run; later data frames carry
// zeros.
const (
	AppDNS     = "dns"     // UDP/53: a query for Host, an A answer
	AppHTTP    = "http"    // TCP/80: GET with Host, 200 OK
	AppTLS     = "tls"     // TCP/443: a crypto/tls ClientHello with SNI Host, a ServerHello
	AppGeneric = "generic" // port 9000, zero payloads; TCP or UDP by Spec.Proto
)

// appTemplate is one application's server port, protocol and messages.
type appTemplate struct {
	name      string
	port      uint16
	udp       int // 1: UDP, 0: TCP, -1: by Spec.Proto
	req, resp []byte
}

func buildApp(name, host string) (appTemplate, error) {
	switch name {
	case AppDNS:
		q := dnsMessage(host, false)
		return appTemplate{name: name, port: 53, udp: 1, req: q, resp: dnsMessage(host, true)}, nil
	case AppHTTP:
		req := "GET / HTTP/1.1\r\nHost: " + host + "\r\nUser-Agent: tierwall-gen/1\r\nAccept: */*\r\n\r\n"
		resp := "HTTP/1.1 200 OK\r\nServer: tierwall-gen\r\nContent-Type: text/html\r\nContent-Length: 0\r\n\r\n"
		return appTemplate{name: name, port: 80, req: []byte(req), resp: []byte(resp)}, nil
	case AppTLS:
		ch, err := clientHello(host)
		if err != nil {
			return appTemplate{}, err
		}
		return appTemplate{name: name, port: 443, req: ch, resp: serverHello()}, nil
	case AppGeneric:
		return appTemplate{name: name, port: 9000, udp: -1}, nil
	}
	return appTemplate{}, fmt.Errorf("%w: application %q (want dns, http, tls or generic)", rule.ErrInvalid, name)
}

// dnsMessage is a standard query for host's A record, or its answer.
func dnsMessage(host string, answer bool) []byte {
	b := []byte{0x74, 0x77} // id "tw"
	if answer {
		b = append(b, 0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0) // response, RD, RA; 1 question, 1 answer
	} else {
		b = append(b, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0) // RD; 1 question
	}
	for _, l := range strings.Split(strings.TrimSuffix(host, "."), ".") {
		b = append(b, byte(len(l)))
		b = append(b, l...)
	}
	b = append(b, 0, 0, 1, 0, 1) // root, type A, class IN
	if answer {
		b = append(b, 0xc0, 12, 0, 1, 0, 1) // name: pointer to the question
		b = binary.BigEndian.AppendUint32(b, 300)
		b = append(b, 0, 4, 192, 0, 2, 80) // TEST-NET-1
	}
	return b
}

// clientHello captures the first record Go's TLS client sends for host.
// X25519 only keeps the key share (and the record) short.
func clientHello(host string) ([]byte, error) {
	c, s := net.Pipe()
	defer s.Close()
	go func() {
		defer c.Close()
		_ = tls.Client(c, &tls.Config{
			ServerName:       host,
			CurvePreferences: []tls.CurveID{tls.X25519},
			NextProtos:       []string{"h2", "http/1.1"},
		}).Handshake() // fails once s is closed
	}()
	if err := s.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return nil, err
	}
	hdr := make([]byte, 5)
	if _, err := io.ReadFull(s, hdr); err != nil {
		return nil, fmt.Errorf("capturing a TLS ClientHello: %w", err)
	}
	body := make([]byte, binary.BigEndian.Uint16(hdr[3:]))
	if _, err := io.ReadFull(s, body); err != nil {
		return nil, fmt.Errorf("capturing a TLS ClientHello: %w", err)
	}
	return append(hdr, body...), nil
}

// serverHello is a TLS 1.2 ServerHello record (ECDHE-RSA-AES128-GCM), no
// extensions: enough for a classifier to see the server's answer.
func serverHello() []byte {
	hs := []byte{0x03, 0x03} // TLS 1.2
	for i := range 32 {
		hs = append(hs, byte(0x74+i)) // server random
	}
	hs = append(hs, 0, 0xc0, 0x2f, 0) // no session id, cipher, no compression
	b := []byte{0x16, 0x03, 0x03}
	b = binary.BigEndian.AppendUint16(b, uint16(4+len(hs)))
	b = append(b, 0x02, 0, byte(len(hs)>>8), byte(len(hs)))
	return append(b, hs...)
}
