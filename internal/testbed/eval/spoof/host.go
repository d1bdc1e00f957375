// SPDX-License-Identifier: Apache-2.0

package spoof

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tierwall/tierwall/internal/testbed/eval/evalkit"
	"github.com/tierwall/tierwall/internal/testbed/lab"
)

// tcpStats reads the host namespace's TCP counters (/proc/net/snmp and
// netstat, "Tcp:PassiveOpens", "TcpExt:SyncookiesSent", ...).
func tcpStats() (map[string]uint64, error) {
	out := map[string]uint64{}
	err := evalkit.InNS(lab.NSHost, -1, func() error {
		// thread-self: /proc/net is the thread group leader's namespace.
		for _, f := range []string{"/proc/thread-self/net/snmp", "/proc/thread-self/net/netstat"} {
			b, err := os.ReadFile(f)
			if err != nil {
				return err
			}
			lines := strings.Split(string(b), "\n")
			for i := 0; i+1 < len(lines); i += 2 {
				names, vals := strings.Fields(lines[i]), strings.Fields(lines[i+1])
				if len(names) != len(vals) || len(names) == 0 {
					continue
				}
				for j := 1; j < len(names); j++ {
					v, _ := strconv.ParseUint(vals[j], 10, 64)
					out[names[0]+names[j]] = v
				}
			}
		}
		return nil
	})
	return out, err
}

// exchanger is the host's own DNS and NTP traffic during a reflection
// flood: the host asks a server on the internet side (the lab's client
// address) every 20 ms on each port, from a connected socket as a
// resolver does, and counts the answers, which come from the flood's
// source ports.
type exchanger struct {
	asked, answered atomic.Uint64
	lastA, lastB    uint64
}

func (x *exchanger) start(ctx context.Context, ports []uint16) (stop func(), err error) {
	xctx, cancel := context.WithCancel(ctx)
	var conns []net.PacketConn
	var wg sync.WaitGroup
	closeAll := func() {
		cancel()
		for _, c := range conns {
			c.Close()
		}
		wg.Wait()
	}
	for _, port := range ports {
		var srv net.PacketConn
		if err := evalkit.InNS(lab.NSInet, -1, func() error {
			var e error
			srv, e = net.ListenPacket("udp4", netip.AddrPortFrom(lab.Client4, port).String())
			return e
		}); err != nil {
			closeAll()
			return nil, err
		}
		conns = append(conns, srv)
		wg.Add(1)
		go func() { // echo
			defer wg.Done()
			buf := make([]byte, 512)
			for {
				n, a, err := srv.ReadFrom(buf)
				if err != nil {
					return
				}
				_, _ = srv.WriteTo(buf[:n], a) // a lost echo is a lost answer, counted
			}
		}()
		// Connected, as glibc's resolver and chrony's client sockets are:
		// the answers are then the socket's exact 4-tuple.
		dst := net.UDPAddrFromAddrPort(netip.AddrPortFrom(lab.Client4, port))
		var cli *net.UDPConn
		if err := evalkit.InNS(lab.NSHost, -1, func() error {
			var e error
			cli, e = net.DialUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(lab.Host4, 0)), dst)
			return e
		}); err != nil {
			closeAll()
			return nil, err
		}
		conns = append(conns, cli)
		wg.Add(2)
		go func() { // ask
			defer wg.Done()
			t := time.NewTicker(20 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-xctx.Done():
					return
				case <-t.C:
				}
				if _, err := cli.Write([]byte("tierwall exchange")); err == nil {
					x.asked.Add(1)
				}
			}
		}()
		go func() { // count answers
			defer wg.Done()
			buf := make([]byte, 512)
			for {
				if _, err := cli.Read(buf); err != nil {
					if xctx.Err() != nil || errors.Is(err, net.ErrClosed) {
						return
					}
					continue // an ICMP error for a lost query: not an answer
				}
				x.answered.Add(1)
			}
		}()
	}
	return closeAll, nil
}

// take returns answered and asked since the last take.
func (x *exchanger) take() [2]uint64 {
	a, b := x.answered.Load(), x.asked.Load()
	out := [2]uint64{a - x.lastA, b - x.lastB}
	x.lastA, x.lastB = a, b
	return out
}

// maxRSS follows a process's peak resident memory (VmHWM).
type maxRSS struct {
	pid  int
	max  atomic.Uint64 // VmHWM
	anon atomic.Uint64 // the largest RssAnon seen: the process's own pages
}

func (m *maxRSS) watch(ctx context.Context) {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	kb := func(v string) uint64 {
		n, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		return n << 10
	}
	for {
		if f, err := os.Open(fmt.Sprintf("/proc/%d/status", m.pid)); err == nil {
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
					m.max.Store(kb(v))
				}
				if v, ok := strings.CutPrefix(sc.Text(), "RssAnon:"); ok {
					m.anon.Store(max(m.anon.Load(), kb(v)))
				}
			}
			f.Close()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// synCounter counts, in the host namespace's prerouting hook (after XDP,
// before conntrack and TCP), the TCP SYNs (SYN without ACK) from outside
// the lab's client networks: the attack SYNs that reached the host's
// stack. XDP's pass verdict is no such count: it also takes the lab's own
// IPv6 router solicitations and MLD reports, which every peer of the
// host's port sends now and then (one or two of them fell in the window
// from the 3rd interval of a SYN flood in most runs, and read as an
// attack SYN passed).
const (
	synTable   = "twl_eval"
	synCounter = "attack_syns"
)

// countStackSYNs sets the counter up (afresh) and returns its removal.
func countStackSYNs() (remove func(), err error) {
	rules := fmt.Sprintf(`table inet %[1]s
delete table inet %[1]s
table inet %[1]s {
	counter %[2]s { }
	chain pre {
		type filter hook prerouting priority -400; policy accept;
		ip saddr != %[3]s tcp flags & (syn | ack) == syn counter name %[2]s
		ip6 saddr != %[4]s tcp flags & (syn | ack) == syn counter name %[2]s
	}
}
`, synTable, synCounter, lab.Net4, lab.Net6)
	cmd := exec.Command("ip", "netns", "exec", lab.NSHost, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("counting the attack SYNs that reach the host's stack: nft: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return func() {
		_ = exec.Command("ip", "netns", "exec", lab.NSHost, "nft", "delete", "table", "inet", synTable).Run()
	}, nil
}

// txRefused is how many of the host's XDP_TX frames its port found the
// ring to the card full for (veth's rx_queue_*_xdp_tx_errors): SYN-ACKs
// a NIC's full transmit ring would have refused.
func txRefused() (uint64, error) {
	return evalkit.VethStat(lab.NSHost, lab.IfHost, "rx_queue_", "_xdp_tx_errors")
}

// stackSYNs reads the counter countStackSYNs set up.
func stackSYNs() (uint64, error) {
	out, err := exec.Command("ip", "netns", "exec", lab.NSHost, "nft", "-j", "list", "counter", "inet", synTable, synCounter).Output()
	if err != nil {
		return 0, fmt.Errorf("reading the attack SYNs that reached the host's stack: %w", err)
	}
	var doc struct {
		Nftables []struct {
			Counter *struct {
				Packets uint64 `json:"packets"`
			} `json:"counter"`
		} `json:"nftables"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		return 0, fmt.Errorf("reading the attack SYNs that reached the host's stack: %w", err)
	}
	for _, o := range doc.Nftables {
		if o.Counter != nil {
			return o.Counter.Packets, nil
		}
	}
	return 0, fmt.Errorf("reading the attack SYNs that reached the host's stack: no counter %s in nft's answer", synCounter)
}
