// SPDX-License-Identifier: Apache-2.0

package detect

import (
	"fmt"
	"net/netip"
	"sort"
)

// Thresholds are per-source rates; zero fields are off. BPS is bits per
// second (IP bytes × 8).
type Thresholds struct {
	PPS      float64           `yaml:"pps" json:"pps"`
	BPS      float64           `yaml:"bps" json:"bps"`
	SYNPPS   float64           `yaml:"syn_pps" json:"syn_pps"`
	PerProto map[uint8]float64 `yaml:"per_proto_pps" json:"per_proto_pps"` // IP protocol → pps
}

// Rate flags sources above static thresholds or above a learned one (the
// paper's rate-monitor threshold, §IV-D): a high quantile of the per-source
// rates seen during a baseline window, times Margin.
//
// Learning is built to survive an attack that is already running when the
// daemon starts. From the first interval, sources above Ceiling are flagged
// (a safe default: detection never waits for learning). Those sources, and
// whole intervals where they make up more than a tenth of the sources,
// teach nothing. The learned value is a quantile over every (source,
// interval) sample, not the maximum, so a few heavy sources cannot lift it,
// and it is clamped to [MinPPS, Ceiling], so no traffic can teach a
// threshold the operator did not allow.
type Rate struct {
	Static Thresholds
	// LearnIntervals > 0 learns a pps threshold from that many clean
	// intervals.
	LearnIntervals int
	Margin         float64 // learned threshold = quantile × Margin (≥ 1)
	// MinPPS is a floor under the learned threshold, so a quiet baseline
	// does not make every later source an attacker (0: DefaultMinPPS).
	MinPPS float64
	// Ceiling caps the learned threshold and is the threshold while
	// learning (0: DefaultCeiling).
	Ceiling float64
	// Quantile of the samples that is learned (0: DefaultQuantile).
	Quantile float64
	// Groups: a source sending more than its host group's SourcePPS to
	// one host of the group is named too (nil: no groups).
	Groups *HostGroups

	seen    int       // clean intervals learned from
	refused int       // anomalous intervals not learned from
	samples []float64 // per-source rates of clean intervals, bounded
	total   uint64    // samples offered to the reservoir
	learned float64
}

// Learning defaults. An idle link teaches a threshold of a few pps; the
// floor keeps it where one real client (a NAT gateway, a crawler, a backup)
// does not cross it, and the ceiling, the threshold while learning, flags
// only sources no client sends at.
const (
	DefaultMinPPS   = 1000 // pps from one source
	DefaultCeiling  = 5000 // pps from one source
	DefaultQuantile = 0.99
	// maxSamples bounds learning's memory whatever the number of sources:
	// beyond it samples are kept by reservoir replacement.
	maxSamples = 1 << 16
)

func (r *Rate) Name() string { return "rate" }

func (r *Rate) floor() float64 {
	if r.MinPPS > 0 {
		return r.MinPPS
	}
	return DefaultMinPPS
}

func (r *Rate) ceiling() float64 {
	if r.Ceiling > 0 {
		return r.Ceiling
	}
	return DefaultCeiling
}

// Learned reports the learned per-source pps threshold, if learning is done.
func (r *Rate) Learned() (float64, bool) {
	return r.learned, r.LearnIntervals > 0 && r.learned > 0
}

// Restore installs a threshold learned before (from the state file), so a
// restart in the middle of an attack does not learn again from it. Values
// outside [MinPPS, Ceiling] are clamped.
func (r *Rate) Restore(pps float64) {
	if r.LearnIntervals <= 0 || pps <= 0 {
		return
	}
	r.learned = min(max(pps, r.floor()), r.ceiling())
	r.samples = nil
}

// Learning reports clean and refused intervals so far (for status).
func (r *Rate) Learning() (clean, refused int) { return r.seen, r.refused }

