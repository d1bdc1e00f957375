// SPDX-License-Identifier: Apache-2.0

package dpi

import (
	"crypto/tls"
	"math/rand/v2"
	"net/netip"
	"testing"
)

// The traffic every classifier must name. Each fixture is a flow's samples
// and the verdict expected from both classifiers, unless except says how
// one of them differs (and why).
type fixture struct {
	name                string
	conn                func(t testing.TB) *conn
	app, category, host string
	except              map[string]exception
}

type exception struct {
	skip string // the classifier cannot name this flow: why
	host *string
}

func ptr[T any](v T) *T { return &v }

const (
	cli4, srv4 = "192.0.2.10", "198.51.100.20"
	cli6, srv6 = "[2001:db8::10]", "[2001:db8:1::20]"
)

// random is deterministic noise: the same bytes in every run.
func random(n int, seed uint64) []byte {
	r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)})
	b := make([]byte, n)
	_, _ = r.Read(b)
	return b
}

func fixtures() []fixture {
	const name = "www.tierwall.test"
	httpGet := []byte("GET /index.html HTTP/1.1\r\nHost: www.tierwall.test\r\nUser-Agent: curl/7.88.1\r\nAccept: */*\r\n\r\n")
	httpOK := []byte("HTTP/1.1 200 OK\r\nServer: nginx/1.22.1\r\nContent-Type: text/html\r\nContent-Length: 5\r\n\r\nhello")
	return []fixture{
		{
			name: "dns/udp4", app: AppDNS, category: CatNetwork, host: name,
			conn: func(testing.TB) *conn {
				return newConn(protoUDP, cli4+":40001", srv4+":53").
					send(0, dnsQuery(0x1234, name, true)).
					send(1, dnsResponse(0x1234, name, netip.MustParseAddr("198.51.100.80")))
			},
		},
		{
			name: "dns/udp6", app: AppDNS, category: CatNetwork, host: name,
			conn: func(testing.TB) *conn {
				return newConn(protoUDP, cli6+":40002", srv6+":53").send(0, dnsQuery(7, name, false))
			},
		},
		{
			name: "dns/response-first", app: AppDNS, category: CatNetwork, host: name,
			conn: func(testing.TB) *conn {
				// The probe missed the query: the response is the flow's first packet.
				return newConn(protoUDP, srv4+":53", cli4+":40003").send(0, dnsResponse(9, name, netip.MustParseAddr("198.51.100.80")))
			},
		},
		{
			name: "dns/tcp", app: AppDNS, category: CatNetwork, host: name,
			conn: func(testing.TB) *conn {
				return tcpConn(cli4+":40004", srv4+":53").send(0, tcpDNS(dnsQuery(0x4321, name, true)))
			},
		},
		{
			name: "dns/other-port", app: AppDNS, category: CatNetwork, host: name,
			conn: func(testing.TB) *conn {
				return newConn(protoUDP, cli4+":40005", srv4+":5300").send(0, dnsQuery(0x1111, name, true))
			},
			except: map[string]exception{"ndpi": {skip: "nDPI 4.2 parses DNS on ports 53 and 5355 only"}},
		},
		{
			name: "http/get4", app: AppHTTP, category: CatWeb, host: name,
			conn: func(testing.TB) *conn {
				return tcpConn(cli4+":40010", srv4+":80").send(0, httpGet).send(1, httpOK)
			},
		},
		{
			name: "http/get6-other-port", app: AppHTTP, category: CatWeb, host: name,
			conn: func(testing.TB) *conn {
				return tcpConn(cli6+":40011", srv6+":8000").send(0, httpGet).send(1, httpOK)
			},
		},
		{
			name: "tls/1.3", app: AppTLS, category: CatWeb, host: name,
			conn: func(t testing.TB) *conn {
				return tcpConn(cli4+":40020", srv4+":443").send(0, clientHello(t, name, tls.VersionTLS13, "h2", "http/1.1"))
			},
		},
		{
			name: "tls/1.2", app: AppTLS, category: CatWeb, host: name,
			conn: func(t testing.TB) *conn {
				return tcpConn(cli4+":40021", srv4+":443").send(0, clientHello(t, name, tls.VersionTLS12))
			},
		},
		{
			name: "tls/1.3-ipv6-other-port", app: AppTLS, category: CatWeb, host: name,
			conn: func(t testing.TB) *conn {
				return tcpConn(cli6+":40022", srv6+":8443").send(0, clientHello(t, name, tls.VersionTLS13))
			},
		},
		{
			name: "tls/split", app: AppTLS, category: CatWeb, host: name,
			conn: func(t testing.TB) *conn {
				// The SNI is in the second segment: the first ends inside the random.
				ch := clientHello(t, name, tls.VersionTLS13)
				return tcpConn(cli4+":40023", srv4+":443").send(0, ch[:40]).send(0, ch[40:])
			},
		},
		{
			name: "quic/v1-initial", app: AppQUIC, category: CatWeb, host: name,
			conn: func(t testing.TB) *conn {
				ch := clientHello(t, name, tls.VersionTLS13, "h3")
				dcid, scid := random(8, 1), random(8, 2)
				return newConn(protoUDP, cli4+":40030", srv4+":443").send(0, quicInitial(t, dcid, scid, ch[5:]))
			},
			except: map[string]exception{"builtin": {host: ptr("")}}, // would need to decrypt the Initial
		},
		{
			name: "ssh", app: AppSSH, category: CatRemoteAccess,
			conn: func(testing.TB) *conn {
				return tcpConn(cli4+":40040", srv4+":22").
					send(1, []byte("SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3\r\n")).
					send(0, []byte("SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3\r\n"))
			},
		},
		{
			name: "ntp", app: AppNTP, category: CatSystem,
			conn: func(testing.TB) *conn {
				req := make([]byte, 48)
				req[0] = 4<<3 | 3 // version 4, client
				copy(req[40:], random(8, 3))
				return newConn(protoUDP, cli4+":40050", srv4+":123").send(0, req)
			},
		},
		{
			name: "dhcp", app: AppDHCP, category: CatNetwork,
			conn: func(testing.TB) *conn {
				return newConn(protoUDP, "0.0.0.0:68", "255.255.255.255:67").send(0, dhcpDiscover())
			},
		},
		{
			name: "smtp", app: AppSMTP, category: CatEmail, host: "mail.tierwall.test",
			conn: func(testing.TB) *conn {
				// nDPI wants a few commands and replies.
				return tcpConn(cli4+":40060", srv4+":25").
					send(1, []byte("220 mail.tierwall.test ESMTP Postfix (Debian/GNU)\r\n")).
					send(0, []byte("EHLO client.tierwall.test\r\n")).
					send(1, []byte("250-mail.tierwall.test\r\n250-PIPELINING\r\n250-SIZE 10240000\r\n250 8BITMIME\r\n")).
					send(0, []byte("MAIL FROM:<a@tierwall.test>\r\n")).
					send(1, []byte("250 2.1.0 Ok\r\n")).
					send(0, []byte("RCPT TO:<b@tierwall.test>\r\n")).
					send(1, []byte("250 2.1.5 Ok\r\n")).
					send(0, []byte("DATA\r\n")).
					send(1, []byte("354 End data with <CR><LF>.<CR><LF>\r\n"))
			},
		},
		{
			name: "unknown/tcp", app: AppUnknown, category: CatUnspecified,
			conn: func(testing.TB) *conn {
				return tcpConn(cli4+":40070", srv4+":40999").send(0, random(300, 4)).send(1, random(200, 5)).send(0, random(700, 6))
			},
		},
		{
			name: "unknown/udp6", app: AppUnknown, category: CatUnspecified,
			conn: func(testing.TB) *conn {
				return newConn(protoUDP, cli6+":40071", srv6+":40998").send(0, random(100, 7)).send(1, random(1300, 8)).send(0, random(60, 9))
			},
		},
	}
}

