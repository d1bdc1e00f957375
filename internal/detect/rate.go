package detect

import (
	"fmt"
	"sort"
)

// Thresholds are per-source rates; zero fields are off.
type Thresholds struct {
	PPS      float64           `yaml:"pps" json:"pps"`
	BPS      float64           `yaml:"bps" json:"bps"`
	SYNPPS   float64           `yaml:"syn_pps" json:"syn_pps"`
	PerProto map[uint8]float64 `yaml:"per_proto_pps" json:"per_proto_pps"` // IP protocol → pps
}

// Rate flags sources above static thresholds or above a learned one: the
// highest rate one source reached during a baseline window of normal
// traffic, times Margin (the paper's rate-monitor threshold, §IV-D).
type Rate struct {
	Static Thresholds
	// LearnIntervals > 0 learns a pps threshold from the first intervals
	// seen; nothing is flagged by it until then.
	LearnIntervals int
	Margin         float64 // learned threshold = max seen × Margin (≥ 1)
	// MinPPS is a floor under the learned threshold, so a quiet baseline
	// does not make every later source an attacker.
	MinPPS float64

	seen    int
	maxPPS  float64
	learned float64
}

func (r *Rate) Name() string { return "rate" }

// Learned reports the learned per-source pps threshold, if learning is done.
func (r *Rate) Learned() (float64, bool) {
	return r.learned, r.LearnIntervals > 0 && r.seen >= r.LearnIntervals
}

func (r *Rate) Detect(t *Traffic) []Detection {
	if r.LearnIntervals > 0 && r.seen < r.LearnIntervals {
		for _, s := range t.Sources {
			r.maxPPS = max(r.maxPPS, t.Rate(s.Packets))
		}
		r.seen++
		if r.seen == r.LearnIntervals {
			r.learned = max(r.maxPPS*max(r.Margin, 1), r.MinPPS)
		}
	}
	var out []Detection
	for a, s := range t.Sources {
		pps := t.Rate(s.Packets)
		if why := r.exceeds(t, s, pps); why != "" {
			out = append(out, Detection{Prefix: host(a), Detector: r.Name(), Reason: why, Rate: pps})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Rate > out[j].Rate })
	return out
}

func (r *Rate) exceeds(t *Traffic, s *Source, pps float64) string {
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
		if v := t.Rate(s.PerProto[p]); lim > 0 && v > lim {
			return fmt.Sprintf("%.0f pps of protocol %d > %.0f", v, p, lim)
		}
	}
	if l, ok := r.Learned(); ok && pps > l {
		return fmt.Sprintf("%.0f pps > learned %.0f", pps, l)
	}
	return ""
}
