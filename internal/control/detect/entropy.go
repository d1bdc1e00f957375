// SPDX-License-Identifier: Apache-2.0

package detect

import (
	"fmt"
	"math"
	"net/netip"
	"sort"
)

// Entropy flags an attack when the traffic volume jumps and the entropy
// of the destination or source address distribution leaves its normal
// band (the approach of refs [26]-[28] of the paper), then names who
// causes it: the heavy sources of the traffic to the attacked
// destinations, or, when the sources look spoofed (many addresses sending
// a packet or two each), the /24 or /48 prefixes carrying the attack, so a
// spoofed flood does not exhaust the tables one address at a time.
type Entropy struct {
	History int     // normal intervals learned before judging (default 10)
	K       float64 // band width in standard deviations (default 3)
	MinPPS  float64 // never flag below this total rate

	NameShare float64 // a source is named above this share of the attack (default 0.01)
	// SourceMinPPS: and only when it sends above this rate itself
	// (default DefaultMinPPS, the rate detector's floor). A volume jump on
	// an idle link is real, but twenty sources at 50 pps each are not
	// what to ban: a share of little is little.
	SourceMinPPS  float64
	SpoofFew      uint64  // "few packets" per source (default 2)
	SpoofFraction float64 // share of attack sources with few packets that means spoofed (default 0.8)
	SpoofMin      int     // and at least this many sources (default 100)
	PrefixShare   float64 // a prefix is named above this share of the attack (default 0.01)
	// PrefixMinPPS: and only when its own spoofed traffic is above this
	// rate (default SourceMinPPS). A share alone names too much: 100
	// spoofed pps into each of 50 /24s is 2% of that attack per /24, and
	// banned a client's /24 among them (issue 32).
	PrefixMinPPS float64
	Prefix4      int // default 24
	Prefix6      int // default 48

	// Hold, set by the caller before Detect, says an attack is on by
	// another detector's judgement (or the interval is partial): the
	// interval is judged but never learned. The baseline is learned only
	// from intervals without an attack; while it is not learned yet, an
	// interval over four times the mean learned so far is not learned
	// either. A flood in the first History intervals taught the baseline
	// the flood, and the same attack then gave no detection (issue 32).
	Hold bool

	n                       int
	pps, hsrc, hdst         welford
	lastHsrc, lastHdst, vol float64
	// pending are the last learnLag intervals' numbers, learned only once
	// that many more intervals passed without Hold: the victim detector
	// names a flood an interval or two after it began, and the intervals
	// before its judgement were the flood too. Learned at once, a flood
	// as the daemon started went into the first intervals' mean (before
	// the 4× guard has a mean to guard with), and its variance widened
	// the volume band past the same flood afterwards.
	pending [][3]float64
}

// learnLag is how many intervals a clean interval waits before it is
// learned (Entropy.pending).
const learnLag = 2

func (e *Entropy) Name() string { return "entropy" }

func (e *Entropy) defaults() {
	def := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		}
	}
	if e.History == 0 {
		e.History = 10
	}
	def(&e.K, 3)
	def(&e.NameShare, 0.01)
	def(&e.SourceMinPPS, DefaultMinPPS)
	def(&e.SpoofFraction, 0.8)
	def(&e.PrefixShare, 0.01)
	def(&e.PrefixMinPPS, e.SourceMinPPS)
	if e.SpoofFew == 0 {
		e.SpoofFew = 2
	}
	if e.SpoofMin == 0 {
		e.SpoofMin = 100
	}
	if e.Prefix4 == 0 {
		e.Prefix4 = 24
	}
	if e.Prefix6 == 0 {
		e.Prefix6 = 48
	}
}

// welford keeps a running mean and variance.
type welford struct{ n, mean, m2 float64 }

func (w *welford) add(x float64) {
	w.n++
	d := x - w.mean
	w.mean += d / w.n
	w.m2 += d * (x - w.mean)
}

func (w *welford) sd() float64 {
	if w.n < 2 {
		return 0
	}
	return math.Sqrt(w.m2 / (w.n - 1))
}

