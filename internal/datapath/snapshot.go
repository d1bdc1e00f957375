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
	// Flows are the interval's flows as a list (Snapshot); Drain hands
	// them to its FlowSink instead and leaves this nil.
	Flows []Flow `json:"flows"`
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

// A FlowSink receives a snapshot's flows while the drain holds them in
// the feature buffer: Start once, with the snapshot (its times set) and
// the number of flows, then Flow for each flow, merged over the CPUs.
// The *Flow is valid only during the call: the daemon adds it to its
// interval's tables and keeps nothing, so a flood's 2^19 keys cost no
// list of 80-byte Flows between the drain and the detectors (42 MB of
// the daemon's resident memory at that size, issue 32).
type FlowSink interface {
	Start(s *Snapshot, flows int)
	Flow(f *Flow)
}

// Snapshot is Drain with the flows kept as a list in s.Flows: the
// Datapath's working memory, valid until the next Snapshot or Drain.
func (d *Datapath) Snapshot() (*Snapshot, error) {
	l := &d.drained.list
	s, err := d.Drain(l)
	if err != nil {
		return nil, err
	}
	s.Flows = l.flows
	return s, nil
}

// Drain swaps the feature buffers and hands the flows of the one that
// was being filled to sink; the returned Snapshot has no Flows. Its Ports
// are this Datapath's working memory, valid until the next Drain: a
// flood's interval is up to 2^18 keys a CPU, and fresh slices every
// interval were 60 MiB of garbage that the heap doubled before each
// collection (the daemon's peak RSS went over its 256 MB figure under
// spoofed floods, issue 32). The swap is one update of the tw_feat
// map-in-map slot; the kernel returns from it only after an RCU grace
// period, when no XDP program can still hold the old buffer, so what is
// read is a consistent interval and the filter never waits. The drained
// buffer becomes the next spare.
func (d *Datapath) Drain(sink FlowSink) (*Snapshot, error) {
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
	var fs []filterTwFeatStats
	if err := d.maps.TwFstats.Lookup(uint32(0), &fs); err != nil {
		return nil, fmt.Errorf("reading feature stats: %w", err)
	}
	for _, v := range fs {
		s.Overflow += v.Overflow
	}
	s.MergeFallback = d.drained.drain(buf, d.sizes, &cfg.FeatSeed, s, sink).fallback
	s.Ports = d.drained.drainPorts(buf, d.sizes)
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
// slots are merged by key across CPUs into the slot where the key was
// first read, each merged flow is handed to sink, and then the slots read
// and the headers are zeroed for the buffer's next turn.
func drain(buf []filterTwFeatSlot, sz sizes, seed *featSeed) ([]Flow, drainStats) {
	var b drainBufs
	st := b.drain(buf, sz, seed, &Snapshot{}, &b.list)
	return b.list.flows, st
}

// drainBufs are a drain's index, key positions, port profile and the
// list Snapshot fills, kept for the next: the largest interval's, so a
// steady flood allocates nothing.
type drainBufs struct {
	tbl   []int32
	at    []int32 // flow j's key and merged counts are buf[at[j]]'s until the drain ends
	ports PortProfile
	list  flowList
}

// flowList is the FlowSink that keeps the flows as a list (Snapshot).
type flowList struct{ flows []Flow }

func (l *flowList) Start(_ *Snapshot, n int) { l.flows = grow(l.flows, n) }
func (l *flowList) Flow(f *Flow)             { l.flows = append(l.flows, *f) }

// grow returns s emptied with room for n, reusing its array when it has
// it and it is not far larger than n (a flood's arrays do not outlive it).
func grow[T any](s []T, n int) []T {
	if cap(s) < n || cap(s) > 4*n && cap(s) > 1<<16 {
		return make([]T, 0, n)
	}
	return s[:0]
}

func (b *drainBufs) drain(buf []filterTwFeatSlot, sz sizes, seed *featSeed, s *Snapshot, sink FlowSink) drainStats {
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
	// A key is merged into the slot it was first read from: no copy of
	// the keys (36 bytes a key, 19 MB of the daemon's resident memory at a
	// flood's 2^19 keys an interval) and no list of flows (80 bytes a
	// key); the slots are zeroed only once every flow has been handed on.
	at := grow(b.at, total)
	defer func() { b.tbl, b.at = tbl, at }()
	var st drainStats
	var spill map[filterTwFeatKey]int32
	add := func(pos int) int32 {
		at = append(at, int32(pos))
		return int32(len(at) - 1)
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
					tbl[p] = add(base + i)
					j = -2 // first seen: e is the flow's slot
					break
				} else if buf[at[k]].Key == e.Key {
					j = k
					break
				}
				p = (p + 1) & mask
			}
			if j == -1 {
				var ok bool
				if j, ok = spill[e.Key]; !ok {
					if spill == nil {
						spill = map[filterTwFeatKey]int32{}
					}
					spill[e.Key] = add(base + i)
					st.fallback++
					j = -2
				}
			}
			if j >= 0 {
				f := &buf[at[j]]
				f.Packets += e.Packets
				f.Bytes += e.Bytes
				f.Syns += e.Syns
			}
		}
		read[cpu] = i
	}
	sink.Start(s, len(at))
	var f Flow
	for _, pos := range at {
		e := &buf[pos]
		f = flowOf(&e.Key)
		f.Packets, f.Bytes, f.SYNs = e.Packets, e.Bytes, e.Syns
		sink.Flow(&f)
	}
	for cpu := 0; cpu < ncpu; cpu++ {
		clear(buf[cpu*slots : cpu*slots+read[cpu]])
		hdrs[cpu] = filterTwFeatSlot{}
	}
	return st
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

// Emit hands s.Flows to sink as Drain hands a buffer's: for data planes
// that hold an interval's flows as a list (the tests' fakes, replays).
func (s *Snapshot) Emit(sink FlowSink) *Snapshot {
	sink.Start(s, len(s.Flows))
	// The list's own elements: a copy per flow escapes to the heap
	// through the interface (80 bytes a flow, 400 MB over the bench's
	// five intervals of a million sources).
	for i := range s.Flows {
		sink.Flow(&s.Flows[i])
	}
	return s
}
