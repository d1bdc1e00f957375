// SPDX-License-Identifier: Apache-2.0

// Package synproxy loads the SYN-cookie stage (bpf/synproxy/xdp_synproxy.c): an XDP
// program that answers SYNs with cookie SYN-ACKs itself, passes ACKs with a
// valid cookie to the kernel's SYNPROXY (set up by internal/synproxy),
// passes segments of connections conntrack knows and drops the rest. In
// the product the filter tail-calls it from slot 0 of its tw_jmp array for
// packets of a syn-cookie rule (Program); Attach puts it on an interface
// by itself, for tests and for a host that wants nothing else.
package xdp

import (
	"errors"
	"fmt"
	"io"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"github.com/tierwall/tierwall/internal/datapath"
)

// Defaults of Options fields left zero: what Linux announces on a
// 1500-byte Ethernet link with its default buffers, and its default TTL.
const (
	DefaultMSS    = 1460
	DefaultWScale = 7
	DefaultTTL    = 64
	// MaxWScale is the largest window scale TCP allows (RFC 7323).
	MaxWScale = 14
)

// Options configure the program when it is loaded.
type Options struct {
	// MSS and WScale are what the SYN-ACK announces to clients in the
	// server's place. They must be the SYNPROXY rule's mss and wscale
	// and the server's own: SYNPROXY translates sequence numbers
	// between client and server, not windows.
	MSS    uint16
	WScale uint8
	// TTL is the SYN-ACK's TTL or hop limit.
	TTL uint8
}

func (o Options) withDefaults() (Options, error) {
	if o.MSS == 0 {
		o.MSS = DefaultMSS
	}
	if o.WScale == 0 {
		o.WScale = DefaultWScale
	}
	if o.TTL == 0 {
		o.TTL = DefaultTTL
	}
	switch {
	case o.MSS < 536:
		return o, fmt.Errorf("%w: MSS %d below the 536 every host accepts", datapath.ErrInvalid, o.MSS)
	case o.WScale > MaxWScale:
		return o, fmt.Errorf("%w: window scale %d above %d", datapath.ErrInvalid, o.WScale, MaxWScale)
	}
	return o, nil
}

// Synproxy is the loaded program and its counters and, once attached,
// its link.
type Synproxy struct {
	opts Options
	objs synproxyObjects
	link link.Link
}

// Load loads the program with fresh counters, attached nowhere.
func Load(o Options) (_ *Synproxy, err error) {
	o, err = o.withDefaults()
	if err != nil {
		return nil, err
	}
	spec, err := loadSynproxy()
	if err != nil {
		return nil, fmt.Errorf("loading synproxy spec: %w", err)
	}
	for name, v := range map[string]uint32{synproxyVarTwSpMss: uint32(o.MSS),
		synproxyVarTwSpWscale: uint32(o.WScale), synproxyVarTwSpTtl: uint32(o.TTL)} {
		if err := spec.Variables[name].Set(v); err != nil {
			return nil, fmt.Errorf("setting %s: %w", name, err)
		}
	}
	s := &Synproxy{opts: o}
	if err := spec.LoadAndAssign(&s.objs, nil); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("loading synproxy: %+v", ve)
		}
		return nil, fmt.Errorf("loading synproxy: %w", err)
	}
	return s, nil
}

// Options are the options the program was loaded with, defaults filled.
func (s *Synproxy) Options() Options { return s.opts }

// Program is the XDP program, for the filter's tail-call array (slot 0 of
// tw_jmp) and for BPF_PROG_TEST_RUN.
func (s *Synproxy) Program() *ebpf.Program { return s.objs.TwSynproxy }

// Install makes s the SYN proxy of d's syn-cookie flow rules (the
// filter's tw_jmp slot), so that callers outside internal/datapath need
// not name the program's type.
func (s *Synproxy) Install(d *datapath.Datapath) error { return d.SetSynproxy(s.objs.TwSynproxy) }

// Attach puts the program on the interface by itself, in native XDP mode,
// falling back to generic mode where the driver has none. On a veth the
// peer needs an XDP program of its own for the SYN-ACKs to leave
// (AttachPeerPass). Attached by itself the program treats every TCP
// packet on the interface as protected; the product tail-calls it from the
// filter for the syn-cookie rules' packets only.
func (s *Synproxy) Attach(ifindex int) error {
	if s.link != nil {
		return fmt.Errorf("%w: synproxy already attached", datapath.ErrInvalid)
	}
	l, err := link.AttachXDP(link.XDPOptions{Program: s.objs.TwSynproxy, Interface: ifindex, Flags: link.XDPDriverMode})
	if err != nil {
		l, err = link.AttachXDP(link.XDPOptions{Program: s.objs.TwSynproxy, Interface: ifindex, Flags: link.XDPGenericMode})
	}
	if err != nil {
		return fmt.Errorf("attaching synproxy to interface %d: %w", ifindex, err)
	}
	s.link = l
	return nil
}

// Close detaches the program (when Attach attached it) and releases it and
// its counters. A tail-call array holding the program keeps it running.
func (s *Synproxy) Close() error {
	var errs []error
	if s.link != nil {
		errs = append(errs, s.link.Close())
		s.link = nil
	}
	errs = append(errs, s.objs.Close())
	return errors.Join(errs...)
}

// Stats reads the counters, summed over the CPUs.
func (s *Synproxy) Stats() (Stats, error) {
	var out Stats
	var per []synproxyTwCtr
	for r := range NumReasons {
		if err := s.objs.TwSpStats.Lookup(uint32(r), &per); err != nil {
			return out, fmt.Errorf("reading synproxy counter %s: %w", Reason(r), err)
		}
		for _, c := range per {
			out[r].Packets += c.Packets
			out[r].Bytes += c.Bytes
		}
	}
	return out, nil
}

// AttachPeerPass puts an XDP program that passes everything on ifindex, in
// native mode, and returns what detaches it. It is for the peer of a veth
// the stage is attached to natively: veth hands XDP_TX frames to the
// peer's queue but only wakes that queue when the peer runs an XDP program
// itself (veth_xdp_flush), so without one the SYN-ACKs wait in the peer's
// ring until other traffic happens to wake it. Two instructions, built
// here rather than compiled: there is nothing in it to share with C.
func AttachPeerPass(ifindex int) (io.Closer, error) {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "tw_peer_pass",
		Type: ebpf.XDP,
		Instructions: asm.Instructions{
			asm.Mov.Imm(asm.R0, xdpPass),
			asm.Return(),
		},
		License: "GPL",
	})
	if err != nil {
		return nil, fmt.Errorf("loading XDP pass program: %w", err)
	}
	defer prog.Close() // the link holds its own reference
	l, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: ifindex, Flags: link.XDPDriverMode})
	if err != nil {
		return nil, fmt.Errorf("attaching XDP pass program to interface %d: %w", ifindex, err)
	}
	return l, nil
}

// xdpPass is XDP_PASS (enum xdp_action).
const xdpPass = 2
