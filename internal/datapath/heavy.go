// SPDX-License-Identifier: Apache-2.0

package datapath

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"
)

// The heavy-hitter detector (bpf/lib/heavy.h): the data plane counts the
// sources no rule decided over windows of a few milliseconds and drops
// one over its threshold from its next packet, through a provisional
// entry that expires by itself, reporting it through tw_hh_events. The
// daemon confirms an entry (a ban replaces it) or revokes it (it passes
// until it expires). These are its verbs.

// HeavyHitter configures the detector. Thresholds are rates; the data
// plane compares counts per Window with them.
type HeavyHitter struct {
	Window        time.Duration // 0: the detector is off
	TTL           time.Duration // a provisional entry's life unless confirmed
	PacketsPerSec uint64        // 0: no packet threshold
	SYNsPerSec    uint64        // 0: no SYN threshold
	Prefix6       int           // IPv6 sources are counted per prefix of this length
	Monitor       bool          // provisional entries count but never drop
}

// Limits of HeavyHitter's fields.
const (
	MinHeavyWindow = time.Millisecond
	MaxHeavyWindow = time.Second
	MaxHeavyTTL    = 10 * time.Minute
)

// kernelTick is the kernel's jiffy (1/CONFIG_HZ): the data plane counts in
// windows of whole jiffies, and the coarse clock's resolution is one.
var kernelTick = sync.OnceValues(func() (time.Duration, error) {
	var ts unix.Timespec
	if err := unix.ClockGetres(unix.CLOCK_MONOTONIC_COARSE, &ts); err != nil {
		return 0, fmt.Errorf("reading the kernel's tick: %w", err)
	}
	// CONFIG_HZ is 100 to 1000; anything else is not a tick.
	if t := time.Duration(ts.Nano()); t >= time.Millisecond && t <= 10*time.Millisecond {
		return t, nil
	}
	return 0, fmt.Errorf("%w: the coarse clock's resolution %v is not a kernel tick", ErrInvalid, time.Duration(ts.Nano()))
})

// provTickSlack is added to a provisional entry's life in jiffies for the
// marks that let its source's packets reach the provisional table: jiffies
// can lag the precise clock the entry expires by (a tick being handled
// late), and a mark that ended early would let a caught source through.
const provTickSlack = 20 * time.Millisecond

// windowTicks is the window the data plane counts over: Window rounded
// down to a power of two jiffies, at least one (10ms → 8ms at HZ=250), so
// that a packet's window is a shift of jiffies, which the data plane reads
// with a load where a precise clock costs a helper call, and so that each
// window holds exactly its length of traffic.
func (h HeavyHitter) windowTicks() (shift uint32, win time.Duration, err error) {
	if h.Window <= 0 {
		return 0, 0, nil
	}
	t, err := kernelTick()
	if err != nil {
		return 0, 0, err
	}
	if n := h.Window / t; n > 1 {
		shift = uint32(bits.Len64(uint64(n)) - 1)
	}
	return shift, t << shift, nil
}

// EffectiveWindow is the window the data plane counts over (windowTicks);
// 0 when off, or when the kernel's tick cannot be read (SetHeavyHitter
// says why).
func (h HeavyHitter) EffectiveWindow() time.Duration {
	_, w, _ := h.windowTicks()
	return w
}

// SampledOneIn is the sketch's sampling at this configuration: it counts
// one packet in SampledOneIn (1: every packet).
func (h HeavyHitter) SampledOneIn() uint32 {
	all, _ := perWindow(h.PacketsPerSec, h.EffectiveWindow(), 1)
	return 1 << sampleShift(all)
}

func (h HeavyHitter) check() error {
	if h.Window == 0 {
		return nil
	}
	switch {
	case h.Window < MinHeavyWindow || h.Window > MaxHeavyWindow:
		return fmt.Errorf("%w: heavy-hitter window %v outside %v..%v", ErrInvalid, h.Window, MinHeavyWindow, MaxHeavyWindow)
	case h.TTL < h.Window || h.TTL > MaxHeavyTTL:
		return fmt.Errorf("%w: provisional TTL %v outside the window (%v)..%v", ErrInvalid, h.TTL, h.Window, MaxHeavyTTL)
	case h.Prefix6 < 32 || h.Prefix6 > 128:
		return fmt.Errorf("%w: heavy-hitter IPv6 prefix /%d outside /32../128", ErrInvalid, h.Prefix6)
	case h.PacketsPerSec == 0 && h.SYNsPerSec == 0:
		return fmt.Errorf("%w: heavy-hitter detector on with neither a packet nor a SYN threshold", ErrInvalid)
	}
	_, win, err := h.windowTicks()
	if err != nil {
		return fmt.Errorf("heavy-hitter window: %w", err)
	}
	for _, r := range []uint64{h.PacketsPerSec, h.SYNsPerSec} {
		if r != 0 && r*uint64(win)/uint64(time.Second) < 2 {
			return fmt.Errorf("%w: heavy-hitter threshold %d/s is under two packets per %v window", ErrInvalid, r, h.Window)
		}
	}
	return nil
}

