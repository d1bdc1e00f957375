// SPDX-License-Identifier: Apache-2.0

// Package trafgen drives tierwall's live-frames generator
// (gen.Generator): floods of 64-byte UDP or TCP SYN frames from N
// sources with a uniform, Gaussian (the paper's Fig. 2b) or Zipf rate
// distribution, or from random spoofed sources, at a rate cap, for a
// duration, with rankings that can change over time. It reports exactly
// what the kernel was handed to transmit, per source.
//
// In flow mode (Spec.Flows > 0, flows.go, gen.FlowGen) it stands for a
// whole wire instead: a sliding window of active TCP and UDP flows, both
// directions, with handshakes, application payloads and FINs, and reports
// exactly what was transmitted per flow.
package trafgen

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"net/netip"
	"sort"
	"time"

	"github.com/tierwall/tierwall/internal/pkt"
	"github.com/tierwall/tierwall/internal/rule"
	"github.com/tierwall/tierwall/internal/testbed/gen"
	"github.com/tierwall/tierwall/internal/tier/nicstage"
)

// Dist is how the rate is spread over the sources.
type Dist string

const (
	Uniform  Dist = "uniform"
	Gaussian Dist = "gaussian"
	Zipf     Dist = "zipf"
)

// MaxDuration bounds every run: the generator always stops by itself.
const MaxDuration = time.Hour

// Spec is one flood.
type Spec struct {
	Iface          string // transmit out of this interface (calling thread's netns)
	SrcMAC, DstMAC [6]byte
	Dst            netip.Addr
	DstPort        uint16
	SrcPort        uint16 // default 40000; 53, 123, … for a reflection flood
	SYN            bool   // TCP SYN instead of UDP

	Sources int          // attacking sources, allocated from Base
	Base    netip.Prefix // where source addresses start (default 10.128.0.0/9 or fd00:100::/32)
	Dist    Dist
	ZipfS   float64 // default 1
	Sigma   float64 // Gaussian spread as a share of Sources (default 1/6)
	Spoof   netip.Prefix
	// Spread scatters the Sources over all of Base (IPv4) instead of
	// numbering them from its start: reflectors are everywhere, and a
	// flood of contiguous sources would be stopped by one prefix.
	Spread bool
	// Card is the emulated NIC's match table: the lab's flood meets it at
	// the end of the wire, in the generator (gen.GenSpec.Card). Sent
	// counts the frames it drops.
	Card *nicstage.MatchTable

	Rate      uint64        // packets/s; 0: as fast as the kernel goes
	Duration  time.Duration // required, at most MaxDuration
	Reshuffle time.Duration // every this long the ranking of sources changes (0: never)
	Seed      uint64
	// Slots is the size of the sample table the generator walks, a power
	// of two from Sources to 2^21 (0: SampleSlots(Sources)). Runs that
	// compare sizes give every size the same table, so the sender's own
	// cost does not change with the number of sources.
	Slots int
	// Started, if set, is told the time just before the first frame is
	// handed to the kernel: the attack's start, after the generator's
	// set-up (loading its program and tables takes ~1 s of kernel time
	// here, more on a busy machine), which is not part of the attack.
	Started func(time.Time)

	// Flow mode (Flows > 0; flows.go). Dst is the first server address and
	// its family the run's; Sources, Base, Dist, Spoof, SYN and Reshuffle
	// do not apply. Duration may be 0 when Packets is set.
	Flows        int          // A: active flows, a sliding window of flow indices
	BirthRate    float64      // new flows per second, paced on the measured send rate
	BirthEvery   float64      // or: a new flow every this many frames (reproducible)
	PacketSize   int          // data frames on the wire with FCS, 64..1518 (default 64)
	Proto        string       // generic flows: tcp, udp or mixed (alternating); default tcp
	Apps         []string     // flow i runs Apps[i % len(Apps)]; default generic
	Packets      uint64       // stop after exactly this many frames (0: at Duration)
	Clients      netip.Prefix // client addresses (default 10.128.0.0/16, fd00:100::/112)
	ClientPorts  [2]uint16    // client port range (default 1024..65535)
	Servers      int          // server addresses counted from Dst (default 1)
	Host         string       // DNS name, HTTP Host and TLS SNI (default www.example.com)
	NoFlowReport bool         // report totals only (a FlowStat costs ~150 bytes)
}

