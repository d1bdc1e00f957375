// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/cilium/ebpf"

	"github.com/tierwall/tierwall/internal/datapath"
	"github.com/tierwall/tierwall/internal/pkt"
)

// HeavyDefault is the heavy-hitter detector as the daemon configures it by
// default (config.defaultHeavy), with the longest TTL so a catch made
// before the rounds stays live through them.
var HeavyDefault = datapath.HeavyHitter{Window: 10 * time.Millisecond, TTL: 10 * time.Minute,
	PacketsPerSec: 100000, SYNsPerSec: 20000, Prefix6: 64}

// HeavyBenchResult is the clean-traffic cost of the heavy-hitter detector:
// packets from sources no rule names, which pass the filter and are
// counted by the detector's sketch.
type HeavyBenchResult struct {
	Sources int
	Off     []float64 // ns/packet, detector off
	On      []float64 // detector on, nothing caught (the provisional lookup skipped)
	Live    []float64 // detector on while a catch is live (every packet also looks up the provisional table)
}

// Median returns the medians in ns/packet.
func (r HeavyBenchResult) Median() (off, on, live float64) {
	return median(r.Off), median(r.On), median(r.Live)
}

// BenchHeavy measures the filter on clean traffic from sources distinct
// sources (uniform), one exact rule in place, with the detector off, on,
// and on with a catch live, interleaved in rounds. Two filters are
// loaded: the "live" one holds a catch for the whole run, the other never
// catches (at the default threshold each clean source sends a few packets
// per round). Both are checked afterwards: nothing but pass verdicts and
// exactly the one planted catch.
func BenchHeavy(sources, rounds, repeat int, seed uint64) (*HeavyBenchResult, error) {
	rng := rand.New(rand.NewPCG(seed, uint64(sources)))
	all := randomAddrs4(sources+1, rng)
	rule, clean := all[:1], all[1:]
	samples := sampleAddrs(clean, Uniform, rng)

	g, err := newRig(rule, samples, repeat)
	if err != nil {
		return nil, err
	}
	defer g.Close()
	live, err := datapath.LoadDetached(datapath.Options{ExactCapacity4: 64, ExactCapacity6: 64, PrefixCapacity: 64, AllowCapacity: 64, FeatureCapacity: 1024})
	if err != nil {
		return nil, err
	}
	defer live.Close()
	if err := live.BlockBulk(rule); err != nil {
		return nil, err
	}
	// Plant the catch: a low threshold, one source (in no sample) sent
	// well over it, then the default thresholds back.
	planted := datapath.HeavyHitter{Window: time.Second, TTL: 10 * time.Minute, PacketsPerSec: 64, Prefix6: 64}
	if err := live.SetHeavyHitter(planted); err != nil {
		return nil, err
	}
	frame := pkt.Frame{DstMAC: [6]byte{2, 0, 0, 0, 0, 1}, SrcMAC: [6]byte{2, 0, 0, 0, 0, 2},
		Src: netip.MustParseAddr("192.0.2.99"), Dst: netip.MustParseAddr("10.0.0.2"),
		Proto: pkt.ProtoUDP, SrcPort: 1, DstPort: 2, Payload: make([]byte, 18)}.Build()
	if _, err := live.Program().Run(&ebpf.RunOptions{Data: frame, Repeat: 1000}); err != nil {
		return nil, err
	}
	if err := live.SetHeavyHitter(HeavyDefault); err != nil {
		return nil, err
	}
	if ps, err := live.Provisionals(); err != nil || len(ps) != 1 {
		return nil, fmt.Errorf("planting a catch: %d provisional entries (%v), want 1", len(ps), err)
	}

	r := &HeavyBenchResult{Sources: sources}
	off := datapath.HeavyHitter{}
	for i := 0; i < rounds; i++ {
		for _, step := range []struct {
			d   *datapath.Datapath
			h   *datapath.HeavyHitter
			out *[]float64
		}{{g.d, &off, &r.Off}, {g.d, &HeavyDefault, &r.On}, {live, nil, &r.Live}} {
			if step.h != nil {
				if err := step.d.SetHeavyHitter(*step.h); err != nil {
					return nil, err
				}
			}
			ns, err := g.measure(step.d.Program(), xdpPass)
			if err != nil {
				return nil, err
			}
			*step.out = append(*step.out, ns)
		}
	}
	for name, d := range map[string]*datapath.Datapath{"plain": g.d, "live": live} {
		st, err := d.HeavyHitterStats()
		if err != nil {
			return nil, err
		}
		want := uint64(0)
		if name == "live" {
			want = 1
		}
		if st.Caught != want {
			return nil, fmt.Errorf("%s filter: %d sources caught, want %d: clean traffic was caught", name, st.Caught, want)
		}
	}
	return r, nil
}

// CallCost is what one call costs, ns, median over rounds: the helpers
// the heavy-hitter detector could read a clock or a random number with,
// and a call of a global BPF function (bpf/testbed/bench_parts.c, bp_calls_*).
type CallCost struct {
	Name string
	Ns   float64
}

// BenchCalls measures each bp_calls_* program against bp_calls_none (the
// same program without the calls), eight calls a run, repeat runs per
// round, and returns the difference per call.
func BenchCalls(rounds, repeat int) ([]CallCost, error) {
	var o benchpartsObjects
	if err := loadParts(&o, netip.MustParseAddr("192.0.2.1"), 1); err != nil {
		return nil, err
	}
	defer o.Close()
	progs := []struct {
		name string
		p    *ebpf.Program
	}{{"none", o.BpCallsNone}, {"bpf_ktime_get_ns", o.BpCallsKtime}, {"bpf_ktime_get_coarse_ns", o.BpCallsCoarse},
		{"bpf_jiffies64 (inlined)", o.BpCallsJiffies}, {"bpf_get_prandom_u32", o.BpCallsPrandom}, {"a global BPF function", o.BpCallsGlobal}}
	ns := make([][]float64, len(progs))
	frame := make([]byte, 64)
	for r := 0; r < rounds; r++ {
		for i, p := range progs {
			ret, d, err := p.p.Benchmark(frame, repeat, nil)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", p.name, err)
			}
			if ret != xdpPass {
				return nil, fmt.Errorf("%s returned %d", p.name, ret)
			}
			ns[i] = append(ns[i], float64(d.Nanoseconds()))
		}
	}
	base := median(ns[0])
	var out []CallCost
	for i, p := range progs[1:] {
		out = append(out, CallCost{Name: p.name, Ns: (median(ns[i+1]) - base) / 8})
	}
	return out, nil
}
