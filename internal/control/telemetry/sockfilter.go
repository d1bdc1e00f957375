// SPDX-License-Identifier: Apache-2.0

package telemetry

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"

	"golang.org/x/net/bpf"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// The collector's sockets take datagrams from the configured exporters
// only, in the kernel: a classic BPF socket filter (SO_ATTACH_FILTER)
// compares each datagram's IP source with theirs. Without it a flood of
// small UDP datagrams to 6343 or 2055 from anywhere filled the receive
// queue, which the routers' datagrams share, and the decoder refused the
// flood one datagram at a time under its lock: the real exporters' were
// dropped by the kernel, and loss correction stops at twice what got
// through, so a flood on the network read too low to be seen. Of the
// others, one in unknownSample passes, so that the decoder still counts
// them and names the last (a router whose address was left out of the
// configuration shows up in /v1/telemetry, at 1/unknownSample of its
// rate).
//
// Written with golang.org/x/net/bpf (classic BPF, which a socket takes
// without privileges and without loading a program): an eBPF socket
// filter would need cilium/ebpf in this package, which keeps to user
// space.

// unknownSample: one in this many datagrams from others passes.
const unknownSample = 1024

// skfNetOff is SKF_NET_OFF: a load at it plus n reads the network
// header's byte n, whatever the socket's layer (a UDP socket's filter
// sees the packet from its UDP header).
const skfNetOff = 0xfff00000 // -0x100000

// maxFilterLen is BPF_MAXINSNS.
const maxFilterLen = 4096

// exporterFilter is the filter for a socket of the family v6 (an IPv6
// socket is dual-stack and gets IPv4 datagrams too) that passes
// datagrams from exporters and one in unknownSample of the rest. Each
// comparison jumps over one instruction at most: classic BPF's
// conditional jumps reach 255 instructions, and a long list would not.
func exporterFilter(exporters []netip.Addr, v6 bool) ([]bpf.RawInstruction, error) {
	var v4s, v6s []netip.Addr
	for _, a := range exporters {
		if a = a.Unmap(); a.Is4() {
			v4s = append(v4s, a)
		} else {
			v6s = append(v6s, a)
		}
	}
	accept := bpf.RetConstant{Val: 0xffffffff}
	var v4, v6b []bpf.Instruction
	v4 = append(v4, bpf.LoadAbsolute{Off: skfNetOff + 12, Size: 4})
	for _, a := range v4s {
		b := a.As4()
		v4 = append(v4, bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: binary.BigEndian.Uint32(b[:]), SkipTrue: 1}, accept)
	}
	for _, a := range v6s {
		b := a.As16()
		for w := range 4 {
			// Past a mismatch: over this word's jump and the rest of
			// this address (two instructions a word, then accept).
			v6b = append(v6b, bpf.LoadAbsolute{Off: skfNetOff + 8 + uint32(4*w), Size: 4},
				bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: binary.BigEndian.Uint32(b[4*w:]), SkipTrue: uint8(2*(3-w) + 1)})
		}
		v6b = append(v6b, accept)
	}
	// The others: one in unknownSample.
	sample := []bpf.Instruction{
		bpf.LoadExtension{Num: bpf.ExtRand},
		bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: unknownSample - 1},
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: 0, SkipTrue: 1},
		accept,
		bpf.RetConstant{Val: 0},
	}
	var prog []bpf.Instruction
	if v6 {
		// The IP version, then each family's list; a jump past a
		// list is unconditional (32-bit), a list may be long.
		v4 = append(v4, bpf.Jump{Skip: uint32(len(v6b))})
		prog = append(prog,
			bpf.LoadAbsolute{Off: skfNetOff, Size: 1},
			bpf.ALUOpConstant{Op: bpf.ALUOpShiftRight, Val: 4},
			bpf.JumpIf{Cond: bpf.JumpEqual, Val: 4, SkipFalse: 1},
			bpf.Jump{Skip: 1},
			bpf.Jump{Skip: uint32(len(v4))},
		)
		prog = append(prog, v4...)
		prog = append(prog, v6b...)
	} else {
		prog = append(prog, v4...)
	}
	prog = append(prog, sample...)
	if len(prog) > maxFilterLen {
		return nil, fmt.Errorf("%d exporters make a socket filter of %d instructions, over the kernel's %d", len(exporters), len(prog), maxFilterLen)
	}
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return nil, fmt.Errorf("assembling the exporters' socket filter: %w", err)
	}
	return raw, nil
}

// filterExporters attaches the exporters' filter to conn.
func filterExporters(conn *net.UDPConn, exporters []netip.Addr) error {
	v6 := true
	if a, ok := conn.LocalAddr().(*net.UDPAddr); ok && a.IP.To4() != nil {
		v6 = false
	}
	raw, err := exporterFilter(exporters, v6)
	if err != nil {
		return err
	}
	if v6 {
		err = ipv6.NewPacketConn(conn).SetBPF(raw)
	} else {
		err = ipv4.NewPacketConn(conn).SetBPF(raw)
	}
	if err != nil {
		return fmt.Errorf("attaching the exporters' socket filter to %v: %w", conn.LocalAddr(), err)
	}
	return nil
}
