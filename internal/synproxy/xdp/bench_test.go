// SPDX-License-Identifier: Apache-2.0

package xdp

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/tierwall/tierwall/internal/datapath"
	"github.com/tierwall/tierwall/internal/rule"
	"github.com/tierwall/tierwall/internal/testutil"
)

// BenchmarkSynAnswered is what a spoofed SYN costs the host in XDP: the
// filter with a syn-cookie rule on the SYN's destination (bypassing
// known-good sources, as the ladder writes it) tail-calling this stage,
// which answers it with a cookie SYN-ACK; and the stage alone. SYNs come
// bare (as the lab's generator sends them) and with Linux's options (as
// most clients, and floods that copy them). Every repetition starts from
// the SYN (BPF_PROG_TEST_RUN's repeat would run again on the SYN-ACK the
// first one left), so each is its own run and ns/pkt is the kernel's own
// time for it, averaged over the runs; "empty" is a program that only
// returns, the part of ns/pkt that is the test run's own.
// `go test -run '^$' -bench SynAnswered ./internal/synproxy/xdp` (root).
func BenchmarkSynAnswered(b *testing.B) {
	testutil.RequireRoot(b)
	s, err := Load(Options{MSS: 1400, WScale: 9, TTL: 61})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	d, err := datapath.LoadDetached(datapath.Options{ExactCapacity4: 1024, ExactCapacity6: 1024, PrefixCapacity: 64, AllowCapacity: 64, FeatureCapacity: 4096})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	r, err := rule.ParseFlowRule(strings.Fields("dst " + srv4.Addr().String() + "/32 proto tcp dport 80 syn-cookie bypass-known-good"))
	if err != nil {
		b.Fatal(err)
	}
	if err := d.SetFlowRules([]rule.FlowRule{r}); err != nil {
		b.Fatal(err)
	}
	if err := s.Install(d); err != nil {
		b.Fatal(err)
	}
	empty, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "tw_empty", Type: ebpf.XDP, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, xdpTx), asm.Return()}})
	if err != nil {
		b.Fatal(err)
	}
	defer empty.Close()
	for _, c := range []struct {
		name string
		opts []byte
	}{{"bare", nil}, {"linux", linuxOpts}} {
		frame := seg(netip.AddrPortFrom(cli4.Addr(), 40000), srv4, syn, isn, 0, c.opts).Build()
		for _, p := range []struct {
			name string
			run  func([]byte) (uint32, time.Duration, error)
		}{
			{"filter", func(f []byte) (uint32, time.Duration, error) { return d.Program().Benchmark(f, 1, nil) }},
			{"stage", func(f []byte) (uint32, time.Duration, error) { return s.Program().Benchmark(f, 1, nil) }},
			{"empty", func(f []byte) (uint32, time.Duration, error) { return empty.Benchmark(f, 1, nil) }},
		} {
			b.Run(c.name+"/"+p.name, func(b *testing.B) {
				var total time.Duration
				for i := 0; i < b.N; i++ {
					ret, per, err := p.run(frame)
					if err != nil {
						b.Fatal(err)
					}
					if ret != xdpTx {
						b.Fatalf("action %d, want XDP_TX", ret)
					}
					total += per
				}
				b.ReportMetric(float64(total.Nanoseconds())/float64(max(b.N, 1)), "ns/pkt")
			})
		}
	}
}
