// SPDX-License-Identifier: Apache-2.0

package nicstage

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/tierwall/tierwall/internal/pkt"
	"github.com/tierwall/tierwall/internal/testutil"
	"github.com/tierwall/tierwall/internal/tier"
	"github.com/tierwall/tierwall/internal/tier/flowtab"
)

// XDP_REDIRECT (uapi/linux/bpf.h); xdpDrop and xdpPass are in stage_test.go.
const xdpRedirect = 4

// Fake ports for BPF_PROG_TEST_RUN: bpf_redirect only records the target
// there, so the verdict shows which port a packet was sent to.
const (
	testHost = 1
	testTwin = 2
)

// Marks of flow.h's enum tw_flow_mark (it does not reach BTF, so bpf2go
// cannot export it; the host's probe decodes the same bytes).
const (
	markHit       = 1
	markMiss      = 2
	markUnhandled = 3
	metaMagic     = 0x74776d6b
	metaLen       = 24
)

type flowMeta struct {
	magic  uint32
	mark   uint8
	dir    uint8
	hash   uint32
	flowID uint64
}

// xdpMd is the UAPI struct xdp_md: BPF_PROG_TEST_RUN reports in ctx_out
// where the frame starts (data) relative to the metadata, which the data
// out buffer holds first.
type xdpMd struct {
	Data, DataEnd, DataMeta, IngressIfindex, RxQueueIndex, EgressIfindex uint32
}

// runMeta runs prog on frame and returns its verdict and the metadata in
// front of the frame afterwards, nil when there is none.
func runMeta(t *testing.T, prog *ebpf.Program, frame []byte, metaIn []byte) (uint32, *flowMeta) {
	t.Helper()
	in := append(append([]byte(nil), metaIn...), frame...)
	out := make([]byte, len(in)+256)
	var ctxOut xdpMd
	ret, err := prog.Run(&ebpf.RunOptions{Data: in, DataOut: out,
		Context:    xdpMd{Data: uint32(len(metaIn)), DataEnd: uint32(len(in))},
		ContextOut: &ctxOut})
	if err != nil {
		t.Fatal(err)
	}
	ml := int(ctxOut.Data)
	if ml == 0 {
		return ret, nil
	}
	if ml != metaLen {
		t.Fatalf("metadata of %d bytes, want %d", ml, metaLen)
	}
	b := out[:ml]
	return ret, &flowMeta{magic: binary.LittleEndian.Uint32(b), mark: b[4], dir: b[5],
		hash: binary.LittleEndian.Uint32(b[8:]), flowID: binary.LittleEndian.Uint64(b[16:])}
}

type fakeClock struct{ ns int64 }

func (c *fakeClock) now() int64              { return c.ns }
func (c *fakeClock) advance(d time.Duration) { c.ns += int64(d) }

// newFlow loads a flow table whose firmware runs only when the test calls
// step, on a fake clock starting at the real CLOCK_MONOTONIC (the data
// plane stamps hits with the real one).
func newFlow(t *testing.T, o FlowOptions) (*FlowTable, *fakeClock) {
	t.Helper()
	testutil.RequireRoot(t)
	clk := &fakeClock{ns: monoNow()}
	o.manual, o.now = true, clk.now
	if o.hostIndex == 0 {
		o.hostIndex = testHost
	}
	if o.Inline {
		o.twinIndex = testTwin
	}
	if o.LearnLatency == 0 {
		o.LearnLatency = time.Microsecond
	}
	ft, err := LoadFlow(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ft.Close() })
	return ft, clk
}

