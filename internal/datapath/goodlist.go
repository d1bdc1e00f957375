// SPDX-License-Identifier: Apache-2.0

package datapath

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
)

// The known-good list: sources that flow rules with KnownGoodBypass let
// pass whatever their action (clients that completed a TCP handshake, or
// that were steady before the attack). Two hashes, tw_good4 and tw_good6,
// of the capacity set at load (Options.KnownGoodCapacity): a full one
// refuses an insert (AddKnownGood fails, and the daemon tries again), and
// never drops a member on its own. The daemon keeps its members under the
// capacity and chooses whom to let go; an LRU chose for it, before it was
// full (the kernel keeps free slots on each CPU's list), and the members
// it dropped were never put back.
// Sources are looked up as the filter sees them, an IPv4-mapped source as
// its IPv4 address, so IPv4-mapped inputs are stored as IPv4.
//
// An address alone is no proof: anyone can spoof a member's. A bypass
// rule lets a member's packet pass when it belongs to one of the host's
// TCP connections (a socket for its exact 4-tuple), and otherwise only
// within the member's own rate (SetKnownGoodRate, all CPUs together);
// beyond it the rule acts as on anyone's. A flood spoofed from a member
// then costs the member nothing but its new connections beyond that rate,
// which a syn-cookie rule still answers.

// DefaultKnownGoodPPS is the rate new state starts with: far above what
// one client opens connections at, far below a flood.
const DefaultKnownGoodPPS = 1000

// SetKnownGoodRate sets the packets per second (all CPUs together) each
// known-good source may pass bypass rules with outside the host's
// connections; 0 lets none pass but those of connections.
func (d *Datapath) SetKnownGoodRate(pps uint32) error {
	lk, err := d.lock()
	if err != nil {
		return err
	}
	defer lk.Unlock()
	return d.updateConfig(func(c *filterTwConfig) { c.GoodPps = pps })
}

// KnownGoodRate is the rate SetKnownGoodRate set.
func (d *Datapath) KnownGoodRate() (uint32, error) {
	cfg, err := d.config()
	if err != nil {
		return 0, err
	}
	return cfg.GoodPps, nil
}

// goodKeys validates and splits addrs; nothing is written on error.
func goodKeys(addrs []netip.Addr) (v4 []uint32, v6 [][16]byte, err error) {
	for _, a := range addrs {
		if !a.IsValid() || a.Zone() != "" {
			return nil, nil, fmt.Errorf("%w: known-good address %q: want an IPv4 or IPv6 address without zone", ErrInvalid, a)
		}
		a = a.Unmap()
		if a.Is4() {
			v4 = append(v4, word4(a))
		} else {
			v6 = append(v6, a.As16())
		}
	}
	return v4, v6, nil
}

// AddKnownGood puts addresses on the known-good list (again, for ones
// already there: that refreshes them). An invalid or zoned address is
// rule.ErrInvalid and adds nothing.
func (d *Datapath) AddKnownGood(addrs []netip.Addr) error {
	v4, v6, err := goodKeys(addrs)
	if err != nil {
		return err
	}
	lk, err := d.lock()
	if err != nil {
		return err
	}
	defer lk.Unlock()
	// The sieve first: a member is never on a list without its bit.
	if err := d.sieveAdd(v4, v6); err != nil {
		return fmt.Errorf("adding known-good sources: %w", err)
	}
	now := monoNow()
	if len(v4) > 0 {
		vals := make([]filterTwGood, len(v4))
		for i := range vals {
			vals[i].AddedNs = now
		}
		if _, err := d.maps.TwGood4.BatchUpdate(v4, vals, nil); err != nil {
			return fmt.Errorf("adding known-good IPv4 sources: %w", err)
		}
	}
	if len(v6) > 0 {
		vals := make([]filterTwGood, len(v6))
		for i := range vals {
			vals[i].AddedNs = now
		}
		if _, err := d.maps.TwGood6.BatchUpdate(v6, vals, nil); err != nil {
			return fmt.Errorf("adding known-good IPv6 sources: %w", err)
		}
	}
	return nil
}

// RemoveKnownGood takes addresses off the known-good list. One that is not
// there is no error: a caller's view may be older than the list (an
// insert it was told failed, another process), and the result is the same.
// An invalid or zoned address is rule.ErrInvalid and removes nothing.
func (d *Datapath) RemoveKnownGood(addrs []netip.Addr) error {
	v4, v6, err := goodKeys(addrs)
	if err != nil {
		return err
	}
	lk, err := d.lock()
	if err != nil {
		return err
	}
	defer lk.Unlock()
	for _, k := range v4 {
		if err := d.maps.TwGood4.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("removing known-good %s: %w", addr4(k), err)
		}
	}
	for _, k := range v6 {
		if err := d.maps.TwGood6.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("removing known-good %s: %w", netip.AddrFrom16(k), err)
		}
	}
	// Then the sieve, to what the members left need.
	return d.sieveRebuild()
}

// KnownGood lists the known-good sources, IPv4 first, in no set order.
func (d *Datapath) KnownGood() ([]netip.Addr, error) {
	k4, err := readGoodKeys[uint32](d.maps.TwGood4)
	if err != nil {
		return nil, fmt.Errorf("listing known-good IPv4 sources: %w", err)
	}
	k6, err := readGoodKeys[[16]byte](d.maps.TwGood6)
	if err != nil {
		return nil, fmt.Errorf("listing known-good IPv6 sources: %w", err)
	}
	out := make([]netip.Addr, 0, len(k4)+len(k6))
	for _, k := range k4 {
		out = append(out, addr4(k))
	}
	for _, k := range k6 {
		out = append(out, netip.AddrFrom16(k))
	}
	return out, nil
}

// KnownGoodCount is how many sources are on the known-good list.
func (d *Datapath) KnownGoodCount() (int, error) {
	n4, err := readGoodKeys[uint32](d.maps.TwGood4)
	if err != nil {
		return 0, fmt.Errorf("counting known-good IPv4 sources: %w", err)
	}
	n6, err := readGoodKeys[[16]byte](d.maps.TwGood6)
	if err != nil {
		return 0, fmt.Errorf("counting known-good IPv6 sources: %w", err)
	}
	return len(n4) + len(n6), nil
}

// KnownGoodMaps are the known-good lists, for a program that adds sources
// from the data plane (the SYN proxy, after a validated handshake) to
// share through ebpf.CollectionOptions.MapReplacements. The maps belong to
// d: callers must not close them.
func (d *Datapath) KnownGoodMaps() (v4, v6 *ebpf.Map) { return d.maps.TwGood4, d.maps.TwGood6 }

// readGoodKeys reads every key of a known-good list in batches (one syscall per
// 4096 entries, where iterating costs two per entry).
func readGoodKeys[K any](m *ebpf.Map) ([]K, error) {
	const chunk = 4096
	keys := make([]K, chunk)
	vals := make([]filterTwGood, chunk)
	var out []K
	var cursor ebpf.MapBatchCursor
	for {
		n, err := m.BatchLookup(&cursor, keys, vals, nil)
		out = append(out, keys[:n]...)
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
	}
}