// Report is what was sent.
type Report struct {
	Sent      uint64                `json:"sent"`
	Elapsed   time.Duration         `json:"elapsed_ns"`
	PPS       float64               `json:"pps"`
	Sources   int                   `json:"sources"`
	Epochs    int                   `json:"epochs"`
	PerSource map[netip.Addr]uint64 `json:"-"`
	// CardDropped of Sent were dropped by the card's table (Spec.Card).
	CardDropped uint64 `json:"card_dropped,omitempty"`
	// Spare repetitions of the generator's runs found the run's frames
	// all out (each an XDP_DROP: the cost of not knowing beforehand how
	// many frames the card drops).
	Spare uint64 `json:"spare,omitempty"`

	// Flow mode. Sent = Scheduled - Dropped.
	Scheduled uint64     `json:"scheduled,omitempty"`  // frames built
	Dropped   uint64     `json:"dropped,omitempty"`    // built, not transmitted (TX failures)
	Born      uint64     `json:"born,omitempty"`       // flows started
	Ended     uint64     `json:"ended,omitempty"`      // flows that left the window
	Window    int        `json:"window,omitempty"`     // A
	BirthRate float64    `json:"birth_rate,omitempty"` // flows/s after the window filled
	Flows     []FlowStat `json:"flows,omitempty"`      // by flow index
}

// Addresses returns the n source addresses of a spec (also what a test
// or the evaluation blocks).
func Addresses(base netip.Prefix, n int) ([]netip.Addr, error) {
	if !base.IsValid() {
		return nil, fmt.Errorf("%w: source base prefix", rule.ErrInvalid)
	}
	hostBits := base.Addr().BitLen() - base.Bits()
	if hostBits < 63 && uint64(n) > uint64(1)<<hostBits {
		return nil, fmt.Errorf("%w: %d sources do not fit in %s", rule.ErrInvalid, n, base)
	}
	out := make([]netip.Addr, n)
	a := base.Masked().Addr().Next() // skip the network address
	for i := range out {
		out[i] = a
		a = a.Next()
	}
	return out, nil
}

// spread moves IPv4 addresses i = 0, 1, … of base to base + (i+1)·stride
// (mod its size), an odd stride near the golden ratio of the size: every
// address distinct, consecutive ones far apart.
func spread(addrs []netip.Addr, base netip.Prefix) error {
	if !base.Addr().Is4() {
		return fmt.Errorf("%w: spread sources need an IPv4 base", rule.ErrInvalid)
	}
	bits := 32 - base.Bits()
	size := uint64(1) << bits
	stride := uint64(float64(size)*0.6180339887) | 1
	b := base.Masked().Addr().As4()
	b0 := uint64(b[0])<<24 | uint64(b[1])<<16 | uint64(b[2])<<8 | uint64(b[3])
	for i := range addrs {
		v := uint32(b0 + (uint64(i+1)*stride)%size)
		addrs[i] = netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
	}
	return nil
}

func (s *Spec) defaults() error {
	if s.Duration <= 0 || s.Duration > MaxDuration {
		return fmt.Errorf("%w: duration %v outside (0, %v]", rule.ErrInvalid, s.Duration, MaxDuration)
	}
	if !s.Dst.IsValid() {
		return fmt.Errorf("%w: destination address", rule.ErrInvalid)
	}
	if s.DstPort == 0 {
		s.DstPort = 9
	}
	if s.SrcPort == 0 {
		s.SrcPort = 40000
	}
	if s.Spoof.IsValid() {
		if s.Spoof.Addr().Is4() != s.Dst.Is4() {
			return fmt.Errorf("%w: spoof prefix %s and destination %s differ in family", rule.ErrInvalid, s.Spoof, s.Dst)
		}
		return nil
	}
	if s.Sources <= 0 || s.Sources > 1<<20 {
		return fmt.Errorf("%w: %d sources outside 1..1048576", rule.ErrInvalid, s.Sources)
	}
	if !s.Base.IsValid() {
		s.Base = netip.MustParsePrefix("10.128.0.0/9")
		if s.Dst.Is6() {
			s.Base = netip.MustParsePrefix("fd00:100::/32")
		}
	}
	if s.Base.Addr().Is4() != s.Dst.Is4() {
		return fmt.Errorf("%w: source base %s and destination %s differ in family", rule.ErrInvalid, s.Base, s.Dst)
	}
	if s.Slots != 0 && (s.Slots&(s.Slots-1) != 0 || s.Slots < s.Sources || s.Slots > maxSlots) {
		return fmt.Errorf("%w: %d sample slots (want a power of two from %d sources to %d)", rule.ErrInvalid, s.Slots, s.Sources, maxSlots)
	}
	switch s.Dist {
	case "":
		s.Dist = Uniform
	case Uniform, Gaussian, Zipf:
	default:
		return fmt.Errorf("%w: distribution %q (want uniform, gaussian or zipf)", rule.ErrInvalid, s.Dist)
	}
	if s.ZipfS == 0 {
		s.ZipfS = 1
	}
	if s.Sigma == 0 {
		s.Sigma = 1.0 / 6
	}
	return nil
}

