// SPDX-License-Identifier: Apache-2.0

package datapath

import (
	"fmt"
	"net/netip"
	"unsafe"

	"github.com/cilium/ebpf"
)

// Hooks for benchmarks and the evaluation: they fill the filter's tables
// and feature buffers at sizes no operator verb would, through the same
// layout code the verbs use.

// BlockBulk inserts many exact IPv4/IPv6 rules without the per-call
// bookkeeping of Block (no batch rollback); for benchmarks and the
// evaluation, which build tables of up to a million rules. It refuses to go past capacity.
func (d *Datapath) BlockBulk(addrs []netip.Addr) error {
	lk, err := d.lock()
	if err != nil {
		return err
	}
	defer lk.Unlock()
	var n4, n6 uint32
	for _, a := range addrs {
		t := d.ex6
		if a.Is4() {
			t = d.ex4
		}
		added, err := t.insert(a)
		if err != nil {
			return err
		}
		if added && a.Is4() {
			n4++
		} else if added {
			n6++
		}
	}
	return d.updateConfig(func(c *filterTwConfig) { c.Exact4N += n4; c.Exact6N += n6 })
}

// ExactFootprint4 is the size in bytes of the IPv4 exact table (keys and
// counters): what a packet's lookup can touch.
func (d *Datapath) ExactFootprint4() int {
	return int(d.sizes.slots4) * int(unsafe.Sizeof(filterTwExact4{}))
}

// CPUs is the number of per-CPU regions the feature buffers have.
func (d *Datapath) CPUs() int { return int(d.sizes.ncpu) }

// PreloadFeatures writes entries distinct IPv4 keys, each with packets
// packets, into every CPU's region of the active feature buffer, at the
// slots tw_features would have put them (hash home, then linear probe):
// the worst case of a snapshot, where each key merges across all CPUs.
func (d *Datapath) PreloadFeatures(entries int, packets uint64) error {
	ncpu, slots := int(d.sizes.ncpu), int(d.sizes.featSlots)
	if entries > slots/2 {
		return fmt.Errorf("%w: %d feature keys per CPU (capacity %d)", ErrInvalid, entries, slots/2)
	}
	cfg, err := d.config()
	if err != nil {
		return err
	}
	img := make([]filterTwFeatSlot, d.sizes.featEntries())
	for c := 0; c < ncpu; c++ {
		for i := 0; i < entries; i++ {
			k := filterTwFeatKey{Family: 4, Proto: 17, Src: [16]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}, Dst: [16]byte{192, 168, 0, 1}}
			slot := int(featHash(&k, &cfg.FeatSeed)) & (slots - 1)
			for img[c*slots+slot].Key.Family != 0 {
				slot = (slot + 1) & (slots - 1)
			}
			img[c*slots+slot] = filterTwFeatSlot{Key: k, Packets: packets, Bytes: 64 * packets}
		}
		img[ncpu*slots+c].Packets = uint64(entries)
	}
	var active ebpf.MapID
	if err := d.maps.TwFeat.Lookup(uint32(0), &active); err != nil {
		return fmt.Errorf("reading the active feature buffer: %w", err)
	}
	m := d.maps.TwFeatA
	if info, err := m.Info(); err == nil {
		if id, _ := info.ID(); id != active {
			m = d.maps.TwFeatB
		}
	}
	buf, err := d.featureSlots(m)
	if err != nil {
		return err
	}
	copy(buf, img)
	return nil
}
