// SPDX-License-Identifier: Apache-2.0

package xdp

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/tierwall/tierwall/internal/pkt"
	"github.com/tierwall/tierwall/internal/testutil"
)

// XDP actions (enum xdp_action); xdpPass is the package's.
const (
	xdpDrop = 1
	xdpTx   = 3
)

const (
	fin    = 0x01
	syn    = pkt.TCPFlagSYN
	rst    = 0x04
	ack    = pkt.TCPFlagACK
	synAck = syn | ack
	isn    = 0x11223344
	tsval  = 0xa1b2c3d4
)

var (
	cli4 = netip.MustParseAddrPort("192.0.2.10:40000")
	srv4 = netip.MustParseAddrPort("198.51.100.1:80")
	cli6 = netip.MustParseAddrPort("[2001:db8::10]:40000")
	srv6 = netip.MustParseAddrPort("[2001:db8::1]:80")

	cliMAC = [6]byte{2, 0, 0, 0, 0, 0xc}
	srvMAC = [6]byte{2, 0, 0, 0, 0, 0x5}
)

// TCP options as clients send them in their SYNs.
var (
	// Linux: MSS, SACK_PERM, TS, NOP, WS.
	linuxOpts = []byte{2, 4, 0x05, 0xb4, 4, 2, 8, 10, 0xa1, 0xb2, 0xc3, 0xd4, 0, 0, 0, 0, 1, 3, 3, 9}
	// Timestamps only, MSS after them, padded with EOL.
	tsOnlyOpts = []byte{1, 1, 8, 10, 0xa1, 0xb2, 0xc3, 0xd4, 0, 0, 0, 0, 2, 4, 0x05, 0x78}
	// Windows: MSS, NOP, WS, NOP, NOP, SACK_PERM; no timestamps.
	windowsOpts = []byte{2, 4, 0x05, 0xb4, 1, 3, 3, 8, 1, 1, 4, 2}
	// macOS: MSS, NOP, WS, NOP, NOP, TS, SACK_PERM, EOL, EOL.
	macOpts = []byte{2, 4, 0x05, 0xb4, 1, 3, 3, 6, 1, 1, 8, 10, 0xa1, 0xb2, 0xc3, 0xd4, 0, 0, 0, 0, 4, 2, 0, 0}
	// Linux's options and length in another order: TS, MSS, WS,
	// SACK_PERM, EOL.
	reorderedOpts = []byte{8, 10, 0xa1, 0xb2, 0xc3, 0xd4, 0, 0, 0, 0, 2, 4, 0x05, 0xb4, 3, 3, 7, 4, 2, 0}
	// Linux's layout with a window scale over RFC 7323's 14.
	linuxScale15 = []byte{2, 4, 0x05, 0xb4, 4, 2, 8, 10, 0xa1, 0xb2, 0xc3, 0xd4, 0, 0, 0, 0, 1, 3, 3, 15}
)

func seg(src, dst netip.AddrPort, flags uint8, seq, ackn uint32, opts []byte) pkt.Frame {
	return pkt.Frame{DstMAC: srvMAC, SrcMAC: cliMAC, Src: src.Addr(), Dst: dst.Addr(), Proto: pkt.ProtoTCP,
		SrcPort: src.Port(), DstPort: dst.Port(), TCPFlags: flags, TCPSeq: seq, TCPAck: ackn, TCPOptions: opts}
}

