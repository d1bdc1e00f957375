// SPDX-License-Identifier: Apache-2.0

package gen

import (
	"fmt"
	"net"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"github.com/tierwall/tierwall/internal/datapath"
)

// Sink is the receiving end of generator tests and benchmarks: an XDP
// program that counts every frame arriving on an interface, then drops it
// (the fastest receiver there is) or passes it to the stack (a slow one).
type Sink struct {
	m    *ebpf.Map
	prog *ebpf.Program
	l    link.Link
}

// NewSink attaches a sink to iface (in the calling thread's netns).
func NewSink(iface string, pass bool) (*Sink, error) {
	ifc, err := net.InterfaceByName(iface)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", datapath.ErrNoInterface, iface)
	}
	s := &Sink{}
	if s.m, err = ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1}); err != nil {
		return nil, fmt.Errorf("creating sink counter: %w", err)
	}
	verdict := int32(1) // XDP_DROP
	if pass {
		verdict = 2 // XDP_PASS
	}
	s.prog, err = ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.XDP, License: "GPL", Instructions: asm.Instructions{
		asm.StoreImm(asm.RFP, -4, 0, asm.Word),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.LoadMapPtr(asm.R1, s.m.FD()),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "out"),
		asm.Mov.Imm(asm.R1, 1),
		asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
		asm.Mov.Imm(asm.R0, verdict).WithSymbol("out"),
		asm.Return(),
	}})
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("loading sink: %w", err)
	}
	if s.l, err = link.AttachXDP(link.XDPOptions{Program: s.prog, Interface: ifc.Index}); err != nil {
		s.Close()
		return nil, fmt.Errorf("attaching sink to %s: %w", iface, err)
	}
	return s, nil
}

// Count is the number of frames received so far.
func (s *Sink) Count() (uint64, error) {
	var n uint64
	if err := s.m.Lookup(uint32(0), &n); err != nil {
		return 0, fmt.Errorf("reading sink counter: %w", err)
	}
	return n, nil
}

// Close detaches the sink.
func (s *Sink) Close() error {
	if s.l != nil {
		s.l.Close()
	}
	if s.prog != nil {
		s.prog.Close()
	}
	return s.m.Close()
}
