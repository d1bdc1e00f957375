// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tierwall/tierwall/internal/netnsx"
	"github.com/tierwall/tierwall/internal/pkt"
	twrule "github.com/tierwall/tierwall/internal/rule"
	"github.com/tierwall/tierwall/internal/synproxy"
	dpsynproxy "github.com/tierwall/tierwall/internal/synproxy/xdp"
	"github.com/tierwall/tierwall/internal/testbed/harness"
	"github.com/tierwall/tierwall/internal/testutil"
)

const (
	spNsCli = "twsp-cli"
	spNsSrv = "twsp-srv"
	spIfCli = "twsp-c"
	spIfSrv = "twsp-s"
	spPort  = 80
	// Spoofed sources of the flood, routed back towards the client side.
	spFloodPrefix = "10.202.0.0/16"
	spFlood       = 50_000
)

var spDialTimeout = 30 * time.Second

var (
	spCli4 = netip.MustParseAddr("10.201.0.1")
	spSrv4 = netip.MustParseAddr("10.201.0.2")
	spCli6 = netip.MustParseAddr("fd00:201::1")
	spSrv6 = netip.MustParseAddr("fd00:201::2")
)

// spCounters reads the server namespace's TCP counters: Tcp and TcpExt
// from /proc/net/snmp and /proc/net/netstat, and SYNPROXY's per-CPU
// counters from /proc/net/stat/synproxy summed, as "Synproxy:<column>".
func spCounters(t *testing.T) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, f := range []string{"/proc/net/snmp", "/proc/net/netstat"} {
		lines := strings.Split(strings.TrimSpace(sh(t, "ip", "netns", "exec", spNsSrv, "cat", f)), "\n")
		for i := 0; i+1 < len(lines); i += 2 {
			names, vals := strings.Fields(lines[i]), strings.Fields(lines[i+1])
			if len(names) != len(vals) || len(names) == 0 {
				t.Fatalf("%s: unpaired lines %q / %q", f, lines[i], lines[i+1])
			}
			proto := strings.TrimSuffix(names[0], ":")
			for j := 1; j < len(names); j++ {
				v, err := strconv.ParseInt(vals[j], 10, 64)
				if err != nil {
					continue // Tcp:MaxConn is -1, fine; others are counters
				}
				out[proto+":"+names[j]] = v
			}
		}
	}
	lines := strings.Split(strings.TrimSpace(sh(t, "ip", "netns", "exec", spNsSrv, "cat", "/proc/net/stat/synproxy")), "\n")
	names := strings.Fields(lines[0])
	for _, l := range lines[1:] {
		for j, f := range strings.Fields(l) {
			v, err := strconv.ParseInt(f, 16, 64)
			if err != nil || j >= len(names) {
				t.Fatalf("/proc/net/stat/synproxy: %q", l)
			}
			out["Synproxy:"+names[j]] += v
		}
	}
	return out
}

