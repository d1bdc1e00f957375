// SPDX-License-Identifier: Apache-2.0

package telemetry

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"
)

// received counts what conn reads until it is quiet for 200 ms, by
// source address.
func received(t *testing.T, conn *net.UDPConn) map[netip.Addr]int {
	t.Helper()
	out := map[netip.Addr]int{}
	buf := make([]byte, 2048)
	for {
		if err := conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		_, from, err := conn.ReadFromUDPAddrPort(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out[from.Addr().Unmap()]++
	}
}

// sendFrom sends n datagrams to to from the address from.
func sendFrom(t *testing.T, from netip.Addr, to netip.AddrPort, n int) {
	t.Helper()
	c, err := net.DialUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(from, 0)), net.UDPAddrFromAddrPort(to))
	if err != nil {
		t.Fatalf("a socket on %s: %v", from, err)
	}
	defer c.Close()
	for range n {
		if _, err := c.Write([]byte("datagram")); err != nil {
			t.Fatal(err)
		}
	}
}

// The collector's sockets take the configured exporters' datagrams and
// one in unknownSample of the others, in the kernel: a flood from
// anywhere else does not fill the queue the routers' datagrams share. On
// an IPv4 socket and on a dual-stack IPv6 one, whose IPv4 datagrams are
// compared as IPv4.
func TestSocketFilterPassesExporters(t *testing.T) {
	known4, other4 := netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("127.0.0.3")
	lo6 := netip.MustParseAddr("::1")
	for _, c := range []struct {
		name      string
		listen    string
		exporters []netip.Addr
		send      []netip.Addr
		want      map[netip.Addr]bool // passes (all 20) or not (at most a sample)
	}{
		{"ipv4", "127.0.0.1:0", []netip.Addr{known4, netip.MustParseAddr("::ffff:127.0.0.9")}, []netip.Addr{known4, other4, netip.MustParseAddr("127.0.0.9")},
			map[netip.Addr]bool{known4: true, other4: false, netip.MustParseAddr("127.0.0.9"): true}},
		{"dual-stack", "[::]:0", []netip.Addr{known4, lo6}, []netip.Addr{known4, other4, lo6},
			map[netip.Addr]bool{known4: true, other4: false, lo6: true}},
		{"dual-stack, ipv6 unknown", "[::]:0", []netip.Addr{known4}, []netip.Addr{known4, lo6},
			map[netip.Addr]bool{known4: true, lo6: false}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ua, err := net.ResolveUDPAddr("udp", c.listen)
			if err != nil {
				t.Fatal(err)
			}
			conn, err := net.ListenUDP("udp", ua)
			if err != nil {
				t.Skipf("no socket on %s: %v", c.listen, err)
			}
			defer conn.Close()
			if _, err := setReadBuffer(conn, 1<<20); err != nil {
				t.Logf("receive buffer: %v", err)
			}
			if err := filterExporters(conn, c.exporters); err != nil {
				t.Fatal(err)
			}
			port := conn.LocalAddr().(*net.UDPAddr).AddrPort().Port()
			for _, from := range c.send {
				to := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port)
				if from.Is6() {
					to = netip.AddrPortFrom(lo6, port)
				}
				n := 20
				if !c.want[from] {
					n = 500 // expected through: 0.5 of unknownSample's 1024
				}
				sendFrom(t, from, to, n)
			}
			got := received(t, conn)
			for from, pass := range c.want {
				if pass && got[from] != 20 {
					t.Errorf("%d of 20 datagrams from exporter %s read", got[from], from)
				}
				if !pass && got[from] > 8 {
					t.Errorf("%d of 500 datagrams from %s (no exporter) read, want about 1 in %d", got[from], from, unknownSample)
				}
			}
		})
	}
}

// A list too long for the kernel's 4,096 instructions is refused, and the
// collector goes on without the filter (the decoder refuses others).
func TestSocketFilterTooLong(t *testing.T) {
	var many []netip.Addr
	for i := range 600 {
		many = append(many, netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 14: byte(i >> 8), 15: byte(i)}))
	}
	if _, err := exporterFilter(many, true); err == nil {
		t.Fatal("a filter of 600 IPv6 exporters assembled")
	}
	if _, err := exporterFilter(many[:400], true); err != nil {
		t.Fatalf("400 IPv6 exporters: %v", err)
	}
}
