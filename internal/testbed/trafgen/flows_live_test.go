// SPDX-License-Identifier: Apache-2.0

package trafgen

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sort"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tierwall/tierwall/internal/pkt"
	"github.com/tierwall/tierwall/internal/testbed/gen"
	"github.com/tierwall/tierwall/internal/testbed/harness"
	"github.com/tierwall/tierwall/internal/testutil"
	"github.com/tierwall/tierwall/internal/tier"
)

// The flow mode's own veth pair (twgf-*): the generator's end in one
// namespace, the receiver in the other, nothing else on them.
const (
	nsFlowTx, nsFlowRx = "twgf-tx", "twgf-rx"
	ifFlowTx, ifFlowRx = "twgf-a", "twgf-b"
)

func flowLab(t testing.TB) (src, dst [6]byte) {
	testutil.RequireRoot(t)
	clean, err := harness.VethPair(nsFlowTx, ifFlowTx, nsFlowRx, ifFlowRx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(clean)
	sh(t, "ip", "netns", "exec", nsFlowTx, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")
	sh(t, "ip", "netns", "exec", nsFlowRx, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")
	for _, x := range []struct {
		ns, ifc string
		mac     *[6]byte
	}{{nsFlowTx, ifFlowTx, &src}, {nsFlowRx, ifFlowRx, &dst}} {
		inNS(t, x.ns, func() {
			if ifc, err := net.InterfaceByName(x.ifc); err == nil {
				*x.mac = [6]byte(ifc.HardwareAddr)
			}
		})
	}
	return src, dst
}

func runIn(t *testing.T, ns string, s Spec) *Report {
	t.Helper()
	var rep *Report
	var err error
	inNS(t, ns, func() { rep, err = Run(context.Background(), s) })
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// capture reads every frame arriving on the receiver's interface through
// an AF_PACKET socket until quiet for 300 ms.
func capture(t *testing.T, start func()) [][]byte {
	t.Helper()
	var fd int
	var err error
	inNS(t, nsFlowRx, func() {
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ALL)))
		if err != nil {
			return
		}
		var ifc *net.Interface
		if ifc, err = net.InterfaceByName(ifFlowRx); err != nil {
			return
		}
		err = unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifc.Index})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 256<<20); err != nil {
		t.Fatal(err)
	}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 300000}); err != nil {
		t.Fatal(err)
	}
	start()
	var frames [][]byte
	buf := make([]byte, 2048)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, append([]byte(nil), buf[:n]...))
	}
	st, err := unix.GetsockoptTpacketStats(fd, unix.SOL_PACKET, unix.PACKET_STATISTICS)
	if err != nil {
		t.Fatal(err)
	}
	if st.Drops != 0 {
		t.Fatalf("capture socket dropped %d frames", st.Drops)
	}
	return frames
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// TestFlowRunReceived compares what arrived at the peer, frame by frame
// parsed and checksummed, with the generator's per-flow report.
func TestFlowRunReceived(t *testing.T) {
	src, dst := flowLab(t)
	sh(t, "ip", "netns", "exec", nsFlowRx, "ethtool", "-K", ifFlowRx, "gro", "on") // ndo_xdp_xmit needs NAPI
	for _, tc := range []struct {
		name    string
		dst     string
		size    int
		packets uint64
		rate    uint64
		overrun bool // flat out into a receiver on the other CPU: the veth ring overflows
	}{
		{"ipv4", "192.0.2.1", 64, 20000, 40000, false},
		{"ipv6", "fd00:200::1", 970, 20000, 40000, false},
		{"ipv4-overrun", "192.0.2.1", 64, 200000, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.overrun {
				sh(t, "ip", "netns", "exec", nsFlowRx, "sh", "-c", "echo 1 > /sys/class/net/"+ifFlowRx+"/threaded")
				defer sh(t, "ip", "netns", "exec", nsFlowRx, "sh", "-c", "echo 0 > /sys/class/net/"+ifFlowRx+"/threaded")
			}
			s := Spec{
				Iface: ifFlowTx, SrcMAC: src, DstMAC: dst, Dst: netip.MustParseAddr(tc.dst), Servers: 2,
				Flows: 200, BirthEvery: 15, PacketSize: tc.size, Proto: "mixed",
				Apps: []string{AppHTTP, AppTLS, AppDNS, AppGeneric}, Packets: tc.packets, Rate: tc.rate,
			}
			var rep *Report
			frames := capture(t, func() { rep = runIn(t, nsFlowTx, s) })
			if rep.Scheduled != s.Packets || rep.Sent+rep.Dropped != rep.Scheduled {
				t.Fatalf("scheduled %d sent %d dropped %d", rep.Scheduled, rep.Sent, rep.Dropped)
			}
			t.Logf("%d scheduled, %d sent, %d dropped, %d flows", rep.Scheduled, rep.Sent, rep.Dropped, rep.Born)
			if tc.overrun && rep.Dropped == 0 {
				t.Log("no frame dropped: the receiver kept up, the overrun case is not exercised")
			}
			if uint64(len(frames)) != rep.Sent {
				t.Fatalf("captured %d frames, report says %d sent", len(frames), rep.Sent)
			}
			type ctr struct {
				pk, by [2]uint64
				flags  [2]uint8
			}
			got := map[tier.FlowKey]*ctr{}
			for i, f := range frames {
				p, err := pkt.Parse(f)
				if err != nil {
					t.Fatalf("frame %d: %v", i, err)
				}
				k, d := tier.NewFlowKey(p.Proto, p.Src, p.Dst)
				c := got[k]
				if c == nil {
					c = &ctr{}
					got[k] = c
				}
				c.pk[d]++
				c.by[d] += uint64(p.IPLen)
				c.flags[d] |= p.TCPFlags
			}
			var ended int
			for _, st := range rep.Flows {
				c := got[st.Key]
				if c == nil {
					c = &ctr{} // every frame of it dropped
				}
				if c.pk != st.Packets || c.by != st.Bytes || c.flags != st.TCPFlags {
					t.Fatalf("flow %d %v: received %+v, reported %v %v %v", st.Index, st.Key, *c, st.Packets, st.Bytes, st.TCPFlags)
				}
				delete(got, st.Key)
				if st.Ended {
					ended++
				}
			}
			if len(got) != 0 || ended == 0 {
				t.Fatalf("%d received flows not in the report, %d flows ended", len(got), ended)
			}
		})
	}
}

