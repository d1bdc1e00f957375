// Package detect holds tierwall's detection module (Miano et al. §IV-C):
// detectors that look at one interval of traffic that passed the filter
// (the feature snapshot, aggregated here per source and destination) and
// name what should be blocked. Detectors are pure functions of what they
// are shown plus their own learned state; the daemon decides what to do
// with a detection (safety rails, ban lifecycle).
package detect

import (
	"container/heap"
	"net/netip"
	"sort"
	"time"
)

// Counts are packet, byte and TCP SYN counts.
type Counts struct {
	Packets uint64
	Bytes   uint64
	SYNs    uint64
}

func (c *Counts) add(p, b, s uint64) {
	c.Packets += p
	c.Bytes += b
	c.SYNs += s
}

// Source is one source's traffic over an interval.
type Source struct {
	Counts
	Dests int // distinct destinations
	// protos holds packets per IP protocol: a short list, not a map, since
	// a source nearly always uses one or two protocols and a flood brings
	// a million sources.
	protos []protoCount
	// dst0 and dsts are the distinct destinations, for Dests: the first
	// inline (a flood's sources nearly all have one), then a short list,
	// then Traffic.seen past maxDsts.
	dst0 netip.Addr
	dsts []netip.Addr
}

// maxDsts is how many destinations of one source are kept in its list;
// past it a source's pairs go to a map (a scan would be quadratic).
const maxDsts = 8

type protoCount struct {
	proto   uint8
	packets uint64
}

// Proto is the packets the source sent with IP protocol p.
func (s *Source) Proto(p uint8) uint64 {
	for _, c := range s.protos {
		if c.proto == p {
			return c.packets
		}
	}
	return 0
}

func (s *Source) addProto(p uint8, n uint64) {
	for i := range s.protos {
		if s.protos[i].proto == p {
			s.protos[i].packets += n
			return
		}
	}
	s.protos = append(s.protos, protoCount{p, n})
}

// Traffic is one interval of passed traffic.
type Traffic struct {
	Interval time.Duration
	Sources  map[netip.Addr]*Source
	Dests    map[netip.Addr]*Counts
	// Pairs holds packets per (source, destination), one entry per key
	// the snapshot had: a pair seen with two protocols appears twice (sum
	// them when it matters). A slice, not a map: at a million sources a
	// pair map was the largest part of the interval's memory and time.
	Pairs []PairCount
	Total Counts
	// Overflow is the packets of this interval the feature buffers could
	// not hold (not in Sources): detectors must not read the interval as
	// complete when it is not zero.
	Overflow uint64

	perSec float64           // 1 / Interval in seconds
	seen   map[Pair]struct{} // pairs of sources with more than maxDsts destinations
}

// Pair is a (source, destination) couple.
type Pair struct{ Src, Dst netip.Addr }

// PairCount is the packets of one (source, destination) key.
type PairCount struct {
	Pair
	Packets uint64
}

// NewTraffic starts an empty interval of length d.
func NewTraffic(d time.Duration) *Traffic { return NewTrafficSized(d, 0) }

// NewTrafficSized starts an empty interval of length d for about n keys:
// sized up front, the maps of a million-source interval never grow.
func NewTrafficSized(d time.Duration, n int) *Traffic {
	t := &Traffic{Sources: make(map[netip.Addr]*Source, n), Dests: map[netip.Addr]*Counts{},
		Pairs: make([]PairCount, 0, n)}
	t.Reset(d)
	return t
}

// Reset empties t for a new interval of length d, keeping its memory: the
// maps keep their buckets, so a daemon that reuses one Traffic does not
// rebuild a million-entry map every interval.
func (t *Traffic) Reset(d time.Duration) {
	clear(t.Sources)
	clear(t.Dests)
	clear(t.Pairs[:cap(t.Pairs)]) // drop the addresses' zone pointers for the GC
	t.Pairs = t.Pairs[:0]
	t.seen = nil
	t.Total, t.Overflow = Counts{}, 0
	t.Interval, t.perSec = d, 0
	if d > 0 {
		t.perSec = 1 / d.Seconds()
	}
}

