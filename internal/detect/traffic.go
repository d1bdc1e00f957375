// Package detect holds tierwall's detection module (Miano et al. §IV-C):
// detectors that look at one interval of traffic that passed the filter
// (the feature snapshot, aggregated here per source and destination) and
// name what should be blocked. Detectors are pure functions of what they
// are shown plus their own learned state; the daemon decides what to do
// with a detection (safety rails, ban lifecycle).
package detect

import (
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
	PerProto map[uint8]uint64 // packets per IP protocol
}

// Traffic is one interval of passed traffic.
type Traffic struct {
	Interval time.Duration
	Sources  map[netip.Addr]*Source
	Dests    map[netip.Addr]*Counts
	Pairs    map[Pair]uint64 // packets per (source, destination)
	Total    Counts
	// Overflow is the packets of this interval the feature buffers could
	// not hold (not in Sources): detectors must not read the interval as
	// complete when it is not zero.
	Overflow uint64
}

// Pair is a (source, destination) couple.
type Pair struct{ Src, Dst netip.Addr }

// NewTraffic starts an empty interval of length d.
func NewTraffic(d time.Duration) *Traffic {
	return &Traffic{Interval: d, Sources: map[netip.Addr]*Source{}, Dests: map[netip.Addr]*Counts{}, Pairs: map[Pair]uint64{}}
}

// Add records one (source, destination, protocol) key of the snapshot.
func (t *Traffic) Add(src, dst netip.Addr, proto uint8, packets, bytes, syns uint64) {
	// An IPv4-mapped IPv6 address is the IPv4 host: detections must name
	// the form a rule can hold (rules refuse mapped addresses).
	src, dst = src.Unmap(), dst.Unmap()
	s := t.Sources[src]
	if s == nil {
		s = &Source{PerProto: map[uint8]uint64{}}
		t.Sources[src] = s
	}
	s.add(packets, bytes, syns)
	s.PerProto[proto] += packets
	d := t.Dests[dst]
	if d == nil {
		d = &Counts{}
		t.Dests[dst] = d
	}
	d.add(packets, bytes, syns)
	t.Pairs[Pair{src, dst}] += packets
	t.Total.add(packets, bytes, syns)
}

// Rate converts a count over the interval to a per-second rate.
func (t *Traffic) Rate(n uint64) float64 {
	if t.Interval <= 0 {
		return 0
	}
	return float64(n) / t.Interval.Seconds()
}

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

// Top ranks the n heaviest sources by packets (ties by address).
func (t *Traffic) Top(n int) []Talker {
	dests := map[netip.Addr]int{}
	for p := range t.Pairs {
		dests[p.Src]++
	}
	out := make([]Talker, 0, len(t.Sources))
	for a, s := range t.Sources {
		out = append(out, Talker{Src: a, Packets: s.Packets, PPS: t.Rate(s.Packets), BPS: 8 * t.Rate(s.Bytes),
			SYNPS: t.Rate(s.SYNs), Dests: dests[a], Interval: t.Interval.Seconds()})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Packets != out[j].Packets {
			return out[i].Packets > out[j].Packets
		}
		return out[i].Src.Less(out[j].Src)
	})
	if len(out) > n {
		out = out[:n]
	}
	return out
}