// counter attaches a gen.Sink to the receiver: it counts frames, then drops
// them or passes them to the stack.
func counter(t testing.TB, pass bool) *gen.Sink {
	t.Helper()
	var s *gen.Sink
	var err error
	inNS(t, nsFlowRx, func() { s, err = gen.NewSink(ifFlowRx, pass) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func count(t testing.TB, s *gen.Sink) uint64 {
	t.Helper()
	n, err := s.Count()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestFlowRunDropsAccounted runs flat out into a receiver: frames the veth
// ring refuses are reported dropped, and the rest is exactly what arrived.
// With no receiver at all (no XDP, no GRO) everything is dropped.
func TestFlowRunDropsAccounted(t *testing.T) {
	src, dst := flowLab(t)
	s := Spec{
		Iface: ifFlowTx, SrcMAC: src, DstMAC: dst, Dst: netip.MustParseAddr("192.0.2.1"),
		Flows: 10000, BirthEvery: 10, Proto: "tcp", Apps: []string{AppHTTP, AppGeneric}, Packets: 3_000_000,
	}
	t.Run("no-receiver", func(t *testing.T) {
		s := s
		s.Packets = 50000
		rep := runIn(t, nsFlowTx, s)
		if rep.Sent != 0 || rep.Dropped != s.Packets {
			t.Fatalf("sent %d dropped %d of %d into a peer that cannot receive", rep.Sent, rep.Dropped, s.Packets)
		}
		for _, st := range rep.Flows {
			if st.Packets != [2]uint64{} || st.SYN {
				t.Fatalf("flow %d reported %v", st.Index, st.Packets)
			}
		}
	})
	for _, r := range []struct {
		name     string
		pass     bool
		threaded bool
	}{{"xdp-drop", false, false}, {"xdp-pass-threaded", true, true}} {
		t.Run(r.name, func(t *testing.T) {
			// Threaded NAPI takes the receiver off the generator's CPU
			// (else it runs in lockstep at the end of every 64-frame
			// batch), so a slow one lets the veth ring overflow.
			m := counter(t, r.pass) // NAPI exists from here on
			if r.threaded {
				sh(t, "ip", "netns", "exec", nsFlowRx, "sh", "-c", "echo 1 > /sys/class/net/"+ifFlowRx+"/threaded")
			}
			accounted(t, s, m)
		})
	}
}

func accounted(t *testing.T, s Spec, m *gen.Sink) {
	rep := runIn(t, nsFlowTx, s)
	time.Sleep(200 * time.Millisecond) // frames in flight
	got := count(t, m)
	var sum uint64
	for _, st := range rep.Flows {
		sum += st.Packets[0] + st.Packets[1]
	}
	t.Logf("%d scheduled, %d sent, %d dropped in %v: %.2f Mpps sent; receiver counted %d", rep.Scheduled, rep.Sent, rep.Dropped, rep.Elapsed, rep.PPS/1e6, got)
	if rep.Scheduled != s.Packets || got != rep.Sent || sum != rep.Sent {
		t.Fatalf("scheduled %d, sent %d, flows sum to %d, receiver counted %d", rep.Scheduled, rep.Sent, sum, got)
	}
}

// BenchmarkFlowGen measures frames per second into an XDP receiver that
// drops, in rounds interleaving the plain generator (64-byte UDP, sources
// cycled: the baseline), the flow generator's kernel side alone (one
// pre-built schedule sent again and again) and the whole flow mode
// (scheduling and accounting included). The machine is shared: compare the
// ratios, medians over rounds (-benchtime Nx: N rounds).
func BenchmarkFlowGen(b *testing.B) {
	src, dst := flowLab(b)
	counter(b, false)
	for _, c := range []struct {
		name  string
		flows int
		size  int
		apps  []string
	}{{"1K-64B", 1000, 64, nil}, {"1M-64B", 1 << 20, 64, nil}, {"1K-970B", 1000, 970, nil}, {"1K-64B-apps", 1000, 64, []string{AppHTTP, AppTLS, AppDNS, AppGeneric}}} {
		b.Run(c.name, func(b *testing.B) {
			s := Spec{Iface: ifFlowTx, SrcMAC: src, DstMAC: dst, Dst: netip.MustParseAddr("192.0.2.1"),
				Flows: c.flows, BirthEvery: 10, PacketSize: c.size, Apps: c.apps, Packets: 1}
			if err := s.flowDefaults(); err != nil {
				b.Fatal(err)
			}
			p, err := newFlowPlan(&s)
			if err != nil {
				b.Fatal(err)
			}
			const n = 1 << 20
			var base, kern, whole []float64
			inNS(b, nsFlowTx, func() {
				g, err := gen.NewFlowGen(p.genSpec(&s))
				if err != nil {
					b.Error(err)
					return
				}
				defer g.Close()
				plain, err := gen.NewGenerator(gen.GenSpec{Iface: ifFlowTx, Template: pkt.Frame{DstMAC: dst, SrcMAC: src,
					Src: netip.IPv4Unspecified(), Dst: s.Dst, Proto: pkt.ProtoUDP, SrcPort: 1, DstPort: 9, Payload: make([]byte, 18)}.Build(),
					Samples: sampleAddrs(1024)})
				if err != nil {
					b.Error(err)
					return
				}
				defer plain.Close()
				frame := pkt.Frame{DstMAC: dst, SrcMAC: src, Src: netip.IPv4Unspecified(), Dst: s.Dst, Proto: pkt.ProtoUDP, SrcPort: 1, DstPort: 9, Payload: make([]byte, 18)}.Build()
				rep := &Report{}
				sch := newScheduler(p, s.Flows, s.BirthEvery, rep, true)
				batch := make([]gen.FlowPkt, n)
				mark := make([]bool, n)
				for done := 0; done < 4*c.flows; done += n { // fill the window
					if err := sch.fill(batch); err != nil {
						b.Error(err)
						return
					}
				}
				mpps := func(f func() error) float64 {
					t0 := time.Now()
					if err := f(); err != nil {
						b.Error(err)
					}
					return n / time.Since(t0).Seconds() / 1e6
				}
				b.ResetTimer()
				for range b.N {
					base = append(base, mpps(func() error { _, err := plain.Send(frame, n, true); return err }))
					kern = append(kern, mpps(func() error { _, err := g.Send(batch); return err }))
					whole = append(whole, mpps(func() error {
						if err := sch.fill(batch); err != nil {
							return err
						}
						res, err := g.Send(batch)
						sch.account(batch, res.Dropped, mark)
						return err
					}))
				}
			})
			b.ReportMetric(median(base), "base-Mpps")
			b.ReportMetric(median(kern), "kernel-Mpps")
			b.ReportMetric(median(whole), "flow-Mpps")
			b.ReportMetric(median(whole)/median(base), "flow/base")
		})
	}
}

func sampleAddrs(n int) []netip.Addr {
	out := make([]netip.Addr, n)
	a := netip.MustParseAddr("10.128.0.1")
	for i := range out {
		out[i] = a
		a = a.Next()
	}
	return out
}

func median(x []float64) float64 {
	if len(x) == 0 {
		return 0
	}
	y := append([]float64(nil), x...)
	sort.Float64s(y)
	return y[len(y)/2]
}