func ep(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

func frame(src, dst netip.AddrPort, proto, flags uint8) []byte {
	return pkt.Frame{Src: src.Addr(), Dst: dst.Addr(), Proto: proto, SrcPort: src.Port(), DstPort: dst.Port(),
		TCPFlags: flags, Payload: []byte("flow-test")}.Build()
}

func l3(f []byte) uint64 { return uint64(len(f) - 14) }

// learnNow queues ls and steps the firmware until each has its outcome.
func learnNow(t *testing.T, ft *FlowTable, clk *fakeClock, ls ...tier.Learn) []tier.FlowEvent {
	t.Helper()
	if _, err := ft.Learn(ls); err != nil {
		t.Fatal(err)
	}
	return stepFor(t, ft, clk, len(ls))
}

// stepFor steps the firmware 1 ms at a time until want events are out.
func stepFor(t *testing.T, ft *FlowTable, clk *fakeClock, want int) []tier.FlowEvent {
	t.Helper()
	var evs []tier.FlowEvent
	buf := make([]tier.FlowEvent, 64)
	for i := 0; i < 1000 && len(evs) < want; i++ {
		clk.advance(time.Millisecond)
		ft.step(clk.now())
		n, err := ft.Events(buf)
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, buf[:n]...)
	}
	if len(evs) != want {
		t.Fatalf("%d events %+v, want %d", len(evs), evs, want)
	}
	return evs
}

func verdicts(t *testing.T, ft *FlowTable) map[string]uint64 {
	t.Helper()
	v, err := ft.Verdicts()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for k, c := range v {
		if c.Packets != 0 {
			out[k] = c.Packets
		}
	}
	return out
}

var (
	cli  = ep("10.0.0.1:40000")
	srv  = ep("10.0.0.2:53")
	web  = ep("10.0.0.9:443")
	cli6 = ep("[2001:db8::1]:40000")
	srv6 = ep("[2001:db8::2]:443")
)

