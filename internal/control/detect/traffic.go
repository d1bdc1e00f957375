// SPDX-License-Identifier: Apache-2.0

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

// Source is one source's traffic over an interval: Traffic.Sources[i],
// whose address is Traffic.SourceAddr(i). 40 bytes and no pointer: a
// flood brings a million of them every interval.
type Source struct {
	Counts
	Dests int // distinct destinations
	// dst0 is the first destination (a position in Traffic.Dests): a
	// flood's sources nearly all have one; later ones are in
	// Traffic.seen.
	dst0 int32
	// proto0 is the first IP protocol; a source that used more (multi)
	// has its packets per protocol in Traffic.protos.
	proto0 uint8
	multi  bool
}

// Dest is one destination's traffic over an interval: Traffic.Dests[i],
// whose address is Traffic.DestAddr(i).
type Dest struct {
	Counts
	// TCP and UDP are the part of Counts of those protocols: per-victim
	// detection keeps a baseline per (destination, protocol), and a flood
	// usually changes one protocol's rate far more than the total.
	TCP, UDP Counts
}

// Traffic is one interval of passed traffic, aggregated per source and
// per destination. Sources and destinations are dense slices numbered by
// an index of compact keys, not maps of netip.Addr to pointers: at a
// million sources per interval the maps and a pointer per source were
// most of the daemon's memory and time. Reset keeps the memory for the
// next interval, so a daemon that reuses one Traffic allocates nothing per
// interval in a steady flood.
type Traffic struct {
	Interval time.Duration
	Sources  []Source
	Dests    []Dest
	// Pairs holds packets per (source, destination), one entry per key
	// the snapshot had: a pair seen with two protocols appears twice (sum
	// them when it matters).
	Pairs []PairCount
	// pairMeta is parallel to Pairs: the key's protocol class and whether
	// it carried TCP other than SYNs (see PairProto, PairNonSYN). A byte
	// beside Pairs, not fields in PairCount, which would grow from 16 to
	// 24 bytes for every key of a million-key interval.
	pairMeta []uint8
	Total    Counts
	// Overflow is the packets of this interval the feature buffers could
	// not hold (not in Sources): detectors must not read the interval as
	// complete when it is not zero.
	Overflow uint64

	perSec float64 // 1 / Interval in seconds
	srcs   index   // numbers Sources
	dsts   index   // numbers Dests
	// seen holds the (source, destination) positions of every
	// destination of a source after its first, for Dests.
	seen map[uint64]struct{}
	// protos holds packets per (source position, protocol) of the
	// sources that used more than one protocol.
	protos map[uint64]uint64
}

// PairCount is the packets of one (source, destination) key: Src and Dst
// are positions in Sources and Dests.
type PairCount struct {
	Src, Dst int32
	Packets  uint64
}

// NewTraffic starts an empty interval of length d.
func NewTraffic(d time.Duration) *Traffic { return NewTrafficSized(d, 0) }

// NewTrafficSized starts an empty interval of length d for about n keys:
// sized up front, the tables of a million-source interval never grow.
func NewTrafficSized(d time.Duration, n int) *Traffic {
	t := &Traffic{}
	t.Reset(d, n)
	return t
}

// Reset empties t for a new interval of length d and about n keys,
// keeping its memory when it fits (and dropping it when it is far larger
// than n needs, so a flood's tables do not outlive the flood).
func (t *Traffic) Reset(d time.Duration, n int) {
	t.srcs.reset(n)
	t.dsts.reset(len(t.Dests)) // destinations are few and steady: last interval's count
	if cap(t.Sources) < n || cap(t.Sources) > 4*max(n, 1024) {
		t.Sources = make([]Source, 0, n)
		t.Pairs = make([]PairCount, 0, n)
		t.pairMeta = make([]uint8, 0, n)
	}
	t.Sources, t.Dests, t.Pairs, t.pairMeta = t.Sources[:0], t.Dests[:0], t.Pairs[:0], t.pairMeta[:0]
	t.seen, t.protos = nil, nil
	t.Total, t.Overflow = Counts{}, 0
	t.Interval, t.perSec = d, 0
	if d > 0 {
		t.perSec = 1 / d.Seconds()
	}
}

// SourceAddr is the address of Sources[i].
func (t *Traffic) SourceAddr(i int) netip.Addr { return t.srcs.keys[i].Addr() }

// SourceKey is the key of Sources[i].
func (t *Traffic) SourceKey(i int) Key { return t.srcs.keys[i] }

// DestAddr is the address of Dests[i].
func (t *Traffic) DestAddr(i int) netip.Addr { return t.dsts.keys[i].Addr() }

// SourceIndex is the position in Sources of the source with key k, or -1.
func (t *Traffic) SourceIndex(k Key) int { return int(t.srcs.get(k)) }

// Source is the traffic of source a, nil when it sent nothing.
func (t *Traffic) Source(a netip.Addr) *Source {
	if i := t.SourceIndex(KeyOf(a.Unmap())); i >= 0 {
		return &t.Sources[i]
	}
	return nil
}

// Proto is the packets Sources[i] sent with IP protocol p.
func (t *Traffic) Proto(i int, p uint8) uint64 {
	s := &t.Sources[i]
	if !s.multi {
		if s.proto0 == p {
			return s.Packets
		}
		return 0
	}
	return t.protos[uint64(i)<<8|uint64(p)]
}

