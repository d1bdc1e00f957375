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

	NameShare     float64 // a source is named above this share of the attack (default 0.01)
	SpoofFew      uint64  // "few packets" per source (default 2)
	SpoofFraction float64 // share of attack sources with few packets that means spoofed (default 0.8)
	SpoofMin      int     // and at least this many sources (default 100)
	PrefixShare   float64 // a prefix is named above this share of the attack (default 0.01)
	Prefix4       int     // default 24
	Prefix6       int     // default 48

	n                       int
	pps, hsrc, hdst         welford
	lastHsrc, lastHdst, vol float64
}

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
	def(&e.SpoofFraction, 0.8)
	def(&e.PrefixShare, 0.01)
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

// normEntropy is the Shannon entropy of the counts, divided by its
// maximum (log2 of the number of keys): 0 = one key, 1 = uniform.
func normEntropy[K comparable](m map[K]uint64) float64 {
	var total float64
	for _, v := range m {
		total += float64(v)
	}
	if len(m) < 2 || total == 0 {
		return 0
	}
	var h float64
	for _, v := range m {
		if v == 0 {
			continue
		}
		p := float64(v) / total
		h -= p * math.Log2(p)
	}
	return h / math.Log2(float64(len(m)))
}

// Baseline reports what has been learned: mean pps and entropies.
func (e *Entropy) Baseline() (pps, hsrc, hdst float64, ready bool) {
	return e.pps.mean, e.hsrc.mean, e.hdst.mean, e.n >= e.History
}

func (e *Entropy) Detect(t *Traffic) []Detection {
	e.defaults()
	src := make(map[netip.Addr]uint64, len(t.Sources))
	for a, s := range t.Sources {
		src[a] = s.Packets
	}
	dst := make(map[netip.Addr]uint64, len(t.Dests))
	for a, d := range t.Dests {
		dst[a] = d.Packets
	}
	pps, hs, hd := t.Rate(t.Total.Packets), normEntropy(src), normEntropy(dst)
	e.lastHsrc, e.lastHdst, e.vol = hs, hd, pps

	learn := func() {
		e.pps.add(pps)
		e.hsrc.add(hs)
		e.hdst.add(hd)
		e.n++
	}
	if e.n < e.History {
		learn()
		return nil
	}
	// Floors on the bands: a perfectly steady baseline must not turn
	// every small wobble into an attack.
	volBand := e.K * max(e.pps.sd(), 0.1*e.pps.mean)
	hBand := func(w *welford) float64 { return e.K * max(w.sd(), 0.05) }
	volume := pps > e.MinPPS && pps > e.pps.mean+volBand
	dstShift := math.Abs(hd-e.hdst.mean) > hBand(&e.hdst)
	srcShift := math.Abs(hs-e.hsrc.mean) > hBand(&e.hsrc)
	if !volume || !(dstShift || srcShift) {
		learn() // only normal intervals shape the baseline
		return nil
	}

	// The attacked destinations: those above the baseline's even share
	// when destination entropy fell; every destination otherwise.
	targets := map[netip.Addr]bool{}
	if dstShift && hd < e.hdst.mean {
		for a, n := range dst {
			if float64(n) >= 0.1*float64(t.Total.Packets) {
				targets[a] = true
			}
		}
	}
	all := len(targets) == 0
	// Each attacked destination is judged on its own: a source's share is
	// of the traffic to that victim (all traffic when no single victim).
	groups := map[netip.Addr]map[netip.Addr]uint64{}
	for _, pc := range t.Pairs {
		p, n := pc.Pair, pc.Packets
		if !all && !targets[p.Dst] {
			continue
		}
		key := p.Dst
		if all {
			key = netip.Addr{}
		}
		if groups[key] == nil {
			groups[key] = map[netip.Addr]uint64{}
		}
		groups[key][p.Src] += n
	}
	why := fmt.Sprintf("volume %.0f pps vs normal %.0f; entropy src %.2f (normal %.2f) dst %.2f (normal %.2f)",
		pps, e.pps.mean, hs, e.hsrc.mean, hd, e.hdst.mean)
	best := map[netip.Prefix]Detection{}
	name := func(d Detection) {
		if old, ok := best[d.Prefix]; !ok || d.Rate > old.Rate {
			best[d.Prefix] = d
		}
	}
	for victim, attack := range groups {
		var attackPkts uint64
		var few int
		for _, n := range attack {
			attackPkts += n
			if n <= e.SpoofFew {
				few++
			}
		}
		target := "all destinations"
		if victim.IsValid() {
			target = victim.String()
		}
		if len(attack) >= e.SpoofMin && float64(few) >= e.SpoofFraction*float64(len(attack)) {
			// Spoofed: aggregate the few-packet sources (not the regular
			// clients that happen to share a prefix with them) and name the
			// prefixes carrying a share of that spoofed traffic.
			agg := map[netip.Prefix]uint64{}
			var spoofPkts uint64
			for a, n := range attack {
				if n > e.SpoofFew {
					continue
				}
				spoofPkts += n
				bits := e.Prefix4
				if a.Is6() {
					bits = e.Prefix6
				}
				p, _ := a.Prefix(bits)
				agg[p] += n
			}
			for p, n := range agg {
				if float64(n) >= e.PrefixShare*float64(spoofPkts) {
					name(Detection{Prefix: p, Detector: e.Name(), Rate: t.Rate(n),
						Reason: fmt.Sprintf("spoofed sources toward %s (%d of %d send ≤ %d packets): prefix carries %.1f%% of them; %s", target, few, len(attack), e.SpoofFew, 100*float64(n)/float64(spoofPkts), why)})
				}
			}
			continue
		}
		for a, n := range attack {
			if float64(n) >= e.NameShare*float64(attackPkts) {
				name(Detection{Prefix: host(a), Detector: e.Name(), Rate: t.Rate(n),
					Reason: fmt.Sprintf("%.1f%% of the traffic toward %s; %s", 100*float64(n)/float64(attackPkts), target, why)})
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
