// SPDX-License-Identifier: Apache-2.0

// Package e2e runs the tierwall binary against real packets over veth in
// network namespaces: blocked and clean IPv4/IPv6 sources, what arrives at
// a socket versus what the counters say, persistence after the attaching
// process is gone, and re-adoption on the next attach.
package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/pkt"
	"github.com/tierwall/tierwall/internal/testbed/harness"
	"github.com/tierwall/tierwall/internal/testutil"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

const (
	nsTx   = "twe2e-tx"
	nsRx   = "twe2e-rx"
	ifTx   = "twe2e-a"
	ifRx   = "twe2e-b"
	port   = 9999
	perSrc = 50
)

var (
	rx4 = netip.MustParseAddr("10.200.0.2")
	rx6 = netip.MustParseAddr("fd00:200::2")
)

func sh(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

var bin string

func TestMain(m *testing.M) {
	if os.Getenv(bgpPairEnv) != "" {
		// A BGP test re-run inside its namespace: the binary, if it
		// needs one, is its parent's (TIERWALL_BIN).
		bin = os.Getenv("TIERWALL_BIN")
		os.Exit(m.Run())
	}
	if b := os.Getenv("TIERWALL_BIN"); b != "" {
		// A binary built elsewhere: the kernel-VM test (scripts/vmtest.sh)
		// builds it on the host, where compiling is 10x faster than in
		// the emulated guest.
		bin = b
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "tierwall-e2e")
	if err != nil {
		panic(err)
	}
	bin = filepath.Join(dir, "tierwall")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/tierwall").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building tierwall: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func buildTierwall(t *testing.T) string { return bin }

// tw runs the CLI in the receiver namespace; it returns output and exit code.
func tw(t *testing.T, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(buildTierwall(t), append([]string{"--netns", nsRx, "--direct"}, args...)...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), 0
}

func mustTw(t *testing.T, args ...string) string {
	t.Helper()
	out, code := tw(t, args...)
	if code != 0 {
		t.Fatalf("tierwall %s: exit %d\n%s", strings.Join(args, " "), code, out)
	}
	return out
}

func setup(t *testing.T) {
	testutil.RequireRoot(t)
	cleanup, err := harness.VethPair(nsTx, ifTx, nsRx, ifRx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	sh(t, "ip", "-n", nsRx, "addr", "add", rx4.String()+"/24", "dev", ifRx)
	sh(t, "ip", "-n", nsRx, "addr", "add", rx6.String()+"/64", "dev", ifRx, "nodad")
	// Spoofed sources must reach the socket when nothing blocks them.
	sh(t, "ip", "netns", "exec", nsRx, "sysctl", "-qw", "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf."+ifRx+".rp_filter=0")
}

// inNS runs f with the calling thread in the named network namespace.
func inNS(t *testing.T, name string, f func()) {
	t.Helper()
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	defer orig.Close()
	ns, err := netns.GetFromName(name)
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	defer ns.Close()
	if err := netns.Set(ns); err != nil {
		runtime.UnlockOSThread() // setns failed: still in orig
		t.Fatal(err)
	}
	// Unlock only a thread that is back in its own namespace, also when f
	// ends in t.Fatal. If restoring fails, panic with the thread still
	// locked, so that no other goroutine ever runs on it in the wrong
	// namespace (the test binary exits; a locked thread is never reused).
	defer func() {
		if err := netns.Set(orig); err != nil {
			panic(fmt.Sprintf("restoring the network namespace after %s: %v", name, err))
		}
		runtime.UnlockOSThread()
	}()
	f()
}

type receiver struct {
	c4, c6 *net.UDPConn
}

func listen(t *testing.T) *receiver {
	r := &receiver{}
	inNS(t, nsRx, func() {
		var err error
		if r.c4, err = net.ListenUDP("udp4", &net.UDPAddr{IP: rx4.AsSlice(), Port: port}); err != nil {
			t.Fatal(err)
		}
		if r.c6, err = net.ListenUDP("udp6", &net.UDPAddr{IP: rx6.AsSlice(), Port: port}); err != nil {
			t.Fatal(err)
		}
	})
	// Room for every datagram a test sends before it drains: a veth with
	// an XDP program gives each one a whole page on older kernels (6.1),
	// so the default 208 KiB holds only about 48 of them.
	for _, c := range []*net.UDPConn{r.c4, r.c6} {
		rc, err := c.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 16<<20)
		}); err != nil || serr != nil {
			t.Fatalf("receive buffer: %v %v", err, serr)
		}
	}
	t.Cleanup(func() { r.c4.Close(); r.c6.Close() })
	return r
}