// perWindow converts a rate to a count per window for all CPUs and per
// CPU (rounded down, at least 1: a source over the total is over the
// per-CPU count on at least one CPU). 0 is off: a count never reached.
func perWindow(rate uint64, window time.Duration, ncpu uint32) (all, local uint32) {
	if rate == 0 {
		return ^uint32(0), ^uint32(0)
	}
	n := min(rate*uint64(window)/uint64(time.Second), uint64(^uint32(0)-1))
	return uint32(n), uint32(max(n/uint64(ncpu), 1))
}

// minSampled is the fewest sampled packets a window's packet threshold
// may stand for: the sketch samples 1 in 2^s packets with s as large as
// keeps the threshold at minSampled samples or more. Sampling spares most
// packets the sketch's writes, its dearest part; the sampled count only
// finds candidates (at half the sampled threshold, which a source at the
// threshold passes with a margin of 2.8 standard deviations at 32: it
// fails to in about 1 window in 400, and becomes one in the next), and a
// candidate is caught on an exact count, so sampling noise can neither
// miss a source over its threshold nor catch one under it. 32, not 64:
// the sketch's work on a sampled packet (~55 ns, its line mostly out of
// cache) is most of the detector's clean-path cost, and 1 in 16 at the
// defaults costs ~4 ns a packet less than 1 in 8 (BENCHMARKS.md).
const minSampled = 32

// maxSampleShift bounds the sampling at 1 in 65536, far beyond any
// threshold a window holds in practice.
const maxSampleShift = 16

// sampleShift is the sampling of a packet threshold of all per window.
func sampleShift(all uint32) uint32 {
	if all == ^uint32(0) || all < 2*minSampled {
		return 0
	}
	return min(uint32(bits.Len32(all/minSampled)-1), maxSampleShift)
}

// SetHeavyHitter configures the detector (Window 0 turns it off). The
// sketch's hash seed is chosen once per created state, at random, so
// that sources cannot be picked to share counters.
func (d *Datapath) SetHeavyHitter(h HeavyHitter) error {
	if err := h.check(); err != nil {
		return err
	}
	lk, err := d.lock()
	if err != nil {
		return err
	}
	defer lk.Unlock()
	var c filterTwHhConfig
	if err := d.maps.TwHhCfg.Lookup(uint32(0), &c); err != nil {
		return fmt.Errorf("reading the heavy-hitter config: %w", err)
	}
	if c.Seed == 0 {
		var b [4]byte
		if _, err := rand.Read(b[:]); err != nil {
			return fmt.Errorf("seeding the sketch: %w", err)
		}
		c.Seed = binary.NativeEndian.Uint32(b[:]) | 1
	}
	shift, win, err := h.windowTicks()
	if err != nil {
		return fmt.Errorf("heavy-hitter window: %w", err)
	}
	c.WindowNs, c.TtlNs, c.TickShift, c.TtlTicks = uint64(win), uint64(h.TTL), shift, 0
	if win > 0 {
		t, _ := kernelTick() // read by windowTicks already
		c.TtlTicks = uint32((h.TTL+provTickSlack+t-1)/t) + 1
	}
	c.PktThresh, c.PktLocal = perWindow(h.PacketsPerSec, win, d.sizes.ncpu)
	c.PktSum, c.SampleShift = c.PktThresh, sampleShift(c.PktThresh)
	if c.SampleShift > 0 {
		// The sketch's sum makes a candidate at half the sampled threshold.
		c.PktSum = max((c.PktThresh>>c.SampleShift)/2, 1)
		c.PktLocal = max(c.PktSum/d.sizes.ncpu, 1)
	}
	c.SynThresh, c.SynLocal = perWindow(h.SYNsPerSec, win, d.sizes.ncpu)
	c.Prefix6 = uint32(h.Prefix6)
	c.Monitor = 0
	if h.Monitor {
		c.Monitor = 1
	}
	if err := d.maps.TwHhCfg.Put(uint32(0), &c); err != nil {
		return fmt.Errorf("writing the heavy-hitter config: %w", err)
	}
	return nil
}

