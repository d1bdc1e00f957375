// SPDX-License-Identifier: Apache-2.0

package datapath

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
)

// maxProbe matches TW_MAX_PROBE: the data plane gives up after this many
// slots, so user space never stores a rule further from its home slot.
const maxProbe = 128

const (
	slotEmpty = uint32(filterTwSlotStateTW_SLOT_EMPTY)
	slotUsed  = uint32(filterTwSlotStateTW_SLOT_USED)
	slotTomb  = uint32(filterTwSlotStateTW_SLOT_TOMB)
)

// slot is one exact-table entry, family-independent.
type slot struct {
	addr    netip.Addr
	state   uint32
	lastHit uint64
}

// exactTable is the user-space side of one open-addressing table
// (bpf/lib/table.h). All mutations happen under the interface lock; the
// data plane reads concurrently, so every write keeps each probe run
// valid at every instant:
//   - insert writes the key with the slot's old state first and flips the
//     state to USED second, so a reader never sees USED with a half-written
//     key;
//   - delete only turns USED into a tombstone, which probe runs skip, and
//     turns trailing tombstones into EMPTY only where a run ends anyway.
//
// A rule's counters are its slot's (shared by the CPUs, added atomically
// by the data plane) plus the pending counts of every CPU's tw_ex_hot
// entry tagged with the slot (bpf/lib/table.h). Every write of a slot here
// writes its counters as zero, and insert zeroes the hot entries of a slot
// before giving it a new rule, so a rule starts at zero.
type exactTable struct {
	v6    bool
	slots uint32
	ncpu  uint32
	seed  uint32
	keys  *ebpf.Map
	hot   *ebpf.Map  // shared by both families; tags tell them apart
	mem   *exactView // mapped on first read, see view
}

func (t *exactTable) home(a netip.Addr) uint32 {
	if t.v6 {
		return hash6(a, t.seed)
	}
	return hash4(a, t.seed)
}

func (t *exactTable) get(i uint32) (slot, error) {
	if t.v6 {
		var e filterTwExact6
		if err := t.keys.Lookup(i, &e); err != nil {
			return slot{}, fmt.Errorf("reading slot %d: %w", i, err)
		}
		return slot{netip.AddrFrom16(e.Addr), uint32(e.State), e.LastHit}, nil
	}
	var e filterTwExact4
	if err := t.keys.Lookup(i, &e); err != nil {
		return slot{}, fmt.Errorf("reading slot %d: %w", i, err)
	}
	return slot{addr4(e.Addr), uint32(e.State), e.LastHit}, nil
}

func (t *exactTable) put(i uint32, s slot) error {
	var err error
	if t.v6 {
		err = t.keys.Put(i, &filterTwExact6{Addr: s.addr.As16(), State: filterTwSlotState(s.state), LastHit: s.lastHit})
	} else {
		err = t.keys.Put(i, &filterTwExact4{Addr: word4(s.addr), State: filterTwSlotState(s.state), LastHit: s.lastHit})
	}
	if err != nil {
		return fmt.Errorf("writing slot %d: %w", i, err)
	}
	return nil
}

func addr4(w uint32) netip.Addr {
	var b [4]byte
	binary.NativeEndian.PutUint32(b[:], w)
	return netip.AddrFrom4(b)
}

func word4(a netip.Addr) uint32 {
	b := a.As4()
	return binary.NativeEndian.Uint32(b[:])
}

// find returns the slot holding a, or -1.
func (t *exactTable) find(a netip.Addr) (int64, error) {
	h := t.home(a)
	for i := uint32(0); i < maxProbe; i++ {
		idx := (h + i) & (t.slots - 1)
		s, err := t.get(idx)
		if err != nil {
			return -1, err
		}
		if s.state == slotEmpty {
			return -1, nil
		}
		if s.state == slotUsed && s.addr == a {
			return int64(idx), nil
		}
	}
	return -1, nil
}