// Every mark and verdict of the wire-port program, passive mode.
func TestFlowMarks(t *testing.T) {
	ft, clk := newFlow(t, FlowOptions{Capacity: 8})
	kU, _ := tier.NewFlowKey(pkt.ProtoUDP, cli, srv)
	kT, _ := tier.NewFlowKey(pkt.ProtoTCP, cli, web)
	k6, _ := tier.NewFlowKey(pkt.ProtoTCP, cli6, srv6)
	for _, ev := range learnNow(t, ft, clk,
		tier.Learn{ID: 7, Key: kU, Action: tier.FlowForward},
		tier.Learn{ID: 8, Key: kT, Action: tier.FlowDiscard},
		tier.Learn{ID: 9, Key: k6, Action: tier.FlowForward}) {
		if ev.Kind != tier.LearnDone {
			t.Fatalf("learn: %+v", ev)
		}
	}

	frag := func(off uint16, mf bool, ext []uint8, src, dst netip.AddrPort) []byte {
		return pkt.Frame{Src: src.Addr(), Dst: dst.Addr(), Proto: pkt.ProtoUDP, SrcPort: src.Port(), DstPort: dst.Port(),
			FragOffset: off, MoreFragments: mf, Ext: ext, Payload: []byte("fragment")}.Build()
	}
	arp := make([]byte, 60)
	arp[12], arp[13] = 0x08, 0x06
	icmp := pkt.Frame{Src: cli.Addr(), Dst: srv.Addr(), Proto: pkt.ProtoICMP}.Build()

	for _, c := range []struct {
		name    string
		frame   []byte
		ret     uint32
		mark    uint8 // 0: no metadata
		dir     uint8
		id      uint64
		key     tier.FlowKey // hash of it expected, zero: hash 0
		verdict string
	}{
		{"hit forward, dir 0", frame(cli, srv, pkt.ProtoUDP, 0), xdpRedirect, markHit, 0, 7, kU, "hit_host"},
		{"hit forward, dir 1", frame(srv, cli, pkt.ProtoUDP, 0), xdpRedirect, markHit, 1, 7, kU, "hit_host"},
		{"hit forward, IPv6", frame(srv6, cli6, pkt.ProtoTCP, pkt.TCPFlagACK), xdpRedirect, markHit, 1, 9, k6, "hit_host"},
		{"hit discard", frame(web, cli, pkt.ProtoTCP, pkt.TCPFlagACK), xdpDrop, 0, 0, 0, tier.FlowKey{}, "hit_discard"},
		{"miss: other port", frame(ep("10.0.0.1:40001"), srv, pkt.ProtoUDP, 0), xdpRedirect, markMiss, 0, 0,
			mustKey(pkt.ProtoUDP, ep("10.0.0.1:40001"), srv), "miss"},
		{"miss: other protocol", frame(cli, srv, pkt.ProtoTCP, pkt.TCPFlagSYN), xdpRedirect, markMiss, 0, 0,
			mustKey(pkt.ProtoTCP, cli, srv), "miss"},
		{"unhandled: ICMP", icmp, xdpRedirect, markUnhandled, 0, 0, tier.FlowKey{}, "unhandled_proto"},
		{"unhandled: first fragment", frag(0, true, nil, cli, srv), xdpRedirect, markUnhandled, 0, 0, tier.FlowKey{}, "unhandled_frag"},
		{"unhandled: later fragment", frag(8, false, nil, cli, srv), xdpRedirect, markUnhandled, 0, 0, tier.FlowKey{}, "unhandled_frag"},
		{"unhandled: IPv6 fragment", frag(0, true, []uint8{pkt.ExtFragment}, cli6, srv6), xdpRedirect, markUnhandled, 0, 0,
			tier.FlowKey{}, "unhandled_ext"},
		{"unhandled: non-IP", arp, xdpRedirect, markUnhandled, 0, 0, tier.FlowKey{}, "unhandled_parse"},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := verdicts(t, ft)
			ret, m := runMeta(t, ft.Program(), c.frame, nil)
			if ret != c.ret {
				t.Errorf("verdict %d, want %d", ret, c.ret)
			}
			switch {
			case c.mark == 0 && m != nil:
				t.Errorf("metadata %+v on a packet that never reaches the host", m)
			case c.mark != 0 && m == nil:
				t.Errorf("no metadata, want mark %d", c.mark)
			case c.mark != 0:
				var hash uint32
				if c.key.Proto != 0 {
					hash = FlowHash(c.key, ft.Seed())
				}
				want := flowMeta{magic: metaMagic, mark: c.mark, dir: c.dir, hash: hash, flowID: c.id}
				if *m != want {
					t.Errorf("metadata %+v, want %+v", *m, want)
				}
			}
			if got := verdicts(t, ft)[c.verdict] - before[c.verdict]; got != 1 {
				t.Errorf("%s counted %d times, want once", c.verdict, got)
			}
		})
	}

	// The NIC counted the hits per direction, from the IP header on.
	u0, u1 := frame(cli, srv, pkt.ProtoUDP, 0), frame(srv, cli, pkt.ProtoUDP, 0)
	c, err := ft.Read(7)
	if err != nil {
		t.Fatal(err)
	}
	if c.Packets != [2]uint64{1, 1} || c.Bytes != [2]uint64{l3(u0), l3(u1)} {
		t.Errorf("flow 7 counters %+v, want one packet each way", c)
	}
	if c, _ := ft.Read(8); c.Packets != [2]uint64{0, 1} || c.TCPFlags != [2]uint8{0, pkt.TCPFlagACK} {
		t.Errorf("flow 8 counters %+v, want one ACK in direction 1", c)
	}
	if _, err := ft.Read(99); !errors.Is(err, tier.ErrNoRule) {
		t.Errorf("read of an unknown flow: %v, want ErrNoRule", err)
	}

	// Both directions hash alike, in C and in Go.
	k, d := tier.NewFlowKey(pkt.ProtoUDP, srv, cli)
	if k != kU || d != 1 || FlowHash(k, 1) == FlowHash(k, 2) {
		t.Errorf("key %v dir %d, or the seed does not change the hash", k, d)
	}
}

func mustKey(proto uint8, src, dst netip.AddrPort) tier.FlowKey {
	k, _ := tier.NewFlowKey(proto, src, dst)
	return k
}

