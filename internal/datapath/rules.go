// SPDX-License-Identifier: Apache-2.0

package datapath

import (
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"time"

	"github.com/cilium/ebpf"
	"github.com/tierwall/tierwall/internal/rule"
	"golang.org/x/sys/unix"
)

// Kind tells which table a rule lives in.
type Kind string

const (
	KindExact  Kind = "exact"  // /32 or /128 block, in the exact tables
	KindPrefix Kind = "prefix" // shorter block prefix, in an LPM trie
	KindAllow  Kind = "allow"  // allowlist prefix; wins over every block
)

// Rule is one entry with its counters summed over CPUs.
type Rule struct {
	Prefix  netip.Prefix `json:"prefix"`
	Kind    Kind         `json:"kind"`
	Packets uint64       `json:"packets"`
	Bytes   uint64       `json:"bytes"`
	// LastHit is when the rule last matched, to about 250 ms; nil if never.
	LastHit *time.Time `json:"last_hit,omitempty"`
}

func (d *Datapath) initTables(seed uint32) {
	d.ex4 = &exactTable{slots: d.sizes.slots4, ncpu: d.sizes.ncpu, seed: seed, keys: d.maps.TwEx4, hot: d.maps.TwExHot}
	d.ex6 = &exactTable{v6: true, slots: d.sizes.slots6, ncpu: d.sizes.ncpu, seed: seed, keys: d.maps.TwEx6, hot: d.maps.TwExHot}
}

// CheckPrefix rejects what cannot be a rule; see rule.CheckPrefix.
func CheckPrefix(p netip.Prefix) error { return rule.CheckPrefix(p) }

func isExact(p netip.Prefix) bool { return p.IsSingleIP() }

// lpm is one LPM trie with its per-CPU counter array, indexed by an id
// stored in the entry's value. The ids of the IPv4 and IPv6 tries of a
// kind share one counter array.
type lpm struct {
	v4, v6 *ebpf.Map
	ctrs   *ebpf.Map
	cap    uint32
	ncpu   uint32
}

type lpmEntry struct {
	prefix  netip.Prefix
	val     filterTwLpmVal
	packets uint64
	bytes   uint64
}

func lpmKey(p netip.Prefix) any {
	if p.Addr().Is4() {
		return &filterTwLpm4Key{Prefixlen: uint32(p.Bits()), Addr: word4(p.Addr())}
	}
	return &filterTwLpm6Key{Prefixlen: uint32(p.Bits()), Addr: p.Addr().As16()}
}

func (l *lpm) trie(p netip.Prefix) *ebpf.Map {
	if p.Addr().Is4() {
		return l.v4
	}
	return l.v6
}

// entries lists both tries. LPM lookups from user space return the longest
// match, not the exact key, so membership is decided on this listing.
func (l *lpm) entries(withCounters bool) ([]lpmEntry, error) {
	var out []lpmEntry
	var k4 filterTwLpm4Key
	var v filterTwLpmVal
	it := l.v4.Iterate()
	for it.Next(&k4, &v) {
		out = append(out, lpmEntry{prefix: netip.PrefixFrom(addr4(k4.Addr), int(k4.Prefixlen)), val: v})
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("listing IPv4 trie: %w", err)
	}
	var k6 filterTwLpm6Key
	it = l.v6.Iterate()
	for it.Next(&k6, &v) {
		out = append(out, lpmEntry{prefix: netip.PrefixFrom(netip.AddrFrom16(k6.Addr), int(k6.Prefixlen)), val: v})
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("listing IPv6 trie: %w", err)
	}
	if withCounters && len(out) > 0 {
		ctr, err := readArray[filterTwCtr](l.ctrs)
		if err != nil {
			return nil, fmt.Errorf("reading counters: %w", err)
		}
		for i := range out {
			for c := uint32(0); c < l.ncpu; c++ {
				out[i].packets += ctr[c*l.cap+out[i].val.Id].Packets
				out[i].bytes += ctr[c*l.cap+out[i].val.Id].Bytes
			}
		}
	}
	return out, nil
}

