// SPDX-License-Identifier: Apache-2.0

package detect

import (
	"fmt"
	"net/netip"
	"sort"
)

// AggregateIPv6 replaces the IPv6 host detections that fall in one /bits
// prefix, when there are at least min of them, by one detection of that
// prefix. An IPv6 attacker owns at least a /64 and rotates addresses in it
// for free: one ban per address would spend the per-interval ban budget
// (and the exact table) on a single attacker. bits 0 turns it off.
func AggregateIPv6(ds []Detection, bits, min int) []Detection {
	if bits <= 0 || bits >= 128 || min < 2 {
		return ds
	}
	groups := map[netip.Prefix][]int{}
	for i, d := range ds {
		if a := d.Prefix.Addr(); d.Prefix.IsSingleIP() && a.Is6() && !a.Is4In6() {
			p, _ := a.Prefix(bits)
			groups[p] = append(groups[p], i)
		}
	}
	drop := map[int]bool{}
	var agg []Detection
	for p, idx := range groups {
		if len(idx) < min {
			continue
		}
		var rate float64
		for _, i := range idx {
			rate += ds[i].Rate
			drop[i] = true
		}
		agg = append(agg, Detection{Prefix: p, Detector: ds[idx[0]].Detector, Rate: rate,
			Reason: fmt.Sprintf("%d addresses of %s detected (%s)", len(idx), p, ds[idx[0]].Reason)})
	}
	if len(agg) == 0 {
		return ds
	}
	out := make([]Detection, 0, len(ds)-len(drop)+len(agg))
	for i, d := range ds {
		if !drop[i] {
			out = append(out, d)
		}
	}
	out = append(out, agg...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Rate > out[j].Rate })
	return out
}