// A full table marks misses UNHANDLED: the NIC has no room to learn them.
func TestFlowTableFull(t *testing.T) {
	ft, clk := newFlow(t, FlowOptions{Capacity: 2})
	k1, k2, k3 := mustKey(pkt.ProtoUDP, cli, srv), mustKey(pkt.ProtoTCP, cli, web), mustKey(pkt.ProtoUDP, cli, web)
	evs := learnNow(t, ft, clk,
		tier.Learn{ID: 1, Key: k1, Action: tier.FlowForward},
		tier.Learn{ID: 1, Key: k3, Action: tier.FlowForward}, // duplicate id
		tier.Learn{ID: 2, Key: k1, Action: tier.FlowForward}, // duplicate key
		tier.Learn{ID: 3, Key: k2, Action: tier.FlowForward},
		tier.Learn{ID: 4, Key: k3, Action: tier.FlowForward}) // no room
	byID := map[uint64][]tier.FlowEvent{}
	for _, ev := range evs {
		byID[ev.ID] = append(byID[ev.ID], ev)
	}
	check := func(id uint64, i int, kind tier.FlowEventKind, err error) {
		t.Helper()
		if len(byID[id]) <= i {
			t.Fatalf("flow %d: events %+v", id, byID[id])
		}
		ev := byID[id][i]
		if ev.Kind != kind || (err != nil && !errors.Is(ev.Err, err)) || (err == nil && ev.Err != nil) {
			t.Errorf("flow %d: %v %v, want %v %v", id, ev.Kind, ev.Err, kind, err)
		}
	}
	check(1, 0, tier.LearnIgnored, flowtab.ErrDuplicateID) // ignored before the batch went in
	check(1, 1, tier.LearnDone, nil)
	check(2, 0, tier.LearnIgnored, flowtab.ErrDuplicateKey)
	check(3, 0, tier.LearnDone, nil)
	check(4, 0, tier.LearnFailed, tier.ErrTableFull)
	if ft.Occupancy() != 2 {
		t.Errorf("occupancy %d, want 2", ft.Occupancy())
	}
	ret, m := runMeta(t, ft.Program(), frame(web, cli, pkt.ProtoUDP, 0), nil)
	if ret != xdpRedirect || m == nil || m.mark != markUnhandled || m.hash != 0 {
		t.Errorf("miss in a full table: %d %+v, want UNHANDLED", ret, m)
	}
	if v := verdicts(t, ft); v["unhandled_full"] != 1 {
		t.Errorf("verdicts %v, want one unhandled_full", v)
	}
	// Unlearning one makes room: misses are MISS again.
	if _, err := ft.Unlearn([]uint64{3, 42}); err != nil {
		t.Fatal(err)
	}
	byID = map[uint64][]tier.FlowEvent{}
	for _, ev := range stepFor(t, ft, clk, 2) {
		byID[ev.ID] = append(byID[ev.ID], ev)
	}
	check(3, 0, tier.Unlearned, nil)
	check(42, 0, tier.LearnIgnored, flowtab.ErrUnknownID)
	if _, m := runMeta(t, ft.Program(), frame(web, cli, pkt.ProtoUDP, 0), nil); m == nil || m.mark != markMiss {
		t.Errorf("miss after an unlearn: %+v, want MISS", m)
	}
}

// Inline: a learned flow leaves by the twin with no metadata; the host
// port's returns go out of the twin too, stripped of the host's metadata.
func TestFlowInline(t *testing.T) {
	ft, clk := newFlow(t, FlowOptions{Capacity: 4, Inline: true})
	k := mustKey(pkt.ProtoUDP, cli, srv)
	learnNow(t, ft, clk, tier.Learn{ID: 1, Key: k, Action: tier.FlowForward},
		tier.Learn{ID: 2, Key: mustKey(pkt.ProtoTCP, cli, web), Action: tier.FlowDiscard})
	if ret, m := runMeta(t, ft.Program(), frame(cli, srv, pkt.ProtoUDP, 0), nil); ret != xdpRedirect || m != nil {
		t.Errorf("inline hit: %d %+v, want a redirect without metadata", ret, m)
	}
	if ret, _ := runMeta(t, ft.Program(), frame(cli, web, pkt.ProtoTCP, pkt.TCPFlagACK), nil); ret != xdpDrop {
		t.Errorf("inline discard: %d", ret)
	}
	if ret, m := runMeta(t, ft.Program(), frame(web, srv, pkt.ProtoUDP, 0), nil); ret != xdpRedirect || m == nil || m.mark != markMiss {
		t.Errorf("inline miss: %d %+v, want to the host marked MISS", ret, m)
	}
	hostMeta := make([]byte, metaLen)
	if ret, m := runMeta(t, ft.ReturnProgram(), frame(web, srv, pkt.ProtoUDP, 0), hostMeta); ret != xdpRedirect || m != nil {
		t.Errorf("return path: %d %+v, want a redirect without metadata", ret, m)
	}
	want := map[string]uint64{"hit_twin": 1, "hit_discard": 1, "miss": 1, "return": 1}
	if v := verdicts(t, ft); !equalCounts(v, want) {
		t.Errorf("verdicts %v, want %v", v, want)
	}
}