// entropyBits is the Shannon entropy in bits of the n counts
// at(0..n-1): 0 = one key carries all, log2(n) = n keys alike. The
// counts are read in place (a million sources are not copied into a map
// first).
//
// Not divided by its maximum (log2 n): normalized, a flood from 100,000
// spoofed addresses sending alike reads as even as 64 clients did (0.95
// against 1.00), and on a server whose clients use one address the
// destinations read 0 before and during. In bits the sources go from 6
// to 16: how many addresses carry the traffic is what a spoofed flood
// changes.
func entropyBits(n int, at func(int) uint64) float64 {
	var total float64
	for i := range n {
		total += float64(at(i))
	}
	if n < 2 || total == 0 {
		return 0
	}
	var h float64
	for i := range n {
		v := at(i)
		if v == 0 {
			continue
		}
		p := float64(v) / total
		h -= p * math.Log2(p)
	}
	return h
}

// State is what the detector learned, as named numbers for the state
// file: a restart continues from it instead of learning blind (a flood in
// the first History intervals after a start would be learned as normal).
func (e *Entropy) State() map[string]float64 {
	out := map[string]float64{"n": float64(e.learned())}
	for name, w := range e.named() {
		out[name+"_n"], out[name+"_mean"], out[name+"_m2"] = w.n, w.mean, w.m2
	}
	return out
}

// named is the learned numbers by their names in the state file. The
// entropies are named for their unit: a state saved when they were
// normalized (0 to 1) is not restored as bits, and the baseline is
// learned again.
func (e *Entropy) named() map[string]*welford {
	return map[string]*welford{"pps": &e.pps, "hsrc_bits": &e.hsrc, "hdst_bits": &e.hdst}
}

// Restore takes back what State returned; a state without "n" (none
// saved), or of normalized entropies, changes nothing.
func (e *Entropy) Restore(st map[string]float64) {
	n, ok := st["n"]
	if _, bits := st["hsrc_bits_n"]; !ok || !bits || n < 0 {
		return
	}
	e.n = int(n)
	for name, w := range e.named() {
		*w = welford{n: st[name+"_n"], mean: st[name+"_mean"], m2: st[name+"_m2"]}
	}
}

// Baseline reports what has been learned: mean pps and entropies.
func (e *Entropy) Baseline() (pps, hsrc, hdst float64, ready bool) {
	return e.pps.mean, e.hsrc.mean, e.hdst.mean, e.learned() >= e.History
}

// learned counts the intervals learned, those still pending included:
// clean so far, they are judged by the mean of those before them.
func (e *Entropy) learned() int { return e.n + len(e.pending) }

// Last is the last interval's numbers as judged: its packet rate and
// its sources' and destinations' normalized entropies.
func (e *Entropy) Last() (pps, hsrc, hdst float64) { return e.vol, e.lastHsrc, e.lastHdst }

// Learned is how many intervals the baseline was learned from.
func (e *Entropy) Learned() int { return e.learned() }

