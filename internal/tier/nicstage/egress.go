// SPDX-License-Identifier: Apache-2.0

package nicstage

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf/link"

	"github.com/tierwall/tierwall/internal/datapath"
)

// Egress is the emulated NIC's transmit side (bpf/nic/xdp_nic_egress.c), on
// its host-facing port: what the host sends to the lab's networks goes on
// to the wire, what it sends anywhere else has left for an internet the
// lab does not have and is dropped there, counted. A SYN flood answered in
// XDP needs it: the cookie SYN-ACKs to the flood's spoofed sources would
// otherwise cross the lab's bridge on the host's CPU and fill the port's
// ring ahead of the real clients' packets, a cost a real card's wire does
// not put on the host. Being XDP on the veth peer, it also makes veth
// deliver the host's XDP_TX frames at once.
type Egress struct {
	objs nic_egressObjects
	link link.Link
}

// EgressVerdicts names the egress counters, in the order of enum
// tw_egress_verdict.
var EgressVerdicts = []string{"wire", "internet", "other"}

// AttachEgress puts the transmit side on the interface ifindex (in the
// current network namespace), in native mode, passing frames for nets to
// the wire. nets must be non-empty: with none every IP frame would leave
// for the internet.
func AttachEgress(ifindex int, nets []netip.Prefix) (*Egress, error) {
	e, err := loadEgress(nets)
	if err != nil {
		return nil, err
	}
	l, err := link.AttachXDP(link.XDPOptions{Program: e.objs.TwNicEgress, Interface: ifindex, Flags: link.XDPDriverMode})
	if err != nil {
		e.objs.Close()
		return nil, fmt.Errorf("attaching the NIC's egress to interface %d: %w", ifindex, err)
	}
	e.link = l
	return e, nil
}

// loadEgress loads the program with nets, attached nowhere.
func loadEgress(nets []netip.Prefix) (_ *Egress, err error) {
	if len(nets) == 0 {
		return nil, fmt.Errorf("%w: the NIC's egress needs the lab's networks", datapath.ErrInvalid)
	}
	e := &Egress{}
	if err := loadNic_egressObjects(&e.objs, nil); err != nil {
		return nil, fmt.Errorf("loading the NIC's egress: %w", err)
	}
	defer func() {
		if err != nil {
			e.objs.Close()
		}
	}()
	for _, p := range nets {
		if !p.IsValid() {
			return nil, fmt.Errorf("%w: egress network %v", datapath.ErrInvalid, p)
		}
		p = p.Masked()
		var one uint8 = 1
		if p.Addr().Is4() {
			k := nic_egressTwLpm4Key{Prefixlen: uint32(p.Bits()), Addr: netipBE32(p.Addr())}
			err = e.objs.TwEgressNets4.Put(&k, &one)
		} else {
			k := nic_egressTwLpm6Key{Prefixlen: uint32(p.Bits()), Addr: p.Addr().As16()}
			err = e.objs.TwEgressNets6.Put(&k, &one)
		}
		if err != nil {
			return nil, fmt.Errorf("adding egress network %v: %w", p, err)
		}
	}
	return e, nil
}

// netipBE32 is an IPv4 address as the kernel holds it in a __u32 read
// from the packet: network order in memory, so little-endian loads of the
// four bytes.
func netipBE32(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

// Stats returns the egress counters, summed over CPUs.
func (e *Egress) Stats() (map[string]datapath.Counter, error) {
	return sumVerdicts[nic_egressTwCtr, datapath.Counter](e.objs.TwEgressStats, EgressVerdicts, "the NIC's egress counters")
}

// Close detaches the program and releases its maps.
func (e *Egress) Close() error {
	var errs []error
	if e.link != nil {
		errs = append(errs, e.link.Close())
		e.link = nil
	}
	errs = append(errs, e.objs.Close())
	return errors.Join(errs...)
}