func equalCounts(a, b map[string]uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// Every cause of an unlearn, each with exact final counters.
func TestFlowUnlearn(t *testing.T) {
	tcpCli, tcpSrv := ep("192.0.2.10:50000"), ep("192.0.2.20:80")
	kT := mustKey(pkt.ProtoTCP, tcpCli, tcpSrv)
	kU := mustKey(pkt.ProtoUDP, cli, srv)
	type pkts struct {
		from, to netip.AddrPort
		flags    uint8
	}
	for _, c := range []struct {
		name    string
		o       FlowOptions
		learn   tier.Learn
		send    []pkts
		act     func(ft *FlowTable, clk *fakeClock)
		cause   tier.Cause
		packets [2]uint64
		flags   [2]uint8
	}{
		{name: "app", learn: tier.Learn{ID: 1, Key: kU, Action: tier.FlowForward},
			send: []pkts{{cli, srv, 0}, {cli, srv, 0}, {srv, cli, 0}},
			act: func(ft *FlowTable, clk *fakeClock) {
				if _, err := ft.Unlearn([]uint64{1}); err != nil {
					t.Fatal(err)
				}
			},
			cause: tier.CauseApp, packets: [2]uint64{2, 1}},
		{name: "idle", o: FlowOptions{IdleTimeout: time.Second}, learn: tier.Learn{ID: 2, Key: kU, Action: tier.FlowDiscard},
			send: []pkts{{srv, cli, 0}},
			// Hits carry the real clock's time: catch up with it first.
			act:   func(ft *FlowTable, clk *fakeClock) { clk.ns = monoNow() + int64(2*time.Second) },
			cause: tier.CauseIdle, packets: [2]uint64{0, 1}},
		{name: "lifetime", o: FlowOptions{IdleTimeout: time.Hour},
			learn: tier.Learn{ID: 3, Key: kU, Action: tier.FlowForward, Options: tier.LearnOptions{Lifetime: 5 * time.Second}},
			send:  []pkts{{cli, srv, 0}},
			act:   func(ft *FlowTable, clk *fakeClock) { clk.advance(6 * time.Second) },
			cause: tier.CauseLifetime, packets: [2]uint64{1, 0}},
		{name: "tcp rst", learn: tier.Learn{ID: 4, Key: kT, Action: tier.FlowForward, Options: tier.LearnOptions{TCPAutoUnlearn: true}},
			send:  []pkts{{tcpCli, tcpSrv, pkt.TCPFlagACK}, {tcpSrv, tcpCli, pkt.TCPFlagACK}, {tcpSrv, tcpCli, 0x04}},
			cause: tier.CauseTCPTerm, packets: [2]uint64{1, 2}, flags: [2]uint8{0x10, 0x14}},
		{name: "tcp fin both sides", learn: tier.Learn{ID: 5, Key: kT, Action: tier.FlowForward, Options: tier.LearnOptions{TCPAutoUnlearn: true}},
			send: []pkts{{tcpCli, tcpSrv, 0x11}, {tcpSrv, tcpCli, pkt.TCPFlagACK}, {tcpCli, tcpSrv, pkt.TCPFlagACK},
				{tcpSrv, tcpCli, 0x11}},
			cause: tier.CauseTCPTerm, packets: [2]uint64{2, 2}, flags: [2]uint8{0x11, 0x11}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ft, clk := newFlow(t, c.o)
			if ev := learnNow(t, ft, clk, c.learn); ev[0].Kind != tier.LearnDone {
				t.Fatalf("learn: %+v", ev)
			}
			var bytes [2]uint64
			for _, p := range c.send {
				f := frame(p.from, p.to, c.learn.Key.Proto, p.flags)
				_, d := tier.NewFlowKey(c.learn.Key.Proto, p.from, p.to)
				bytes[d] += l3(f)
				runMeta(t, ft.Program(), f, nil)
			}
			if c.act != nil {
				c.act(ft, clk)
			}
			evs := stepFor(t, ft, clk, 1)
			ev := evs[0]
			if ev.Kind != tier.Unlearned || ev.ID != c.learn.ID || ev.Cause != c.cause || ev.Key != c.learn.Key {
				t.Fatalf("event %+v, want unlearned %d by %v", ev, c.learn.ID, c.cause)
			}
			if ev.Counters.Packets != c.packets || ev.Counters.Bytes != bytes || ev.Counters.TCPFlags != c.flags {
				t.Errorf("final counters %+v, want packets %v bytes %v flags %v", ev.Counters, c.packets, bytes, c.flags)
			}
			if ft.Occupancy() != 0 {
				t.Errorf("occupancy %d after the unlearn", ft.Occupancy())
			}
			if _, err := ft.Read(c.learn.ID); !errors.Is(err, tier.ErrNoRule) {
				t.Errorf("read after unlearn: %v", err)
			}
			p := c.send[0]
			if _, m := runMeta(t, ft.Program(), frame(p.from, p.to, c.learn.Key.Proto, 0), nil); m == nil || m.mark != markMiss {
				t.Errorf("packet after the unlearn: %+v, want MISS", m)
			}
		})
	}
}

