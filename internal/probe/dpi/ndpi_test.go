// SPDX-License-Identifier: Apache-2.0

//go:build ndpi

package dpi

import (
	"crypto/tls"
	"testing"
)

func newNDPI(t *testing.T) *NDPI {
	t.Helper()
	n, err := NewNDPI()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Error(err)
		}
	})
	t.Logf("nDPI %s, %d bytes per flow", n.Version(), NDPIFlowSize)
	return n
}

func TestNDPIFixtures(t *testing.T) {
	testFixtures(t, newNDPI(t))
}

// How nDPI 4.2 treats TCP flows whose handshake the probe missed: the
// fixtures open connections properly, so this only reports.
func TestNDPIWithoutHandshake(t *testing.T) {
	n := newNDPI(t)
	ch := clientHello(t, "nosyn.tierwall.test", tls.VersionTLS13)
	for _, tc := range []struct {
		name string
		conn *conn
	}{
		{"http", tcpConn(cli4+":40200", srv4+":80").send(0, []byte("GET / HTTP/1.1\r\nHost: a.tierwall.test\r\n\r\n"))},
		{"tls", tcpConn(cli4+":40201", srv4+":443").send(0, ch)},
		{"tls split", tcpConn(cli4+":40202", srv4+":443").send(0, ch[:40]).send(0, ch[40:])},
		{"ssh", tcpConn(cli4+":40203", srv4+":22").send(1, []byte("SSH-2.0-OpenSSH_9.2p1\r\n")).send(0, []byte("SSH-2.0-OpenSSH_9.2p1\r\n"))},
	} {
		with, nw := classify(n, tc.conn)
		tc.conn.samples = tc.conn.samples[3:]
		without, nwo := classify(n, tc.conn)
		t.Logf("%s: with the handshake %s (after %d), without %s (after %d)", tc.name, with, nw, without, nwo)
	}
}

func TestNDPICloseWithOpenFlows(t *testing.T) {
	n, err := NewNDPI()
	if err != nil {
		t.Fatal(err)
	}
	c := newConn(protoUDP, cli4+":40201", srv4+":53")
	f := n.NewFlow(c.key, c.initDir)
	if err := n.Close(); err == nil {
		t.Error("Close with an open flow succeeded")
	}
	f.Close()
	if err := n.Close(); err != nil {
		t.Error(err)
	}
	if err := n.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// A sample cut by the snap length still reaches nDPI's dissectors.
func TestNDPISnapped(t *testing.T) {
	c := newConn(protoUDP, cli4+":40202", srv4+":53").send(0, dnsQuery(5, "snap.tierwall.test", true))
	s := c.samples[0]
	s.Data = s.Data[:len(s.Data)-11] // the OPT record
	v, _ := classify(newNDPI(t), c)
	if v.App != AppDNS {
		t.Errorf("%s, want dns", v)
	}
}

// At give-up nDPI guesses from the ports, as the built-in classifier does.
func TestNDPIGiveup(t *testing.T) {
	n := newNDPI(t)
	for _, tc := range []struct {
		conn *conn
		app  string
		src  Source
	}{
		{tcpConn(cli4+":40210", srv4+":443"), AppTLS, SourcePort},
		{newConn(protoUDP, cli4+":40211", srv4+":53").send(0, []byte{1, 2, 3}), AppDNS, SourcePort},
		{tcpConn(cli4+":40212", srv4+":40213"), AppUnknown, SourceNone},
	} {
		v, k := classify(n, tc.conn)
		if k != 0 || v.App != tc.app || v.Source != tc.src {
			t.Errorf("%v: %s after %d samples, want %s from %s at give-up", tc.conn.key, v, k, tc.app, tc.src)
		}
	}
}
