// SPDX-License-Identifier: Apache-2.0

package demo

import (
	"context"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Load is legitimate HTTP traffic: workers, each on its own client
// address (so that no single legitimate address looks like a flood),
// fetching a page over keep-alive connections with a 5 s timeout (the
// paper's weighttp setup, scaled to a 2-vCPU machine).
type Load struct {
	OK, Failed atomic.Uint64
	// NewConns opens a connection per request (a SYN each), for floods
	// of SYNs: keep-alive clients would not notice a stack that cannot
	// accept.
	NewConns bool
	// Rate paces each client to this many requests/s (0: the next
	// request as soon as the last is answered). A paced client that falls
	// behind does not catch up in a burst: its rate is the lower of Rate
	// and one over its latency, so a stall shows as lost requests.
	Rate float64
}

// dialIn connects from inside network namespace ns ("": this
// process's), from local.
func dialIn(ns string, local netip.Addr) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		type res struct {
			c   net.Conn
			err error
		}
		ch := make(chan res, 1)
		go func() {
			// The socket is made on a thread inside ns; the thread is never
			// unlocked and dies with this goroutine. ns "": this one's.
			runtime.LockOSThread()
			if ns == "" {
				defer runtime.UnlockOSThread()
			} else {
				h, err := netns.GetFromName(ns)
				if err != nil {
					ch <- res{nil, err}
					return
				}
				defer h.Close()
				if err := netns.Set(h); err != nil {
					ch <- res{nil, err}
					return
				}
			}
			// IP_BIND_ADDRESS_NO_PORT: the port is chosen at connect
			// time, knowing the destination, as for a client that never
			// binds (the kernel walks its ports in order per destination).
			// Bound first with port 0, each connection got a random port
			// and, at hundreds of connections a second from one address,
			// soon one whose 4-tuple the server (and its conntrack, when a
			// SYN proxy is on) still held in TIME_WAIT: a stall no real
			// client population causes.
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: local.AsSlice()}, Timeout: 5 * time.Second,
				Control: func(_, _ string, c syscall.RawConn) error {
					var serr error
					if err := c.Control(func(fd uintptr) {
						serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_BIND_ADDRESS_NO_PORT, 1)
					}); err != nil {
						return err
					}
					return serr
				}}
			c, err := d.DialContext(ctx, network, addr)
			ch <- res{c, err}
		}()
		r := <-ch
		return r.c, r.err
	}
}

// Run fetches url from each of clients until ctx ends.
func (l *Load) Run(ctx context.Context, ns, url string, clients []netip.Addr) {
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Add(1)
		go func(local netip.Addr) {
			defer wg.Done()
			tr := &http.Transport{DialContext: dialIn(ns, local), MaxIdleConnsPerHost: 1, MaxConnsPerHost: 1, DisableKeepAlives: l.NewConns}
			defer tr.CloseIdleConnections()
			hc := &http.Client{Transport: tr, Timeout: 5 * time.Second}
			var (
				gap  time.Duration
				next = time.Now()
			)
			if l.Rate > 0 {
				gap = time.Duration(float64(time.Second) / l.Rate)
				// Clients start spread over one gap, not in step.
				next = next.Add(time.Duration(rand.Int64N(int64(gap))))
			}
			for ctx.Err() == nil {
				if gap > 0 {
					if d := time.Until(next); d > 0 {
						select {
						case <-ctx.Done():
							return
						case <-time.After(d):
						}
					}
					if next = next.Add(gap); next.Before(time.Now()) {
						next = time.Now()
					}
				}
				req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
				resp, err := hc.Do(req)
				if err != nil {
					if ctx.Err() == nil {
						l.Failed.Add(1)
						time.Sleep(10 * time.Millisecond)
					}
					continue
				}
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err == nil && resp.StatusCode == 200 {
					l.OK.Add(1)
				} else {
					l.Failed.Add(1)
				}
			}
		}(c)
	}
	wg.Wait()
}

// ClientAddrs are the legitimate clients' addresses, from 10.70.1.1 on.
func ClientAddrs(n int) []netip.Addr { return AddrsFrom(netip.MustParseAddr("10.70.1.1"), n) }

// AddrsFrom is n consecutive addresses from a.
func AddrsFrom(a netip.Addr, n int) []netip.Addr {
	out := make([]netip.Addr, n)
	for i := range out {
		out[i] = a
		a = a.Next()
	}
	return out
}
