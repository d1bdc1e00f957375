// SPDX-License-Identifier: Apache-2.0

package placement

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Scenario is a synthetic attack for judging placement quality: a skewed
// (Zipf) distribution of per-source rates whose ranking drifts, because
// every source ramps up and down on its own period. What placement sees is
// the previous interval's packet counts (Poisson-sampled), as in the real
// loop; what it is scored on is the current interval's true traffic.
type Scenario struct {
	Sources   int
	K         int
	Intervals int
	ZipfS     float64 // skew of the base weights
	Load      float64 // attack volume / MaxRate
	MaxRate   float64 // pps
	// Each source's rate is weight * (1 + Swing*sin(2*pi*t/period + phase)),
	// with period drawn in [MinPeriod, MaxPeriod] intervals.
	Swing                float64
	MinPeriod, MaxPeriod float64
	// Jitter is the sigma of a per-source, per-interval log-normal factor:
	// bots are bursty, so a source's rate is never the same twice.
	Jitter            float64
	Interval, Latency time.Duration
	Seed              uint64
	// MinThreshold is passed to Params (zero: its default).
	MinThreshold float64
}

// Result is one policy's score over a scenario.
type Result struct {
	Policy string
	// HWShare is the share of all attack packets dropped in hardware;
	// OracleShare what a clairvoyant top-K would have dropped.
	HWShare, OracleShare float64
	Updates              int
	UpdatesPerSec        float64
}

// Quality is hardware share / oracle share.
func (r Result) Quality() float64 { return r.HWShare / r.OracleShare }

// Simulate scores Listing 1 (with its threshold and budget) and a naive
// policy that installs the measured top-K every interval, on the same
// traffic.
func Simulate(sc Scenario) (listing, naive Result, err error) {
	if sc.Sources <= 0 || sc.K <= 0 || sc.Intervals <= 1 || sc.MaxRate <= 0 || sc.Load <= 0 {
		return listing, naive, fmt.Errorf("placement: incomplete scenario %+v", sc)
	}
	rng := rand.New(rand.NewPCG(sc.Seed, sc.Seed^0x9E3779B97F4A7C15))
	weight := make([]float64, sc.Sources)
	period := make([]float64, sc.Sources)
	phase := make([]float64, sc.Sources)
	perm := rng.Perm(sc.Sources) // base rank is unrelated to the key
	var wsum float64
	for i := range weight {
		weight[i] = 1 / math.Pow(float64(perm[i]+1), sc.ZipfS)
		wsum += weight[i]
		period[i] = sc.MinPeriod + rng.Float64()*(sc.MaxPeriod-sc.MinPeriod)
		phase[i] = rng.Float64() * 2 * math.Pi
	}
	volume := sc.Load * sc.MaxRate
	secs := sc.Interval.Seconds()
	truth := func(t int) []float64 {
		r := make([]float64, sc.Sources)
		var sum float64
		for i := range r {
			r[i] = weight[i] * (1 + sc.Swing*math.Sin(2*math.Pi*float64(t)/period[i]+phase[i]))
			if sc.Jitter > 0 {
				r[i] *= math.Exp(sc.Jitter*rng.NormFloat64() - sc.Jitter*sc.Jitter/2)
			}
			sum += r[i]
		}
		for i := range r { // keep the total volume steady: only ranks move
			r[i] *= volume / sum
		}
		return r
	}
	measure := func(r []float64) []Source[int] {
		m := make([]Source[int], len(r))
		for i, v := range r {
			lambda := v * secs
			n := math.Max(0, math.Round(lambda+math.Sqrt(lambda)*rng.NormFloat64()))
			m[i] = Source[int]{Key: i, Rate: n / secs}
		}
		return m
	}
	p := Params{K: sc.K, MaxRate: sc.MaxRate, Interval: sc.Interval, UpdateLatency: sc.Latency, MinThreshold: sc.MinThreshold}

	listing.Policy, naive.Policy = "listing-1", "naive-top-k"
	lSet, nSet := map[int]bool{}, map[int]bool{}
	var lDrop, nDrop, oDrop, total float64
	prev := truth(0)
	for t := 1; t < sc.Intervals; t++ {
		seen := measure(prev)
		// Listing 1.
		hw := make([]int, 0, len(lSet))
		for k := range lSet {
			hw = append(hw, k)
		}
		plan := Decide(seen, hw, p)
		for _, k := range plan.Remove {
			delete(lSet, k)
		}
		for _, k := range plan.Install {
			lSet[k] = true
		}
		listing.Updates += plan.Updates()
		// Naive: exactly the measured top-K.
		top := Decide(seen, nil, Params{K: sc.K, MaxRate: sc.MaxRate}).Install
		want := make(map[int]bool, len(top))
		for _, k := range top {
			want[k] = true
			if !nSet[k] {
				naive.Updates++
			}
		}
		for k := range nSet {
			if !want[k] {
				naive.Updates++
			}
		}
		nSet = want

		cur := truth(t)
		for i, v := range cur {
			total += v
			if lSet[i] {
				lDrop += v
			}
			if nSet[i] {
				nDrop += v
			}
		}
		oDrop += OracleShare(cur, sc.K) * sumOf(cur)
		prev = cur
	}
	dur := float64(sc.Intervals-1) * secs
	listing.HWShare, naive.HWShare = lDrop/total, nDrop/total
	listing.OracleShare, naive.OracleShare = oDrop/total, oDrop/total
	listing.UpdatesPerSec, naive.UpdatesPerSec = float64(listing.Updates)/dur, float64(naive.Updates)/dur
	return listing, naive, nil
}

func sumOf(v []float64) float64 {
	var s float64
	for _, x := range v {
		s += x
	}
	return s
}
