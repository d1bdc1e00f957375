// SPDX-License-Identifier: Apache-2.0

package datapath

import (
	"fmt"
	"math/bits"
	"net/netip"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Flow is one feature-extraction key over one snapshot interval.
type Flow struct {
	Src     netip.Addr `json:"src"`
	Dst     netip.Addr `json:"dst"`
	Proto   uint8      `json:"proto"`
	Packets uint64     `json:"packets"`
	Bytes   uint64     `json:"bytes"`
	SYNs    uint64     `json:"syns"`
}

// Snapshot is everything that passed the filter between Start and End: the
// flows and their port profile.
type Snapshot struct {
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	Flows []Flow    `json:"flows"`
	// Overflow is the total of packets never counted because a buffer was
	// full, since attach (not per snapshot).
	Overflow uint64 `json:"overflow_packets_total"`
	// MergeFallback is how many keys of this snapshot were merged through
	// the fallback map because their run in the merge index reached
	// mergeProbe: a handful by chance, many only for crafted keys.
	MergeFallback int `json:"merge_fallback_keys"`
	// Ports is the port profile of the same traffic over the same
	// interval (2 MiB: not in JSON; use its Top).
	Ports *PortProfile `json:"-"`
}

// Snapshot swaps the feature buffers and returns the one that was being
// filled. Its Flows and Ports are this Datapath's working memory, valid
// until the next Snapshot: a flood's interval is up to 2^18 keys a CPU,
// and fresh slices every interval were 60 MiB of garbage that the heap
// doubled before each collection (the daemon's peak RSS went over its
// 256 MB figure under spoofed floods, issue 32). The swap is one update of the tw_feat map-in-map slot; the kernel
// returns from it only after an RCU grace period, when no XDP program can
// still hold the old buffer, so what is read is a consistent interval and
// the filter never waits. The drained buffer becomes the next spare.
func (d *Datapath) Snapshot() (*Snapshot, error) {
	lk, err := d.lock()
	if err != nil {
		return nil, err
	}
	defer lk.Unlock()

	var activeID ebpf.MapID
	if err := d.maps.TwFeat.Lookup(uint32(0), &activeID); err != nil {
		return nil, fmt.Errorf("reading active feature buffer: %w", err)
	}
	infoA, err := d.maps.TwFeatA.Info()
	if err != nil {
		return nil, fmt.Errorf("inspecting feature buffer: %w", err)
	}
	idA, _ := infoA.ID()
	old, spare := d.maps.TwFeatA, d.maps.TwFeatB
	if activeID != idA {
		old, spare = spare, old
	}
	cfg, err := d.config()
	if err != nil {
		return nil, err
	}
	if err := d.maps.TwFeat.Put(uint32(0), spare); err != nil {
		return nil, fmt.Errorf("swapping feature buffers: %w", err)
	}
	now := monoNow()
	if err := d.updateConfig(func(c *filterTwConfig) { c.FeatSince = now }); err != nil {
		return nil, err
	}

	s := &Snapshot{Start: *monoToWall(cfg.FeatSince), End: *monoToWall(now)}
	buf, err := d.featureSlots(old)
	if err != nil {
		return nil, err
	}
	var ds drainStats
	s.Flows, ds = d.drained.drain(buf, d.sizes, &cfg.FeatSeed)
	s.MergeFallback = ds.fallback
	s.Ports = d.drained.drainPorts(buf, d.sizes)
	var fs []filterTwFeatStats
	if err := d.maps.TwFstats.Lookup(uint32(0), &fs); err != nil {
		return nil, fmt.Errorf("reading feature stats: %w", err)
	}
	for _, v := range fs {
		s.Overflow += v.Overflow
	}
	return s, nil
}

// featureSlots maps a feature buffer into this process (once) and returns
// it as the generated slot type: the struct is the C layout
// (structs.HostLayout, 64 bytes, asserted in types.h), so slots are read in
// place with no copy and no decoding. cilium/ebpf's Map.Memory only offers
// copying ReadAt/WriteAt, which doubles the memory traffic of a drain.
func (d *Datapath) featureSlots(m *ebpf.Map) ([]filterTwFeatSlot, error) {
	if s, ok := d.featMem[m]; ok {
		return s, nil
	}
	n := int(d.sizes.featEntries())
	size := n * int(unsafe.Sizeof(filterTwFeatSlot{}))
	b, err := unix.Mmap(m.FD(), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mapping feature buffer: %w", err)
	}
	s := unsafe.Slice((*filterTwFeatSlot)(unsafe.Pointer(&b[0])), n)
	if d.featMem == nil {
		d.featMem = map[*ebpf.Map][]filterTwFeatSlot{}
	}
	d.featMem[m] = s
	return s, nil
}

func (d *Datapath) unmapFeatures() {
	for m, s := range d.featMem {
		b := unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(s[0])))
		_ = unix.Munmap(b)
		delete(d.featMem, m)
	}
}

// mergeProbe bounds a probe run in the merge index. The index is seeded
// and at most half full, so runs are short; a key that would need a longer
// one (crafted keys sharing a home slot, or rare bad luck) is merged
// through a Go map instead, whose hash is randomised per map. Either way a
// key costs at most mergeProbe probes and one map operation, so no choice
// of keys makes a drain quadratic.
const mergeProbe = 32

