// SPDX-License-Identifier: Apache-2.0

// Package tiertest is a hardware table in memory, for tests of everything
// that drives a tier.Table (placement, the daemon) without a NIC or root.
// It keeps the contract of real backends: Install refuses past capacity,
// Remove returns the last counters, and failures can be injected.
package tiertest

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"time"

	"github.com/tierwall/tierwall/internal/tier"
)

// Table is a fake tier.Table. NoCounters makes it behave like ethtool
// n-tuple (no per-rule counters). InstallErr and ListErr, when set, are
// returned by every Install and List.
type Table struct {
	Cap        int
	NoCounters bool
	Latency    time.Duration
	InstallErr error
	ListErr    error

	Rules    map[tier.Match]*tier.Counters
	Installs int // successful installs
	Removes  int // successful removes
	Lists    int // List calls
}

var _ tier.Table = (*Table)(nil)

// New returns an empty table of capacity k with counters.
func New(k int) *Table {
	return &Table{Cap: k, Latency: time.Millisecond, Rules: map[tier.Match]*tier.Counters{}}
}

// Hit adds packets to the rule for src, as traffic the NIC dropped.
func (t *Table) Hit(src netip.Addr, packets uint64) {
	if c, ok := t.Rules[tier.SourceMatch(src)]; ok {
		c.Packets += packets
		c.Bytes += 64 * packets
	}
}

// Has reports whether a source rule for src is installed.
func (t *Table) Has(src netip.Addr) bool { _, ok := t.Rules[tier.SourceMatch(src)]; return ok }

func (t *Table) Caps() tier.Caps {
	return tier.Caps{Backend: "fake", Iface: "fake0", Capacity: t.Cap, Counters: !t.NoCounters, Flows: true, Forward: true}
}

func (t *Table) Install(ctx context.Context, r tier.Rule) (time.Duration, error) {
	if err := r.Validate(); err != nil {
		return 0, err
	}
	if t.InstallErr != nil {
		return 0, t.InstallErr
	}
	if _, ok := t.Rules[r.Match]; !ok && len(t.Rules) >= t.Cap {
		return 0, fmt.Errorf("installing %s: %w", r.Match, tier.ErrTableFull)
	}
	t.Rules[r.Match] = &tier.Counters{}
	t.Installs++
	return t.Latency, nil
}

func (t *Table) Remove(ctx context.Context, m tier.Match) (tier.Counters, time.Duration, error) {
	c, ok := t.Rules[m]
	if !ok {
		return tier.Counters{}, 0, fmt.Errorf("removing %s: %w", m, tier.ErrNoRule)
	}
	delete(t.Rules, m)
	t.Removes++
	return *c, t.Latency, nil
}

func (t *Table) List(ctx context.Context) ([]tier.Entry, error) {
	t.Lists++
	if t.ListErr != nil {
		return nil, t.ListErr
	}
	es := make([]tier.Entry, 0, len(t.Rules))
	for m, c := range t.Rules {
		e := tier.Entry{Rule: tier.Rule{Match: m, Action: tier.Drop}, HasCounters: !t.NoCounters}
		if !t.NoCounters {
			e.Counters = *c
		}
		es = append(es, e)
	}
	sort.Slice(es, func(i, j int) bool { return es[i].Rule.Match.Src.Less(es[j].Rule.Match.Src) })
	return es, nil
}

func (t *Table) Close() error { return nil }