// Add records one (source, destination, protocol) key of the snapshot.
func (t *Traffic) Add(src, dst netip.Addr, proto uint8, packets, bytes, syns uint64) {
	// An IPv4-mapped IPv6 address is the IPv4 host: detections must name
	// the form a rule can hold (rules refuse mapped addresses). KeyOf
	// gives both forms one key; the key's address is the unmapped one.
	si, newSrc := t.srcs.put(KeyOf(src))
	di, newDst := t.dsts.put(KeyOf(dst))
	if newSrc {
		t.Sources = append(t.Sources, Source{dst0: di, proto0: proto, Dests: 1})
	}
	if newDst {
		t.Dests = append(t.Dests, Dest{})
	}
	s := &t.Sources[si]
	if !newSrc {
		if s.dst0 != di {
			if t.seen == nil {
				t.seen = map[uint64]struct{}{}
			}
			pk := uint64(si)<<32 | uint64(di)
			if _, ok := t.seen[pk]; !ok {
				t.seen[pk] = struct{}{}
				s.Dests++
			}
		}
		if s.multi || s.proto0 != proto {
			if t.protos == nil {
				t.protos = map[uint64]uint64{}
			}
			if !s.multi { // the first protocol's packets so far
				t.protos[uint64(si)<<8|uint64(s.proto0)] = s.Packets
				s.multi = true
			}
			t.protos[uint64(si)<<8|uint64(proto)] += packets
		}
	}
	s.add(packets, bytes, syns)
	d := &t.Dests[di]
	d.add(packets, bytes, syns)
	var meta uint8
	switch proto {
	case 6:
		d.TCP.add(packets, bytes, syns)
		meta = pairTCP
		if packets > syns {
			meta |= pairNonSYN
		}
	case 17:
		d.UDP.add(packets, bytes, syns)
		meta = pairUDP
	}
	t.Pairs = append(t.Pairs, PairCount{si, di, packets})
	t.pairMeta = append(t.pairMeta, meta)
	t.Total.add(packets, bytes, syns)
}

// Pair protocol classes and flags, in pairMeta.
const (
	pairTCP    = 1
	pairUDP    = 2
	pairNonSYN = 4 // TCP packets other than SYNs: the source answered a handshake
)

// PairProto is the IP protocol of Pairs[i] when it is TCP (6) or UDP
// (17), else 0.
func (t *Traffic) PairProto(i int) uint8 {
	switch t.pairMeta[i] & 3 {
	case pairTCP:
		return 6
	case pairUDP:
		return 17
	}
	return 0
}

// PairNonSYN reports whether Pairs[i] carried TCP packets other than
// SYNs, which a spoofed source cannot send in answer to a handshake.
func (t *Traffic) PairNonSYN(i int) bool { return t.pairMeta[i]&pairNonSYN != 0 }

// Rate converts a count over the interval to a per-second rate.
func (t *Traffic) Rate(n uint64) float64 { return float64(n) * t.perSec }

// Detection names something to block and why.
type Detection struct {
	Prefix   netip.Prefix `json:"prefix"`
	Detector string       `json:"detector"`
	Reason   string       `json:"reason"`
	// Rate is the packets per second that triggered it (0 for lists).
	Rate float64 `json:"rate_pps"`
	// HostGroup is the host group whose thresholds decided ("" for none).
	HostGroup string `json:"hostgroup,omitempty"`
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
	for i := range t.Sources {
		s := &t.Sources[i]
		k := t.srcs.keys[i]
		if h.Len() == n && !heavier(s.Packets, k, (*h)[0].Packets, (*h)[0].key) {
			continue
		}
		tk := ranked{key: k, Talker: Talker{Src: k.Addr(), Packets: s.Packets, PPS: t.Rate(s.Packets), BPS: 8 * t.Rate(s.Bytes),
			SYNPS: t.Rate(s.SYNs), Dests: s.Dests, Interval: t.Interval.Seconds()}}
		if h.Len() < n {
			heap.Push(h, tk)
		} else {
			(*h)[0] = tk
			heap.Fix(h, 0)
		}
	}
	sort.Slice(*h, func(i, j int) bool { return heavier((*h)[i].Packets, (*h)[i].key, (*h)[j].Packets, (*h)[j].key) })
	out := make([]Talker, len(*h))
	for i, r := range *h {
		out[i] = r.Talker
	}
	return out
}

func heavier(p1 uint64, a1 Key, p2 uint64, a2 Key) bool {
	if p1 != p2 {
		return p1 > p2
	}
	return a1.less(a2)
}

// ranked is a talker with its key, for comparisons without conversions.
type ranked struct {
	Talker
	key Key
}

// talkerHeap is a min-heap: the lightest of the kept talkers on top.
type talkerHeap []ranked

func (h talkerHeap) Len() int { return len(h) }
func (h talkerHeap) Less(i, j int) bool {
	return heavier(h[j].Packets, h[j].key, h[i].Packets, h[i].key)
}
func (h talkerHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *talkerHeap) Push(x any)   { *h = append(*h, x.(ranked)) }
func (h *talkerHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