// maxSlots bounds the sample table: 2^21 samples of 16 bytes, 32 MiB.
const maxSlots = 1 << 21

// SampleSlots is the default sample table for n sources: twice as many
// slots, at least 2^16, at most 2^21, a power of two.
func SampleSlots(n int) int {
	return min(1<<bits.Len(uint(max(2*n, 1<<16)-1)), maxSlots)
}

// Weights is the share of the rate each source rank gets.
func Weights(d Dist, n int, zipfS, sigma float64) []float64 {
	w := make([]float64, n)
	var sum float64
	for i := range w {
		switch d {
		case Zipf:
			w[i] = 1 / math.Pow(float64(i+1), zipfS)
		case Gaussian:
			z := (float64(i) - float64(n-1)/2) / math.Max(sigma*float64(n), 1e-9)
			w[i] = math.Exp(-z * z / 2)
		default:
			w[i] = 1
		}
		sum += w[i]
	}
	for i := range w {
		w[i] /= sum
	}
	return w
}

// sampleTable lays out slots source indices so that each source appears
// in proportion to its weight (largest-remainder rounding, so the table
// is exact), in a shuffled order so that consecutive frames come from
// different sources.
func sampleTable(weights []float64, rank []int, slots int, rng *rand.Rand) []int {
	type rem struct {
		i int
		r float64
	}
	counts := make([]int, len(weights))
	var rems []rem
	used := 0
	for i, w := range weights {
		x := w * float64(slots)
		counts[i] = int(x)
		used += counts[i]
		rems = append(rems, rem{i, x - float64(counts[i])})
	}
	sort.Slice(rems, func(a, b int) bool { return rems[a].r > rems[b].r })
	for k := 0; used < slots; k++ {
		counts[rems[k%len(rems)].i]++
		used++
	}
	out := make([]int, 0, slots)
	for i, c := range counts {
		for j := 0; j < c; j++ {
			out = append(out, rank[i]) // the source holding rank i
		}
	}
	rng.Shuffle(len(out), func(a, b int) { out[a], out[b] = out[b], out[a] })
	return out
}

