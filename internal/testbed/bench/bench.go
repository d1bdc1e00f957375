// SPDX-License-Identifier: Apache-2.0

// Package bench holds the filter benchmark's programs (bpf/testbed/bench_wrap.c,
// bpf/testbed/bench_baseline.c), never attached anywhere, its drivers, and the code
// that fills xdp-tools' maps for the evaluation's baseline: everything
// `make bench` and `make eval` load besides the product's own programs.
package bench

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/tierwall/tierwall/internal/datapath"
	"github.com/tierwall/tierwall/internal/pkt"
	"golang.org/x/sys/unix"
)

// The filter benchmark (docs/BENCHMARKS.md): per-packet cost through
// BPF_PROG_TEST_RUN with the source varying on every repetition. A
// wrapper program (bpf/testbed/bench_wrap.c) writes the next source from a sample
// table into the packet and tail-calls the program under test: the filter,
// a plain-hash baseline, or an empty program. All three are measured in
// rounds, interleaved, in one process; ratios are of medians.

// Dist is how the sources of the benchmark traffic are drawn.
type Dist string

const (
	Uniform Dist = "uniform"
	Zipf1   Dist = "zipf-s1"
)

// FilterBenchResult is one (rules, distribution) cell.
type FilterBenchResult struct {
	Rules    int
	Dist     Dist
	Filter   []float64 // ns/packet per round
	Baseline []float64
	Empty    []float64
	// Floor: one random cache-line read in an array as large as the
	// filter's exact table (bl_one_line).
	Floor []float64
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	sort.Float64s(s)
	return s[len(s)/2]
}

// Median returns the medians of the three programs in ns/packet.
func (r FilterBenchResult) Median() (filter, baseline, empty float64) {
	return median(r.Filter), median(r.Baseline), median(r.Empty)
}

const benchSamples = 1 << 20

// sampleAddrs draws benchSamples sources from addrs: uniformly, or Zipf
// with exponent 1 by inverse CDF (math/rand's Zipf needs s > 1).
func sampleAddrs(addrs []netip.Addr, d Dist, rng *rand.Rand) []netip.Addr {
	out := make([]netip.Addr, benchSamples)
	if d == Uniform {
		for i := range out {
			out[i] = addrs[rng.IntN(len(addrs))]
		}
		return out
	}
	cdf := make([]float64, len(addrs))
	sum := 0.0
	for i := range cdf {
		sum += 1 / float64(i+1)
		cdf[i] = sum
	}
	for i := range out {
		u := rng.Float64() * sum
		out[i] = addrs[sort.SearchFloat64s(cdf, u)]
	}
	return out
}

func randomAddrs4(n int, rng *rand.Rand) []netip.Addr {
	seen := make(map[uint32]bool, n)
	out := make([]netip.Addr, 0, n)
	for len(out) < n {
		w := rng.Uint32()
		if w>>24 == 0 || w>>24 >= 224 || seen[w] {
			continue
		}
		seen[w] = true
		out = append(out, netip.AddrFrom4([4]byte{byte(w >> 24), byte(w >> 16), byte(w >> 8), byte(w)}))
	}
	return out
}

// BenchFilter measures one cell: rules exact IPv4 rules, sources drawn
// with dist, rounds interleaved rounds of repeat packets per program.
// heavy, if not nil, turns the heavy-hitter detector on with it (the drop
// path never reaches it: a banned source is dropped before).
func BenchFilter(rules int, dist Dist, rounds, repeat int, seed uint64, heavy *datapath.HeavyHitter) (*FilterBenchResult, error) {
	rng := rand.New(rand.NewPCG(seed, uint64(rules)))
	addrs := randomAddrs4(rules, rng)
	samples := sampleAddrs(addrs, dist, rng)

	g, err := newRig(addrs, samples, repeat)
	if err != nil {
		return nil, err
	}
	defer g.Close()
	if heavy != nil {
		if err := g.d.SetHeavyHitter(*heavy); err != nil {
			return nil, err
		}
	}
	r := &FilterBenchResult{Rules: rules, Dist: dist}
	for i := 0; i < rounds; i++ {
		for _, step := range []struct {
			p   *ebpf.Program
			out *[]float64
		}{{g.d.Program(), &r.Filter}, {g.base.BlHashLookup, &r.Baseline}, {g.base.BlEmpty, &r.Empty}, {g.base.BlOneLine, &r.Floor}} {
			ns, err := g.measure(step.p, xdpDrop)
			if err != nil {
				return nil, err
			}
			*step.out = append(*step.out, ns)
		}
	}
	// Sanity: every sampled source was a hit (one drop per packet).
	if _, err := g.allExact(uint64(rounds * repeat)); err != nil {
		return nil, err
	}
	return r, nil
}