func (l *lpm) insert(p netip.Prefix, used map[uint32]bool) error {
	id := uint32(0)
	for used[id] {
		id++
	}
	if id >= l.cap {
		return fmt.Errorf("%w: %d entries", ErrTableFull, l.cap)
	}
	keys := make([]uint32, l.ncpu)
	for c := range keys {
		keys[c] = uint32(c)*l.cap + id
	}
	if _, err := l.ctrs.BatchUpdate(keys, make([]filterTwCtr, l.ncpu), nil); err != nil {
		return fmt.Errorf("zeroing counters: %w", err)
	}
	if err := l.trie(p).Update(lpmKey(p), &filterTwLpmVal{Id: id}, ebpf.UpdateNoExist); err != nil {
		if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.E2BIG) {
			return fmt.Errorf("%w: %d entries", ErrTableFull, l.cap)
		}
		return fmt.Errorf("adding %s: %w", p, err)
	}
	used[id] = true
	return nil
}

func (d *Datapath) prefixes() *lpm {
	return &lpm{v4: d.maps.TwPfx4, v6: d.maps.TwPfx6, ctrs: d.maps.TwPfxCtr, cap: d.sizes.pfx, ncpu: d.sizes.ncpu}
}

func (d *Datapath) allows() *lpm {
	return &lpm{v4: d.maps.TwAllow4, v6: d.maps.TwAllow6, ctrs: d.maps.TwAllowCtr, cap: d.sizes.allow, ncpu: d.sizes.ncpu}
}

// change applies adds or deletes to one kind of table all or nothing: it
// validates and checks capacity first, and if a later step fails it undoes
// the steps already taken, so a failed call leaves the tables as they were.
func (d *Datapath) change(ps []netip.Prefix, allow, add bool) (err error) {
	for _, p := range ps {
		if err := CheckPrefix(p); err != nil {
			return err
		}
	}
	lk, err := d.lock()
	if err != nil {
		return err
	}
	defer lk.Unlock()

	cfg, err := d.config()
	if err != nil {
		return err
	}
	l := d.prefixes()
	if allow {
		l = d.allows()
	}
	entries, err := l.entries(false)
	if err != nil {
		return err
	}
	have := map[netip.Prefix]bool{}
	used := map[uint32]bool{}
	for _, e := range entries {
		have[e.prefix] = true
		used[e.val.Id] = true
	}

	// Plan: dedupe, drop no-ops, check existence and capacity.
	var plan []netip.Prefix
	seen := map[netip.Prefix]bool{}
	n4, n6, nl := 0, 0, 0
	for _, p := range ps {
		if seen[p] {
			continue
		}
		seen[p] = true
		exact := !allow && isExact(p)
		var present bool
		if exact {
			t := d.ex4
			if p.Addr().Is6() {
				t = d.ex6
			}
			at, err := t.find(p.Addr())
			if err != nil {
				return err
			}
			present = at >= 0
		} else {
			present = have[p]
		}
		if add == present {
			if !add {
				return fmt.Errorf("%w: %s", ErrNoRule, p)
			}
			continue // adding what is there already is a no-op
		}
		plan = append(plan, p)
		switch {
		case exact && p.Addr().Is4():
			n4++
		case exact:
			n6++
		default:
			nl++
		}
	}
	if add {
		if cfg.Exact4N+uint32(n4) > cfg.Exact4Cap {
			return fmt.Errorf("%w: exact IPv4 table holds %d of %d rules, %d more asked", ErrTableFull, cfg.Exact4N, cfg.Exact4Cap, n4)
		}
		if cfg.Exact6N+uint32(n6) > cfg.Exact6Cap {
			return fmt.Errorf("%w: exact IPv6 table holds %d of %d rules, %d more asked", ErrTableFull, cfg.Exact6N, cfg.Exact6Cap, n6)
		}
		if len(entries)+nl > int(l.cap) {
			return fmt.Errorf("%w: %s table holds %d of %d prefixes, %d more asked", ErrTableFull, kindName(allow), len(entries), l.cap, nl)
		}
	}

	var done []netip.Prefix
	defer func() {
		if err != nil {
			for i := len(done) - 1; i >= 0; i-- {
				_ = d.apply(done[i], allow, !add, l, used) // best effort undo
			}
		}
	}()
	for _, p := range plan {
		if err := d.apply(p, allow, add, l, used); err != nil {
			return err
		}
		done = append(done, p)
	}
	return nil
}

func kindName(allow bool) string {
	if allow {
		return "allow"
	}
	return "prefix"
}