// Run sends the flood and reports what was sent. It stops at the duration
// or when ctx ends, whichever comes first.
func Run(ctx context.Context, s Spec) (*Report, error) {
	if s.Flows > 0 {
		return runFlows(ctx, s)
	}
	if err := s.defaults(); err != nil {
		return nil, err
	}
	zero := netip.IPv4Unspecified()
	if s.Dst.Is6() {
		zero = netip.IPv6Unspecified()
	}
	f := pkt.Frame{DstMAC: s.DstMAC, SrcMAC: s.SrcMAC, Src: zero, Dst: s.Dst, SrcPort: s.SrcPort, DstPort: s.DstPort}
	if s.SYN {
		f.Proto, f.TCPFlags = pkt.ProtoTCP, pkt.TCPFlagSYN
	} else {
		f.Proto = pkt.ProtoUDP
		f.Payload = make([]byte, 18) // 64-byte frames on IPv4
	}
	frame := f.Build()

	rng := rand.New(rand.NewPCG(s.Seed, s.Seed^0x5DEECE66D))
	spec := gen.GenSpec{Iface: s.Iface, Template: frame, Spoof: s.Spoof, Card: s.Card}
	var addrs []netip.Addr
	var weights []float64
	var rank []int
	var table []int
	if !s.Spoof.IsValid() {
		var err error
		if addrs, err = Addresses(s.Base, s.Sources); err != nil {
			return nil, err
		}
		if s.Spread {
			if err := spread(addrs, s.Base); err != nil {
				return nil, err
			}
		}
		weights = Weights(s.Dist, s.Sources, s.ZipfS, s.Sigma)
		rank = make([]int, s.Sources)
		for i := range rank {
			rank[i] = i
		}
		slots := s.Slots
		if slots == 0 {
			slots = SampleSlots(s.Sources)
		}
		table = sampleTable(weights, rank, slots, rng)
		spec.Samples = make([]netip.Addr, slots)
		for i, src := range table {
			spec.Samples[i] = addrs[src]
		}
	}
	g, err := gen.NewGenerator(spec)
	if err != nil {
		return nil, err
	}
	defer g.Close()

	rep := &Report{Sources: s.Sources, Epochs: 1}
	// Per-source counts are taken per epoch of the sample table, from the
	// walk's cursors, never per send: the lab's wire shares this CPU.
	var per []uint64
	var cur0 gen.Cursor
	walked := func() error {
		if per == nil {
			return nil
		}
		cur1, err := g.Cursor()
		if err != nil {
			return err
		}
		if err := g.AddWalked(per, cur0, cur1); err != nil {
			return err
		}
		for i, c := range per {
			if c > 0 {
				rep.PerSource[spec.Samples[i]] += c
				per[i] = 0
			}
		}
		cur0 = cur1
		return nil
	}
	if !s.Spoof.IsValid() {
		rep.PerSource = make(map[netip.Addr]uint64, s.Sources)
		per = make([]uint64, len(spec.Samples))
		if cur0, err = g.Cursor(); err != nil {
			return nil, err
		}
	}
	// Each test run ends with an RCU grace period (~20 ms here): runs of
	// about 100 ms keep that overhead small and the rate cap smooth.
	const slot = 100 * time.Millisecond
	chunk := uint64(1 << 16) // uncapped: a first short run measures the rate
	var rate float64
	if s.Rate > 0 {
		chunk = max(1, s.Rate*uint64(slot)/uint64(time.Second))
	}
	start := time.Now()
	if s.Started != nil {
		s.Started(start)
	}
	end := start.Add(s.Duration)
	nextShuffle := start.Add(s.Reshuffle)
	for {
		now := time.Now()
		if !now.Before(end) || ctx.Err() != nil {
			break
		}
		if s.Reshuffle > 0 && !now.Before(nextShuffle) && !s.Spoof.IsValid() {
			if err := walked(); err != nil {
				return rep, err
			}
			rng.Shuffle(len(rank), func(a, b int) { rank[a], rank[b] = rank[b], rank[a] })
			table = sampleTable(weights, rank, len(table), rng)
			for i, src := range table {
				spec.Samples[i] = addrs[src]
			}
			if err := g.SetSamples(spec.Samples); err != nil {
				return rep, err
			}
			rep.Epochs++
			nextShuffle = nextShuffle.Add(s.Reshuffle)
		}
		n := chunk
		if s.Rate == 0 && rate > 0 {
			// Uncapped: runs of ~100 ms at the rate measured so far, the
			// last one cut to the time left.
			n = uint64(rate * min(slot, end.Sub(now)).Seconds())
			n = min(max(n, 1024), 1<<24)
		}
		exact := false
		if s.Rate > 0 {
			// A capped flood sends exactly rate x duration frames. A
			// call may send a little fewer than it asks for (the card's
			// drops, gen.Generator.Send); the last one sends all it asks
			// for, and takes up to half a chunk more, so that no small
			// call is left after it, due when the deadline is closer
			// than its test run's grace period.
			total := s.Rate * uint64(s.Duration) / uint64(time.Second)
			if rep.Sent >= total {
				break
			}
			n = min(chunk, total-rep.Sent)
			if left := total - rep.Sent; left <= chunk+chunk/2 {
				n, exact = left, true
			}
		}
		callStart := time.Now()
		sent, err := g.Send(frame, uint32(min(n, math.MaxUint32)), exact)
		if err != nil {
			return rep, err
		}
		if d := time.Since(callStart); d > 0 && sent > 0 {
			rate = float64(sent) / d.Seconds()
		}
		rep.Sent += sent
		if s.Rate > 0 {
			// Pace: sleep until the schedule catches up with what was sent.
			if ahead := time.Duration(rep.Sent*uint64(time.Second)/s.Rate) - time.Since(start); ahead > 0 {
				select {
				case <-time.After(min(ahead, time.Until(end))):
				case <-ctx.Done():
				}
			}
		}
	}
	rep.Elapsed = time.Since(start)
	rep.PPS = float64(rep.Sent) / rep.Elapsed.Seconds()
	tot, err := g.Totals()
	if err != nil {
		return rep, err
	}
	rep.CardDropped, rep.Spare = tot.CardDropped, tot.Spare
	return rep, walked()
}