// TCP end without the auto-unlearn option: counted, nothing unlearned.
func TestFlowNoAutoUnlearn(t *testing.T) {
	ft, clk := newFlow(t, FlowOptions{})
	k := mustKey(pkt.ProtoTCP, cli, web)
	learnNow(t, ft, clk, tier.Learn{ID: 1, Key: k, Action: tier.FlowForward})
	runMeta(t, ft.Program(), frame(cli, web, pkt.ProtoTCP, 0x04), nil)
	clk.advance(time.Second)
	ft.step(clk.now())
	if n, _ := ft.Events(make([]tier.FlowEvent, 4)); n != 0 || ft.Occupancy() != 1 {
		t.Errorf("%d events, occupancy %d: a flow without the option was unlearned", n, ft.Occupancy())
	}
}

// An entry being unlearned is a miss: its packets go to the host and
// only the host counts them; the final counters exclude them.
func TestFlowUnlearningIsMiss(t *testing.T) {
	ft, clk := newFlow(t, FlowOptions{})
	k := mustKey(pkt.ProtoUDP, cli, srv)
	learnNow(t, ft, clk, tier.Learn{ID: 1, Key: k, Action: tier.FlowDiscard})
	f := frame(cli, srv, pkt.ProtoUDP, 0)
	if ret, _ := runMeta(t, ft.Program(), f, nil); ret != xdpDrop {
		t.Fatalf("hit discard: %d", ret)
	}
	// The firmware's first half of an unlearn, alone.
	st, err := ft.objs.TwNicflowUnlearning.Run(&ebpf.RunOptions{Context: nicflowTwNicflowRef{Key: bpfKey(k), FlowId: 1}})
	if err != nil || st != uint32(nicflowTwNicflowStateTW_NFS_ACTIVE) {
		t.Fatalf("marking unlearning: state %d, %v", st, err)
	}
	for range 3 {
		ret, m := runMeta(t, ft.Program(), f, nil)
		if ret != xdpRedirect || m == nil || m.mark != markMiss || m.flowID != 0 {
			t.Fatalf("packet of an unlearning flow: %d %+v, want a MISS to the host", ret, m)
		}
	}
	if v := verdicts(t, ft); v["unlearning"] != 3 || v["miss"] != 3 || v["hit_discard"] != 1 {
		t.Errorf("verdicts %v", v)
	}
	if _, err := ft.Unlearn([]uint64{1}); err != nil {
		t.Fatal(err)
	}
	ev := stepFor(t, ft, clk, 1)[0]
	if ev.Kind != tier.Unlearned || ev.Counters.Packets != [2]uint64{1, 0} || ev.Counters.Bytes != [2]uint64{l3(f), 0} {
		t.Errorf("final %+v, want the one hit only", ev)
	}
}