func loadTest(t *testing.T) *Synproxy {
	t.Helper()
	testutil.RequireRoot(t)
	s, err := Load(Options{MSS: 1400, WScale: 9, TTL: 61})
	if err != nil {
		t.Fatalf("loading: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func run(t *testing.T, s *Synproxy, frame []byte) (uint32, []byte) {
	t.Helper()
	return runProg(t, s.Program(), frame)
}

func runProg(t *testing.T, prog *ebpf.Program, frame []byte) (uint32, []byte) {
	t.Helper()
	opts := &ebpf.RunOptions{Data: frame, DataOut: make([]byte, len(frame)+256)}
	ret, err := prog.Run(opts)
	if err != nil {
		t.Fatalf("running: %v", err)
	}
	// Run cuts DataOut to the frame's new length.
	return ret, opts.DataOut
}

// synAck is what the test learns from a SYN-ACK: the fields Parse checks
// plus the window and the options.
type synAckInfo struct {
	pkt.Parsed
	window uint16
	opts   map[byte][]byte
	optLen int
	ttl    uint8
}

// checkSynAck parses out (an untagged frame) as a receiver would and checks
// it answers SYN in: MACs and addresses swapped, SYN|ACK, ack = seq + 1,
// window 0, both checksums right (pkt.Parse verifies them).
func checkSynAck(t *testing.T, in pkt.Frame, out []byte) synAckInfo {
	t.Helper()
	if !bytes.Equal(out[0:6], in.SrcMAC[:]) || !bytes.Equal(out[6:12], in.DstMAC[:]) {
		t.Errorf("MACs not swapped: dst %x src %x", out[0:6], out[6:12])
	}
	p, err := pkt.Parse(out)
	if err != nil {
		t.Fatalf("SYN-ACK does not parse: %v\n%x", err, out)
	}
	var info synAckInfo
	info.Parsed = p
	if want := netip.AddrPortFrom(in.Dst, in.DstPort); p.Src != want {
		t.Errorf("source %s, want %s", p.Src, want)
	}
	if want := netip.AddrPortFrom(in.Src, in.SrcPort); p.Dst != want {
		t.Errorf("destination %s, want %s", p.Dst, want)
	}
	if p.TCPFlags != synAck {
		t.Errorf("flags %#x, want SYN|ACK", p.TCPFlags)
	}
	if p.Ack != in.TCPSeq+1 {
		t.Errorf("ack %#x, want seq+1 = %#x", p.Ack, in.TCPSeq+1)
	}
	if len(p.Payload) != 0 {
		t.Errorf("payload of %d bytes", len(p.Payload))
	}
	l3 := 14
	l4 := l3 + 20
	info.ttl = out[l3+8]
	if in.Src.Is6() {
		l4 = l3 + 40
		info.ttl = out[l3+7]
	}
	if len(out) != l3+p.IPLen {
		t.Errorf("frame of %d bytes, datagram ends at %d", len(out), l3+p.IPLen)
	}
	th := out[l4:]
	info.window = binary.BigEndian.Uint16(th[14:])
	if info.window != 0 {
		t.Errorf("window %d, want 0 as SYNPROXY's", info.window)
	}
	hl := int(th[12]>>4) * 4
	info.optLen = hl - 20
	info.opts = map[byte][]byte{}
	for o := th[20:hl]; len(o) > 0; {
		switch o[0] {
		case 0:
			o = nil
		case 1:
			o = o[1:]
		default:
			if len(o) < 2 || int(o[1]) > len(o) || o[1] < 2 {
				t.Fatalf("bad option list %x", th[20:hl])
			}
			info.opts[o[0]] = o[2:o[1]]
			o = o[o[1]:]
		}
	}
	if mss := info.opts[2]; len(mss) != 2 || binary.BigEndian.Uint16(mss) != 1400 {
		t.Errorf("MSS option %x, want 1400", mss)
	}
	if info.ttl != 61 {
		t.Errorf("TTL %d, want 61", info.ttl)
	}
	return info
}

func TestSynAnswered(t *testing.T) {
	s := loadTest(t)
	for _, tc := range []struct {
		name     string
		in       pkt.Frame
		optLen   int
		tsLow    uint32 // low 6 bits of TSval, or 0xff: no timestamp
		wscale   bool
		sackPerm bool
	}{
		{"linux v4", seg(cli4, srv4, syn, isn, 0, linuxOpts), 20, 9 | 1<<4, true, true},
		{"linux v6", seg(cli6, srv6, syn, isn, 0, linuxOpts), 20, 9 | 1<<4, true, true},
		{"no options grows the frame", seg(cli4, srv4, syn, isn, 0, nil), 4, 0xff, false, false},
		{"windows: no timestamps, MSS only", seg(cli4, srv4, syn, isn, 0, windowsOpts), 4, 0xff, false, false},
		{"timestamps only", seg(cli6, srv6, syn, isn, 0, tsOnlyOpts), 16, 0xf, false, false},
		{"ECE and CWR not accepted", seg(cli4, srv4, syn|0x40|0x80, isn, 0, linuxOpts), 20, 9 | 1<<4, true, true},
		// Linux's layout is read at fixed offsets, any other walked:
		// the same options in other orders, one of them as long.
		{"macOS: walked", seg(cli4, srv4, syn, isn, 0, macOpts), 20, 6 | 1<<4, true, true},
		{"linux's length, another order: walked", seg(cli6, srv6, syn, isn, 0, reorderedOpts), 20, 7 | 1<<4, true, true},
		{"linux's layout, scale over 14", seg(cli4, srv4, syn, isn, 0, linuxScale15), 20, 14 | 1<<4, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ret, out := run(t, s, tc.in.Build())
			if ret != xdpTx {
				t.Fatalf("action %d, want XDP_TX", ret)
			}
			info := checkSynAck(t, tc.in, out)
			if info.optLen != tc.optLen {
				t.Errorf("%d option bytes, want %d", info.optLen, tc.optLen)
			}
			ts, hasTS := info.opts[8]
			if (tc.tsLow != 0xff) != hasTS {
				t.Fatalf("timestamp option %x, want one: %v", ts, tc.tsLow != 0xff)
			}
			if hasTS {
				if got := binary.BigEndian.Uint32(ts) & 0x3f; got != tc.tsLow {
					t.Errorf("TSval low bits %#x, want %#x", got, tc.tsLow)
				}
				if got := binary.BigEndian.Uint32(ts[4:]); got != tsval {
					t.Errorf("TSecr %#x, want the client's TSval %#x", got, uint32(tsval))
				}
			}
			if ws, ok := info.opts[3]; ok != tc.wscale || (ok && ws[0] != 9) {
				t.Errorf("window scale option %x, want one: %v (9)", ws, tc.wscale)
			}
			if _, ok := info.opts[4]; ok != tc.sackPerm {
				t.Errorf("SACK_PERM present %v, want %v", ok, tc.sackPerm)
			}
			if info.TCPFlags&0x40 != 0 {
				t.Error("ECE set: ECN was never offered to SYNPROXY")
			}
		})
	}
}

// SYNs whose IP header the reply must not copy: IPv4 options, IPv6
// extension headers, VLAN tags (kept), Ethernet padding (cut).
func TestSynAnsweredOddHeaders(t *testing.T) {
	s := loadTest(t)
	t.Run("ipv4 options dropped from the reply", func(t *testing.T) {
		in := seg(cli4, srv4, syn, isn, 0, linuxOpts)
		in.IPv4Options = 8
		ret, out := run(t, s, in.Build())
		if ret != xdpTx {
			t.Fatalf("action %d, want XDP_TX", ret)
		}
		checkSynAck(t, in, out)
	})
	t.Run("ipv6 extension header dropped from the reply", func(t *testing.T) {
		in := seg(cli6, srv6, syn, isn, 0, linuxOpts)
		in.Ext = []uint8{pkt.ExtDestOpts}
		ret, out := run(t, s, in.Build())
		if ret != xdpTx {
			t.Fatalf("action %d, want XDP_TX", ret)
		}
		checkSynAck(t, in, out)
	})
	t.Run("vlan tag kept", func(t *testing.T) {
		in := seg(cli4, srv4, syn, isn, 0, linuxOpts)
		in.VLANs = []uint16{42}
		ret, out := run(t, s, in.Build())
		if ret != xdpTx {
			t.Fatalf("action %d, want XDP_TX", ret)
		}
		if tag := out[12:16]; !bytes.Equal(tag, []byte{0x81, 0, 0, 42}) {
			t.Fatalf("tag %x, want 8100002a", tag)
		}
		checkSynAck(t, in, append(out[:12:12], out[16:]...))
	})
	t.Run("ethernet padding cut", func(t *testing.T) {
		in := seg(cli4, srv4, syn, isn, 0, nil)
		ret, out := run(t, s, append(in.Build(), make([]byte, 30)...))
		if ret != xdpTx {
			t.Fatalf("action %d, want XDP_TX", ret)
		}
		checkSynAck(t, in, out)
	})
}

// handshake answers a SYN and returns the client's ACK of the SYN-ACK.
func handshake(t *testing.T, s *Synproxy, cli, srv netip.AddrPort) pkt.Frame {
	t.Helper()
	in := seg(cli, srv, syn, isn, 0, linuxOpts)
	ret, out := run(t, s, in.Build())
	if ret != xdpTx {
		t.Fatalf("SYN: action %d, want XDP_TX", ret)
	}
	sa := checkSynAck(t, in, out)
	// The client's ACK echoes the SYN-ACK's TSval; only ack_seq - 1, the
	// cookie, and the 4-tuple and seq - 1 matter for the check.
	ts := sa.opts[8]
	opts := append([]byte{1, 1, 8, 10, 0xa1, 0xb2, 0xc3, 0xd5}, ts[:4]...)
	return seg(cli, srv, ack, isn+1, sa.Seq+1, opts)
}

func TestAckCookie(t *testing.T) {
	s := loadTest(t)
	for _, fam := range []struct {
		name     string
		cli, srv netip.AddrPort
	}{{"v4", cli4, srv4}, {"v6", cli6, srv6}} {
		t.Run(fam.name+" valid", func(t *testing.T) {
			a := handshake(t, s, fam.cli, fam.srv)
			if ret, _ := run(t, s, a.Build()); ret != xdpPass {
				t.Fatalf("ACK with the cookie: action %d, want XDP_PASS", ret)
			}
		})
		t.Run(fam.name+" wrong cookie", func(t *testing.T) {
			a := handshake(t, s, fam.cli, fam.srv)
			a.TCPAck ^= 0x00010000
			if ret, _ := run(t, s, a.Build()); ret != xdpDrop {
				t.Fatalf("ACK with a wrong cookie: action %d, want XDP_DROP", ret)
			}
		})
		t.Run(fam.name+" other source", func(t *testing.T) {
			a := handshake(t, s, fam.cli, fam.srv)
			a.SrcPort++
			if ret, _ := run(t, s, a.Build()); ret != xdpDrop {
				t.Fatalf("cookie replayed from another port: action %d, want XDP_DROP", ret)
			}
		})
	}
}

// Fixtures with the verdict and counter each must produce; the test also
// checks that the counters add up to exactly the fixtures run.
func TestVerdicts(t *testing.T) {
	s := loadTest(t)
	trunc := seg(cli4, srv4, syn, isn, 0, nil).Build()
	binary.BigEndian.PutUint16(trunc[14+2:], 200) // total length beyond the frame
	longDoff := seg(cli4, srv4, syn, isn, 0, nil).Build()
	longDoff[14+20+12] = 15 << 4 // 60-byte TCP header in a 20-byte segment
	udp := pkt.Frame{Src: cli4.Addr(), Dst: srv4.Addr(), Proto: pkt.ProtoUDP, SrcPort: 1, DstPort: 53}.Build()
	arp := pkt.Frame{EtherType: pkt.EtherARP, Payload: make([]byte, 28)}.Build()
	frag := pkt.Frame{Src: cli4.Addr(), Dst: srv4.Addr(), Proto: pkt.ProtoTCP, FragOffset: 100, Payload: make([]byte, 16)}.Build()

	fixtures := []struct {
		name   string
		frame  []byte
		want   uint32
		reason Reason
	}{
		{"syn v4", seg(cli4, srv4, syn, isn, 0, linuxOpts).Build(), xdpTx, ReasonSynAnswered},
		{"syn v6", seg(cli6, srv6, syn, isn, 0, nil).Build(), xdpTx, ReasonSynAnswered},
		{"ack without cookie v4", seg(cli4, srv4, ack, isn+1, 12345, nil).Build(), xdpDrop, ReasonAckInvalid},
		{"ack without cookie v6", seg(cli6, srv6, ack|0x08, isn+1, 12345, nil).Build(), xdpDrop, ReasonAckInvalid},
		{"rst", seg(cli4, srv4, rst, isn, 0, nil).Build(), xdpDrop, ReasonDroppedOther},
		{"rst ack", seg(cli6, srv6, rst|ack, isn, 1, nil).Build(), xdpDrop, ReasonDroppedOther},
		{"fin ack", seg(cli4, srv4, fin|ack, isn, 1, nil).Build(), xdpDrop, ReasonDroppedOther},
		{"syn ack", seg(cli4, srv4, synAck, isn, 1, nil).Build(), xdpDrop, ReasonDroppedOther},
		{"syn fin", seg(cli4, srv4, syn|fin, isn, 0, nil).Build(), xdpDrop, ReasonDroppedOther},
		{"no flags", seg(cli4, srv4, 0, isn, 0, nil).Build(), xdpDrop, ReasonDroppedOther},
		{"syn, doff beyond the datagram", longDoff, xdpDrop, ReasonSynUnfit},
		{"ipv4 length beyond the frame", trunc, xdpPass, ReasonMalformed},
		{"ipv4 header cut", seg(cli4, srv4, syn, isn, 0, nil).Build()[:24], xdpPass, ReasonMalformed},
		{"udp", udp, xdpPass, ReasonNoTCP},
		{"arp", arp, xdpPass, ReasonNoTCP},
		{"later fragment", frag, xdpPass, ReasonNoTCP},
	}
	var want Stats
	for _, f := range fixtures {
		ret, _ := run(t, s, f.frame)
		if ret != f.want {
			t.Errorf("%s: action %d, want %d (%s)", f.name, ret, f.want, f.reason)
		}
		if f.reason.Dropped() != (f.want == xdpDrop) {
			t.Errorf("%s: Reason.Dropped disagrees with the action", f.name)
		}
		want[f.reason].Packets++
		want[f.reason].Bytes += uint64(len(f.frame))
	}
	got, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	for r := range NumReasons {
		if got[r] != want[r] {
			t.Errorf("counter %s: %+v, want %+v", Reason(r), got[r], want[r])
		}
	}
}

// The filter reaches the program through slot 0 of its tw_jmp array; a
// caller that does nothing but that tail call stands in for it here. The
// kernel lets a program into a program array only if it matches the
// array's first user in type, JIT, XDP frags and expected attach type:
// the caller is BPF_XDP like the SEC("xdp") filter, or the update fails
// with EINVAL.
func TestTailCalled(t *testing.T) {
	s := loadTest(t)
	jmp, err := ebpf.NewMap(&ebpf.MapSpec{Name: "tw_jmp", Type: ebpf.ProgramArray, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer jmp.Close()
	caller, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "tw_jmp_caller", Type: ebpf.XDP, AttachType: ebpf.AttachXDP, License: "GPL",
		Instructions: asm.Instructions{
			asm.LoadMapPtr(asm.R2, jmp.FD()),
			asm.Mov.Imm(asm.R3, 0),
			asm.FnTailCall.Call(),
			asm.Mov.Imm(asm.R0, xdpDrop), // the slot is empty
			asm.Return(),
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer caller.Close()
	if err := jmp.Put(uint32(0), s.Program()); err != nil {
		t.Fatalf("putting the program in slot 0: %v", err)
	}
	in := seg(cli6, srv6, syn, isn, 0, linuxOpts)
	in.VLANs = []uint16{7}
	ret, out := runProg(t, caller, in.Build())
	if ret != xdpTx {
		t.Fatalf("action %d through the tail call, want XDP_TX", ret)
	}
	checkSynAck(t, in, append(out[:12:12], out[16:]...))
	st, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Get(ReasonSynAnswered).Packets != 1 {
		t.Errorf("counters %v, want one SYN answered", st)
	}
}

func TestOptionsChecked(t *testing.T) {
	for _, o := range []Options{{MSS: 100}, {WScale: 15}} {
		if _, err := o.withDefaults(); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}
