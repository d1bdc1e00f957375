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
		if err := conn.SetReadBuffer(readBuffer); err != nil {
			log.Warn("telemetry: socket buffer not enlarged", "listen", a, "err", err)
		}
		c.conns = append(c.conns, conn)
	}
	for _, conn := range c.conns {
		c.wg.Add(1)
		go c.read(conn)
	}
	return c, nil
}

// Addrs are the addresses listened on (the ports chosen for ":0").
func (c *Collector) Addrs() []netip.AddrPort {
	var out []netip.AddrPort
	for _, conn := range c.conns {
		out = append(out, conn.LocalAddr().(*net.UDPAddr).AddrPort())
	}
	return out
}

func (c *Collector) read(conn *net.UDPConn) {
	defer c.wg.Done()
	buf := make([]byte, 65536)
	var batch []Record
	emit := func(r *Record) { batch = append(batch, *r) }
	for {
		n, from, err := conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			c.readErrors.Add(1)
			continue
		}
		now := time.Now()
		batch = batch[:0]
		// Decode errors are counted per exporter by the decoder; what
		// decoded before one is used.
		_ = c.dec.Decode(from.Addr(), buf[:n], now, emit)
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