// allExact checks that every packet the filter saw, at least want, was
// dropped as an exact hit, and returns how many it saw. At least: a test
// run interrupted by a signal (the Go runtime's preemption) fails with
// EINTR after some packets and cilium/ebpf runs it again whole, so a few
// more packets than asked for may have gone through.
func (g *rig) allExact(want uint64) (uint64, error) {
	s, err := g.d.Stats()
	if err != nil {
		return 0, err
	}
	var all uint64
	for _, v := range s.Verdicts {
		all += v.Packets
	}
	if got := s.Verdicts["drop_exact"].Packets; got != all || got < want {
		return 0, fmt.Errorf("filter dropped %d of %d packets as exact hits (%d asked for)", got, all, want)
	}
	return all, nil
}

const (
	xdpDrop = 1
	xdpPass = 2
)

// rig is the benchmark's set-up: the filter holding the rules, the
// baseline programs over the same addresses, and the wrapper that writes
// the next sampled source into the packet and tail-calls the program
// under test.
type rig struct {
	d      *datapath.Datapath
	base   benchbaseObjects
	wrap   benchwrapObjects
	frame  []byte
	repeat int
}

func newRig(addrs, samples []netip.Addr, repeat int) (_ *rig, err error) {
	rules := len(addrs)
	g := &rig{repeat: repeat}
	g.d, err = datapath.LoadDetached(datapath.Options{ExactCapacity4: max(rules, 64), ExactCapacity6: 64, PrefixCapacity: 64, AllowCapacity: 64, FeatureCapacity: 1024})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			g.Close()
		}
	}()
	if err := g.d.BlockBulk(addrs); err != nil {
		return nil, fmt.Errorf("filling exact table: %w", err)
	}

	bspec, err := loadBenchbase()
	if err != nil {
		return nil, err
	}
	bspec.Maps["bl_hash"].MaxEntries = uint32(max(rules, 1))
	lines := uint32(g.d.ExactFootprint4() / 64) // the exact table's footprint in cache lines
	bspec.Maps["bl_lines"].MaxEntries = lines
	if err := bspec.Variables["bl_lines_mask"].Set(lines - 1); err != nil {
		return nil, err
	}
	if err := bspec.LoadAndAssign(&g.base, nil); err != nil {
		return nil, fmt.Errorf("loading baseline: %w", err)
	}
	keys := make([]uint32, len(addrs))
	vals := make([]uint64, len(addrs))
	for i, a := range addrs {
		keys[i] = binary.LittleEndian.Uint32(a.AsSlice())
	}
	if _, err := g.base.BlHash.BatchUpdate(keys, vals, nil); err != nil {
		return nil, fmt.Errorf("filling baseline hash: %w", err)
	}

	wspec, err := loadBenchwrap()
	if err != nil {
		return nil, err
	}
	wspec.Maps["bw_samples4"].MaxEntries = benchSamples
	if err := wspec.Variables["bw_mask"].Set(uint32(benchSamples - 1)); err != nil {
		return nil, err
	}
	if err := wspec.LoadAndAssign(&g.wrap, nil); err != nil {
		return nil, fmt.Errorf("loading wrapper: %w", err)
	}
	sk := make([]uint32, benchSamples)
	sv := make([]uint32, benchSamples)
	for i, a := range samples {
		sk[i], sv[i] = uint32(i), binary.LittleEndian.Uint32(a.AsSlice())
	}
	if _, err := g.wrap.BwSamples4.BatchUpdate(sk, sv, nil); err != nil {
		return nil, fmt.Errorf("filling samples: %w", err)
	}
	g.frame = pkt.Frame{DstMAC: [6]byte{2, 0, 0, 0, 0, 1}, SrcMAC: [6]byte{2, 0, 0, 0, 0, 2},
		Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"),
		Proto: pkt.ProtoUDP, SrcPort: 1, DstPort: 2, Payload: make([]byte, 18)}.Build() // 64 bytes
	return g, nil
}

// Close releases everything the rig loaded (safe on a half-built one).
func (g *rig) Close() {
	if g.d != nil {
		g.d.Close()
	}
	g.base.Close()
	g.wrap.Close()
}

// measure runs the wrapper, tail-calling p, and returns ns per packet; p
// must have returned want.
func (g *rig) measure(p *ebpf.Program, want uint32) (float64, error) {
	if err := g.wrap.BwNext.Put(uint32(0), p); err != nil {
		return 0, fmt.Errorf("installing program: %w", err)
	}
	ret, dur, err := g.wrap.BwWrap4.Benchmark(g.frame, g.repeat, nil)
	if err != nil {
		return 0, err
	}
	if ret != want {
		return 0, fmt.Errorf("program returned %d, want %d: the benchmark is not measuring what it says", ret, want)
	}
	return float64(dur.Nanoseconds()), nil
}

