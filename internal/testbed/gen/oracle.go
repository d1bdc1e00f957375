// SPDX-License-Identifier: Apache-2.0

package gen

import (
	"fmt"
	"net"

	"github.com/cilium/ebpf/link"

	"github.com/tierwall/tierwall/internal/datapath"
)

// Oracle is the evaluation's ideal filter (bpf/testbed/xdp_oracle.c): on
// a host's port in place of the defence, it drops a UDP flood by its
// destination port from the first packet, at the least cost an XDP
// program has, and passes everything else. The clients' rate under it is
// what the host's receive path leaves them whatever the filter.
type Oracle struct {
	objs oracleObjects
	l    link.Link
}

// NewOracle attaches the ideal filter for UDP floods to port on iface
// (in the calling thread's netns).
func NewOracle(iface string, port uint16) (*Oracle, error) {
	ifc, err := net.InterfaceByName(iface)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", datapath.ErrNoInterface, iface)
	}
	spec, err := loadOracle()
	if err != nil {
		return nil, fmt.Errorf("loading the oracle: %w", err)
	}
	if err := spec.Variables["tw_oracle_port"].Set(port); err != nil {
		return nil, fmt.Errorf("setting the oracle's port: %w", err)
	}
	o := &Oracle{}
	if err := spec.LoadAndAssign(&o.objs, nil); err != nil {
		return nil, fmt.Errorf("loading the oracle: %w", err)
	}
	if o.l, err = link.AttachXDP(link.XDPOptions{Program: o.objs.TwOracle, Interface: ifc.Index}); err != nil {
		o.objs.Close()
		return nil, fmt.Errorf("attaching the oracle to %s: %w", iface, err)
	}
	return o, nil
}

// Counts are the frames dropped and passed so far, over every CPU.
func (o *Oracle) Counts() (dropped, passed uint64, err error) {
	var out [2]uint64
	for k := range out {
		var per []uint64
		if err := o.objs.TwOracleCtr.Lookup(uint32(k), &per); err != nil {
			return 0, 0, fmt.Errorf("reading the oracle's counters: %w", err)
		}
		for _, v := range per {
			out[k] += v
		}
	}
	return out[0], out[1], nil
}

// Close detaches the oracle.
func (o *Oracle) Close() error {
	if o.l != nil {
		o.l.Close()
	}
	return o.objs.Close()
}
