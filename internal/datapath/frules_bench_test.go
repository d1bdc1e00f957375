// SPDX-License-Identifier: Apache-2.0

package datapath

import (
	"net/netip"
	"testing"

	"github.com/tierwall/tierwall/internal/pkt"
	"github.com/tierwall/tierwall/internal/rule"
	"github.com/tierwall/tierwall/internal/testutil"
)

// BenchmarkFlowRules is the per-packet cost of the flow rules through
// BPF_PROG_TEST_RUN: a clean UDP packet that passes (and is counted into
// the features), with no rules, with one and with 64 that it does not
// match (each of them checked: the worst case), and one a first rule drops.
// `go test -run '^$' -bench FlowRules ./internal/datapath` (root); ns/pkt
// is the kernel's own per-run time.
func BenchmarkFlowRules(b *testing.B) {
	testutil.RequireRoot(b)
	miss := func(n int) []rule.FlowRule {
		var rs []rule.FlowRule
		for i := 0; i < n; i++ {
			// Same protocol and ports as the packet, another /24:
			// the destination test fails last of the cheap checks.
			rs = append(rs, rule.FlowRule{Dst: netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 19, byte(i), 0}), 24),
				Proto: pkt.ProtoUDP, SrcPorts: rule.PortRange{Lo: 53, Hi: 53}, Action: rule.FlowDrop})
		}
		return rs
	}
	frame := flowPkt{src: "10.9.9.9", dst: "198.18.0.1", proto: pkt.ProtoUDP, sport: 53, dport: 4444}.build()
	drop := rule.FlowRule{Dst: netip.MustParsePrefix("198.18.0.0/24"), Proto: pkt.ProtoUDP, Action: rule.FlowDrop}
	for _, c := range []struct {
		name  string
		rules []rule.FlowRule
	}{
		{"rules=0", nil},
		{"rules=1", miss(1)},
		{"rules=64", miss(64)},
		{"rules=1/drop", []rule.FlowRule{drop}},
		{"rules=64/drop-last", append(miss(63), drop)},
	} {
		b.Run(c.name, func(b *testing.B) {
			d, err := LoadDetached(Options{ExactCapacity4: 1024, ExactCapacity6: 1024, PrefixCapacity: 64, AllowCapacity: 64, FeatureCapacity: 4096})
			if err != nil {
				b.Fatal(err)
			}
			defer d.Close()
			if err := d.SetFlowRules(c.rules); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			_, per, err := d.Program().Benchmark(frame, max(b.N, 1), nil)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(per.Nanoseconds()), "ns/pkt")
		})
	}
}
