package datapath

import (
	"net/netip"
	"testing"

	"github.com/tierwall/tierwall/internal/testutil"
)

// BenchmarkRuleCounters500K reads the counters of 500K exact bans (the
// default bans.max_total) in a table of the default capacity: what the
// daemon does every interval. `go test -run '^$' -bench RuleCounters
// -benchtime 3x ./internal/datapath` (root).
func BenchmarkRuleCounters500K(b *testing.B) {
	testutil.RequireRoot(b)
	d, err := LoadDetached(Options{PrefixCapacity: 64, AllowCapacity: 64, FeatureCapacity: 4096})
	if err != nil {
		b.Fatalf("loading filter: %v", err)
	}
	defer d.Close()
	const n = 500_000
	addrs := make([]netip.Addr, n)
	ps := make([]netip.Prefix, n)
	for i := range addrs {
		addrs[i] = netip.AddrFrom4([4]byte{100, byte(i >> 16), byte(i >> 8), byte(i)})
		ps[i] = netip.PrefixFrom(addrs[i], 32)
	}
	if err := d.BlockBulk(addrs); err != nil {
		b.Fatal(err)
	}
	b.Run("map", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			cs, err := d.RuleCounters(ps)
			if err != nil {
				b.Fatal(err)
			}
			if len(cs) != n {
				b.Fatalf("%d counters, want %d", len(cs), n)
			}
		}
	})
	b.Run("into", func(b *testing.B) {
		rs := make([]Reading, n)
		for i := 0; i < b.N; i++ {
			if err := d.RuleCountersInto(ps, rs); err != nil {
				b.Fatal(err)
			}
			for _, r := range rs {
				if !r.Found {
					b.Fatal("a blocked rule not found")
				}
			}
		}
	})
}