// newDst records dst as one of s's destinations; it reports whether it
// was new.
func (t *Traffic) newDst(src netip.Addr, s *Source, dst netip.Addr) bool {
	switch {
	case s.Dests == 0:
		s.dst0 = dst
		return true
	case s.dst0 == dst:
		return false
	}
	for _, d := range s.dsts {
		if d == dst {
			return false
		}
	}
	if len(s.dsts) < maxDsts {
		s.dsts = append(s.dsts, dst)
		return true
	}
	if t.seen == nil {
		t.seen = map[Pair]struct{}{}
	}
	if _, ok := t.seen[Pair{src, dst}]; ok {
		return false
	}
	t.seen[Pair{src, dst}] = struct{}{}
	return true
}

// Add records one (source, destination, protocol) key of the snapshot.
func (t *Traffic) Add(src, dst netip.Addr, proto uint8, packets, bytes, syns uint64) {
	// An IPv4-mapped IPv6 address is the IPv4 host: detections must name
	// the form a rule can hold (rules refuse mapped addresses).
	src, dst = src.Unmap(), dst.Unmap()
	s := t.Sources[src]
	if s == nil {
		s = &Source{}
		t.Sources[src] = s
	}
	s.add(packets, bytes, syns)
	s.addProto(proto, packets)
	d := t.Dests[dst]
	if d == nil {
		d = &Counts{}
		t.Dests[dst] = d
	}
	d.add(packets, bytes, syns)
	if t.newDst(src, s, dst) {
		s.Dests++
	}
	t.Pairs = append(t.Pairs, PairCount{Pair{src, dst}, packets})
	t.Total.add(packets, bytes, syns)
}

// Rate converts a count over the interval to a per-second rate.
func (t *Traffic) Rate(n uint64) float64 { return float64(n) * t.perSec }

// Detection names something to block and why.
type Detection struct {
	Prefix   netip.Prefix `json:"prefix"`
	Detector string       `json:"detector"`
	Reason   string       `json:"reason"`
	// Rate is the packets per second that triggered it (0 for lists).
	Rate float64 `json:"rate_pps"`
}

// Detector is one detection method.
type Detector interface {
	Name() string
	// Detect looks at one interval; it may update learned state.
	Detect(t *Traffic) []Detection
}

func host(a netip.Addr) netip.Prefix { return netip.PrefixFrom(a, a.BitLen()) }

// Talker is one source's traffic over an interval, as rates: what `tierwall
// top` prints, from the daemon's last interval or from a snapshot of its
// own, in one schema.
type Talker struct {
	Src      netip.Addr `json:"src"`
	PPS      float64    `json:"pps"`
	BPS      float64    `json:"bps"`
	SYNPS    float64    `json:"syn_pps"`
	Dests    int        `json:"destinations"`
	Packets  uint64     `json:"packets"`
	Interval float64    `json:"interval_seconds"`
	Banned   bool       `json:"banned"`
}

// Top ranks the n heaviest sources by packets (ties by address). It keeps
// only n candidates while it scans, so a million sources cost a scan, not
// a sort.
func (t *Traffic) Top(n int) []Talker {
	if n <= 0 {
		return []Talker{}
	}
	h := &talkerHeap{}
	for a, s := range t.Sources {
		if h.Len() == n && !heavier(s.Packets, a, (*h)[0].Packets, (*h)[0].Src) {
			continue
		}
		tk := Talker{Src: a, Packets: s.Packets, PPS: t.Rate(s.Packets), BPS: 8 * t.Rate(s.Bytes),
			SYNPS: t.Rate(s.SYNs), Dests: s.Dests, Interval: t.Interval.Seconds()}
		if h.Len() < n {
			heap.Push(h, tk)
		} else {
			(*h)[0] = tk
			heap.Fix(h, 0)
		}
	}
	out := []Talker(*h)
	sort.Slice(out, func(i, j int) bool { return heavier(out[i].Packets, out[i].Src, out[j].Packets, out[j].Src) })
	return out
}

func heavier(p1 uint64, a1 netip.Addr, p2 uint64, a2 netip.Addr) bool {
	if p1 != p2 {
		return p1 > p2
	}
	return a1.Less(a2)
}

// talkerHeap is a min-heap: the lightest of the kept talkers on top.
type talkerHeap []Talker

func (h talkerHeap) Len() int { return len(h) }
func (h talkerHeap) Less(i, j int) bool {
	return heavier(h[j].Packets, h[j].Src, h[i].Packets, h[i].Src)
}
func (h talkerHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *talkerHeap) Push(x any)   { *h = append(*h, x.(Talker)) }
func (h *talkerHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