// Provisional is a source the detector caught.
type Provisional struct {
	Prefix  netip.Prefix `json:"prefix"` // a /32, or an IPv6 prefix of HeavyHitter.Prefix6
	Kind    string       `json:"kind"`   // packets or syns: the threshold it crossed
	Count   uint32       `json:"count"`  // its count in the window that caught it
	Added   time.Time    `json:"added"`
	Expires time.Time    `json:"expires"`
	Packets uint64       `json:"packets"` // dropped (counted, in monitor-only mode) since
	Bytes   uint64       `json:"bytes"`
	Monitor bool         `json:"monitor"`
	Revoked bool         `json:"revoked"`
}

func hhKind(k uint8) string {
	switch filterTwHhKind(k) {
	case filterTwHhKindTW_HH_PACKETS:
		return "packets"
	case filterTwHhKindTW_HH_SYNS:
		return "syns"
	}
	return fmt.Sprintf("kind-%d", k)
}

func wall(ns uint64) time.Time {
	if t := monoToWall(ns); t != nil {
		return *t
	}
	return time.Time{}
}

func provisional(p netip.Prefix, v *filterTwProv) Provisional {
	return Provisional{Prefix: p, Kind: hhKind(v.Kind), Count: v.Count, Added: wall(v.AddedNs), Expires: wall(v.ExpiresNs),
		Packets: v.Packets, Bytes: v.Bytes,
		Monitor: v.Flags&uint8(filterTwProvFlagTW_PROV_MONITOR) != 0, Revoked: v.Flags&uint8(filterTwProvFlagTW_PROV_REVOKED) != 0}
}

// Provisionals lists the provisional tables, expired entries included
// (ExpireProvisionals removes them), candidates not: those are the data
// plane's own, neither dropped nor reported.
func (d *Datapath) Provisionals() ([]Provisional, error) {
	ps, _, err := d.provisionals()
	return ps, err
}

// provisionals lists the catches, and the candidates' prefixes that have
// expired.
func (d *Datapath) provisionals() (_ []Provisional, expiredCands []netip.Prefix, _ error) {
	now := monoNow()
	var c filterTwHhConfig
	if err := d.maps.TwHhCfg.Lookup(uint32(0), &c); err != nil {
		return nil, nil, fmt.Errorf("reading the heavy-hitter config: %w", err)
	}
	var out []Provisional
	var cands []netip.Prefix
	add := func(p netip.Prefix, v *filterTwProv) {
		switch {
		case v.Cand == 0:
			out = append(out, provisional(p, v))
		case v.ExpiresNs <= now:
			cands = append(cands, p)
		}
	}
	var k4 uint32
	var v filterTwProv
	it := d.maps.TwProv4.Iterate()
	for it.Next(&k4, &v) {
		add(netip.PrefixFrom(addr4(k4), 32), &v)
	}
	if err := it.Err(); err != nil {
		return nil, nil, fmt.Errorf("listing IPv4 provisional drops: %w", err)
	}
	var k6 [16]byte
	it = d.maps.TwProv6.Iterate()
	for it.Next(&k6, &v) {
		add(netip.PrefixFrom(netip.AddrFrom16(k6), int(c.Prefix6)), &v)
	}
	if err := it.Err(); err != nil {
		return nil, nil, fmt.Errorf("listing IPv6 provisional drops: %w", err)
	}
	return out, cands, nil
}

// provKey is the map and key of a provisional prefix: a /32, or an IPv6
// prefix as the data plane keys it (masked to its length).
func (d *Datapath) provKey(p netip.Prefix) (*ebpf.Map, any, error) {
	if !p.IsValid() {
		return nil, nil, fmt.Errorf("%w: provisional prefix %v", ErrInvalid, p)
	}
	p = p.Masked()
	if p.Addr().Is4() {
		if p.Bits() != 32 {
			return nil, nil, fmt.Errorf("%w: IPv4 provisional entries are /32, not %v", ErrInvalid, p)
		}
		return d.maps.TwProv4, word4(p.Addr()), nil
	}
	return d.maps.TwProv6, p.Addr().As16(), nil
}

