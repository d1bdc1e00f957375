// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"encoding/binary"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// wireLoss is what the interface's driver dropped before XDP saw it:
// rx_missed_errors (the NIC's ring was full), rx_fifo_errors and
// rx_over_errors, from the kernel's 64-bit link statistics. It growing is
// the plainest sign that the local tiers are saturated: packets are lost
// on the wire side, so only the upstream can help. rx_dropped is left
// out: the stack counts there what it merely did not want (an unknown
// protocol), which says nothing about load.
func wireLoss(ifname string) (uint64, error) {
	b, err := syscall.NetlinkRIB(unix.RTM_GETLINK, unix.AF_UNSPEC)
	if err != nil {
		return 0, fmt.Errorf("reading link statistics: %w", err)
	}
	msgs, err := syscall.ParseNetlinkMessage(b)
	if err != nil {
		return 0, fmt.Errorf("reading link statistics: %w", err)
	}
	for i := range msgs {
		m := &msgs[i]
		if m.Header.Type != unix.RTM_NEWLINK {
			continue
		}
		attrs, err := syscall.ParseNetlinkRouteAttr(m)
		if err != nil {
			continue
		}
		var name string
		var stats []byte
		for _, a := range attrs {
			switch a.Attr.Type {
			case unix.IFLA_IFNAME:
				name = string(trimNUL(a.Value))
			case unix.IFLA_STATS64:
				stats = a.Value
			}
		}
		if name != ifname {
			continue
		}
		// struct rtnl_link_stats64: 64-bit counters in host order;
		// rx_over_errors, rx_fifo_errors and rx_missed_errors are the
		// 12th, 15th and 16th.
		const over, fifo, missed = 11, 14, 15
		if len(stats) < (missed+1)*8 {
			return 0, fmt.Errorf("link statistics of %s: %d bytes, too short", ifname, len(stats))
		}
		u := func(i int) uint64 { return binary.NativeEndian.Uint64(stats[i*8:]) }
		return u(over) + u(fifo) + u(missed), nil
	}
	return 0, fmt.Errorf("link statistics: no interface %s", ifname)
}

func trimNUL(b []byte) []byte {
	for i, c := range b {
		if c == 0 {
			return b[:i]
		}
	}
	return b
}
