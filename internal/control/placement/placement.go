// SPDX-License-Identifier: Apache-2.0

// Package placement decides which blocked sources the NIC's hardware table
// holds: the offloading algorithm of Miano et al. (IEEE Access 2019,
// Listing 1). The hardware table is a cache of the XDP blacklist: every
// blocked source stays in XDP, so moving one between tiers never opens a
// gap; placement only chooses which K of them are also dropped in hardware.
package placement

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"
)

// Source is one blocked source (or any hardware-eligible rule) with its
// current rate, merged from the counters of both tiers.
type Source[K comparable] struct {
	Key  K
	Rate float64 // packets per second over the last interval
}

// Params tune the algorithm.
type Params struct {
	// K is the hardware table's capacity.
	K int
	// MaxRate is the packet rate at which the system saturates (what the
	// software tier can drop). Attack volume is measured against it.
	MaxRate float64
	// MinThreshold is the offload gain required when the attack volume is
	// at or above MaxRate; below it the threshold grows as MinThreshold /
	// (volume / MaxRate), capped at MaxThreshold. Zero means 2.5 and 1000:
	// at saturation a swap must at least 2.5x the evicted entry's traffic,
	// the value that keeps >= 95% of the oracle share with < 1/4 of the
	// naive policy's updates on bursty attacks (docs/BENCHMARKS.md).
	MinThreshold, MaxThreshold float64
	// Interval is how often placement runs; UpdateLatency the measured cost
	// of one hardware rule update; BudgetShare the share of the interval
	// that may be spent updating (zero means 0.5). Together they give the
	// number of updates allowed per run. Zero Interval or UpdateLatency:
	// no budget limit.
	Interval, UpdateLatency time.Duration
	BudgetShare             float64
}

// DefaultMinThreshold is Params.MinThreshold's zero value.
const DefaultMinThreshold = 2.5

func (p Params) withDefaults() Params {
	if p.MinThreshold == 0 {
		p.MinThreshold = DefaultMinThreshold
	}
	if p.MaxThreshold == 0 {
		p.MaxThreshold = 1000
	}
	if p.BudgetShare == 0 {
		p.BudgetShare = 0.5
	}
	return p
}

// Validate reports parameter errors.
func (p Params) Validate() error {
	p = p.withDefaults()
	switch {
	case p.K < 0:
		return fmt.Errorf("placement: K %d is negative", p.K)
	case p.MaxRate <= 0 || math.IsNaN(p.MaxRate) || math.IsInf(p.MaxRate, 0):
		return fmt.Errorf("placement: max rate %v must be a positive number", p.MaxRate)
	case p.MinThreshold < 1 || p.MaxThreshold < p.MinThreshold:
		return fmt.Errorf("placement: thresholds %v..%v must satisfy 1 <= min <= max", p.MinThreshold, p.MaxThreshold)
	case p.BudgetShare <= 0 || p.BudgetShare > 1:
		return fmt.Errorf("placement: budget share %v outside (0, 1]", p.BudgetShare)
	case p.Interval < 0 || p.UpdateLatency < 0:
		return fmt.Errorf("placement: negative interval or update latency")
	}
	return nil
}

// Budget is the number of hardware rule updates allowed per run; -1 means
// unlimited.
func (p Params) Budget() int {
	p = p.withDefaults()
	if p.Interval <= 0 || p.UpdateLatency <= 0 {
		return -1
	}
	return int(p.BudgetShare * float64(p.Interval) / float64(p.UpdateLatency))
}

// Threshold is the offload gain a swap needs at this attack volume:
// inversely proportional to volume/MaxRate, so a light attack causes no
// churn and a saturating one swaps eagerly.
func (p Params) Threshold(volume float64) float64 {
	p = p.withDefaults()
	load := volume / p.MaxRate
	if load <= 0 || math.IsNaN(load) {
		return p.MaxThreshold
	}
	return min(p.MaxThreshold, max(p.MinThreshold, p.MinThreshold/load))
}

// Plan is one run's decision. Remove before Install: the table is full
// when a swap is needed.
type Plan[K comparable] struct {
	Install   []K
	Remove    []K
	Threshold float64 // the gain a swap needed this run
	Volume    float64 // total rate of all sources
	Skipped   int     // swaps that passed the threshold but exceeded the budget
}

