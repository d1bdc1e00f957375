package placement

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/tier"
)

// memTable is a hardware table in memory; counters can be switched off to
// behave like ethtool n-tuple.
type memTable struct {
	cap      int
	counters bool
	rules    map[netip.Addr]uint64
}

func (m *memTable) Caps() tier.Caps { return tier.Caps{Capacity: m.cap, Counters: m.counters} }
func (m *memTable) Install(_ context.Context, r tier.Rule) (time.Duration, error) {
	if len(m.rules) >= m.cap {
		return 0, tier.ErrTableFull
	}
	m.rules[r.Match.Src] = 0
	return time.Millisecond, nil
}
func (m *memTable) Remove(_ context.Context, x tier.Match) (tier.Counters, time.Duration, error) {
	n, ok := m.rules[x.Src]
	if !ok {
		return tier.Counters{}, 0, tier.ErrNoRule
	}
	delete(m.rules, x.Src)
	return tier.Counters{Packets: n}, time.Millisecond, nil
}
func (m *memTable) List(context.Context) ([]tier.Entry, error) {
	var es []tier.Entry
	for a, n := range m.rules {
		e := tier.Entry{Rule: tier.Rule{Match: tier.SourceMatch(a), Action: tier.Drop}, HasCounters: m.counters}
		if m.counters {
			e.Counters.Packets = n
		}
		es = append(es, e)
	}
	return es, nil
}
func (m *memTable) Close() error { return nil }

func TestOffloaderMergesTiersAndRetires(t *testing.T) {
	a, b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	tb := &memTable{cap: 1, counters: true, rules: map[netip.Addr]uint64{}}
	o := &Offloader{Table: tb, Params: Params{MaxRate: 1}}
	t0 := time.Unix(0, 0)
	ctx := context.Background()
	if _, err := o.Step(ctx, t0, []Counted{{a, 0}, {b, 0}}); err != nil {
		t.Fatal(err)
	}
	// a sent 1000 in software, b 10: a goes to hardware.
	rep, _ := o.Step(ctx, t0.Add(time.Second), []Counted{{a, 1000}, {b, 10}})
	if rep.Rates[a] != 1000 || len(rep.Plan.Install) != 1 || rep.Plan.Install[0] != a {
		t.Fatalf("step 2: %+v", rep)
	}
	// a now drops 500 in hardware (none in software): its rate is the sum.
	tb.rules[a] = 500
	rep, _ = o.Step(ctx, t0.Add(2*time.Second), []Counted{{a, 1000}, {b, 2000}})
	if rep.Rates[a] != 500 || rep.Rates[b] != 1990 {
		t.Fatalf("merged rates %v", rep.Rates)
	}
	// b beats a by 3.98x >= 2.5: swapped; a's 500 hardware packets retire.
	if len(rep.Plan.Remove) != 1 || o.HWPackets(a, 0) != 500 {
		t.Fatalf("swap %+v, retired %d", rep.Plan, o.HWPackets(a, 0))
	}
}

func TestOffloaderFreezesRatesWithoutCounters(t *testing.T) {
	a, b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	tb := &memTable{cap: 1, counters: false, rules: map[netip.Addr]uint64{}}
	o := &Offloader{Table: tb, Params: Params{MaxRate: 1}}
	t0 := time.Unix(0, 0)
	ctx := context.Background()
	o.Step(ctx, t0, []Counted{{a, 0}, {b, 0}})
	o.Step(ctx, t0.Add(time.Second), []Counted{{a, 1000}, {b, 10}}) // a offloaded at 1000 pps
	// a is invisible now (hardware drops it, no counters); b grows a bit.
	rep, _ := o.Step(ctx, t0.Add(2*time.Second), []Counted{{a, 1000}, {b, 600}})
	if rep.Rates[a] != 1000 {
		t.Fatalf("rate of a blind hardware entry %v, want the frozen 1000", rep.Rates[a])
	}
	if rep.Plan.Updates() != 0 {
		t.Fatalf("evicted on a measured 0 rate: %+v", rep.Plan)
	}
}