// drain counts datagrams per source until the sockets stay quiet.
func (r *receiver) drain(t *testing.T) map[netip.Addr]int {
	t.Helper()
	got := map[netip.Addr]int{}
	buf := make([]byte, 2048)
	for _, c := range []*net.UDPConn{r.c4, r.c6} {
		for {
			if err := c.SetReadDeadline(time.Now().Add(300 * time.Millisecond)); err != nil {
				t.Fatal(err)
			}
			_, from, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				break
			}
			got[from.Addr().Unmap()]++
		}
	}
	return got
}

func send(t *testing.T, srcs []netip.Addr, n int) {
	t.Helper()
	rxMAC := hwaddr(t, nsRx, ifRx)
	inNS(t, nsTx, func() {
		out := openRaw(t, ifTx, rxMAC)
		defer out.close()
		for _, src := range srcs {
			dst := rx4
			if src.Is6() {
				dst = rx6
			}
			f := pkt.Frame{DstMAC: [6]byte(rxMAC), SrcMAC: [6]byte(out.mac), Src: src, Dst: dst,
				Proto: pkt.ProtoUDP, SrcPort: 5555, DstPort: port, Payload: []byte("e2e")}
			b := f.Build()
			for i := 0; i < n; i++ {
				out.send(t, b)
			}
		}
	})
}

// rawOut sends frames out of one interface with an AF_PACKET socket.
type rawOut struct {
	fd  int
	sa  *unix.SockaddrLinklayer
	mac net.HardwareAddr // the interface's own, for the frames' source
}

// openRaw opens a sender on ifname in the calling thread's namespace;
// dst (optional) is the link-layer destination the kernel is told.
func openRaw(t *testing.T, ifname string, dst net.HardwareAddr) rawOut {
	t.Helper()
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
	if err != nil {
		t.Fatal(err)
	}
	sa := &unix.SockaddrLinklayer{Ifindex: ifi.Index, Halen: 6}
	copy(sa.Addr[:], dst)
	return rawOut{fd: fd, sa: sa, mac: ifi.HardwareAddr}
}

func (r rawOut) send(t *testing.T, b []byte) {
	t.Helper()
	if err := unix.Sendto(r.fd, b, 0, r.sa); err != nil {
		t.Fatalf("sending: %v", err)
	}
}

func (r rawOut) close() { unix.Close(r.fd) }

func hwaddr(t *testing.T, ns, ifname string) net.HardwareAddr {
	var mac net.HardwareAddr
	inNS(t, ns, func() {
		ifc, err := net.InterfaceByName(ifname)
		if err != nil {
			t.Fatal(err)
		}
		mac = ifc.HardwareAddr
	})
	return mac
}

type rule struct {
	Prefix  string `json:"prefix"`
	Kind    string `json:"kind"`
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
}

func rules(t *testing.T) map[string]rule {
	var rs []rule
	if err := json.Unmarshal([]byte(mustTw(t, "block", "list", "--json")), &rs); err != nil {
		t.Fatal(err)
	}
	out := map[string]rule{}
	for _, r := range rs {
		out[r.Prefix] = r
	}
	return out
}

type stats struct {
	Verdicts map[string]struct{ Packets uint64 } `json:"verdicts"`
}

func verdicts(t *testing.T) map[string]uint64 {
	return verdictsFrom(t, []byte(mustTw(t, "stats", "--json")))
}

// verdictsFrom decodes `tierwall stats --json` into packets per verdict.
func verdictsFrom(t *testing.T, out []byte) map[string]uint64 {
	t.Helper()
	var s stats
	if err := json.Unmarshal(out, &s); err != nil {
		t.Fatalf("decoding stats: %v: %s", err, out)
	}
	v := map[string]uint64{}
	for k, x := range s.Verdicts {
		v[k] = x.Packets
	}
	return v
}