// BenchSnapshot fills the active feature buffer with entries keys in every
// CPU's region (the worst case: each key is merged across all CPUs), at
// scattered slots as the data plane's hash would place them, and times
// Snapshot (swap plus drain), per round.
func BenchSnapshot(entries, rounds int) ([]time.Duration, error) {
	d, err := datapath.LoadDetached(datapath.Options{ExactCapacity4: 64, ExactCapacity6: 64, PrefixCapacity: 64, AllowCapacity: 64, FeatureCapacity: entries})
	if err != nil {
		return nil, err
	}
	defer d.Close()
	var out []time.Duration
	for r := 0; r < rounds; r++ {
		if err := d.PreloadFeatures(entries, 3); err != nil {
			return nil, err
		}
		start := time.Now()
		s, err := d.Snapshot()
		el := time.Since(start)
		if err != nil {
			return nil, err
		}
		if len(s.Flows) != entries {
			return nil, fmt.Errorf("snapshot has %d flows, want %d", len(s.Flows), entries)
		}
		for _, f := range s.Flows {
			if f.Packets != uint64(3*d.CPUs()) {
				return nil, fmt.Errorf("flow %v has %d packets, want %d", f.Src, f.Packets, 3*d.CPUs())
			}
		}
		out = append(out, el)
	}
	return out, nil
}

var errNaN = errors.New("no data")

// Ratio of medians, guarded.
func Ratio(a, b float64) (float64, error) {
	if b == 0 || math.IsNaN(a) || math.IsNaN(b) {
		return 0, errNaN
	}
	return a / b, nil
}

// ContendedResult is the contended case: one source, one rule, the same
// packets run on every CPU at once, so every CPU hits the same rule (and,
// where a design shares it, the same counter line) at full rate.
type ContendedResult struct {
	CPUs     int
	Filter   []float64 // ns/packet per round, the mean over the CPUs' runs
	Baseline []float64
	Empty    []float64
}

// Median returns the medians of the three programs in ns/packet.
func (r ContendedResult) Median() (filter, baseline, empty float64) {
	return median(r.Filter), median(r.Baseline), median(r.Empty)
}

// BenchContended runs the one-rule cell on every CPU at the same time:
// one OS thread pinned to each CPU, each running repeat packets per
// program per round, interleaved as BenchFilter's rounds are. The
// baseline's hash lookup only reads shared memory, so filter ÷ baseline
// here shows what sharing a written line between CPUs costs the filter.
func BenchContended(rounds, repeat int) (*ContendedResult, error) {
	addr := netip.MustParseAddr("192.0.2.1")
	samples := make([]netip.Addr, benchSamples)
	for i := range samples {
		samples[i] = addr
	}
	g, err := newRig([]netip.Addr{addr}, samples, repeat)
	if err != nil {
		return nil, err
	}
	defer g.Close()
	ncpu := g.d.CPUs()
	r := &ContendedResult{CPUs: ncpu}
	for i := 0; i < rounds; i++ {
		for _, step := range []struct {
			p   *ebpf.Program
			out *[]float64
		}{{g.d.Program(), &r.Filter}, {g.base.BlHashLookup, &r.Baseline}, {g.base.BlEmpty, &r.Empty}} {
			ns, err := g.measureOnAll(step.p, xdpDrop, ncpu)
			if err != nil {
				return nil, err
			}
			*step.out = append(*step.out, ns)
		}
	}
	all, err := g.allExact(uint64(rounds * repeat * ncpu))
	if err != nil {
		return nil, err
	}
	// The rule's counter, shared by the CPUs, lost none of them.
	c, err := g.d.RuleCounters([]netip.Prefix{netip.PrefixFrom(addr, 32)})
	if err != nil {
		return nil, err
	}
	if got := c[netip.PrefixFrom(addr, 32)].Packets; got != all {
		return nil, fmt.Errorf("the rule counted %d of %d packets", got, all)
	}
	return r, nil
}

// measureOnAll runs p through the wrapper on every CPU at once, one
// pinned thread each started together, and returns the mean ns/packet.
func (g *rig) measureOnAll(p *ebpf.Program, want uint32, ncpu int) (float64, error) {
	if err := g.wrap.BwNext.Put(uint32(0), p); err != nil {
		return 0, fmt.Errorf("installing program: %w", err)
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	ns := make([]float64, ncpu)
	errs := make([]error, ncpu)
	for cpu := 0; cpu < ncpu; cpu++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
			var set unix.CPUSet
			set.Set(cpu)
			if err := unix.SchedSetaffinity(0, &set); err != nil {
				errs[cpu] = fmt.Errorf("pinning to CPU %d: %w", cpu, err)
				<-start
				return
			}
			<-start
			ret, dur, err := g.wrap.BwWrap4.Benchmark(g.frame, g.repeat, nil)
			switch {
			case err != nil:
				errs[cpu] = err
			case ret != want:
				errs[cpu] = fmt.Errorf("program returned %d on CPU %d, want %d", ret, cpu, want)
			}
			ns[cpu] = float64(dur.Nanoseconds())
		}()
	}
	close(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	sum := 0.0
	for _, x := range ns {
		sum += x
	}
	return sum / float64(ncpu), nil
}