// The firmware completes no more than LearnRate requests a second plus
// its burst, and none before LearnLatency: counted on the fake clock.
func TestFlowLearnRate(t *testing.T) {
	const rate, n = 1000, 1500
	ft, clk := newFlow(t, FlowOptions{Capacity: 2048, LearnRate: rate, LearnLatency: 5 * time.Millisecond})
	ls := make([]tier.Learn, n)
	for i := range ls {
		ls[i] = tier.Learn{ID: uint64(i + 1), Action: tier.FlowForward,
			Key: mustKey(pkt.ProtoUDP, netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}), 1000), srv)}
	}
	if q, err := ft.Learn(ls); err != nil || q != n {
		t.Fatalf("queued %d: %v", q, err)
	}
	done := 0
	buf := make([]tier.FlowEvent, 256)
	drain := func() {
		for {
			k, _ := ft.Events(buf)
			if k == 0 {
				return
			}
			for _, ev := range buf[:k] {
				if ev.Kind != tier.LearnDone {
					t.Fatalf("%+v", ev)
				}
			}
			done += k
		}
	}
	clk.advance(4 * time.Millisecond)
	ft.step(clk.now())
	drain()
	if done != 0 {
		t.Fatalf("%d learned before the latency", done)
	}
	clk.advance(time.Millisecond)
	ft.step(clk.now())
	drain()
	burst := rate / 100
	if done != burst {
		t.Fatalf("%d learned at the latency, want the burst of %d", done, burst)
	}
	for range 1000 { // one second more, 1 ms steps
		clk.advance(time.Millisecond)
		ft.step(clk.now())
	}
	drain()
	if want := burst + rate; done != want {
		t.Errorf("%d learned in 1 s at %d/s, want %d", done, rate, want)
	}
	if ft.Occupancy() != done {
		t.Errorf("occupancy %d, want %d", ft.Occupancy(), done)
	}
	// A full queue takes what fits and says how much.
	small, _ := newFlow(t, FlowOptions{QueueLen: 2})
	if q, err := small.Learn(ls[:3]); q != 2 || !errors.Is(err, tier.ErrQueueFull) {
		t.Errorf("queued %d: %v, want 2 and ErrQueueFull", q, err)
	}
}

// A full event queue stalls the firmware instead of dropping events.
func TestFlowEventBackpressure(t *testing.T) {
	ft, clk := newFlow(t, FlowOptions{EventQueueLen: 2})
	ls := []tier.Learn{
		{ID: 1, Key: mustKey(pkt.ProtoUDP, cli, srv), Action: tier.FlowForward},
		{ID: 2, Key: mustKey(pkt.ProtoUDP, cli, web), Action: tier.FlowForward},
		{ID: 3, Key: mustKey(pkt.ProtoTCP, cli, web), Action: tier.FlowForward},
	}
	if _, err := ft.Learn(ls); err != nil {
		t.Fatal(err)
	}
	clk.advance(time.Millisecond)
	ft.step(clk.now())
	clk.advance(time.Millisecond)
	ft.step(clk.now())
	if ft.Occupancy() != 2 || ft.Stats().Stalls == 0 {
		t.Fatalf("occupancy %d, stalls %d: want 2 and a stall", ft.Occupancy(), ft.Stats().Stalls)
	}
	buf := make([]tier.FlowEvent, 8)
	if n, _ := ft.Events(buf); n != 2 {
		t.Fatalf("%d events", n)
	}
	stepFor(t, ft, clk, 1)
	if ft.Occupancy() != 3 {
		t.Errorf("occupancy %d after draining, want 3", ft.Occupancy())
	}
}