func (r *Rate) learn(t *Traffic) {
	ceil := r.ceiling()
	over := 0
	for i := range t.Sources {
		if t.Rate(t.Sources[i].Packets) > ceil {
			over++
		}
	}
	if len(t.Sources) == 0 || over*10 > len(t.Sources) {
		r.refused++ // an attack in progress, or nothing to learn from
		return
	}
	for i := range t.Sources {
		v := t.Rate(t.Sources[i].Packets)
		if v > ceil {
			continue
		}
		r.total++
		if len(r.samples) < maxSamples {
			r.samples = append(r.samples, v)
			continue
		}
		// Reservoir sampling (deterministic, from the sample count): every
		// sample has the same chance to be kept, memory stays bounded.
		if i := splitmix(r.total) % r.total; i < maxSamples {
			r.samples[i] = v
		}
	}
	r.seen++
	if r.seen < r.LearnIntervals {
		return
	}
	q := r.Quantile
	if q <= 0 || q > 1 {
		q = DefaultQuantile
	}
	sort.Float64s(r.samples)
	v := r.samples[min(int(q*float64(len(r.samples))), len(r.samples)-1)]
	r.learned = min(max(v*max(r.Margin, 1), r.floor()), ceil)
	r.samples = nil
}

func (r *Rate) Detect(t *Traffic) []Detection {
	if r.LearnIntervals > 0 && r.learned == 0 {
		r.learn(t)
	}
	var out []Detection
	for i := range t.Sources {
		s := &t.Sources[i]
		pps := t.Rate(s.Packets)
		if why := r.exceeds(t, i, s, pps); why != "" {
			out = append(out, Detection{Prefix: host(t.SourceAddr(i)), Detector: r.Name(), Reason: why, Rate: pps})
		}
	}
	out = append(out, r.groupSources(t, out)...)
	sort.Slice(out, func(i, j int) bool { return out[i].Rate > out[j].Rate })
	return out
}

func (r *Rate) exceeds(t *Traffic, i int, s *Source, pps float64) string {
	st := r.Static
	switch {
	case st.PPS > 0 && pps > st.PPS:
		return fmt.Sprintf("%.0f pps > %.0f", pps, st.PPS)
	case st.BPS > 0 && t.Rate(s.Bytes)*8 > st.BPS:
		return fmt.Sprintf("%.0f bps > %.0f", t.Rate(s.Bytes)*8, st.BPS)
	case st.SYNPPS > 0 && t.Rate(s.SYNs) > st.SYNPPS:
		return fmt.Sprintf("%.0f SYN/s > %.0f", t.Rate(s.SYNs), st.SYNPPS)
	}
	for p, lim := range st.PerProto {
		if v := t.Rate(t.Proto(i, p)); lim > 0 && v > lim {
			return fmt.Sprintf("%.0f pps of protocol %d > %.0f", v, p, lim)
		}
	}
	if l, ok := r.Learned(); ok && pps > l {
		return fmt.Sprintf("%.0f pps > learned %.0f", pps, l)
	}
	if r.LearnIntervals > 0 && r.learned == 0 && pps > r.ceiling() {
		return fmt.Sprintf("%.0f pps > %.0f (ceiling, while learning)", pps, r.ceiling())
	}
	return ""
}

// groupSources names the sources above their destination's host-group
// SourcePPS, less those already named. A monitored group names none.
func (r *Rate) groupSources(t *Traffic, named []Detection) []Detection {
	if r.Groups == nil || !r.Groups.source {
		return nil
	}
	// One lookup per destination, not per pair.
	dg := make([]*HostGroup, len(t.Dests))
	for i := range t.Dests {
		if g := r.Groups.Lookup(t.DestAddr(i)); g != nil && g.SourcePPS > 0 && g.Action != ActionMonitor {
			dg[i] = g
		}
	}
	done := make(map[netip.Prefix]bool, len(named))
	for _, d := range named {
		done[d.Prefix] = true
	}
	// A pair is per protocol class: sum them per (source, destination).
	sum := map[[2]int32]uint64{}
	var order [][2]int32
	for _, p := range t.Pairs {
		if dg[p.Dst] == nil {
			continue
		}
		k := [2]int32{p.Src, p.Dst}
		if _, ok := sum[k]; !ok {
			order = append(order, k)
		}
		sum[k] += p.Packets
	}
	var out []Detection
	for _, k := range order {
		g, pps := dg[k[1]], t.Rate(sum[k])
		src := host(t.SourceAddr(int(k[0])))
		if pps <= g.SourcePPS || done[src] {
			continue
		}
		done[src] = true
		out = append(out, Detection{Prefix: src, Detector: r.Name(), Rate: pps, HostGroup: g.Name,
			Reason: fmt.Sprintf("%.0f pps toward %s > %.0f (host group %s)", pps, t.DestAddr(int(k[1])), g.SourcePPS, g.Name)})
	}
	return out
}

// splitmix is SplitMix64's finaliser: a cheap, well-mixed hash of a counter.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
