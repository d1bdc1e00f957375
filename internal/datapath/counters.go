// SPDX-License-Identifier: Apache-2.0

package datapath

import (
	"fmt"
	"math/bits"
	"net/netip"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Reading is one rule's counters as RuleCountersInto reads them; Found is
// false when the data plane holds no such block rule.
//
// A Reading also remembers where an exact rule was and whether it had
// gone quiet, so that the next RuleCountersInto over the same slice can
// skip a rule whose counters cannot have moved: one check of its slot
// instead of a hash, a probe and a read of every CPU's counters (at 500K
// bans, most of them quiet, that was most of an interval's work).
type Reading struct {
	Counter
	Found bool

	slot    uint32 // exact-table slot + 1; 0: unknown
	lastHit uint64 // the slot's last_hit when the counters were read
	// quiet: last_hit was 0 with zero counters, or older than twice its
	// resolution when read, so any later hit rewrites it (tw_touch).
	quiet bool
}

// lastHitRes is TW_LAST_HIT_RES_NS: the data plane rewrites a slot's
// last_hit only when it is older than this.
const lastHitRes = 250_000_000

// isQuiet reports whether a slot read at now with last_hit lh and
// counters c must change last_hit on its next hit. The data plane counts
// a hit, then rewrites last_hit when now - last_hit > lastHitRes (now from
// the coarse clock, a tick behind ours): with last_hit older than twice
// that, every hit after the read changes it. last_hit 0 means never hit
// since the rule was written, unless a hit is between its count and its
// touch: then the counters are not zero and the slot is not quiet.
func isQuiet(lh, now uint64, c Counter) bool {
	if lh == 0 {
		return c.Packets == 0 && c.Bytes == 0
	}
	return now > lh && now-lh > 2*lastHitRes
}

// read fills r from slot idx of t: last_hit first (atomically, so it is
// not read after the counters), then the counters.
func (t *exactTable) read(v *exactView, idx uint32, now uint64, r *Reading) {
	var lh uint64
	if t.v6 {
		lh = atomic.LoadUint64(&v.k6[idx].LastHit)
	} else {
		lh = atomic.LoadUint64(&v.k4[idx].LastHit)
	}
	c := t.sum(v, idx)
	*r = Reading{Counter: c, Found: true, slot: idx + 1, lastHit: lh, quiet: isQuiet(lh, now, c)}
}

// reread refreshes r for address a from the slot it remembers: false when
// it remembers none or the slot no longer holds a (the rule moved, or r
// was made for another rule), and a full lookup is needed.
func (t *exactTable) reread(v *exactView, a netip.Addr, now uint64, r *Reading) bool {
	if r.slot == 0 || !r.Found || r.slot > t.slots {
		return false
	}
	idx := r.slot - 1
	var state uint32
	var lh uint64
	if t.v6 {
		e := &v.k6[idx]
		state = uint32(atomic.LoadUint32((*uint32)(unsafe.Pointer(&e.State))))
		if state != slotUsed || e.Addr != a.As16() {
			return false
		}
		lh = atomic.LoadUint64(&e.LastHit)
	} else {
		e := &v.k4[idx]
		state = uint32(atomic.LoadUint32((*uint32)(unsafe.Pointer(&e.State))))
		if state != slotUsed || e.Addr != word4(a) {
			return false
		}
		lh = atomic.LoadUint64(&e.LastHit)
	}
	if r.quiet && lh == r.lastHit {
		return true // no hit since the last read: the counters are r's
	}
	t.read(v, idx, now, r)
	return true
}

// exactView is an exact table, counters included, mapped read-only into
// this process (BPF_F_MMAPABLE): reading every ban's counters is then
// memory reads, where a lookup syscall per slot costs ~300 ns (seconds at
// 500K bans). Writes keep going through the syscall, which orders them as
// exactTable's concurrency rules need.
type exactView struct {
	k4  []filterTwExact4
	k6  []filterTwExact6
	hot []filterTwHot // read-write: insert zeroes a reused slot's entries
	raw [][]byte      // what to munmap
}

// hotSlots and hotV6 are TW_HOT_SLOTS and TW_HOT_V6; maxTornReads bounds
// the quick retries of one counter reading (sum), maxTornWaits the ones
// after a tornWait each (100 ms in all) for a writer that is not running.
const (
	maxTornReads = 1000
	maxTornWaits = 200
	tornWait     = 500 * time.Microsecond
	hotSlots     = uint32(filterTwHotLimitTW_HOT_SLOTS)
	hotV6        = uint32(filterTwHotLimitTW_HOT_V6)
)

func mmapArray[V any](m *ebpf.Map, n int) ([]V, []byte, error) {
	return mmapArrayProt[V](m, n, unix.PROT_READ)
}

func mmapArrayProt[V any](m *ebpf.Map, n int, prot int) ([]V, []byte, error) {
	var v V
	size := n * int(unsafe.Sizeof(v))
	b, err := unix.Mmap(m.FD(), 0, size, prot, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("mapping %d entries: %w", n, err)
	}
	return unsafe.Slice((*V)(unsafe.Pointer(&b[0])), n), b, nil
}

// view maps the table once; the mapping lives until the Datapath closes.
func (t *exactTable) view() (*exactView, error) {
	if t.mem != nil {
		return t.mem, nil
	}
	v := &exactView{}
	var raw []byte
	var err error
	if t.v6 {
		v.k6, raw, err = mmapArray[filterTwExact6](t.keys, int(t.slots))
	} else {
		v.k4, raw, err = mmapArray[filterTwExact4](t.keys, int(t.slots))
	}
	if err != nil {
		return nil, fmt.Errorf("exact table: %w", err)
	}
	v.raw = append(v.raw, raw)
	if v.hot, raw, err = mmapArrayProt[filterTwHot](t.hot, int(hotSlots*t.ncpu), unix.PROT_READ|unix.PROT_WRITE); err != nil {
		v.unmap()
		return nil, fmt.Errorf("exact hot entries: %w", err)
	}
	v.raw = append(v.raw, raw)
	t.mem = v
	return v, nil
}

func (v *exactView) unmap() {
	for _, b := range v.raw {
		_ = unix.Munmap(b)
	}
	v.raw = nil
}

func (t *exactTable) unmap() {
	if t != nil && t.mem != nil {
		t.mem.unmap()
		t.mem = nil
	}
}

// findMem is find over the mapped table: the same probe, no syscall.
func (t *exactTable) findMem(v *exactView, a netip.Addr) int64 {
	h := t.home(a)
	var w uint32
	var a16 [16]byte
	if t.v6 {
		a16 = a.As16()
	} else {
		w = word4(a)
	}
	for i := uint32(0); i < maxProbe; i++ {
		idx := (h + i) & (t.slots - 1)
		var state uint32
		var match bool
		if t.v6 {
			e := &v.k6[idx]
			state, match = uint32(e.State), e.Addr == a16
		} else {
			e := &v.k4[idx]
			state, match = uint32(e.State), e.Addr == w
		}
		if state == slotEmpty {
			return -1
		}
		if state == slotUsed && match {
			return int64(idx)
		}
	}
	return -1
}

// tag is slot idx's tag in tw_ex_hot.
func (t *exactTable) tag(idx uint32) uint32 {
	if t.v6 {
		return idx | hotV6
	}
	return idx
}

// sum reads slot idx's counters: the slot's, which the data plane adds to
// atomically while we read, plus the pending counts of every CPU's hot
// entry tagged with it. A CPU that moves an entry's counts into its slot
// keeps the entry's seq odd meanwhile, so a reading during which any seq
// was odd or moved may have seen the counts twice or not at all, and is
// taken again; the move is rare (an entry taken over while holding
// counts) and takes nanoseconds, so this almost never loops more than
// once. The bound only keeps a reader from spinning on a CPU that stopped
// mid-move, which a BPF program cannot.
func (t *exactTable) sum(v *exactView, idx uint32) Counter {
	tag := t.tag(idx)
	var buf [64]uint32
	seq := buf[:]
	if t.ncpu > uint32(len(buf)) {
		seq = make([]uint32, t.ncpu)
	}
	for try := 0; ; try++ {
		// A writer inside its update for this long is not running: a
		// vCPU the hypervisor descheduled holds its seq odd until it is
		// back (the kernel-VM test saw a reading go down when 1,000
		// quick retries gave up on one). Wait for it, a bounded while.
		if try > maxTornReads {
			time.Sleep(tornWait)
		}
		var c Counter
		torn := false
		for cpu := uint32(0); cpu < t.ncpu; cpu++ {
			e := &v.hot[cpu*hotSlots+idx&(hotSlots-1)]
			seq[cpu] = atomic.LoadUint32(&e.Seq)
			if seq[cpu]&1 != 0 && try < maxTornReads+maxTornWaits {
				torn = true
				break
			}
			if atomic.LoadUint32(&e.Tag) == tag {
				c.Packets += atomic.LoadUint64(&e.Packets)
				c.Bytes += atomic.LoadUint64(&e.Bytes)
			}
		}
		if torn {
			continue
		}
		if t.v6 {
			e := &v.k6[idx]
			c.Packets += atomic.LoadUint64(&e.Packets)
			c.Bytes += atomic.LoadUint64(&e.Bytes)
		} else {
			e := &v.k4[idx]
			c.Packets += atomic.LoadUint64(&e.Packets)
			c.Bytes += atomic.LoadUint64(&e.Bytes)
		}
		for cpu := uint32(0); cpu < t.ncpu; cpu++ {
			if atomic.LoadUint32(&v.hot[cpu*hotSlots+idx&(hotSlots-1)].Seq) != seq[cpu] {
				torn = true
				break
			}
		}
		if !torn || try >= maxTornReads+maxTornWaits {
			return c
		}
	}
}

// clearHot zeroes the pending counts that CPUs hold for slot idx, before
// the slot takes a new rule: they belong to the rule that had it before.
// Only the counts: the seq belongs to the entry's CPU.
func (t *exactTable) clearHot(idx uint32) error {
	v, err := t.view()
	if err != nil {
		return err
	}
	tag := t.tag(idx)
	for cpu := uint32(0); cpu < t.ncpu; cpu++ {
		e := &v.hot[cpu*hotSlots+idx&(hotSlots-1)]
		if atomic.LoadUint32(&e.Tag) == tag {
			atomic.StoreUint64(&e.Packets, 0)
			atomic.StoreUint64(&e.Bytes, 0)
		}
	}
	return nil
}

// RuleCountersInto reads the counters of block rules ps into out (out[i]
// for ps[i]; len(out) must be len(ps)): what the daemon calls every
// interval, with a slice it keeps, so 500K bans cost no map and no
// allocation. Exact rules are read from the mapped tables; prefix rules
// with one listing of the tries (there are at most capacity.prefix).
func (d *Datapath) RuleCountersInto(ps []netip.Prefix, out []Reading) error {
	if len(out) != len(ps) {
		return fmt.Errorf("%w: %d readings for %d prefixes", ErrInvalid, len(out), len(ps))
	}
	now := monoNow()
	var exact [2][]int32 // indices into ps of the exact rules to look up, per family
	var views [2]*exactView
	tables := [2]*exactTable{d.ex4, d.ex6}
	var ids map[netip.Prefix]uint32
	var lctrs []filterTwCtr
	l := d.prefixes()
	for i, p := range ps {
		if isExact(p) {
			f := 0
			if p.Addr().Is6() {
				f = 1
			}
			if views[f] == nil {
				v, err := tables[f].view()
				if err != nil {
					return err
				}
				views[f] = v
			}
			// The slot this reading came from last time, when it still
			// holds the rule: in ps order, which is also out's, so the
			// only random access is the slot itself.
			if tables[f].reread(views[f], p.Addr(), now, &out[i]) {
				continue
			}
			out[i] = Reading{}
			exact[f] = append(exact[f], int32(i))
			continue
		}
		out[i] = Reading{}
		// An LPM lookup returns the longest match, maybe a broader prefix:
		// ids come from the tries' own keys instead.
		if ids == nil {
			es, err := l.entries(false)
			if err != nil {
				return err
			}
			ids = make(map[netip.Prefix]uint32, len(es))
			for _, e := range es {
				ids[e.prefix] = e.val.Id
			}
			if lctrs, err = readArray[filterTwCtr](l.ctrs); err != nil {
				return fmt.Errorf("reading counters: %w", err)
			}
		}
		id, ok := ids[p]
		if !ok || id >= l.cap {
			continue
		}
		var c Counter
		for cpu := uint32(0); cpu < l.ncpu; cpu++ {
			c.Packets += lctrs[cpu*l.cap+id].Packets
			c.Bytes += lctrs[cpu*l.cap+id].Bytes
		}
		out[i] = Reading{Counter: c, Found: true}
	}
	for f, t := range tables {
		if len(exact[f]) == 0 {
			continue
		}
		v := views[f]
		for _, i := range t.bySlot(ps, exact[f]) {
			if idx := t.findMem(v, ps[i].Addr()); idx >= 0 {
				t.read(v, uint32(idx), now, &out[i])
			}
		}
	}
	return nil
}

// bySlot orders the indices of ps by the home slot of their address
// (a counting sort on the top bits): read in slot order, the table is
// walked front to back, which the CPU prefetches, instead of a cache miss
// per ban in random order (~270 ns each at 500K bans here).
func (t *exactTable) bySlot(ps []netip.Prefix, idx []int32) []int32 {
	const bucketBits = 12
	shift := max(bits.Len32(t.slots-1)-bucketBits, 0)
	var count [1<<bucketBits + 1]int32
	homes := make([]uint32, len(idx))
	for j, i := range idx {
		homes[j] = (t.home(ps[i].Addr()) & (t.slots - 1)) >> shift
		count[homes[j]+1]++
	}
	for b := 1; b < len(count); b++ {
		count[b] += count[b-1]
	}
	out := make([]int32, len(idx))
	for j, i := range idx {
		out[count[homes[j]]] = i
		count[homes[j]]++
	}
	return out
}

// RuleCounters reads the counters of the given block rules only, as a
// map; prefixes that are not blocked are absent. See RuleCountersInto.
func (d *Datapath) RuleCounters(ps []netip.Prefix) (map[netip.Prefix]Counter, error) {
	rs := make([]Reading, len(ps))
	if err := d.RuleCountersInto(ps, rs); err != nil {
		return nil, err
	}
	out := make(map[netip.Prefix]Counter, len(ps))
	for i, r := range rs {
		if r.Found {
			out[ps[i]] = r.Counter
		}
	}
	return out, nil
}
