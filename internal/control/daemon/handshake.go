// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"net/netip"
	"strings"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Known-good membership is the kernel's word: a source joins only when this
// host's TCP stack holds a connection with it past the handshake, which a
// spoofer, who never sees the SYN-ACK, cannot make. Packets are no proof:
// three spoofed ACKs per address bought 2,000 of 2,000 spoofed addresses
// the bypass of every flow rule (issue 32). The detector asks
// verifyHandshake; one sock_diag dump per interval answers every question
// of that interval.

// Connections is the kernel's table of TCP connections past their
// handshake, keyed by (remote, local) address.
type Connections map[[2]netip.Addr]struct{}

// Has reports whether a connection from remote to local exists.
func (c Connections) Has(remote, local netip.Addr) bool {
	_, ok := c[[2]netip.Addr{remote.Unmap(), local.Unmap()}]
	return ok
}

// dumpConnections reads the connections of the network namespace this
// thread is in; tests replace it.
var dumpConnections = SockDiagConnections

// handshakeState caches one interval's dump.
type handshakeState struct {
	step   uint64 // d.steps of the dump (0: none yet)
	conns  Connections
	failed bool
}

// verifyHandshake is KnownGood.Verify: whether this host holds a TCP
// connection from src to dst past its handshake. The first question of
// an interval reads the table; a failed read answers no (nobody joins on
// a guess) and is reported once per interval.
func (d *Daemon) verifyHandshake(src, dst netip.Addr) bool {
	conns, ok := d.connections()
	return ok && conns.Has(src, dst)
}

// connections is this interval's dump of the kernel's connections, read
// at the first question; false when the read failed (reported once).
func (d *Daemon) connections() (Connections, bool) {
	h := &d.flow.hs
	if h.step != d.steps {
		h.step = d.steps
		conns, err := dumpConnections()
		h.conns, h.failed = conns, err != nil
		if err != nil {
			d.event(d.lastAt, "error", netip.Prefix{}, "known-good: reading this host's TCP connections: %v (nobody joins this interval)", err)
		}
	}
	return h.conns, !h.failed
}

// connected is Victims.Connections: this interval's connections as
// (remote, local) pairs, none when the read failed.
func (d *Daemon) connected() iter.Seq2[netip.Addr, netip.Addr] {
	return func(yield func(netip.Addr, netip.Addr) bool) {
		conns, ok := d.connections()
		if !ok {
			return
		}
		for k := range conns {
			if !yield(k[0], k[1]) {
				return
			}
		}
	}
}

// protects reports whether the daemon protects destination a: one of this
// host's addresses, or inside a protected prefix or a host group. Only
// their clients can become known-good.
func (d *Daemon) protects(a netip.Addr) bool {
	a = a.Unmap()
	for _, m := range d.mgmt {
		if m.Addr == a && strings.HasPrefix(m.What, "address of") {
			return true
		}
	}
	for _, p := range d.cfg.Rails.ProtectedPrefixes {
		if p.Contains(a) {
			return true
		}
	}
	return d.hostgroups.Lookup(a) != nil
}

// TCP states past the handshake (include/net/tcp_states.h): what a
// source cannot reach without answering the SYN-ACK. SYN_RECV (a SYN
// alone) and LISTEN are not among them.
const postHandshake = 1<<1 | // ESTABLISHED
	1<<4 | 1<<5 | // FIN_WAIT1, FIN_WAIT2
	1<<6 | // TIME_WAIT
	1<<8 | 1<<9 | // CLOSE_WAIT, LAST_ACK
	1<<11 // CLOSING

const (
	sockDiagByFamily = 20 // SOCK_DIAG_BY_FAMILY
	inetDiagReqLen   = 56 // struct inet_diag_req_v2
	inetDiagMsgLen   = 72 // struct inet_diag_msg
)

// SockDiagConnections dumps this network namespace's TCP sockets past
// their handshake over NETLINK_SOCK_DIAG (both families; an IPv4 client
// of a dual-stack socket is read as IPv4). The kernel filters by state,
// so a SYN flood's request sockets are not read.
func SockDiagConnections() (Connections, error) {
	c, err := netlink.Dial(unix.NETLINK_SOCK_DIAG, nil)
	if err != nil {
		return nil, fmt.Errorf("opening sock_diag: %w", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	out := Connections{}
	for _, fam := range []uint8{unix.AF_INET, unix.AF_INET6} {
		msgs, err := c.Execute(netlink.Message{
			Header: netlink.Header{Type: sockDiagByFamily, Flags: netlink.Request | netlink.Dump},
			Data:   inetDiagRequest(fam, unix.IPPROTO_TCP, postHandshake),
		})
		if err != nil {
			return nil, fmt.Errorf("dumping TCP sockets (family %d): %w", fam, err)
		}
		for _, m := range msgs {
			if err := parseInetDiag(m.Data, out); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// inetDiagRequest encodes struct inet_diag_req_v2 for a dump of every
// socket of family and protocol in the states of mask.
func inetDiagRequest(family, proto uint8, states uint32) []byte {
	b := make([]byte, inetDiagReqLen)
	b[0], b[1] = family, proto
	binary.NativeEndian.PutUint32(b[4:], states)
	// id (ports, addresses, interface, cookie): zero, a dump ignores it,
	// except the cookie, which must be INET_DIAG_NOCOOKIE.
	binary.NativeEndian.PutUint32(b[48:], ^uint32(0))
	binary.NativeEndian.PutUint32(b[52:], ^uint32(0))
	return b
}

var errShortDiag = errors.New("short inet_diag_msg")

// parseInetDiag reads one struct inet_diag_msg into out: id.src is the
// local address, id.dst the remote one.
func parseInetDiag(b []byte, out Connections) error {
	if len(b) < inetDiagMsgLen {
		return fmt.Errorf("%w: %d bytes", errShortDiag, len(b))
	}
	addr := func(off int) netip.Addr {
		if b[0] == unix.AF_INET {
			return netip.AddrFrom4([4]byte(b[off : off+4]))
		}
		return netip.AddrFrom16([16]byte(b[off : off+16])).Unmap()
	}
	// family, state, timer, retrans; id: sport, dport (4), src (16), dst (16)
	local, remote := addr(8), addr(24)
	out[[2]netip.Addr{remote, local}] = struct{}{}
	return nil
}