// RemoveProvisional deletes an entry: after the daemon confirmed it (a
// ban now drops the source) or once it expired. One already gone is no
// error.
func (d *Datapath) RemoveProvisional(p netip.Prefix) error {
	m, k, err := d.provKey(p)
	if err != nil {
		return err
	}
	if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("removing provisional %v: %w", p, err)
	}
	return nil
}

// RevokeProvisional lets a caught source pass for exempt (and keeps the
// detector from catching it again meanwhile): a rail refused its ban. A
// source not in the table gets the entry all the same, so that a revoke
// racing the entry's expiry still holds.
func (d *Datapath) RevokeProvisional(p netip.Prefix, exempt time.Duration) error {
	m, k, err := d.provKey(p)
	if err != nil {
		return err
	}
	var v filterTwProv
	if err := m.Lookup(k, &v); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("reading provisional %v: %w", p, err)
	}
	now := monoNow()
	if v.AddedNs == 0 {
		v.AddedNs = now
	}
	v.ExpiresNs = now + uint64(exempt)
	v.Flags |= uint8(filterTwProvFlagTW_PROV_REVOKED)
	v.Cand = 0 // a candidate revoked is a revoked entry, counted no more
	if err := m.Put(k, &v); err != nil {
		return fmt.Errorf("revoking provisional %v: %w", p, err)
	}
	return nil
}