func TestBlockOverVeth(t *testing.T) {
	setup(t)
	r := listen(t)
	mustTw(t, "attach", "-i", ifRx)
	mustTw(t, "block", "add", "192.0.2.1", "198.51.100.0/24", "2001:db8::1", "2001:db8:bad::/48")
	mustTw(t, "allow", "add", "198.51.100.64/26")

	blocked := []netip.Addr{netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("198.51.100.9"),
		netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8:bad::77")}
	clean := []netip.Addr{netip.MustParseAddr("10.200.0.1"), netip.MustParseAddr("192.0.2.2"),
		netip.MustParseAddr("198.51.100.70"), netip.MustParseAddr("fd00:200::1"), netip.MustParseAddr("2001:db8::2")}

	// The attaching process has exited: the pinned link keeps filtering.
	send(t, append(append([]netip.Addr{}, blocked...), clean...), perSrc)
	got := r.drain(t)
	for _, s := range blocked {
		if got[s] != 0 {
			t.Errorf("%d packets from blocked %s arrived", got[s], s)
		}
	}
	for _, s := range clean {
		if got[s] != perSrc {
			t.Errorf("%d of %d packets from clean %s arrived", got[s], perSrc, s)
		}
	}
	rs := rules(t)
	for _, p := range []string{"192.0.2.1/32", "198.51.100.0/24", "2001:db8::1/128", "2001:db8:bad::/48"} {
		if rs[p].Packets != perSrc {
			t.Errorf("rule %s counted %d packets, want %d", p, rs[p].Packets, perSrc)
		}
	}
	v := verdicts(t)
	if v["drop_exact"] != 2*perSrc || v["drop_prefix"] != 2*perSrc || v["allowlisted"] != perSrc {
		t.Errorf("verdicts %v", v)
	}

	// Attach again: same rules, same counters, still dropping.
	mustTw(t, "attach", "-i", ifRx)
	if after := rules(t); fmt.Sprint(after) != fmt.Sprint(rs) {
		t.Fatalf("rules changed across re-attach:\n%v\n%v", rs, after)
	}
	send(t, blocked[:1], perSrc)
	if got := r.drain(t); got[blocked[0]] != 0 {
		t.Errorf("blocked source got through after re-attach")
	}
	if n := rules(t)["192.0.2.1/32"].Packets; n != 2*perSrc {
		t.Errorf("counter after re-attach %d, want %d", n, 2*perSrc)
	}

	// Unblock: traffic flows again.
	mustTw(t, "block", "del", "192.0.2.1")
	send(t, blocked[:1], perSrc)
	if got := r.drain(t); got[blocked[0]] != perSrc {
		t.Errorf("%d of %d packets arrived after unblock", got[blocked[0]], perSrc)
	}

	// Detach: everything passes and the pinned state is gone.
	mustTw(t, "detach", "-i", ifRx)
	send(t, blocked[1:2], perSrc)
	if got := r.drain(t); got[blocked[1]] != perSrc {
		t.Errorf("%d of %d packets arrived after detach", got[blocked[1]], perSrc)
	}
	if _, code := tw(t, "stats"); code != 2 {
		t.Errorf("stats after detach: exit %d, want 2", code)
	}
}

func TestBadInputChangesNothing(t *testing.T) {
	setup(t)
	mustTw(t, "attach", "-i", ifRx, "--exact4-capacity", "2")
	mustTw(t, "block", "add", "192.0.2.1")
	before := mustTw(t, "block", "list", "--json")
	for _, c := range [][]string{
		{"block", "add", "192.0.2.9", "not-an-address"},
		{"block", "add", "10.0.0.0/33"},
		{"block", "add", "10.1.2.3/8"},
		{"block", "add", "192.0.2.7", "192.0.2.8"}, // one over capacity
		{"block", "del", "192.0.2.77"},
		{"block", "add", "-i", "nosuch0", "192.0.2.9"},
		{"attach", "-i", "nosuch0"},
		{"attach", "-i", ifRx, "--mode", "turbo"},
		{"attach", "-i", ifRx, "--exact4-capacity", "9"},
		{"block"},
		{"block", "add"},
		{"stats", "--bogus"},
	} {
		out, code := tw(t, c...)
		if code != 2 {
			t.Errorf("tierwall %s: exit %d, want 2\n%s", strings.Join(c, " "), code, out)
		}
		if !strings.Contains(out, "tierwall: ") {
			t.Errorf("tierwall %s printed no error: %s", strings.Join(c, " "), out)
		}
	}
	if after := mustTw(t, "block", "list", "--json"); after != before {
		t.Fatalf("rules changed by failed commands:\n%s\n%s", before, after)
	}
	mustTw(t, "detach", "-i", ifRx)
}
