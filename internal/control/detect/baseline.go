// SPDX-License-Identifier: Apache-2.0

package detect

// baseline is a learned normal level of one per-victim measure (packets
// per second, new sources per interval, ...): an exponentially weighted
// mean and mean absolute deviation, fed only with intervals the detector
// judged clean.
//
// Clean-only learning keeps a flood out, but not an attacker who ramps up
// slowly enough that every interval stays under the threshold and so
// counts as clean: each one would lift the mean a little, and the
// threshold with it. So the mean may rise by at most maxRise of itself per
// clean interval (falls are free: a lower baseline makes detection more
// sensitive, never blind), and the deviation is capped at devCap times the
// mean. A ramp faster than maxRise per interval therefore outruns the
// baseline and crosses the threshold (mean + k·band, at least twice the
// mean with the default floors); a ramp slower than that is, by volume
// alone, indistinguishable from organic growth, and what remains to catch
// it is the source-population test (new sources), which a spoofed ramp
// trips because its sources are never learned.
type baseline struct {
	mean, dev float64
	n         uint32 // clean samples learned
}

// Baseline learning constants. They are not configuration: they set how
// the baseline moves, which the thresholds (Config.K, floors) are tuned
// against.
const (
	ewmaAlpha = 1.0 / 16 // weight of one clean interval
	maxRise   = 0.002    // the mean rises at most 0.2% per clean interval: ×2 in ~350 intervals
	devCap    = 0.5      // deviation at most half the mean
)

func (b *baseline) learn(x float64) {
	if b.n == 0 {
		b.mean, b.dev, b.n = x, 0, 1
		return
	}
	b.n++
	// Warm-up: a plain running mean over the first samples, so a fresh
	// baseline is not just its first interval. The rise cap applies from
	// the start; the first sample sets the scale.
	alpha := max(ewmaAlpha, 1/float64(b.n))
	d := x - b.mean
	if d < 0 {
		d = -d
	}
	m := b.mean + alpha*(x-b.mean)
	if lim := b.mean * (1 + maxRise); m > lim && b.n > 8 {
		m = lim
	}
	b.dev += alpha * (d - b.dev)
	b.mean = m
	b.dev = min(b.dev, devCap*max(b.mean, 1))
}

// threshold is the level above which x is anomalous: mean + k·band, the
// band at least rel of the mean and abs, so that a perfectly steady
// measure does not turn every wobble into an attack.
func (b *baseline) threshold(k, rel, abs float64) float64 {
	return b.mean + k*max(b.dev, rel*b.mean, abs)
}