// Close unlearns everything with final counters and fails queued learns.
func TestFlowClose(t *testing.T) {
	ft, clk := newFlow(t, FlowOptions{})
	k := mustKey(pkt.ProtoUDP, cli, srv)
	learnNow(t, ft, clk, tier.Learn{ID: 1, Key: k, Action: tier.FlowForward})
	runMeta(t, ft.Program(), frame(srv, cli, pkt.ProtoUDP, 0), nil)
	if _, err := ft.Learn([]tier.Learn{{ID: 2, Key: mustKey(pkt.ProtoUDP, cli, web), Action: tier.FlowForward}}); err != nil {
		t.Fatal(err)
	}
	if err := ft.Close(); err != nil {
		t.Fatal(err)
	}
	buf := make([]tier.FlowEvent, 8)
	n, err := ft.Events(buf)
	if err != nil || n != 2 {
		t.Fatalf("%d events, %v", n, err)
	}
	byID := map[uint64]tier.FlowEvent{buf[0].ID: buf[0], buf[1].ID: buf[1]}
	if e := byID[1]; e.Kind != tier.Unlearned || e.Cause != tier.CauseFlush || e.Counters.Packets != [2]uint64{0, 1} {
		t.Errorf("flow 1 at close: %+v", e)
	}
	if e := byID[2]; e.Kind != tier.LearnFailed || !errors.Is(e.Err, tier.ErrClosed) {
		t.Errorf("queued learn at close: %+v", e)
	}
	if _, err := ft.Events(buf); !errors.Is(err, tier.ErrClosed) {
		t.Errorf("events after the last: %v, want ErrClosed", err)
	}
	if _, err := ft.Learn(nil); !errors.Is(err, tier.ErrClosed) {
		t.Errorf("learn after close: %v", err)
	}
}

// The firmware goroutine on the real clock: a learn completes on its own.
func TestFlowFirmwareGoroutine(t *testing.T) {
	testutil.RequireRoot(t)
	ft, err := LoadFlow(FlowOptions{Capacity: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer ft.Close()
	if _, err := ft.Learn([]tier.Learn{{ID: 1, Key: mustKey(pkt.ProtoUDP, cli, srv), Action: tier.FlowForward}}); err != nil {
		t.Fatal(err)
	}
	buf := make([]tier.FlowEvent, 1)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if n, _ := ft.Events(buf); n == 1 {
			if buf[0].Kind != tier.LearnDone {
				t.Fatalf("%+v", buf[0])
			}
			return
		}
	}
	t.Fatal("no learn outcome within 5s")
}

// A termination whose ring record is lost (ring full) is found by the
// ageing sweep: the entry itself says TERMINATING.
func TestFlowTermSweepBackstop(t *testing.T) {
	ft, clk := newFlow(t, FlowOptions{})
	k := mustKey(pkt.ProtoTCP, cli, web)
	learnNow(t, ft, clk, tier.Learn{ID: 1, Key: k, Action: tier.FlowForward, Options: tier.LearnOptions{TCPAutoUnlearn: true}})
	runMeta(t, ft.Program(), frame(web, cli, pkt.ProtoTCP, 0x04), nil)
	if got := ft.drainRing(nil, 8); len(got) != 1 || got[0].id != 1 {
		t.Fatalf("ring held %+v, want flow 1's record", got) // and now it is gone
	}
	ev := stepFor(t, ft, clk, 1)[0]
	if ev.Kind != tier.Unlearned || ev.Cause != tier.CauseTCPTerm || ev.Counters.Packets != [2]uint64{0, 1} {
		t.Errorf("%+v, want flow 1 unlearned by tcp-term with one packet", ev)
	}
}