// dhcpDiscover is a minimal DHCPDISCOVER.
func dhcpDiscover() []byte {
	b := make([]byte, 240, 300)
	b[0], b[1], b[2] = 1, 1, 6 // BOOTREQUEST, Ethernet, 6-byte address
	copy(b[4:], []byte{0x39, 0x03, 0xf3, 0x26})
	copy(b[28:], []byte{0x02, 0x00, 0x5e, 0x10, 0x00, 0x01})
	copy(b[236:], []byte{0x63, 0x82, 0x53, 0x63})
	b = append(b, 53, 1, 1) // DHCP message type: discover
	b = append(b, 55, 4, 1, 3, 6, 15)
	return append(b, 255)
}

// classify runs a flow's samples through c as the engine does: Add until
// Done, else Giveup. n is the number of samples used, 0 for Giveup.
func classify(c Classifier, cn *conn) (v Verdict, n int) {
	f := c.NewFlow(cn.key, cn.initDir)
	defer f.Close()
	for i, s := range cn.samples {
		if v = f.Add(s); v.Done {
			return v, i + 1
		}
	}
	return f.Giveup(), 0
}

// testFixtures checks that c names every fixture.
func testFixtures(t *testing.T, c Classifier) {
	for _, fx := range fixtures() {
		t.Run(fx.name, func(t *testing.T) {
			ex := fx.except[c.Name()]
			if ex.skip != "" {
				t.Skip(ex.skip)
			}
			host := fx.host
			if ex.host != nil {
				host = *ex.host
			}
			cn := fx.conn(t)
			v, n := classify(c, cn)
			t.Logf("%s after %d of %d samples", v, n, len(cn.samples))
			if v.App != fx.app || v.Category != fx.category || v.Host != host || !v.Done {
				t.Errorf("verdict %+v, want app %q category %q host %q", v, fx.app, fx.category, host)
			}
			switch {
			case fx.app == AppUnknown && v.Source != SourceNone:
				t.Errorf("source %s, want none", v.Source)
			case fx.app != AppUnknown && (n == 0 || v.Source != SourceDPI):
				t.Errorf("verdict from %s after %d samples (0: Giveup), want one from the payload", v.Source, n)
			}
		})
	}
}
