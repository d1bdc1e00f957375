// SPDX-License-Identifier: Apache-2.0

package scaleout

import (
	"hash/fnv"
	"net/netip"
	"strconv"

	"github.com/tierwall/tierwall/internal/control/detect"
)

// Partitioner maps a destination to its partition. Every collector and
// every detector of a deployment must use the same one (the same N and
// host groups): a destination that two collectors put in different
// partitions reaches two detectors, each with part of its traffic.
type Partitioner struct {
	// N is the number of partitions (subjects); detectors own disjoint
	// sets of them. More partitions than detectors lets a partition move
	// without rehashing the others.
	N int
	// Groups are the host groups: all of a group's addresses go to one
	// partition, so that the detector owning it judges the group's total
	// (a carpet bombing spreads over many /24s of one group).
	Groups *detect.HostGroups
}

// Of is dst's partition: the hash of its host group's name, or of its
// /24 (IPv4) or /48 (IPv6). A prefix, not the address: one victim's
// neighbours land together, which keeps a partition's destinations few
// per prefix and a prefix's FlowSpec decisions in one detector.
func (p Partitioner) Of(dst netip.Addr) int {
	if p.N <= 1 {
		return 0
	}
	h := fnv.New32a()
	if g := p.Groups.Lookup(dst); g != nil {
		_, _ = h.Write([]byte("g:" + g.Name))
	} else {
		bits := 24
		if dst.Is6() && !dst.Is4In6() {
			bits = 48
		}
		pfx, _ := dst.Unmap().Prefix(bits)
		b, _ := pfx.Addr().MarshalBinary()
		_, _ = h.Write(b)
	}
	return int(h.Sum32() % uint32(p.N))
}

// Subject is the NATS subject of partition i under prefix.
func Subject(prefix string, i int) string { return prefix + "." + strconv.Itoa(i) }