// apply makes one change and keeps the entry counts in the config, which
// the data plane reads to skip empty tables, in step with the tables.
func (d *Datapath) apply(p netip.Prefix, allow, add bool, l *lpm, used map[uint32]bool) error {
	v4 := p.Addr().Is4()
	delta := uint32(1)
	if !add {
		delta = ^uint32(0) // -1
	}
	if !allow && isExact(p) {
		t := d.ex6
		if v4 {
			t = d.ex4
		}
		var err error
		if add {
			_, err = t.insert(p.Addr())
		} else {
			_, err = t.remove(p.Addr())
		}
		if err != nil {
			return fmt.Errorf("updating exact rule %s: %w", p, err)
		}
		return d.updateConfig(func(c *filterTwConfig) {
			if v4 {
				c.Exact4N += delta
			} else {
				c.Exact6N += delta
			}
		})
	}
	if add {
		// Count first: a reader that sees the entry must not skip the trie.
		if err := d.updateConfig(func(c *filterTwConfig) { bumpLPM(c, allow, v4, delta) }); err != nil {
			return err
		}
		if err := l.insert(p, used); err != nil {
			_ = d.updateConfig(func(c *filterTwConfig) { bumpLPM(c, allow, v4, ^uint32(0)) })
			return fmt.Errorf("adding %s rule %s: %w", kindName(allow), p, err)
		}
		return nil
	}
	if err := l.trie(p).Delete(lpmKey(p)); err != nil {
		return fmt.Errorf("deleting %s rule %s: %w", kindName(allow), p, err)
	}
	return d.updateConfig(func(c *filterTwConfig) { bumpLPM(c, allow, v4, delta) })
}

func bumpLPM(c *filterTwConfig, allow, v4 bool, delta uint32) {
	switch {
	case allow && v4:
		c.Allow4N += delta
	case allow:
		c.Allow6N += delta
	case v4:
		c.Pfx4N += delta
	default:
		c.Pfx6N += delta
	}
}

// Block adds block rules: /32 and /128 go to the exact tables, shorter
// prefixes to the LPM tries. All or nothing.
func (d *Datapath) Block(ps ...netip.Prefix) error { return d.change(ps, false, true) }

// Unblock deletes block rules. All or nothing; a missing rule is ErrNoRule.
func (d *Datapath) Unblock(ps ...netip.Prefix) error { return d.change(ps, false, false) }

// Allow adds allowlist prefixes. All or nothing.
func (d *Datapath) Allow(ps ...netip.Prefix) error { return d.change(ps, true, true) }

// Disallow deletes allowlist prefixes. All or nothing.
func (d *Datapath) Disallow(ps ...netip.Prefix) error { return d.change(ps, true, false) }

// Blocked lists block rules, exact and prefix, with counters.
func (d *Datapath) Blocked() ([]Rule, error) {
	var out []Rule
	for _, t := range []*exactTable{d.ex4, d.ex6} {
		rs, err := t.all()
		if err != nil {
			return nil, err
		}
		for _, r := range rs {
			out = append(out, Rule{Prefix: netip.PrefixFrom(r.addr, r.addr.BitLen()), Kind: KindExact,
				Packets: r.packets, Bytes: r.bytes, LastHit: monoToWall(r.lastHit)})
		}
	}
	es, err := d.prefixes().entries(true)
	if err != nil {
		return nil, err
	}
	out = append(out, lpmRules(es, KindPrefix)...)
	sortRules(out)
	return out, nil
}

// Allowed lists allowlist prefixes with counters.
func (d *Datapath) Allowed() ([]Rule, error) {
	es, err := d.allows().entries(true)
	if err != nil {
		return nil, err
	}
	out := lpmRules(es, KindAllow)
	sortRules(out)
	return out, nil
}

func lpmRules(es []lpmEntry, k Kind) []Rule {
	out := make([]Rule, 0, len(es))
	for _, e := range es {
		out = append(out, Rule{Prefix: e.prefix, Kind: k, Packets: e.packets, Bytes: e.bytes, LastHit: monoToWall(e.val.LastHit)})
	}
	return out
}

func sortRules(rs []Rule) {
	sort.Slice(rs, func(i, j int) bool {
		a, b := rs[i].Prefix, rs[j].Prefix
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c < 0
		}
		return a.Bits() < b.Bits()
	})
}

func monoNow() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}

// monoToWall converts the data plane's CLOCK_MONOTONIC(_COARSE)
// nanoseconds to wall time.
func monoToWall(ns uint64) *time.Time {
	if ns == 0 {
		return nil
	}
	t := time.Now().Add(-time.Duration(int64(monoNow()) - int64(ns)))
	return &t
}
