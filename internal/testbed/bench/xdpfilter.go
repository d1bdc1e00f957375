// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
)

// FillXDPFilter writes IPv4 source addresses into the filter_ipv4 map of
// the most recently loaded xdp-filter (xdp-tools), as `xdp-filter ip ADDR
// -m src` would one process per address: the evaluation's baseline needs
// thousands. Values are MAP_FLAG_SRC on every CPU, as the CLI writes them.
func FillXDPFilter(srcs []netip.Addr) error {
	var best *ebpf.Map
	var id ebpf.MapID
	for {
		next, err := ebpf.MapGetNextID(id)
		if err != nil {
			break
		}
		id = next
		m, err := ebpf.NewMapFromID(id)
		if err != nil {
			continue
		}
		if info, err := m.Info(); err != nil || info.Name != "filter_ipv4" {
			m.Close()
			continue
		}
		if best != nil {
			best.Close()
		}
		best = m
	}
	if best == nil {
		return fmt.Errorf("xdp-filter: no filter_ipv4 map loaded")
	}
	defer best.Close()
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return err
	}
	keys := make([]uint32, len(srcs))
	vals := make([]uint64, len(srcs)*ncpu)
	for i, a := range srcs {
		b := a.As4()
		keys[i] = uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
		for c := 0; c < ncpu; c++ {
			vals[i*ncpu+c] = 1
		}
	}
	if _, err := best.BatchUpdate(keys, vals, nil); err != nil {
		return fmt.Errorf("xdp-filter: writing addresses: %w", err)
	}
	return nil
}
