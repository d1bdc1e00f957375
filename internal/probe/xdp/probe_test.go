// SPDX-License-Identifier: Apache-2.0

package xdp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/tierwall/tierwall/internal/pkt"
	"github.com/tierwall/tierwall/internal/probe/flow"
	"github.com/tierwall/tierwall/internal/testutil"
	"github.com/tierwall/tierwall/internal/tier"
)

// XDP actions (enum xdp_action).
const (
	xdpDrop     = 1
	xdpPass     = 2
	xdpRedirect = 4
)

// xdpMD is struct xdp_md, the test-run context: Data past zero puts that
// many bytes of metadata in front of the packet.
type xdpMD struct {
	Data, DataEnd, DataMeta, IngressIfindex, RxQueueIndex, EgressIfindex uint32
}

// noMeta is a packet that reaches the host without metadata.
const noMeta = flow.Mark(255)

// packet is one frame shown to the program, with the NIC's metadata unless
// mark is noMeta.
type packet struct {
	frame []byte
	mark  flow.Mark
	hash  uint32 // the NIC's flow hash in the metadata
	magic uint32 // 0: TW_META_MAGIC
	want  uint32 // XDP action
}

func metaBytes(t testing.TB, mark flow.Mark, hash, magic uint32) []byte {
	t.Helper()
	if magic == 0 {
		magic = metaMagic
	}
	var b bytes.Buffer
	m := probeTwFlowMeta{Magic: magic, Mark: uint8(mark), Hash: hash}
	if err := binary.Write(&b, binary.LittleEndian, &m); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// metaMagic is TW_META_MAGIC ("twmk"); a #define, so bpf2go cannot
// export it, and the tests prove this value is the one the program checks.
const metaMagic = 0x74776d6b

func runPacket(t testing.TB, p *Tier, pk packet) uint32 {
	t.Helper()
	opts := &ebpf.RunOptions{Data: pk.frame}
	if pk.mark != noMeta {
		data := metaBytes(t, pk.mark, pk.hash, pk.magic)
		metaLen := len(data)
		data = append(data, pk.frame...)
		opts.Data = data
		opts.Context = &xdpMD{Data: uint32(metaLen), DataEnd: uint32(len(data))}
	}
	ret, err := p.Program().Run(opts)
	if err != nil {
		t.Fatalf("running probe: %v", err)
	}
	return ret
}

func loadTestProbe(t testing.TB, c Config) *Tier {
	t.Helper()
	testutil.RequireRoot(t)
	if c.RingBytes == 0 {
		c.RingBytes = 1 << 16
	}
	if c.Capacity == 0 {
		c.Capacity = 1024
	}
	p, err := Load(c)
	if err != nil {
		t.Fatalf("loading probe: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

var (
	cli4 = netip.MustParseAddrPort("192.0.2.10:40000")
	srv4 = netip.MustParseAddrPort("198.51.100.1:443")
	cli6 = netip.MustParseAddrPort("[2001:db8::10]:40000")
	srv6 = netip.MustParseAddrPort("[2001:db8::1]:443")
)

func frame(proto uint8, src, dst netip.AddrPort, flags uint8, payload string) []byte {
	f := pkt.Frame{Src: src.Addr(), Dst: dst.Addr(), Proto: proto, SrcPort: src.Port(), DstPort: dst.Port(),
		TCPFlags: flags, Payload: []byte(payload)}
	return f.Build()
}

func tcp(src, dst netip.AddrPort, flags uint8, payload string) []byte {
	return frame(pkt.ProtoTCP, src, dst, flags, payload)
}

const (
	syn    = pkt.TCPFlagSYN
	ack    = pkt.TCPFlagACK
	synAck = syn | ack
	psh    = 0x08
)

// l3 is the bytes the probe counts for a frame: from the IP header on.
func l3(b []byte) uint64 { return uint64(len(b) - 14) }

type wantFlow struct {
	key     tier.FlowKey
	packets [2]uint64
	bytes   [2]uint64
	flags   [2]uint8
	marks   [flow.NumMarks]uint64
	initDir uint8
	state   flow.State
	hash    uint32 // 0: not checked
}

type scenario struct {
	name     string
	cfg      Config
	egress   int                         // inline: the egress ifindex
	before   func(t *testing.T, p *Tier) // runs after the first packet
	packets  []packet
	flows    []wantFlow         // every entry the table must hold
	counters map[Verdict]uint64 // packets; all others must be 0
	check    func(t *testing.T, p *Tier)
}

func key(proto uint8, src, dst netip.AddrPort) tier.FlowKey {
	k, _ := tier.NewFlowKey(proto, src, dst)
	return k
}

func scenarios() []scenario {
	handshake := []packet{
		{frame: tcp(cli4, srv4, syn, ""), mark: noMeta, want: xdpDrop},
		{frame: tcp(srv4, cli4, synAck, ""), mark: noMeta, want: xdpDrop},
		{frame: tcp(cli4, srv4, ack, ""), mark: noMeta, want: xdpDrop},
		{frame: tcp(cli4, srv4, ack|psh, "GET / HTTP/1.1\r\n"), mark: noMeta, want: xdpDrop},
	}
	k4 := key(pkt.ProtoTCP, cli4, srv4)
	// cli4 (192.0.2.10) sorts below srv4 (198.51.100.1): the client is lo.
	hsBytes := [2]uint64{l3(handshake[0].frame) + l3(handshake[2].frame) + l3(handshake[3].frame), l3(handshake[1].frame)}

	icmpReq := frame(pkt.ProtoICMP, netip.AddrPortFrom(cli4.Addr(), 0), netip.AddrPortFrom(srv4.Addr(), 0), 0, "ping")
	icmpRep := frame(pkt.ProtoICMP, netip.AddrPortFrom(srv4.Addr(), 0), netip.AddrPortFrom(cli4.Addr(), 0), 0, "ping")
	icmpKey := tier.FlowKey{Proto: pkt.ProtoICMP, Lo: netip.AddrPortFrom(cli4.Addr(), 0), Hi: netip.AddrPortFrom(srv4.Addr(), 0)}

	fragFirst := pkt.Frame{Src: cli4.Addr(), Dst: srv4.Addr(), Proto: pkt.ProtoUDP, SrcPort: 5000, DstPort: 53,
		MoreFragments: true, Payload: []byte("first part")}
	fragNext := fragFirst
	fragNext.MoreFragments, fragNext.FragOffset = false, 3
	frag6 := pkt.Frame{Src: cli6.Addr(), Dst: srv6.Addr(), Proto: pkt.ProtoUDP, Ext: []uint8{pkt.ExtFragment}, FragOffset: 3,
		Payload: []byte("later part")}
	arp := pkt.Frame{EtherType: pkt.EtherARP, Payload: make([]byte, 28)}
	runt := tcp(cli4, srv4, syn, "")[:14+10]

	k6 := key(pkt.ProtoTCP, cli6, srv6)
	// srv6 (2001:db8::1) sorts below cli6 (2001:db8::10): the server is lo.
	syn6, synAck6 := tcp(cli6, srv6, syn, ""), tcp(srv6, cli6, synAck, "")

	udpA := frame(pkt.ProtoUDP, cli4, netip.MustParseAddrPort("198.51.100.2:53"), 0, "query a")
	udpB := frame(pkt.ProtoUDP, cli4, netip.MustParseAddrPort("198.51.100.3:53"), 0, "query b")
	udpC := frame(pkt.ProtoUDP, cli4, netip.MustParseAddrPort("198.51.100.4:53"), 0, "query c")
	kA := key(pkt.ProtoUDP, cli4, netip.MustParseAddrPort("198.51.100.2:53"))
	kB := key(pkt.ProtoUDP, cli4, netip.MustParseAddrPort("198.51.100.3:53"))

	return []scenario{
		{
			name:    "tcp-both-directions-one-entry",
			packets: handshake,
			flows: []wantFlow{{key: k4, packets: [2]uint64{3, 1}, bytes: hsBytes, flags: [2]uint8{syn | ack | psh, synAck},
				marks: [4]uint64{4, 0, 0, 0}, initDir: 0, state: flow.StateDPI}},
			counters: map[Verdict]uint64{VerdictMarkNone: 4, VerdictTracked: 4, VerdictConsumed: 4, VerdictFlowNew: 1, VerdictDPISent: 4},
		},
		{
			name: "tcp-first-packet-from-hi",
			packets: []packet{
				{frame: tcp(srv4, cli4, synAck, ""), mark: noMeta, want: xdpDrop},
				{frame: tcp(cli4, srv4, ack, ""), mark: noMeta, want: xdpDrop},
			},
			flows: []wantFlow{{key: k4, packets: [2]uint64{1, 1}, bytes: [2]uint64{l3(tcp(cli4, srv4, ack, "")), l3(tcp(srv4, cli4, synAck, ""))},
				flags: [2]uint8{ack, synAck}, marks: [4]uint64{2, 0, 0, 0}, initDir: 1, state: flow.StateDPI}},
			counters: map[Verdict]uint64{VerdictMarkNone: 2, VerdictTracked: 2, VerdictConsumed: 2, VerdictFlowNew: 1, VerdictDPISent: 2},
		},
		{
			name: "marks-from-metadata",
			packets: []packet{
				{frame: handshake[0].frame, mark: flow.MarkMiss, hash: 0xabcd1234, want: xdpDrop},
				{frame: handshake[1].frame, mark: flow.MarkUnhandled, want: xdpDrop},
				{frame: handshake[2].frame, mark: flow.MarkNone, want: xdpDrop},
				{frame: handshake[2].frame, mark: flow.MarkHit, magic: 0x12345678, want: xdpDrop}, // not ours: none
				{frame: handshake[3].frame, mark: noMeta, want: xdpDrop},
				// Passive, a hit was counted by the NIC: never in the entry.
				{frame: handshake[3].frame, mark: flow.MarkHit, want: xdpDrop},
			},
			flows: []wantFlow{{key: k4, packets: [2]uint64{4, 1},
				bytes: [2]uint64{l3(handshake[0].frame) + 2*l3(handshake[2].frame) + l3(handshake[3].frame), l3(handshake[1].frame)},
				flags: [2]uint8{syn | ack | psh, synAck}, marks: [4]uint64{3, 0, 1, 1}, state: flow.StateDPI, hash: 0xabcd1234}},
			counters: map[Verdict]uint64{VerdictMarkNone: 3, VerdictMarkMiss: 1, VerdictMarkUnhandled: 1, VerdictMarkHit: 1,
				VerdictTracked: 5, VerdictNICCounted: 1, VerdictConsumed: 6, VerdictFlowNew: 1, VerdictDPISent: 5},
		},
		{
			name: "passive-hit-creates-nothing",
			packets: []packet{
				{frame: handshake[3].frame, mark: flow.MarkHit, hash: 7, want: xdpDrop},
				{frame: handshake[3].frame, mark: flow.MarkHit, hash: 7, want: xdpDrop},
			},
			counters: map[Verdict]uint64{VerdictMarkHit: 2, VerdictNICCounted: 2, VerdictConsumed: 2},
		},
		{
			name:   "inline-hit-counted-in-software",
			cfg:    Config{Inline: true},
			egress: 1,
			packets: []packet{
				{frame: handshake[3].frame, mark: flow.MarkHit, hash: 7, want: xdpRedirect},
			},
			flows: []wantFlow{{key: k4, packets: [2]uint64{1, 0}, bytes: [2]uint64{l3(handshake[3].frame), 0},
				flags: [2]uint8{ack | psh, 0}, marks: [4]uint64{0, 1, 0, 0}, state: flow.StateDPI, hash: 7}},
			counters: map[Verdict]uint64{VerdictMarkHit: 1, VerdictTracked: 1, VerdictForward: 1, VerdictFlowNew: 1, VerdictDPISent: 1},
		},
		{
			name:   "inline-forward-then-discard",
			cfg:    Config{Inline: true},
			egress: 1,
			packets: []packet{
				{frame: handshake[0].frame, mark: flow.MarkMiss, want: xdpRedirect},
				{frame: handshake[1].frame, mark: flow.MarkMiss, want: xdpDrop},
				{frame: handshake[2].frame, mark: flow.MarkMiss, want: xdpDrop},
				{frame: arp.Build(), mark: noMeta, want: xdpRedirect}, // untracked still forwarded
			},
			before: func(t *testing.T, p *Tier) {
				if err := p.SetState(k4, flow.StateSoftware, flow.Discard); err != nil {
					t.Fatal(err)
				}
			},
			flows: []wantFlow{{key: k4, packets: [2]uint64{2, 1}, bytes: [2]uint64{l3(handshake[0].frame) + l3(handshake[2].frame), l3(handshake[1].frame)},
				flags: [2]uint8{syn | ack, synAck}, marks: [4]uint64{0, 0, 3, 0}, state: flow.StateSoftware}},
			counters: map[Verdict]uint64{VerdictMarkMiss: 3, VerdictMarkNone: 1, VerdictTracked: 3, VerdictNonIP: 1,
				VerdictForward: 2, VerdictDiscard: 2, VerdictFlowNew: 1, VerdictDPISent: 1},
		},
		{
			name: "inline-without-egress",
			cfg:  Config{Inline: true},
			packets: []packet{
				{frame: handshake[0].frame, mark: noMeta, want: xdpDrop},
			},
			flows: []wantFlow{{key: k4, packets: [2]uint64{1, 0}, bytes: [2]uint64{l3(handshake[0].frame), 0},
				flags: [2]uint8{syn, 0}, marks: [4]uint64{1, 0, 0, 0}, state: flow.StateDPI}},
			counters: map[Verdict]uint64{VerdictMarkNone: 1, VerdictTracked: 1, VerdictTxError: 1, VerdictFlowNew: 1, VerdictDPISent: 1},
		},
		{
			name: "icmp-flow-with-zero-ports",
			packets: []packet{
				{frame: icmpReq, mark: noMeta, want: xdpDrop},
				{frame: icmpRep, mark: noMeta, want: xdpDrop},
			},
			flows: []wantFlow{{key: icmpKey, packets: [2]uint64{1, 1}, bytes: [2]uint64{l3(icmpReq), l3(icmpRep)},
				marks: [4]uint64{2, 0, 0, 0}, state: flow.StateDPI}},
			counters: map[Verdict]uint64{VerdictMarkNone: 2, VerdictTracked: 2, VerdictConsumed: 2, VerdictFlowNew: 1, VerdictDPISent: 2},
		},
		{
			name: "fragments-and-unparsed-untracked",
			packets: []packet{
				{frame: fragFirst.Build(), mark: noMeta, want: xdpDrop}, // first fragment: has ports, tracked
				{frame: fragNext.Build(), mark: noMeta, want: xdpDrop},
				{frame: frag6.Build(), mark: flow.MarkUnhandled, want: xdpDrop},
				{frame: arp.Build(), mark: noMeta, want: xdpDrop},
				{frame: runt, mark: noMeta, want: xdpDrop},
			},
			flows: []wantFlow{{key: key(pkt.ProtoUDP, netip.AddrPortFrom(cli4.Addr(), 5000), netip.AddrPortFrom(srv4.Addr(), 53)),
				packets: [2]uint64{1, 0}, bytes: [2]uint64{l3(fragFirst.Build()), 0}, marks: [4]uint64{1, 0, 0, 0}, state: flow.StateDPI}},
			counters: map[Verdict]uint64{VerdictMarkNone: 4, VerdictMarkUnhandled: 1, VerdictTracked: 1, VerdictFragment: 2,
				VerdictNonIP: 1, VerdictMalformed: 1, VerdictConsumed: 5, VerdictFlowNew: 1, VerdictDPISent: 1},
		},
		{
			name: "ipv6-flow",
			packets: []packet{
				{frame: syn6, mark: flow.MarkMiss, want: xdpDrop},
				{frame: synAck6, mark: flow.MarkMiss, want: xdpDrop},
			},
			flows: []wantFlow{{key: k6, packets: [2]uint64{1, 1}, bytes: [2]uint64{l3(synAck6), l3(syn6)},
				flags: [2]uint8{synAck, syn}, marks: [4]uint64{0, 0, 2, 0}, initDir: 1, state: flow.StateDPI}},
			counters: map[Verdict]uint64{VerdictMarkMiss: 2, VerdictTracked: 2, VerdictConsumed: 2, VerdictFlowNew: 1, VerdictDPISent: 2},
		},
		{
			name: "table-full-refuses-never-evicts",
			cfg:  Config{Capacity: 2},
			packets: []packet{
				{frame: udpA, mark: noMeta, want: xdpDrop},
				{frame: udpB, mark: noMeta, want: xdpDrop},
				{frame: udpC, mark: noMeta, want: xdpDrop},
				{frame: udpC, mark: noMeta, want: xdpDrop},
				{frame: udpA, mark: noMeta, want: xdpDrop},
			},
			flows: []wantFlow{
				{key: kA, packets: [2]uint64{2, 0}, bytes: [2]uint64{2 * l3(udpA), 0}, marks: [4]uint64{2, 0, 0, 0}, state: flow.StateDPI},
				{key: kB, packets: [2]uint64{1, 0}, bytes: [2]uint64{l3(udpB), 0}, marks: [4]uint64{1, 0, 0, 0}, state: flow.StateDPI},
			},
			counters: map[Verdict]uint64{VerdictMarkNone: 5, VerdictTracked: 3, VerdictTableFull: 2, VerdictConsumed: 5,
				VerdictFlowNew: 2, VerdictRefused: 2, VerdictDPISent: 3},
			check: func(t *testing.T, p *Tier) {
				s, err := p.Stats()
				if err != nil {
					t.Fatal(err)
				}
				want := flow.TierStats{Packets: [4]uint64{5, 0, 0, 0}, Refused: 2, Untracked: 2, Flows: 2, Capacity: 2}
				if s != want {
					t.Errorf("stats %+v, want %+v", s, want)
				}
			},
		},
	}
}

func TestScenarios(t *testing.T) {
	testutil.RequireRoot(t)
	for _, sc := range scenarios() {
		t.Run(sc.name, func(t *testing.T) {
			p := loadTestProbe(t, sc.cfg)
			if sc.egress != 0 {
				if err := p.SetEgress(sc.egress); err != nil {
					t.Fatal(err)
				}
			}
			for i, pk := range sc.packets {
				if i == 1 && sc.before != nil {
					sc.before(t, p)
				}
				if got := runPacket(t, p, pk); got != pk.want {
					t.Errorf("packet %d: XDP action %d, want %d", i, got, pk.want)
				}
			}
			checkFlows(t, p, sc.flows)
			checkCounters(t, p, sc.counters)
			if sc.check != nil {
				sc.check(t, p)
			}
		})
	}
}

func checkFlows(t *testing.T, p *Tier, want []wantFlow) {
	t.Helper()
	got := map[tier.FlowKey]flow.Entry{}
	if err := p.Walk(func(k tier.FlowKey, e *flow.Entry) bool {
		got[k] = *e
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Errorf("%d flows %v, want %d", len(got), got, len(want))
	}
	for _, w := range want {
		e, ok := got[w.key]
		if !ok {
			t.Errorf("flow %s missing", w.key)
			continue
		}
		if e.Packets != w.packets || e.Bytes != w.bytes || e.TCPFlags != w.flags || e.Marks != w.marks ||
			e.InitDir != w.initDir || e.State != w.state {
			t.Errorf("flow %s:\n got packets %v bytes %v flags %v marks %v init dir %d state %s\nwant packets %v bytes %v flags %v marks %v init dir %d state %s",
				w.key, e.Packets, e.Bytes, e.TCPFlags, e.Marks, e.InitDir, e.State,
				w.packets, w.bytes, w.flags, w.marks, w.initDir, w.state)
		}
		if w.hash != 0 && e.Hash != w.hash {
			t.Errorf("flow %s: hash %#x, want the NIC's %#x", w.key, e.Hash, w.hash)
		}
		if e.Hash == 0 {
			t.Errorf("flow %s: no hash", w.key)
		}
		if e.First.IsZero() || e.Last.Before(e.First) || time.Since(e.First) > time.Minute {
			t.Errorf("flow %s: first %v last %v", w.key, e.First, e.Last)
		}
		if l, err := p.Lookup(w.key); err != nil || l.Packets != e.Packets {
			t.Errorf("lookup %s: %+v, %v; walk saw %+v", w.key, l, err, e)
		}
	}
}

func checkCounters(t *testing.T, p *Tier, want map[Verdict]uint64) {
	t.Helper()
	c, err := p.Counters()
	if err != nil {
		t.Fatal(err)
	}
	for v := range c {
		if got := c[v].Packets; got != want[Verdict(v)] {
			t.Errorf("counter %s = %d, want %d", Verdict(v), got, want[Verdict(v)])
		}
	}
	// Each group partitions the packets.
	sum := func(vs ...Verdict) (n uint64) {
		for _, v := range vs {
			n += c[v].Packets
		}
		return n
	}
	marks := sum(VerdictMarkNone, VerdictMarkHit, VerdictMarkMiss, VerdictMarkUnhandled)
	classes := sum(VerdictTracked, VerdictNICCounted, VerdictTableFull, VerdictNonIP, VerdictMalformed, VerdictFragment)
	outcomes := sum(VerdictConsumed, VerdictForward, VerdictDiscard, VerdictTxError)
	if marks != classes || marks != outcomes {
		t.Errorf("packets by mark %d, by class %d, by outcome %d: each must count every packet once", marks, classes, outcomes)
	}
}

// readAll drains the ring without waiting.
func readAll(t *testing.T, p *Tier) []flow.Sample {
	t.Helper()
	var out []flow.Sample
	_, err := p.ReadSamples(time.Time{}, 1<<20, func(s *flow.Sample) {
		c := *s
		c.Data = append([]byte(nil), s.Data...)
		out = append(out, c)
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestSamples(t *testing.T) {
	const n = 3
	p := loadTestProbe(t, Config{DPIPackets: n, SnapLen: 60})
	long := "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ" // cut by the snap length
	kA := key(pkt.ProtoTCP, cli4, srv4)
	kB := key(pkt.ProtoUDP, cli6, srv6)
	type sent struct {
		frame []byte
		key   tier.FlowKey
		dir   uint8
		l4off int
		pay   int // payload offset, 0: none
		flags uint8
		mark  flow.Mark
	}
	var flowA, flowB []sent
	for i := 0; i < 5; i++ {
		fa, dir := tcp(cli4, srv4, ack|psh, fmt.Sprintf("req %d", i)), uint8(0)
		if i%2 == 1 {
			fa, dir = tcp(srv4, cli4, ack|psh, fmt.Sprintf("rsp %d %s", i, long)), 1
		}
		flowA = append(flowA, sent{frame: fa, key: kA, dir: dir, l4off: 20, pay: 40, flags: ack | psh, mark: flow.MarkMiss})
		fb := frame(pkt.ProtoUDP, cli6, srv6, 0, fmt.Sprintf("dns %d", i))
		// srv6 sorts first: the client sends in direction 1.
		flowB = append(flowB, sent{frame: fb, key: kB, dir: 1, l4off: 40, pay: 48, mark: noMeta})
	}
	for i := range flowA {
		runPacket(t, p, packet{frame: flowA[i].frame, mark: flowA[i].mark, hash: 99})
		runPacket(t, p, packet{frame: flowB[i].frame, mark: noMeta})
	}
	samples := readAll(t, p)
	if len(samples) != 2*n {
		t.Fatalf("%d samples, want %d (%d per flow)", len(samples), 2*n, n)
	}
	eB, err := p.Lookup(kB)
	if err != nil {
		t.Fatal(err)
	}
	seqs := map[tier.FlowKey]int{}
	for _, s := range samples {
		w := flowA
		hash := uint32(99)
		if s.Key == kB {
			w, hash = flowB, eB.Hash
		} else if s.Key != kA {
			t.Fatalf("sample of unknown flow %s", s.Key)
		}
		if int(s.Seq) != seqs[s.Key] {
			t.Errorf("%s: sample %d, want %d", s.Key, s.Seq, seqs[s.Key])
		}
		seqs[s.Key]++
		x := w[s.Seq]
		ip := x.frame[14:]
		wantLen := min(len(ip), 60)
		if s.Dir != x.dir || s.L4Off != x.l4off || s.PayOff != x.pay || s.L3Len != len(ip) || s.TCPFlags != x.flags ||
			s.Hash != hash || !bytes.Equal(s.Data, ip[:wantLen]) {
			t.Errorf("%s sample %d: dir %d l4 %d pay %d l3len %d flags %#x hash %#x data %q\nwant dir %d l4 %d pay %d l3len %d flags %#x hash %#x data %q",
				s.Key, s.Seq, s.Dir, s.L4Off, s.PayOff, s.L3Len, s.TCPFlags, s.Hash, s.Data,
				x.dir, x.l4off, x.pay, len(ip), x.flags, hash, ip[:wantLen])
		}
		wantMark := x.mark
		if wantMark == noMeta {
			wantMark = flow.MarkNone
		}
		if s.Mark != wantMark {
			t.Errorf("%s sample %d: mark %s, want %s", s.Key, s.Seq, s.Mark, wantMark)
		}
		if !bytes.Equal(s.Payload(), ip[x.pay:wantLen]) {
			t.Errorf("%s sample %d: payload %q, want %q", s.Key, s.Seq, s.Payload(), ip[x.pay:wantLen])
		}
		if time.Since(s.Time) > time.Minute || time.Until(s.Time) > time.Second {
			t.Errorf("sample time %v, now %v", s.Time, time.Now())
		}
	}
	for _, k := range []tier.FlowKey{kA, kB} {
		e, err := p.Lookup(k)
		if err != nil {
			t.Fatal(err)
		}
		if e.DPISent != n || e.DPILost != 0 || e.Packets[0]+e.Packets[1] != 5 {
			t.Errorf("%s: dpi sent %d lost %d packets %v, want %d, 0, 5 in all", k, e.DPISent, e.DPILost, e.Packets, n)
		}
	}
	// Verdict given: no more samples, even below N.
	kC := key(pkt.ProtoUDP, cli4, srv4)
	runPacket(t, p, packet{frame: frame(pkt.ProtoUDP, cli4, srv4, 0, "one"), mark: noMeta})
	if err := p.SetState(kC, flow.StateLearning, flow.Forward); err != nil {
		t.Fatal(err)
	}
	runPacket(t, p, packet{frame: frame(pkt.ProtoUDP, cli4, srv4, 0, "two"), mark: noMeta})
	if got := readAll(t, p); len(got) != 1 || got[0].Key != kC {
		t.Errorf("after the verdict: %d samples, want only the first packet's", len(got))
	}
}

func TestRingOverflowCounted(t *testing.T) {
	// One page holds three 1096-byte records.
	p := loadTestProbe(t, Config{DPIPackets: 10, RingBytes: 4096})
	k := key(pkt.ProtoTCP, cli4, srv4)
	for i := 0; i < 12; i++ {
		runPacket(t, p, packet{frame: tcp(cli4, srv4, ack, "x"), mark: noMeta})
	}
	e, err := p.Lookup(k)
	if err != nil {
		t.Fatal(err)
	}
	if e.DPISent != 10 || e.DPILost != 7 {
		t.Errorf("dpi sent %d lost %d, want 10 numbers given, 7 of them lost", e.DPISent, e.DPILost)
	}
	got := readAll(t, p)
	if len(got) != 3 {
		t.Fatalf("%d samples delivered, want 3", len(got))
	}
	for i, s := range got {
		if int(s.Seq) != i {
			t.Errorf("sample %d has seq %d", i, s.Seq)
		}
	}
	s, err := p.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if s.DPILost != 7 {
		t.Errorf("tier DPI lost %d, want 7", s.DPILost)
	}
}

func TestReadSamplesDeadline(t *testing.T) {
	p := loadTestProbe(t, Config{})
	start := time.Now()
	n, err := p.ReadSamples(start.Add(50*time.Millisecond), 10, func(*flow.Sample) { t.Error("no sample was sent") })
	if n != 0 || err != nil {
		t.Fatalf("empty ring: %d, %v", n, err)
	}
	if d := time.Since(start); d < 40*time.Millisecond || d > 2*time.Second {
		t.Errorf("waited %v for a 50ms deadline", d)
	}
	for i := 0; i < 5; i++ {
		runPacket(t, p, packet{frame: frame(pkt.ProtoUDP, cli4, netip.AddrPortFrom(srv4.Addr(), uint16(1000+i)), 0, "q"), mark: noMeta})
	}
	n, err = p.ReadSamples(time.Now().Add(time.Minute), 3, func(*flow.Sample) {})
	if n != 3 || err != nil {
		t.Fatalf("capped read: %d, %v; want 3", n, err)
	}
	start = time.Now()
	n, err = p.ReadSamples(time.Now().Add(time.Minute), 10, func(*flow.Sample) {})
	if n != 2 || err != nil || time.Since(start) > time.Second {
		t.Fatalf("rest: %d, %v after %v; want the 2 left without waiting", n, err, time.Since(start))
	}
}

func TestLookupDeleteWalk(t *testing.T) {
	p := loadTestProbe(t, Config{})
	var keys []tier.FlowKey
	for i := 0; i < 1100; i++ { // more than two walk batches
		dst := netip.AddrPortFrom(srv4.Addr(), uint16(1000+i))
		runPacket(t, p, packet{frame: frame(pkt.ProtoUDP, cli4, dst, 0, "q"), mark: noMeta})
		keys = append(keys, key(pkt.ProtoUDP, cli4, dst))
	}
	seen := 0
	if err := p.Walk(func(tier.FlowKey, *flow.Entry) bool { seen++; return true }); err != nil || seen != 1024 {
		t.Fatalf("walk saw %d flows (%v), want the table's 1024", seen, err)
	}
	seen = 0
	if err := p.Walk(func(tier.FlowKey, *flow.Entry) bool { seen++; return seen < 10 }); err != nil || seen != 10 {
		t.Fatalf("stopped walk saw %d flows (%v), want 10", seen, err)
	}
	runPacket(t, p, packet{frame: frame(pkt.ProtoUDP, srv4, cli4, 0, "reply"), mark: noMeta}) // not in: table full
	k := key(pkt.ProtoUDP, cli4, srv4)
	if _, err := p.Lookup(k); !errors.Is(err, ErrNoFlow) {
		t.Fatalf("lookup of a refused flow: %v, want ErrNoFlow", err)
	}
	e, err := p.Delete(keys[0])
	if err != nil || e.Packets != [2]uint64{1, 0} {
		t.Fatalf("delete: %+v, %v", e, err)
	}
	if _, err := p.Delete(keys[0]); !errors.Is(err, ErrNoFlow) {
		t.Errorf("second delete: %v, want ErrNoFlow", err)
	}
	if err := p.SetState(keys[0], flow.StateEnded, flow.Forward); !errors.Is(err, ErrNoFlow) {
		t.Errorf("set state of a deleted flow: %v, want ErrNoFlow", err)
	}
	if _, err := p.Lookup(tier.FlowKey{Proto: pkt.ProtoUDP, Lo: srv4, Hi: cli4}); !errors.Is(err, tier.ErrInvalid) {
		t.Errorf("unsorted key: %v, want ErrInvalid", err)
	}
	s, err := p.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if s.Flows != 1023 || s.Refused != 1100-1024+1 {
		t.Errorf("stats: %d flows, %d refused; want 1023, %d", s.Flows, s.Refused, 1100-1024+1)
	}
	// The freed slot takes the next new flow.
	runPacket(t, p, packet{frame: frame(pkt.ProtoUDP, srv4, cli4, 0, "reply"), mark: noMeta})
	if _, err := p.Lookup(k); err != nil {
		t.Errorf("flow after a delete made room: %v", err)
	}
}

// Apply runs a batch in order, each op with its own outcome, over more
// than one run of the batch program (TW_PROBE_OPS): state changes land in
// place, deletes return the entry's counters, and an op on a flow not in
// the table fails alone.
func TestApplyBatch(t *testing.T) {
	p := loadTestProbe(t, Config{})
	n := opsLimit + 44
	var keys []tier.FlowKey
	for i := 0; i < n; i++ {
		dst := netip.AddrPortFrom(srv4.Addr(), uint16(1000+i))
		for j := 0; j <= i%3; j++ {
			runPacket(t, p, packet{frame: frame(pkt.ProtoUDP, cli4, dst, 0, "q"), mark: noMeta})
		}
		keys = append(keys, key(pkt.ProtoUDP, cli4, dst))
	}
	missing := key(pkt.ProtoUDP, cli4, netip.AddrPortFrom(srv4.Addr(), 9))
	var ops []flow.Op
	for i, k := range keys {
		// Every flow's state set, then every other one deleted: the
		// delete must see the state written before it in the batch.
		ops = append(ops, flow.Op{Key: k, State: flow.StateOffloaded, Action: flow.Discard})
		if i%2 == 0 {
			ops = append(ops, flow.Op{Key: k, Delete: true})
		}
	}
	// A malformed key (endpoints unsorted) fails alone, mid-batch.
	bad := tier.FlowKey{Proto: pkt.ProtoUDP, Lo: srv4, Hi: cli4}
	ops = append(ops[:10], append([]flow.Op{{Key: bad, Delete: true}}, ops[10:]...)...)
	ops = append(ops, flow.Op{Key: missing, Delete: true}, flow.Op{Key: keys[0], Delete: true},
		flow.Op{Key: missing, State: flow.StateSoftware})
	if err := p.Apply(ops); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(ops[10].Err, tier.ErrInvalid) {
		t.Fatalf("malformed key: %v, want ErrInvalid", ops[10].Err)
	}
	ops = append(ops[:10], ops[11:]...)
	deleted := 0
	for _, o := range ops[:len(ops)-3] {
		if o.Err != nil {
			t.Fatalf("%+v: %v", o.Key, o.Err)
		}
		if !o.Delete {
			continue
		}
		deleted++
		i := int(o.Key.Hi.Port()) - 1000
		if want := uint64(i%3 + 1); o.Entry.Packets != [2]uint64{want, 0} || o.Entry.State != flow.StateOffloaded || o.Entry.Action != flow.Discard {
			t.Errorf("flow %d deleted: %+v, want %d packets, offloaded, discard", i, o.Entry, want)
		}
	}
	for _, o := range ops[len(ops)-3:] {
		if !errors.Is(o.Err, ErrNoFlow) {
			t.Errorf("%+v on a flow not in the table: %v, want ErrNoFlow", o, o.Err)
		}
	}
	for i, k := range keys {
		e, err := p.Lookup(k)
		switch {
		case i%2 == 0 && !errors.Is(err, ErrNoFlow):
			t.Errorf("flow %d after its delete: %v", i, err)
		case i%2 == 1 && (err != nil || e.State != flow.StateOffloaded || e.Action != flow.Discard):
			t.Errorf("flow %d: %+v, %v", i, e, err)
		}
	}
	if s, err := p.Stats(); err != nil || s.Flows != n-deleted {
		t.Errorf("stats %+v (%v): want %d flows", s, err, n-deleted)
	}
}

// SetState runs while packets are counted on other CPUs: no increment may
// be lost, which a whole-value map update could not promise.
func TestSetStateKeepsConcurrentCounts(t *testing.T) {
	p := loadTestProbe(t, Config{})
	f := tcp(cli4, srv4, ack, "x")
	k := key(pkt.ProtoTCP, cli4, srv4)
	runPacket(t, p, packet{frame: f, mark: noMeta})
	const runs, repeat = 20, 5000
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		states := []flow.State{flow.StateLearning, flow.StateOffloaded, flow.StateSoftware}
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := p.SetState(k, states[i%len(states)], flow.Action(i%2)); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	// A run a signal interrupts is restarted whole (cilium/ebpf retries
	// on EINTR), its partial pass counted too: each run must count at
	// least its packets (a lost increment counts fewer), and runs no
	// signal met exactly theirs.
	packets := func() uint64 {
		e, err := p.Lookup(k)
		if err != nil {
			t.Fatal(err)
		}
		return e.Packets[0]
	}
	exact := 0
	for i := 0; i < runs; i++ {
		before := packets()
		if _, err := p.Program().Run(&ebpf.RunOptions{Data: f, Repeat: repeat}); err != nil {
			t.Fatal(err)
		}
		switch d := packets() - before; {
		case d < repeat:
			t.Errorf("run %d: %d packets counted of %d: increments lost", i, d, repeat)
		case d == repeat:
			exact++
		}
	}
	close(stop)
	wg.Wait()
	e, err := p.Lookup(k)
	if err != nil {
		t.Fatal(err)
	}
	if exact == 0 || e.Marks[flow.MarkNone] != e.Packets[0] {
		t.Errorf("%d of %d runs counted exactly; packets %d, marks %v: want every packet marked none", exact, runs, e.Packets[0], e.Marks)
	}
}

// The program's key and Go's tier.NewFlowKey agree on random endpoints,
// equal addresses and equal ports included.
func TestFlowKeyAgreesWithGo(t *testing.T) {
	p := loadTestProbe(t, Config{Capacity: 4096, DPIPackets: 1})
	rng := rand.New(rand.NewPCG(11, 1))
	addr := func(v6 bool, pool []netip.Addr) netip.Addr {
		if rng.IntN(3) == 0 && len(pool) > 0 {
			return pool[rng.IntN(len(pool))]
		}
		if v6 {
			var b [16]byte
			for i := range b {
				b[i] = byte(rng.IntN(4)) * 0x55 // few values: shared prefixes
			}
			return netip.AddrFrom16(b)
		}
		var b [4]byte
		for i := range b {
			b[i] = byte(rng.IntN(4)) * 0x55
		}
		return netip.AddrFrom4(b)
	}
	port := func() uint16 { return []uint16{0, 1, 255, 256, 443, 40000, 65535}[rng.IntN(7)] }
	var pool []netip.Addr
	for i := 0; i < 1000; i++ {
		v6 := i%2 == 1
		a := addr(v6, nil)
		b := addr(v6, pool)
		pool = append(pool, a)
		if rng.IntN(5) == 0 {
			b = a
		}
		if a.Is4() != b.Is4() {
			b = addr(v6, nil)
		}
		src, dst := netip.AddrPortFrom(a, port()), netip.AddrPortFrom(b, port())
		proto := uint8(pkt.ProtoUDP)
		if i%3 == 0 {
			proto = pkt.ProtoTCP
		}
		k, dir := tier.NewFlowKey(proto, src, dst)
		before, _ := p.Lookup(k)
		runPacket(t, p, packet{frame: frame(proto, src, dst, 0, "k"), mark: noMeta})
		e, err := p.Lookup(k)
		if err != nil {
			t.Fatalf("%s -> %s: Go key %s not in the table: %v", src, dst, k, err)
		}
		if e.Packets[dir] != before.Packets[dir]+1 {
			t.Fatalf("%s -> %s: counted in direction %d, Go says %d", src, dst, 1-dir, dir)
		}
	}
	got := readAll(t, p)
	for _, s := range got {
		if _, dir := tier.NewFlowKey(s.Key.Proto, s.Key.Lo, s.Key.Hi); dir != 0 {
			t.Errorf("sample key %s is not sorted as Go sorts", s.Key)
		}
	}
}

// The Go vocabulary of internal/probe/flow is the C one of flow.h.
func TestContractValues(t *testing.T) {
	pairs := []struct {
		name   string
		goV, c uint32
	}{
		{"mark none", uint32(flow.MarkNone), uint32(probeTwFlowMarkTW_MARK_NONE)},
		{"mark hit", uint32(flow.MarkHit), uint32(probeTwFlowMarkTW_MARK_HIT)},
		{"mark miss", uint32(flow.MarkMiss), uint32(probeTwFlowMarkTW_MARK_MISS)},
		{"mark unhandled", uint32(flow.MarkUnhandled), uint32(probeTwFlowMarkTW_MARK_UNHANDLED)},
		{"state new", uint32(flow.StateNew), uint32(probeTwFlowStateTW_FS_NEW)},
		{"state dpi", uint32(flow.StateDPI), uint32(probeTwFlowStateTW_FS_DPI)},
		{"state learning", uint32(flow.StateLearning), uint32(probeTwFlowStateTW_FS_LEARNING)},
		{"state offloaded", uint32(flow.StateOffloaded), uint32(probeTwFlowStateTW_FS_OFFLOADED)},
		{"state software", uint32(flow.StateSoftware), uint32(probeTwFlowStateTW_FS_SOFTWARE)},
		{"state ended", uint32(flow.StateEnded), uint32(probeTwFlowStateTW_FS_ENDED)},
		{"forward", uint32(flow.Forward), uint32(probeTwFlowActionTW_FA_FORWARD)},
		{"discard", uint32(flow.Discard), uint32(probeTwFlowActionTW_FA_DISCARD)},
		{"marks", flow.NumMarks, uint32(VerdictMarkUnhandled - VerdictMarkNone + 1)},
	}
	for _, p := range pairs {
		if p.goV != p.c {
			t.Errorf("%s: Go %d, C %d", p.name, p.goV, p.c)
		}
	}
	for v := 0; v < NumVerdicts; v++ {
		if Verdict(v).String() == "" {
			t.Errorf("verdict %d has no name", v)
		}
	}
}

func TestConfigRanges(t *testing.T) {
	for _, c := range []Config{{Capacity: -1}, {DPIPackets: 33}, {SnapLen: 1025}, {RingBytes: 5000}, {RingBytes: 1024}} {
		if _, err := c.withDefaults(); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	c, err := Config{}.withDefaults()
	if err != nil || c.Capacity != DefaultCapacity || c.DPIPackets != 10 || c.SnapLen != 512 || c.RingBytes != DefaultRingBytes {
		t.Errorf("defaults %+v, %v", c, err)
	}
}

// A polled probe is not woken per sample: a read waits out its deadline and
// then takes what gathered. A quarter-full ring still wakes it at once.
func TestReadSamplesPolled(t *testing.T) {
	const ring = 64 << 10 // woken at 16 KiB: the 15th sample of 1096 bytes
	p := loadTestProbe(t, Config{RingBytes: ring, Polled: true})
	send := func(from, n int) {
		for i := from; i < from+n; i++ {
			runPacket(t, p, packet{frame: frame(pkt.ProtoUDP, cli4, netip.AddrPortFrom(srv4.Addr(), uint16(1000+i)), 0, "q"), mark: noMeta})
		}
	}
	send(0, 3)
	start := time.Now()
	n, err := p.ReadSamples(start.Add(200*time.Millisecond), 100, func(*flow.Sample) {})
	if n != 3 || err != nil {
		t.Fatalf("polled read: %d, %v; want the 3 samples", n, err)
	}
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Errorf("read returned after %v: the program woke the reader for 3 samples", d)
	}
	send(3, 20)
	start = time.Now()
	n, err = p.ReadSamples(start.Add(time.Minute), 100, func(*flow.Sample) {})
	if n != 20 || err != nil {
		t.Fatalf("read after the wake threshold: %d, %v; want 20", n, err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("a ring past its wake threshold did not wake the reader (%v)", d)
	}
}