// LadderResult is the fixed cost at one rule, cut into the filter's
// pieces (bpf/testbed/bench_parts.c): each rung is the previous one plus one
// piece, all through the same wrapper, interleaved in rounds.
type LadderResult struct {
	Empty, Plain, Verdict, Exact, Filter, Baseline []float64 // ns/packet per round
	// Parse is the full parser alone (a global function), which the
	// filter's drop path of a plain IPv4 frame skips: not a rung.
	Parse []float64
}

// BenchLadder measures the rungs against the filter and the plain hash,
// one rule, one source.
func BenchLadder(rounds, repeat int) (*LadderResult, error) {
	addr := netip.MustParseAddr("192.0.2.1")
	samples := make([]netip.Addr, benchSamples)
	for i := range samples {
		samples[i] = addr
	}
	g, err := newRig([]netip.Addr{addr}, samples, repeat)
	if err != nil {
		return nil, err
	}
	defer g.Close()
	var parts benchpartsObjects
	if err := loadParts(&parts, addr, g.d.CPUs()); err != nil {
		return nil, err
	}
	defer parts.Close()
	r := &LadderResult{}
	for i := 0; i < rounds; i++ {
		for _, step := range []struct {
			p   *ebpf.Program
			out *[]float64
		}{{g.base.BlEmpty, &r.Empty}, {parts.BpPlain, &r.Plain}, {parts.BpVerdict, &r.Verdict},
			{parts.BpExact, &r.Exact}, {g.d.Program(), &r.Filter}, {g.base.BlHashLookup, &r.Baseline},
			{parts.BpParse, &r.Parse}} {
			ns, err := g.measure(step.p, xdpDrop)
			if err != nil {
				return nil, err
			}
			*step.out = append(*step.out, ns)
		}
	}
	// bp_exact counted the rule: its table had the address, and every
	// packet was a hit.
	var e benchpartsTwExact4
	var hits uint64
	for i := uint32(0); i < partsSlots; i++ {
		if err := parts.TwEx4.Lookup(i, &e); err != nil {
			return nil, err
		}
		hits += e.Packets
	}
	n := uint32(partsSlots) * uint32(g.d.CPUs())
	for k := uint32(0); k < n; k++ {
		var h benchpartsTwHot
		if err := parts.TwExHot.Lookup(k, &h); err != nil {
			return nil, err
		}
		hits += h.Packets
	}
	if hits < uint64(rounds*repeat) {
		return nil, fmt.Errorf("bp_exact counted %d hits of at least %d packets", hits, rounds*repeat)
	}
	return r, nil
}

// partsSlots is the rungs' exact table: every slot holds the one rule,
// so its probe finds it at once wherever the address hashes (the seed is
// the bench's to choose, the hash the data plane's).
const partsSlots = 64

func loadParts(o *benchpartsObjects, addr netip.Addr, ncpu int) error {
	spec, err := loadBenchparts()
	if err != nil {
		return err
	}
	spec.Maps["tw_ex4"].MaxEntries = partsSlots
	spec.Maps["tw_ex_hot"].MaxEntries = uint32(benchpartsTwHotLimitTW_HOT_SLOTS) * uint32(ncpu)
	for name, v := range map[string]uint32{"tw_ex4_slots": partsSlots, "tw_nr_cpus": uint32(ncpu)} {
		if err := spec.Variables[name].Set(v); err != nil {
			return fmt.Errorf("setting %s: %w", name, err)
		}
	}
	if err := spec.LoadAndAssign(o, nil); err != nil {
		return fmt.Errorf("loading the rungs: %w", err)
	}
	w := binary.LittleEndian.Uint32(addr.AsSlice())
	for i := uint32(0); i < partsSlots; i++ {
		if err := o.TwEx4.Put(i, &benchpartsTwExact4{Addr: w, State: 1 /* TW_SLOT_USED */}); err != nil {
			o.Close()
			return fmt.Errorf("filling the rungs' table: %w", err)
		}
	}
	if err := o.TwCfg.Put(uint32(0), &benchpartsTwConfig{Exact4N: 1}); err != nil {
		o.Close()
		return fmt.Errorf("configuring the rungs: %w", err)
	}
	return nil
}