// insert adds a; it reports false when a was already there.
func (t *exactTable) insert(a netip.Addr) (bool, error) {
	h := t.home(a)
	free := int64(-1)
	var freeState uint32
probe:
	for i := uint32(0); i < maxProbe; i++ {
		idx := (h + i) & (t.slots - 1)
		s, err := t.get(idx)
		if err != nil {
			return false, err
		}
		switch s.state {
		case slotUsed:
			if s.addr == a {
				return false, nil
			}
		case slotTomb:
			if free < 0 {
				free, freeState = int64(idx), slotTomb
			}
		default:
			if free < 0 {
				free, freeState = int64(idx), slotEmpty
			}
			break probe
		}
	}
	if free < 0 {
		return false, fmt.Errorf("%w: no free slot within %d of %s's home slot", ErrTableFull, maxProbe, a)
	}
	idx := uint32(free)
	if err := t.clearHot(idx); err != nil {
		return false, err
	}
	if err := t.put(idx, slot{addr: a, state: freeState}); err != nil {
		return false, err
	}
	if err := t.put(idx, slot{addr: a, state: slotUsed}); err != nil {
		return false, err
	}
	return true, nil
}

// remove deletes a; it reports false when a was not there.
func (t *exactTable) remove(a netip.Addr) (bool, error) {
	at, err := t.find(a)
	if err != nil || at < 0 {
		return false, err
	}
	idx := uint32(at)
	if err := t.put(idx, slot{addr: a, state: slotTomb}); err != nil {
		return false, err
	}
	// A tombstone followed by EMPTY ends every run that reaches it anyway:
	// clear it, and the tombstones before it, to keep misses short.
	next, err := t.get((idx + 1) & (t.slots - 1))
	if err != nil || next.state != slotEmpty {
		return true, err
	}
	for i := uint32(0); i < t.slots; i++ {
		j := (idx - i) & (t.slots - 1)
		s, err := t.get(j)
		if err != nil {
			return true, err
		}
		if s.state != slotTomb {
			break
		}
		if err := t.put(j, slot{addr: s.addr, state: slotEmpty}); err != nil {
			return true, err
		}
	}
	return true, nil
}

// all returns every used slot with its index and summed counters.
func (t *exactTable) all() ([]slotRule, error) {
	// Counters from the mapped view, which adds the hot entries'
	// pending counts; the states and keys from one batch read.
	v, err := t.view()
	if err != nil {
		return nil, err
	}
	var out []slotRule
	if t.v6 {
		es, err := readArray[filterTwExact6](t.keys)
		if err != nil {
			return nil, fmt.Errorf("reading table: %w", err)
		}
		for i, e := range es {
			if uint32(e.State) == slotUsed {
				c := t.sum(v, uint32(i))
				out = append(out, slotRule{slot{netip.AddrFrom16(e.Addr), slotUsed, e.LastHit}, c.Packets, c.Bytes})
			}
		}
		return out, nil
	}
	es, err := readArray[filterTwExact4](t.keys)
	if err != nil {
		return nil, fmt.Errorf("reading table: %w", err)
	}
	for i, e := range es {
		if uint32(e.State) == slotUsed {
			c := t.sum(v, uint32(i))
			out = append(out, slotRule{slot{addr4(e.Addr), slotUsed, e.LastHit}, c.Packets, c.Bytes})
		}
	}
	return out, nil
}

type slotRule struct {
	slot
	packets, bytes uint64
}

// readArray reads a whole BPF array in batches.
func readArray[V any](m *ebpf.Map) ([]V, error) {
	n := int(m.MaxEntries())
	out := make([]V, 0, n)
	// A batch of at most 64K entries, but never more than the map holds:
	// a full-size batch buffer for a small table cleared megabytes a read
	// (most of the time of a counters read, in profiles).
	chunk := min(n, 1<<16)
	keys := make([]uint32, chunk)
	vals := make([]V, chunk)
	var cursor ebpf.MapBatchCursor
	for len(out) < n {
		got, err := m.BatchLookup(&cursor, keys, vals, nil)
		out = append(out, vals[:got]...)
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	if len(out) != n {
		return nil, fmt.Errorf("read %d of %d entries", len(out), n)
	}
	return out, nil
}

// readPerCPUArray reads a whole per-CPU array in one batch: the values of
// index i are out[i*ncpu : (i+1)*ncpu], one per possible CPU.
func readPerCPUArray[V any](m *ebpf.Map) (out []V, ncpu int, err error) {
	if ncpu, err = ebpf.PossibleCPU(); err != nil {
		return nil, 0, err
	}
	n := int(m.MaxEntries())
	keys := make([]uint32, n)
	out = make([]V, n*ncpu)
	var cursor ebpf.MapBatchCursor
	got, err := m.BatchLookup(&cursor, keys, out, nil)
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return nil, 0, err
	}
	if got != n {
		return nil, 0, fmt.Errorf("read %d of %d entries", got, n)
	}
	return out, ncpu, nil
}