// spDropped is what the veth pair dropped between the flood's socket and
// the XDP program: the client side's tx drops and the server side's rx
// drops (a full ring), read from sysfs inside each namespace.
func spDropped(t *testing.T) int64 {
	t.Helper()
	var n int64
	for _, c := range [][2]string{{spNsCli, spIfCli + "/statistics/tx_dropped"}, {spNsSrv, spIfSrv + "/statistics/rx_dropped"}} {
		v, err := strconv.ParseInt(strings.TrimSpace(sh(t, "ip", "netns", "exec", c[0], "cat", "/sys/class/net/"+c[1])), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		n += v
	}
	return n
}

// spSynRecv counts the server's sockets in SYN_RECV.
func spSynRecv(t *testing.T) int {
	t.Helper()
	out := sh(t, "ip", "netns", "exec", spNsSrv, "ss", "-Htan", "state", "syn-recv")
	return len(strings.Fields(strings.TrimSpace(out))) / 4 // Recv-Q Send-Q Local Peer
}

// spServe runs an echo server on port 80 of both server addresses until
// the test ends; accepted counts the connections it took.
func spServe(t *testing.T, accepted *atomic.Int64) {
	t.Helper()
	for _, a := range []netip.Addr{spSrv4, spSrv6} {
		var ln net.Listener
		err := netnsx.Do(spNsSrv, -1, func() (err error) {
			ln, err = net.Listen("tcp", netip.AddrPortFrom(a, spPort).String())
			return err
		})
		if err != nil {
			t.Fatalf("listening on %s: %v", a, err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				accepted.Add(1)
				go func() {
					defer c.Close()
					_ = c.SetDeadline(time.Now().Add(30 * time.Second))
					line, err := bufio.NewReader(c).ReadString('\n')
					if err == nil {
						_, _ = c.Write([]byte("echo " + line))
					}
				}()
			}
		}()
	}
}

// spClient connects from the client namespace, sends a line and checks
// the echo. Deadlines only keep a broken test from hanging: connections
// that need the SYN retransmitted (a SYN lost in the flood) still pass.
func spClient(dst netip.Addr, i int, bulk bool) error {
	var c net.Conn
	err := netnsx.Do(spNsCli, -1, func() (err error) {
		d := net.Dialer{Timeout: spDialTimeout}
		c, err = d.Dial("tcp", netip.AddrPortFrom(dst, spPort).String())
		return err
	})
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", dst, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	// More than one segment; with bulk, the first two clients (IPv4 and
	// IPv6) send enough to run on windows beyond 64 KiB, scaled by the
	// factor the SYN-ACK announced in the server's name (SYNPROXY
	// translates sequence numbers, not windows).
	size := 3000
	if bulk && i < 2 {
		size = 4 << 20
	}
	msg := fmt.Sprintf("hello %d %s\n", i, strings.Repeat("x", size))
	if _, err := c.Write([]byte(msg)); err != nil {
		return fmt.Errorf("writing to %s: %w", dst, err)
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return fmt.Errorf("reading from %s: %w", dst, err)
	}
	if got != "echo "+msg {
		return fmt.Errorf("echo from %s: %d bytes, want %d", dst, len(got), len("echo "+msg))
	}
	return nil
}

// spClients runs n clients, alternating IPv4 and IPv6, in parallel; with
// bulk the first two move 4 MiB each way.
func spClients(t *testing.T, n int, bulk bool) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dst := spSrv4
			if i%2 == 1 {
				dst = spSrv6
			}
			errs <- spClient(dst, i, bulk)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

// spFloodSYNs injects SYNs with random sources in spFloodPrefix and random
// ports at the server, from the client namespace's AF_PACKET socket: at
// least min of them, and then on until stop is closed (at most 100 times
// min). It returns how many it sent.
func spFloodSYNs(t *testing.T, min int, stop <-chan struct{}, progress *atomic.Int64) int {
	srvMAC := hwaddr(t, spNsSrv, spIfSrv)
	var sent int
	err := netnsx.Do(spNsCli, -1, func() error {
		ifc, err := net.InterfaceByName(spIfCli)
		if err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
		if err != nil {
			return fmt.Errorf("AF_PACKET socket: %w", err)
		}
		defer unix.Close(fd)
		sa := &unix.SockaddrLinklayer{Ifindex: ifc.Index, Halen: 6}
		copy(sa.Addr[:], srvMAC)
		pfx := netip.MustParsePrefix(spFloodPrefix)
		base := pfx.Addr().As4()
		r := rand.New(rand.NewPCG(1, 2))
		// Linux's SYN options: MSS, SACK_PERM, TS, NOP, WS.
		opts := []byte{2, 4, 0x05, 0xb4, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 3, 7}
		for {
			if sent >= 100*min {
				return nil
			}
			if sent >= min {
				select {
				case <-stop:
					return nil
				default:
				}
			}
			src := base
			src[2], src[3] = byte(r.UintN(256)), byte(r.UintN(254)+1)
			f := pkt.Frame{DstMAC: [6]byte(srvMAC), SrcMAC: [6]byte(ifc.HardwareAddr),
				Src: netip.AddrFrom4(src), Dst: spSrv4, Proto: pkt.ProtoTCP,
				SrcPort: uint16(r.UintN(60000) + 1024), DstPort: spPort, TCPFlags: pkt.TCPFlagSYN,
				TCPSeq: r.Uint32(), TCPOptions: opts}
			b := f.Build()
			for {
				err := unix.Sendto(fd, b, 0, sa)
				if err == nil {
					break
				}
				// A full veth ring pushes back on some kernels.
				if !errors.Is(err, unix.ENOBUFS) && !errors.Is(err, unix.EAGAIN) {
					return fmt.Errorf("sending SYN %d: %w", sent, err)
				}
				runtime.Gosched()
			}
			sent++
			progress.Store(int64(sent))
		}
	})
	if err != nil {
		t.Errorf("flood: %v", err)
	}
	return sent
}

// TestSynproxy: real clients complete connections through the XDP SYN
// cookies and the kernel's SYNPROXY, before and during a spoofed SYN flood
// that leaves no trace on the server's TCP stack.
func TestSynproxy(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireCommand(t, "nft", "ss")
	cleanup, err := harness.VethPair(spNsCli, spIfCli, spNsSrv, spIfSrv)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	sh(t, "ip", "-n", spNsCli, "addr", "add", spCli4.String()+"/24", "dev", spIfCli)
	sh(t, "ip", "-n", spNsSrv, "addr", "add", spSrv4.String()+"/24", "dev", spIfSrv)
	sh(t, "ip", "-n", spNsCli, "addr", "add", spCli6.String()+"/64", "dev", spIfCli, "nodad")
	sh(t, "ip", "-n", spNsSrv, "addr", "add", spSrv6.String()+"/64", "dev", spIfSrv, "nodad")
	sh(t, "ip", "-n", spNsSrv, "route", "add", spFloodPrefix, "via", spCli4.String())
	// Checksum offload stays on, as on a real link: the peers' TCP
	// checksums arrive partial (CHECKSUM_PARTIAL, kept through native XDP)
	// and the kernel trusts them. That matters for IPv6: nft's synproxy
	// statement checks every packet with the IPv4 checksum routine
	// (nf_ip_checksum), which only lets IPv6 through when the checksum is
	// already trusted, partial here, CHECKSUM_UNNECESSARY from a NIC.

	ctx := context.Background()
	loose0 := strings.TrimSpace(sh(t, "ip", "netns", "exec", spNsSrv, "sysctl", "-n", "net.netfilter.nf_conntrack_tcp_loose"))
	cfg := synproxy.Config{Netns: spNsSrv, Targets: []synproxy.Target{
		{Dst: netip.PrefixFrom(spSrv4, 32), Ports: twrule.PortRange{Lo: spPort, Hi: spPort}},
		{Dst: netip.PrefixFrom(spSrv6, 128), Ports: twrule.PortRange{Lo: spPort, Hi: spPort}},
	}}
	if err := synproxy.Apply(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	// Applying twice is replacing: same result, original values kept.
	if err := synproxy.Apply(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	removed := false
	t.Cleanup(func() {
		if !removed {
			_ = synproxy.Remove(ctx, spNsSrv)
		}
	})

	sp, err := dpsynproxy.Load(dpsynproxy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sp.Close() })
	err = netnsx.Do(spNsSrv, -1, func() error {
		ifc, err := net.InterfaceByName(spIfSrv)
		if err != nil {
			return err
		}
		return sp.Attach(ifc.Index)
	})
	if err != nil {
		t.Fatal(err)
	}
	// Native XDP_TX on a veth reaches the peer only when the peer runs
	// XDP too.
	err = netnsx.Do(spNsCli, -1, func() error {
		ifc, err := net.InterfaceByName(spIfCli)
		if err != nil {
			return err
		}
		pass, err := dpsynproxy.AttachPeerPass(ifc.Index)
		if err == nil {
			t.Cleanup(func() { pass.Close() })
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	var accepted atomic.Int64
	spServe(t, &accepted)
	before := spCounters(t)

	// Real clients, no flood.
	const clean = 20
	spClients(t, clean, true)
	mid := spCounters(t)
	st, err := sp.Stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after %d clean connections: %v", clean, spStats(st))
	if d := mid["Tcp:PassiveOpens"] - before["Tcp:PassiveOpens"]; d != clean {
		t.Errorf("PassiveOpens grew by %d, want %d", d, clean)
	}
	if d := mid["Synproxy:cookie_valid"] - before["Synproxy:cookie_valid"]; d != clean {
		t.Errorf("SYNPROXY validated %d cookies, want %d", d, clean)
	}
	if got := st.Get(dpsynproxy.ReasonSynAnswered).Packets; got < clean {
		t.Errorf("XDP answered %d SYNs, want at least %d", got, clean)
	}
	if got := st.Get(dpsynproxy.ReasonAckValid).Packets; got < clean {
		t.Errorf("XDP passed %d cookie ACKs, want at least %d", got, clean)
	}
	if st.Get(dpsynproxy.ReasonConntrackPass).Packets == 0 {
		t.Error("no segment passed as a known connection")
	}

	// The flood, with real clients connecting while it runs.
	const during = 10
	stop := make(chan struct{})
	sentc := make(chan int, 1)
	var progress atomic.Int64
	dropped0 := spDropped(t)
	go func() { sentc <- spFloodSYNs(t, spFlood, stop, &progress) }()
	// The clients start once the flood is under way, and the flood goes
	// on until they are done: every client connects during it.
	for progress.Load() < spFlood/10 {
		time.Sleep(time.Millisecond)
	}
	// No bulk transfer here: the cookie SYN-ACKs to the flood's spoofed
	// sources come back to the clients' namespace, the only way out of
	// the server's, and fill its 256-entry veth ring ahead of the
	// clients' own ACKs, which no real link does (they would leave for
	// the internet). A 4 MiB transfer then stalled in RTO backoff past
	// its 30 s deadline in 1 run of 6 while the flood, which runs until
	// the clients are done, went on; the clean phase moves the 4 MiB.
	spClients(t, during, false)
	close(stop)
	sent := <-sentc
	// Read once the flood's last frames have left the veth ring: the
	// program's counters stop moving.
	var st2 dpsynproxy.Stats
	for i := 0; i < 100; i++ {
		time.Sleep(20 * time.Millisecond)
		prev := st2
		if st2, err = sp.Stats(); err != nil {
			t.Fatal(err)
		}
		if st2 == prev {
			break
		}
	}
	after := spCounters(t)
	t.Logf("flood of %d SYNs with %d clients: %v", sent, during, spStats(st2))

	if d := after["Tcp:PassiveOpens"] - mid["Tcp:PassiveOpens"]; d != during {
		t.Errorf("PassiveOpens grew by %d during the flood, want the %d real clients only", d, during)
	}
	if n := accepted.Load(); n != clean+during {
		t.Errorf("server accepted %d connections, want %d", n, clean+during)
	}
	for _, k := range []string{"TcpExt:SyncookiesSent", "TcpExt:SyncookiesRecv", "TcpExt:SyncookiesFailed",
		"TcpExt:ListenOverflows", "TcpExt:ListenDrops", "TcpExt:TCPReqQFullDrop", "Synproxy:syn_received"} {
		if d := after[k] - before[k]; d != 0 {
			t.Errorf("%s grew by %d: the flood reached the kernel", k, d)
		}
	}
	if n := spSynRecv(t); n != 0 {
		t.Errorf("%d sockets in SYN_RECV", n)
	}
	// Every SYN of the flood that the veth delivered was answered.
	answered := st2.Get(dpsynproxy.ReasonSynAnswered).Packets - st.Get(dpsynproxy.ReasonSynAnswered).Packets
	if dropped := spDropped(t) - dropped0; int64(answered)+dropped < int64(sent) {
		t.Errorf("XDP answered %d SYNs and the veth dropped %d, want all %d of the flood and the real clients'", answered, dropped, sent)
	}
	if d := st2.Get(dpsynproxy.ReasonAckValid).Packets - st.Get(dpsynproxy.ReasonAckValid).Packets; d < during {
		t.Errorf("XDP passed %d cookie ACKs during the flood, want at least %d", d, during)
	}
	for _, r := range []dpsynproxy.Reason{dpsynproxy.ReasonSynUnfit, dpsynproxy.ReasonConntrackError, dpsynproxy.ReasonMalformed} {
		if n := st2.Get(r).Packets; n != 0 {
			t.Errorf("%s: %d packets", r, n)
		}
	}

	// Teardown puts the sysctls back and takes the table away.
	if err := synproxy.Remove(ctx, spNsSrv); err != nil {
		t.Fatal(err)
	}
	removed = true
	if v := strings.TrimSpace(sh(t, "ip", "netns", "exec", spNsSrv, "sysctl", "-n", "net.netfilter.nf_conntrack_tcp_loose")); v != loose0 {
		t.Errorf("nf_conntrack_tcp_loose %s after Remove, want %s", v, loose0)
	}
	if ok, err := synproxy.Installed(ctx, spNsSrv); err != nil || ok {
		t.Errorf("table still installed after Remove (%v)", err)
	}
	if err := synproxy.Remove(ctx, spNsSrv); err != nil {
		t.Errorf("second Remove: %v", err)
	}
}

func spStats(s dpsynproxy.Stats) string {
	var b strings.Builder
	for r := range dpsynproxy.NumReasons {
		if s[r].Packets != 0 {
			fmt.Fprintf(&b, "%s=%d ", dpsynproxy.Reason(r), s[r].Packets)
		}
	}
	return strings.TrimSpace(b.String())
}
