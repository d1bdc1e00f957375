// SPDX-License-Identifier: Apache-2.0

package detect

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/tierwall/tierwall/internal/rule"
)

// SYN sizes: a SYN flood's packets come from one tool, with one option
// layout and so one IP length (a bare SYN is 40 bytes, Linux's 60,
// Windows' 52), and a server's clients send the few sizes of their own
// stacks. Where the flood's size is one that the host's clean traffic
// does not send, a drop rule for SYNs of that size costs the host a
// verdict per flood packet, where a SYN cookie costs it a SYN-ACK built
// and sent for each (under busy loops on both CPUs the clients kept
// 84-90% of their connection rate with cookies alone). The sizes are the
// port profile's SYNLen row; what clean traffic sends is learned here, and
// only from intervals with no attack on and none in the interval after
// (a flood that began as an interval ended, too small yet to be judged,
// would otherwise teach its own size as clean). An attacker who sends his
// flood's size in the quiet beforehand only turns the rule off: the SYN
// cookies stay, as without it.

// synSizeMaxRules is how many size rules a SYN flood gets at most: the
// data plane's 64 flow rules are shared by every victim.
const synSizeMaxRules = 2

// synSizeMinShare is the share of a flood's SYNs a size range must carry
// to get a rule.
const synSizeMinShare = 0.05

// synSizeMaxGap is the most sizes without a flood SYN a range spans: a
// range runs over the sizes the flood sends, not the ones between its
// smallest and largest that it does not (MPTCP's, TCP-AO's, a Fast Open
// SYN's with data), which new clients may send though the host has not
// seen them yet.
const synSizeMaxGap = 8

// synSizes is the host's clean SYN rate by SYNLen column.
type synSizes struct {
	rate    [65536]float32 // SYN/s, an average of clean intervals
	pending [65536]float32 // the last interval's, learned once the next is clean too
	held    bool           // pending holds a clean interval
	n       uint32         // clean intervals learned
}

// observe takes one interval's SYN counts (nil: none known) over secs;
// clean reports whether the interval had no attack on and no anomaly.
func (z *synSizes) observe(pp *PortProfile, secs float64, clean bool) {
	if z.held && clean {
		alpha := float32(max(ewmaAlpha, 1/float64(z.n+1)))
		if z.n == 0 {
			alpha = 1
		}
		for i := range z.rate {
			z.rate[i] += alpha * (z.pending[i] - z.rate[i])
		}
		z.n++
	}
	z.held = clean && pp != nil && secs > 0
	if z.held {
		inv := float32(1 / secs)
		for i, c := range pp.SYNLen {
			z.pending[i] = float32(c) * inv
		}
	}
}

// synSizeRules are drop rules, on the cookie rule's match, for the SYNs
// of the sizes that carry most of the flood in pp and that clean traffic
// sent at under AmpBaselineShare of the victim's clean SYN rate, all of
// them together; none while the sizes or the victim's baseline are being
// learned. Each range runs from the flood's smallest size to its largest
// between two sizes clean traffic uses, so it is never wider than the
// flood.
func (v *Victims) synSizeRules(cookie rule.FlowRule, pp *PortProfile, s *victimState, why *[]string) []rule.FlowRule {
	c := &v.Config
	z := v.sizes
	if !c.SYNSizeDrop || z == nil || z.n < uint32(c.LearnIntervals) || !s.learned(c.LearnIntervals) {
		return nil
	}
	lo, hi := 0, SYNLenV6
	if !cookie.Dst.Addr().Is4() {
		lo, hi = SYNLenV6, 65536
	}
	// The sizes are learned from intervals in which every destination
	// was clean, the victim's baseline from its own: when the host's
	// clean SYNs of the victim's family fall short of the victim's own
	// (a new service, or an attacker who keeps some other destination
	// anomalous so that no interval is learned), the sizes do not know
	// the victim's clients, and every size would read as unused.
	var known float32
	for _, r := range z.rate[lo:hi] {
		known += r
	}
	if float64(known) < 0.5*s.syn.mean {
		*why = append(*why, fmt.Sprintf("no SYN size dropped: the clean SYN sizes learned (%.0f SYN/s) do not cover the victim's clean %.0f SYN/s", known, s.syn.mean))
		return nil
	}
	var total uint64
	for _, n := range pp.SYNLen[lo:hi] {
		total += n
	}
	if total == 0 {
		return nil
	}
	budget := float32(c.AmpBaselineShare * s.syn.mean)
	type span struct {
		first, last int
		flood       uint64
		clean       float32
	}
	var spans []span
	cur := span{first: -1}
	var clean float32 // clean rate from cur.first on
	end := func() {
		if cur.first >= 0 && float64(cur.flood) >= synSizeMinShare*float64(total) && cur.clean <= budget {
			spans = append(spans, cur)
		}
		cur, clean = span{first: -1}, 0
	}
	for i := lo; i < hi; i++ {
		r := z.rate[i]
		if r > budget {
			end()
			continue
		}
		n := pp.SYNLen[i]
		if cur.first < 0 {
			if n == 0 {
				continue
			}
			cur.first = i
		}
		if n == 0 && i-cur.last > synSizeMaxGap {
			end()
			continue
		}
		clean += r
		if n > 0 {
			cur.last, cur.clean = i, clean
			cur.flood += n
		}
	}
	end()
	slices.SortFunc(spans, func(a, b span) int { return cmp.Compare(b.flood, a.flood) })
	var rules []rule.FlowRule
	var spent float32
	for _, sp := range spans {
		if len(rules) == synSizeMaxRules || spent+sp.clean > budget {
			break
		}
		spent += sp.clean
		r := cookie
		r.Action = rule.FlowDrop
		r.TCPFlags = rule.TCPFlagMatch{Mask: rule.TCPSyn | rule.TCPAck, Value: rule.TCPSyn}
		r.Length = rule.Range16{Lo: uint16(sp.first & SYNLenMax), Hi: uint16(sp.last & SYNLenMax)}
		if sp.last&SYNLenMax == SYNLenMax {
			r.Length.Hi = 0xffff
		}
		rules = append(rules, r)
		*why = append(*why, fmt.Sprintf("SYNs of %d-%d bytes are %.0f%% of the flood's, clean traffic sent %.1f SYN/s of them (under %.0f%% of its %.0f SYN/s): drop them, SYN cookies for the rest",
			r.Length.Lo, r.Length.Hi, 100*float64(sp.flood)/float64(total), sp.clean, 100*c.AmpBaselineShare, s.syn.mean))
	}
	return rules
}

// isSYNRule reports whether r is one of a SYN flood's rules: its SYN
// cookies, or a drop of its SYN sizes.
func isSYNRule(r rule.FlowRule) bool {
	return r.Action == rule.FlowSYNCookie || IsSYNSizeRule(r)
}

// IsSYNSizeRule reports whether r has the shape of the ladder's drop of a
// SYN flood's sizes (SYN without ACK, a length range, the known-good
// bypass).
func IsSYNSizeRule(r rule.FlowRule) bool {
	return r.Action == rule.FlowDrop && r.Proto == 6 && r.KnownGoodBypass && !r.Length.Any() &&
		r.TCPFlags == rule.TCPFlagMatch{Mask: rule.TCPSyn | rule.TCPAck, Value: rule.TCPSyn}
}