func (e *Entropy) Detect(t *Traffic) []Detection {
	e.defaults()
	srcPkts := func(i int) uint64 { return t.Sources[i].Packets }
	dstPkts := func(i int) uint64 { return t.Dests[i].Packets }
	pps, hs, hd := t.Rate(t.Total.Packets), entropyBits(len(t.Sources), srcPkts), entropyBits(len(t.Dests), dstPkts)
	e.lastHsrc, e.lastHdst, e.vol = hs, hd, pps

	if e.Hold {
		e.pending = e.pending[:0] // the attack may have begun in them
	}
	learn := func() {
		e.pending = append(e.pending, [3]float64{pps, hs, hd})
		if len(e.pending) <= learnLag {
			return
		}
		x := e.pending[0]
		e.pending = append(e.pending[:0], e.pending[1:]...)
		e.pps.add(x[0])
		e.hsrc.add(x[1])
		e.hdst.add(x[2])
		e.n++
	}
	if e.learned() < e.History {
		if !e.Hold && !(e.learned() >= 3 && e.n > 0 && pps > e.MinPPS && pps > 4*e.pps.mean) {
			learn()
		}
		return nil
	}
	// Floors on the bands: a perfectly steady baseline must not turn
	// every small wobble into an attack. An entropy moves by at least
	// K quarter-bits (0.75 at K=3): the sources that carry the traffic
	// became 1.7 times as many, or as few.
	volBand := e.K * max(e.pps.sd(), 0.1*e.pps.mean)
	hBand := func(w *welford) float64 { return e.K * max(w.sd(), 0.25) }
	volume := pps > e.MinPPS && pps > e.pps.mean+volBand
	dstShift := math.Abs(hd-e.hdst.mean) > hBand(&e.hdst)
	srcShift := math.Abs(hs-e.hsrc.mean) > hBand(&e.hsrc)
	if !volume || !(dstShift || srcShift) {
		if !e.Hold {
			learn() // only normal intervals shape the baseline
		}
		return nil
	}

	// The attacked destinations: those above the baseline's even share
	// when destination entropy fell; every destination otherwise.
	var targets []int32
	if dstShift && hd < e.hdst.mean {
		for i := range t.Dests {
			if float64(t.Dests[i].Packets) >= 0.1*float64(t.Total.Packets) {
				targets = append(targets, int32(i))
			}
		}
	}
	why := fmt.Sprintf("volume %.0f pps vs normal %.0f; entropy in bits src %.2f (normal %.2f) dst %.2f (normal %.2f)",
		pps, e.pps.mean, hs, e.hsrc.mean, hd, e.hdst.mean)
	best := map[netip.Prefix]Detection{}
	name := func(d Detection) {
		if old, ok := best[d.Prefix]; !ok || d.Rate > old.Rate {
			best[d.Prefix] = d
		}
	}
	// judge names who causes the attack on one victim (invalid: all
	// destinations) from the packets each of its n sources sent it:
	// at(j) is the j-th source's position in Sources and its packets.
	judge := func(victim netip.Addr, n int, at func(j int) (int32, uint64)) {
		var attackPkts uint64
		var few int
		for j := range n {
			_, p := at(j)
			attackPkts += p
			if p <= e.SpoofFew {
				few++
			}
		}
		target := "all destinations"
		if victim.IsValid() {
			target = victim.String()
		}
		if n >= e.SpoofMin && float64(few) >= e.SpoofFraction*float64(n) {
			// Spoofed: aggregate the few-packet sources (not the regular
			// clients that happen to share a prefix with them) and name the
			// prefixes carrying a share of that spoofed traffic.
			agg := map[netip.Prefix]uint64{}
			var spoofPkts uint64
			for j := range n {
				i, p := at(j)
				if p > e.SpoofFew {
					continue
				}
				spoofPkts += p
				a := t.SourceAddr(int(i))
				bits := e.Prefix4
				if a.Is6() {
					bits = e.Prefix6
				}
				pf, _ := a.Prefix(bits)
				agg[pf] += p
			}
			for pf, p := range agg {
				if float64(p) >= e.PrefixShare*float64(spoofPkts) && t.Rate(p) > e.PrefixMinPPS {
					name(Detection{Prefix: pf, Detector: e.Name(), Rate: t.Rate(p),
						Reason: fmt.Sprintf("spoofed sources toward %s (%d of %d send ≤ %d packets): prefix carries %.1f%% of them; %s", target, few, n, e.SpoofFew, 100*float64(p)/float64(spoofPkts), why)})
				}
			}
			return
		}
		for j := range n {
			i, p := at(j)
			if float64(p) >= e.NameShare*float64(attackPkts) && t.Rate(p) > e.SourceMinPPS {
				name(Detection{Prefix: host(t.SourceAddr(int(i))), Detector: e.Name(), Rate: t.Rate(p),
					Reason: fmt.Sprintf("%.1f%% of the traffic toward %s; %s", 100*float64(p)/float64(attackPkts), target, why)})
			}
		}
	}
	if len(targets) == 0 {
		// Every pair counts: a source's packets to all destinations are
		// its total.
		judge(netip.Addr{}, len(t.Sources), func(j int) (int32, uint64) { return int32(j), t.Sources[j].Packets })
	} else {
		// Each attacked destination is judged on its own: a source's
		// share is of the traffic to that victim. One scratch array of
		// per-source packets serves every victim in turn; a source is
		// in touched once, from its first pair with the victim.
		sum := make([]uint64, len(t.Sources))
		in := make([]bool, len(t.Sources))
		var touched []int32
		for _, v := range targets {
			touched = touched[:0]
			for _, pc := range t.Pairs {
				if pc.Dst != v {
					continue
				}
				if !in[pc.Src] {
					in[pc.Src] = true
					touched = append(touched, pc.Src)
				}
				sum[pc.Src] += pc.Packets
			}
			judge(t.DestAddr(int(v)), len(touched), func(j int) (int32, uint64) { return touched[j], sum[touched[j]] })
			for _, i := range touched {
				sum[i], in[i] = 0, false
			}
		}
	}
	var out []Detection
	for _, d := range best {
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Rate > out[j].Rate })
	return out
}