// ExpireProvisionals removes the entries past their expiry and says how
// many; the data plane removes those it meets, this the rest. Expired
// candidates are removed too, and not counted: they were never catches.
func (d *Datapath) ExpireProvisionals() (int, error) {
	ps, cands, err := d.provisionals()
	if err != nil {
		return 0, err
	}
	for _, p := range cands {
		if err := d.RemoveProvisional(p); err != nil {
			return 0, err
		}
	}
	now, n := time.Now(), 0
	for _, p := range ps {
		if p.Expires.After(now) {
			continue
		}
		if err := d.RemoveProvisional(p.Prefix); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// SetProtected replaces the prefixes the detector never catches: the
// daemon's protected and allowlisted ones. An IPv6 prefix longer than the
// detector's IPv6 prefix is also entered as its covering prefix, since the
// detector catches whole prefixes: a flood from a protected host's
// neighbours must not drop the host.
func (d *Datapath) SetProtected(ps []netip.Prefix, prefix6 int) error {
	want4 := map[filterTwLpm4Key]bool{}
	want6 := map[filterTwLpm6Key]bool{}
	for _, p := range ps {
		if !p.IsValid() {
			return fmt.Errorf("%w: protected prefix %v", ErrInvalid, p)
		}
		p = p.Masked()
		if p.Addr().Is4() {
			want4[filterTwLpm4Key{Prefixlen: uint32(p.Bits()), Addr: word4(p.Addr())}] = true
			continue
		}
		want6[filterTwLpm6Key{Prefixlen: uint32(p.Bits()), Addr: p.Addr().As16()}] = true
		if p.Bits() > prefix6 && prefix6 >= 32 {
			c := netip.PrefixFrom(p.Addr(), prefix6).Masked()
			want6[filterTwLpm6Key{Prefixlen: uint32(prefix6), Addr: c.Addr().As16()}] = true
		}
	}
	if len(want4) > protectCapacity || len(want6) > protectCapacity {
		return fmt.Errorf("%w: %d IPv4 and %d IPv6 protected prefixes, at most %d each", ErrInvalid, len(want4), len(want6), protectCapacity)
	}
	lk, err := d.lock()
	if err != nil {
		return err
	}
	defer lk.Unlock()
	if err := syncLPM(d.maps.TwProtect4, want4); err != nil {
		return fmt.Errorf("protected IPv4 prefixes: %w", err)
	}
	if err := syncLPM(d.maps.TwProtect6, want6); err != nil {
		return fmt.Errorf("protected IPv6 prefixes: %w", err)
	}
	return nil
}

// syncLPM makes m hold exactly want: additions first, so that a prefix
// being replaced by a wider one is never unprotected in between.
func syncLPM[K comparable](m *ebpf.Map, want map[K]bool) error {
	for k := range want {
		if err := m.Put(k, uint32(1)); err != nil {
			return err
		}
	}
	var k K
	var v uint32
	var stale []K
	it := m.Iterate()
	for it.Next(&k, &v) {
		if !want[k] {
			stale = append(stale, k)
		}
	}
	if err := it.Err(); err != nil {
		return err
	}
	for _, k := range stale {
		if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return err
		}
	}
	return nil
}

// HeavyStats is what the detector did, summed over CPUs.
type HeavyStats struct {
	Caught        uint64 `json:"caught"`         // provisional entries made
	TableFull     uint64 `json:"table_full"`     // over threshold, no room: not held
	RingFull      uint64 `json:"ring_full"`      // entry made, its report lost
	ExemptGood    uint64 `json:"exempt_good"`    // over threshold, known good
	ExemptProtect uint64 `json:"exempt_protect"` // over threshold, protected
	Expired       uint64 `json:"expired"`        // removed by the data plane at expiry
	Checks        uint64 `json:"checks"`         // cross-CPU sums
	Marked        uint64 `json:"marked"`         // provisional-table lookups the sketch's marks let by
	Candidates    uint64 `json:"candidates"`     // sources counted exactly after the sampled sketch found them near the threshold
}

// HeavyHitterStats sums the detector's per-CPU counters.
func (d *Datapath) HeavyHitterStats() (HeavyStats, error) {
	var per []filterTwHhStats
	if err := d.maps.TwHhCtr.Lookup(uint32(0), &per); err != nil {
		return HeavyStats{}, fmt.Errorf("reading heavy-hitter counters: %w", err)
	}
	var s HeavyStats
	for _, c := range per {
		s.Caught += c.Caught
		s.TableFull += c.TableFull
		s.RingFull += c.RingFull
		s.ExemptGood += c.ExemptGood
		s.ExemptProtect += c.ExemptProtect
		s.Expired += c.Expired
		s.Checks += c.Checks
		s.Marked += c.Marked
		s.Candidates += c.Candidates
	}
	return s, nil
}

// HeavyEvent is one report of a caught source.
type HeavyEvent struct {
	Prefix  netip.Prefix
	Kind    string
	Count   uint32
	At      time.Time
	Monitor bool
}

// HeavyEvents reads the detector's reports.
type HeavyEvents struct{ r *ringbuf.Reader }

// HeavyHitterEvents opens the report ring. One reader at a time: the
// daemon's.
func (d *Datapath) HeavyHitterEvents() (*HeavyEvents, error) {
	r, err := ringbuf.NewReader(d.maps.TwHhEvents)
	if err != nil {
		return nil, fmt.Errorf("opening the heavy-hitter ring: %w", err)
	}
	return &HeavyEvents{r: r}, nil
}

// Read returns the reports waiting, waiting until deadline for the first
// (a zero deadline waits for one; a past one does not wait).
func (e *HeavyEvents) Read(deadline time.Time, max int) ([]HeavyEvent, error) {
	e.r.SetDeadline(deadline)
	var out []HeavyEvent
	var rec ringbuf.Record
	for len(out) < max {
		if err := e.r.ReadInto(&rec); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return out, nil
			}
			return out, fmt.Errorf("reading the heavy-hitter ring: %w", err)
		}
		var ev filterTwHhEvent
		if len(rec.RawSample) < binary.Size(ev) {
			continue // not ours: the layout is checked at load
		}
		if _, err := binary.Decode(rec.RawSample, binary.NativeEndian, &ev); err != nil {
			continue
		}
		var p netip.Prefix
		if ev.Family == 4 {
			p = netip.PrefixFrom(netip.AddrFrom4([4]byte(ev.Addr[:4])), 32)
		} else {
			p = netip.PrefixFrom(netip.AddrFrom16(ev.Addr), int(ev.Prefix))
		}
		out = append(out, HeavyEvent{Prefix: p, Kind: hhKind(ev.Kind), Count: ev.Count, At: wall(ev.AtNs),
			Monitor: ev.Flags&uint8(filterTwProvFlagTW_PROV_MONITOR) != 0})
		e.r.SetDeadline(time.Now()) // the rest without waiting
	}
	return out, nil
}

// Close releases the reader.
func (e *HeavyEvents) Close() error { return e.r.Close() }

// HeavyHitterReports returns the reports waiting (at most max), without
// waiting, through a reader this Datapath opens on first use and closes
// with itself.
func (d *Datapath) HeavyHitterReports(max int) ([]HeavyEvent, error) {
	if d.heavyEvents == nil {
		ev, err := d.HeavyHitterEvents()
		if err != nil {
			return nil, err
		}
		d.heavyEvents = ev
	}
	return d.heavyEvents.Read(time.Now(), max)
}