// drainStats is the work of one drain: probes of the merge index (at most
// keys × mergeProbe) and keys merged through the fallback map.
type drainStats struct {
	probes   int
	fallback int
}

// drain reads and empties a quiescent feature buffer in place: each CPU
// region is scanned (only until its header's key count is reached), used
// slots are merged by key across CPUs and zeroed, then the headers are
// reset for the buffer's next turn.
func drain(buf []filterTwFeatSlot, sz sizes, seed *featSeed) ([]Flow, drainStats) {
	var b drainBufs
	return b.drain(buf, sz, seed)
}

// drainBufs are a drain's index, key positions, flows and port profile,
// kept for the next: the largest interval's, so a steady flood allocates
// nothing.
type drainBufs struct {
	tbl   []int32
	at    []int32 // flows[j]'s key is buf[at[j]].Key until the drain ends
	flows []Flow
	ports PortProfile
}

// grow returns s emptied with room for n, reusing its array when it has
// it and it is not far larger than n (a flood's arrays do not outlive it).
func grow[T any](s []T, n int) []T {
	if cap(s) < n || cap(s) > 4*n && cap(s) > 1<<16 {
		return make([]T, 0, n)
	}
	return s[:0]
}

func (b *drainBufs) drain(buf []filterTwFeatSlot, sz sizes, seed *featSeed) ([]Flow, drainStats) {
	ncpu, slots := int(sz.ncpu), int(sz.featSlots)
	hdrs := buf[ncpu*slots:]
	total := 0
	for _, h := range hdrs {
		total += int(h.Packets)
	}
	// Merge across CPUs through an open-addressing index keyed by the data
	// plane's own hash and seed: regions are laid out in hash order, so
	// index probes and counter updates walk memory sequentially (a Go map
	// here costs a cache miss per key, over half of the 100 ms budget at
	// 300K keys). A power of two above 2 × keys: at most half full.
	mask := uint32(1<<bits.Len(uint(2*total)) - 1)
	tbl := grow(b.tbl, int(mask+1))[:mask+1]
	for i := range tbl {
		tbl[i] = -1
	}
	// A merged key is compared with the slot it was first read from, not
	// with a copy: the slots are zeroed only once every region is read
	// (a copy of the keys cost 36 bytes a key, 19 MB of the daemon's
	// resident memory at a flood's 2^19 keys an interval).
	at := grow(b.at, total)
	flows := grow(b.flows, total)
	defer func() { b.tbl, b.at, b.flows = tbl, at, flows }()
	var st drainStats
	var spill map[filterTwFeatKey]int32
	add := func(pos int, k *filterTwFeatKey) int32 {
		at = append(at, int32(pos))
		flows = append(flows, flowOf(k))
		return int32(len(flows) - 1)
	}
	read := make([]int, ncpu) // slots read per region, zeroed at the end
	for cpu := 0; cpu < ncpu; cpu++ {
		left := hdrs[cpu].Packets
		base := cpu * slots
		region := buf[base : base+slots]
		i := 0
		for ; i < len(region) && left > 0; i++ {
			e := &region[i]
			if e.Key.Family == 0 {
				continue
			}
			left--
			// A key is in the index iff its first mergeProbe slots
			// hold it: runs only grow during a drain, so one that was
			// too long for a key stays too long, and the key is in
			// spill.
			j := int32(-1)
			p := featHash(&e.Key, seed) & mask
			for n := 0; n < mergeProbe; n++ {
				st.probes++
				if k := tbl[p]; k < 0 {
					j = add(base+i, &e.Key)
					tbl[p] = j
					break
				} else if buf[at[k]].Key == e.Key {
					j = k
					break
				}
				p = (p + 1) & mask
			}
			if j < 0 {
				var ok bool
				if j, ok = spill[e.Key]; !ok {
					if spill == nil {
						spill = map[filterTwFeatKey]int32{}
					}
					j = add(base+i, &e.Key)
					spill[e.Key] = j
					st.fallback++
				}
			}
			f := &flows[j]
			f.Packets += e.Packets
			f.Bytes += e.Bytes
			f.SYNs += e.Syns
		}
		read[cpu] = i
	}
	for cpu := 0; cpu < ncpu; cpu++ {
		clear(buf[cpu*slots : cpu*slots+read[cpu]])
		hdrs[cpu] = filterTwFeatSlot{}
	}
	return flows, st
}

// flowOf decodes a key. The data plane already records an IPv4-mapped
// source as family 4 (tw_unmap); a family-6 key with one, which no current
// program writes, is unmapped here the same way, so no Flow ever carries a
// source that no rule can name, and Src and Dst are of one family.
func flowOf(k *filterTwFeatKey) Flow {
	f := Flow{Proto: k.Proto}
	if k.Family == 4 {
		f.Src = netip.AddrFrom4([4]byte(k.Src[:4]))
		f.Dst = netip.AddrFrom4([4]byte(k.Dst[:4]))
		return f
	}
	f.Src, f.Dst = netip.AddrFrom16(k.Src), netip.AddrFrom16(k.Dst)
	if f.Src.Is4In6() {
		f.Src = f.Src.Unmap()
		if f.Dst.Is4In6() {
			f.Dst = f.Dst.Unmap()
		} else {
			f.Dst = netip.IPv4Unspecified()
		}
	}
	return f
}
