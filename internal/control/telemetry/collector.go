// SPDX-License-Identifier: Apache-2.0

package telemetry

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"
)

// Sink takes the records of one datagram (the slice is reused after it
// returns).
type Sink func(now time.Time, rs []Record)

// Collector reads telemetry datagrams on UDP sockets, one goroutine per
// socket; any socket takes any protocol (the version field tells them
// apart), so a router's sFlow and NetFlow may share a port.
type Collector struct {
	dec   *Decoder
	sink  Sink
	log   *slog.Logger
	conns []*net.UDPConn
	wg    sync.WaitGroup
	// readErrors counts failed socket reads (not the kernel's drops:
	// those are in /proc/net/udp's drops column).
	readErrors atomic.Uint64
}

// readBuffer is the socket receive buffer asked for: a router sends its
// datagrams in bursts, and the kernel drops what does not fit.
const readBuffer = 8 << 20

// Listen opens a socket on each address and starts reading.
func Listen(addrs []string, dec *Decoder, sink Sink, log *slog.Logger) (*Collector, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Collector{dec: dec, sink: sink, log: log}
	for _, a := range addrs {
		ua, err := net.ResolveUDPAddr("udp", a)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("telemetry listen address %q: %w", a, err)
		}
		conn, err := net.ListenUDP("udp", ua)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("listening for telemetry on %s: %w", a, err)
		}
		if got, err := setReadBuffer(conn, readBuffer); err != nil || got < readBuffer {
			log.Warn("telemetry: socket buffer smaller than asked; bursts beyond it are dropped (raise net.core.rmem_max, or run with CAP_NET_ADMIN)",
				"listen", a, "asked", readBuffer, "got", got, "err", err)
		}
		if err := filterExporters(conn, dec.exporterAddrs()); err != nil {
			// The decoder still refuses them, one at a time.
			log.Warn("telemetry: no socket filter: datagrams from anyone reach the decoder", "listen", a, "err", err)
		}
		c.conns = append(c.conns, conn)
	}
	for _, conn := range c.conns {
		c.wg.Add(1)
		go c.read(conn)
	}
	return c, nil
}

// setReadBuffer asks for a receive buffer of size bytes and returns what
// the socket got (the kernel counts its overhead: it reports twice what
// was asked). SO_RCVBUFFORCE first: a collector runs as root, and on a
// stock kernel net.core.rmem_max would cap SO_RCVBUF at 208 KiB, a few
// milliseconds of a busy router's feed.
func setReadBuffer(conn *net.UDPConn, size int) (int, error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return 0, fmt.Errorf("socket of %v: %w", conn.LocalAddr(), err)
	}
	var got int
	var serr error
	cerr := raw.Control(func(fd uintptr) {
		if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, size) != nil {
			// Not privileged: capped by net.core.rmem_max.
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, size)
		}
		var gerr error
		got, gerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF)
		serr = errors.Join(serr, gerr)
	})
	if err := errors.Join(cerr, serr); err != nil {
		return got / 2, fmt.Errorf("receive buffer of %v: %w", conn.LocalAddr(), err)
	}
	return got / 2, nil
}

// Addrs are the addresses listened on (the ports chosen for ":0").
func (c *Collector) Addrs() []netip.AddrPort {
	var out []netip.AddrPort
	for _, conn := range c.conns {
		out = append(out, conn.LocalAddr().(*net.UDPAddr).AddrPort())
	}
	return out
}

// batchSize is how many datagrams one recvmmsg(2) takes at most: a
// router's burst is read with one system call instead of one each, which
// on a loaded core was most of a datagram's cost (the decoder takes about
// 2.7 µs of an sFlow datagram of six samples; the read alone took more).
const batchSize = 32

// maxDatagram is each read buffer: a UDP datagram's largest payload, so
// that none is cut short.
const maxDatagram = 65535

// batchReader is recvmmsg(2) on a UDP socket of either family.
type batchReader interface {
	ReadBatch(ms []ipv4.Message, flags int) (int, error)
}

func newBatchReader(conn *net.UDPConn) batchReader {
	if a, ok := conn.LocalAddr().(*net.UDPAddr); ok && a.IP.To4() != nil {
		return ipv4.NewPacketConn(conn)
	}
	// An IPv6 socket (dual-stack for "[::]:port" and ":port"): the
	// ipv6 package's messages are the same type.
	return ipv6.NewPacketConn(conn)
}

func (c *Collector) read(conn *net.UDPConn) {
	defer c.wg.Done()
	rd := newBatchReader(conn)
	ms := make([]ipv4.Message, batchSize)
	for i := range ms {
		ms[i].Buffers = [][]byte{make([]byte, maxDatagram)}
	}
	var batch []Record
	emit := func(r *Record) { batch = append(batch, *r) }
	for {
		n, err := rd.ReadBatch(ms, 0)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			c.readErrors.Add(1)
			continue
		}
		now := time.Now()
		batch = batch[:0]
		for i := range ms[:n] {
			m := &ms[i]
			from, ok := m.Addr.(*net.UDPAddr)
			if !ok {
				c.readErrors.Add(1)
				continue
			}
			addr, _ := netip.AddrFromSlice(from.IP)
			// Decode errors are counted per exporter by the decoder;
			// what decoded before one is used.
			_ = c.dec.Decode(addr, m.Buffers[0][:m.N], now, emit)
		}
		// One hand-over a batch: the detector's lock is taken once for
		// the burst, not once a datagram.
		if len(batch) > 0 {
			c.sink(now, batch)
		}
	}
}

// Close stops reading and waits for the readers.
func (c *Collector) Close() error {
	var errs []error
	for _, conn := range c.conns {
		errs = append(errs, conn.Close())
	}
	c.wg.Wait()
	return errors.Join(errs...)
}