// Updates is the number of hardware operations the plan costs.
func (p Plan[K]) Updates() int { return len(p.Install) + len(p.Remove) }

// Decide runs Listing 1. all is every blocked source with its rate (any
// order); inHW is what the hardware table holds now. Sources in inHW that
// are no longer in all (unblocked) are always removed, outside the budget's
// swap accounting but counted against it first.
func Decide[K comparable](all []Source[K], inHW []K, p Params) Plan[K] {
	p = p.withDefaults()
	var plan Plan[K]
	rate := make(map[K]float64, len(all))
	for _, s := range all {
		rate[s.Key] = s.Rate
		plan.Volume += s.Rate
	}
	plan.Threshold = p.Threshold(plan.Volume)
	budget := p.Budget()
	spend := func(n int) bool {
		if budget < 0 {
			return true
		}
		if budget < n {
			return false
		}
		budget -= n
		return true
	}

	// Entries whose rule is gone must leave the table whatever the budget:
	// hardware must never drop what the blacklist no longer blocks.
	var hw []Source[K]
	for _, k := range inHW {
		r, ok := rate[k]
		if !ok {
			plan.Remove = append(plan.Remove, k)
			spend(1)
			continue
		}
		hw = append(hw, Source[K]{k, r})
	}

	// Lines 1-4: global top-K descending, hardware entries ascending.
	// Ties break on input order so the result is deterministic.
	global := slices.Clone(all)
	slices.SortStableFunc(global, func(a, b Source[K]) int { return cmp.Compare(b.Rate, a.Rate) })
	if len(global) > p.K {
		global = global[:p.K]
	}
	slices.SortStableFunc(hw, func(a, b Source[K]) int { return cmp.Compare(a.Rate, b.Rate) })

	// Lines 5-6: candidates not yet offloaded, offloaded entries no
	// longer in the top-K.
	inTop := make(map[K]bool, len(global))
	for _, s := range global {
		inTop[s.Key] = true
	}
	inHWSet := make(map[K]bool, len(hw))
	for _, s := range hw {
		inHWSet[s.Key] = true
	}
	var cand, evict []Source[K]
	for _, s := range global {
		if !inHWSet[s.Key] {
			cand = append(cand, s)
		}
	}
	for _, s := range hw {
		if !inTop[s.Key] {
			evict = append(evict, s)
		}
	}

	// Free room first: filling an empty slot evicts nothing, so its gain is
	// unbounded and it only needs the budget.
	free := p.K - len(hw)
	i := 0
	for ; i < len(cand) && free > 0; i++ {
		if cand[i].Rate <= 0 {
			break // a silent source is not worth an update
		}
		if !spend(1) {
			plan.Skipped++
			continue
		}
		plan.Install = append(plan.Install, cand[i].Key)
		free--
	}
	// Lines 7-13: each remaining candidate against the weakest entry still
	// evictable; OFFLOADGAIN is the ratio of their rates.
	for ; i < len(cand) && len(evict) > 0; i++ {
		if gain(cand[i].Rate, evict[0].Rate) < plan.Threshold {
			continue
		}
		if !spend(2) {
			plan.Skipped++
			continue
		}
		plan.Remove = append(plan.Remove, evict[0].Key)
		plan.Install = append(plan.Install, cand[i].Key)
		evict = evict[1:]
	}
	return plan
}

// gain is OFFLOADGAIN: how many times more traffic the candidate would
// drop in hardware than the entry it evicts.
func gain(candidate, victim float64) float64 {
	if victim <= 0 {
		if candidate <= 0 {
			return 0
		}
		return math.Inf(1)
	}
	return candidate / victim
}

// OracleShare is the fraction of the total rate that the ideal top-K would
// absorb: the upper bound of any placement's hardware share.
func OracleShare(rates []float64, k int) float64 {
	var total float64
	for _, r := range rates {
		total += r
	}
	if total == 0 {
		return 0
	}
	s := slices.Clone(rates)
	slices.SortFunc(s, func(a, b float64) int { return cmp.Compare(b, a) })
	var top float64
	for _, r := range s[:min(k, len(s))] {
		top += r
	}
	return top / total
}
