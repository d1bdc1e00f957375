// SPDX-License-Identifier: Apache-2.0

package detect

import (
	"container/heap"
	"fmt"
	"math"
	"net/netip"
	"strings"

	"github.com/tierwall/tierwall/internal/rule"
)

// Rung is a step of the mitigation ladder, narrowest first.
type Rung uint8

const (
	// RungSourceBans blocks the few sources that carry the flood (/32 or
	// /128 each), as the rate detector does.
	RungSourceBans Rung = iota + 1
	// RungPrefix blocks the narrowest source prefix carrying the flood,
	// when it holds no known-good client.
	RungPrefix
	// RungFlowRule matches the flood by what it is sent to: the victim,
	// a protocol, maybe a port; rate-limit, drop (reflection) or SYN
	// cookies, every rule letting known-good clients through.
	RungFlowRule
)

var rungNames = map[Rung]string{RungSourceBans: "source-bans", RungPrefix: "prefix", RungFlowRule: "flow-rule"}

func (r Rung) String() string {
	if s, ok := rungNames[r]; ok {
		return s
	}
	return fmt.Sprintf("rung(%d)", uint8(r))
}

// MarshalText makes rungs readable in JSON.
func (r Rung) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// Mitigation is the ladder's choice for one victim: a value to apply, or
// to log in monitor-only mode.
type Mitigation struct {
	ID     uint64     `json:"id"` // unique per detector, for Withdrawal
	Victim netip.Addr `json:"victim"`
	Rung   Rung       `json:"rung"`
	// Prefixes are the sources to block (RungSourceBans: hosts;
	// RungPrefix: one prefix). None holds a known-good client.
	Prefixes []netip.Prefix `json:"prefixes,omitempty"`
	// Rules are the flow rules (RungFlowRule), each checked and with
	// KnownGoodBypass set.
	Rules []rule.FlowRule `json:"rules,omitempty"`
	// Spared are known-good clients above the per-source limit that the
	// source rung did not ban: a source the kernel vouches for is never
	// banned whole (its address may be spoofed to aim the ban at it), and
	// the data plane's flow rules cannot match one source's flood alone.
	Spared []netip.Addr `json:"spared,omitempty"`
	// Reason says which rung was chosen and why the narrower ones were
	// not.
	Reason   string   `json:"reason"`
	Evidence Evidence `json:"evidence"`
	// HostGroup is the victim's host group ("" outside any).
	HostGroup string `json:"hostgroup,omitempty"`
}

// ladder picks the narrowest rung that matches at least Coverage of the
// victim's traffic above its baseline without touching its known-good
// clients. prior are the victim's mitigations already in force (when
// escalating): the rungs they used are not proposed again. A victim in a
// host group whose action is flowrule starts at the flow-rule rung.
func (v *Victims) ladder(in Input, dst int32, s *victimState, ev Evidence, prior []Mitigation) Mitigation {
	g := v.Groups.Lookup(in.Traffic.DestAddr(int(dst)))
	used := map[Rung]bool{}
	for _, p := range prior {
		used[p.Rung] = true
	}
	var why []string
	if g != nil && g.Action == ActionFlowRule {
		used[RungSourceBans], used[RungPrefix] = true, true
		why = append(why, fmt.Sprintf("host group %s: action flowrule, no source is banned", g.Name))
	}
	m := v.climb(in, dst, s, ev, prior, used, why)
	if g != nil {
		m.HostGroup = g.Name
		m.Reason += "; host group " + g.Name
	}
	return m
}

func (v *Victims) climb(in Input, dst int32, s *victimState, ev Evidence, prior []Mitigation, used map[Rung]bool, why []string) Mitigation {
	t, c := in.Traffic, &v.Config
	victim := t.DestAddr(int(dst))
	secs := t.Interval.Seconds()
	d := &t.Dests[dst]
	v.nextID++
	m := Mitigation{ID: v.nextID, Victim: victim, Evidence: ev}
	if len(prior) > 0 {
		why = append(why, fmt.Sprintf("escalated: the %d mitigations in force (last: %s) leave the passed traffic over threshold", len(prior), prior[len(prior)-1].Rung))
	}

	// The traffic to stop is what exceeds the baseline; with no baseline,
	// all of it.
	excess := float64(d.Packets)
	if s.learned(c.LearnIntervals) {
		excess = max(float64(d.Packets)-s.pps.mean*secs, 0)
	}
	if excess == 0 {
		excess = float64(d.Packets)
	}
	need := uint64(math.Ceil(c.Coverage * excess))
	head := fmt.Sprintf("%s: %.0f pps (baseline %.0f, threshold %.0f), %d sources (%d new, %.0f%% sending ≤ 2 packets), signals %s",
		victim, ev.PPS, ev.BaselinePPS, ev.ThresholdPPS, ev.Sources, ev.NewSources, 100*ev.FewShare, ev.Signals)

	// Rung 1: a few heavy sources.
	if !used[RungSourceBans] {
		hosts, got, n := v.heavySources(t, dst, s, &m.Spared)
		if len(m.Spared) > 0 {
			why = append(why, fmt.Sprintf("%d known-good clients above the per-source limit not banned (verified connections)", len(m.Spared)))
		}
		switch {
		case len(hosts) > 0 && got >= need:
			m.Rung, m.Prefixes = RungSourceBans, hosts
			m.Evidence.Covered = min(float64(got)/excess, 1)
			m.Reason = fmt.Sprintf("rung source-bans: %d sources each above %.0f pps carry %.0f%% of the traffic above baseline; %s",
				len(hosts), v.heavyPPS(s), 100*m.Evidence.Covered, head)
			if len(why) > 0 {
				m.Reason += "; " + strings.Join(why, "; ")
			}
			return m
		case n == 0:
			why = append(why, "no source above the per-source limit")
		default:
			why = append(why, fmt.Sprintf("the %d heaviest sources carry %.0f%% (< %.0f%%)", len(hosts), 100*min(float64(got)/excess, 1), 100*c.Coverage))
		}
	}

	// Rung 2: one source prefix, only for a severe flood (a flash crowd
	// of new clients at a moderate rate is never dropped by prefix).
	severe := !s.learned(c.LearnIntervals) || ev.PPS >= c.SevereFactor*max(s.pps.mean, c.MinPPS/c.SevereFactor)
	if !used[RungPrefix] {
		switch p, got, ok := v.narrowestPrefix(t, dst, need); {
		case !severe:
			why = append(why, fmt.Sprintf("%.1f× baseline is below the %.0f× that prefix rules need", ev.PPS/max(s.pps.mean, 1), c.SevereFactor))
		case !ok:
			why = append(why, fmt.Sprintf("no single source prefix between /%d and /%d (IPv6 /%d and /%d) carries %.0f%%",
				c.MinBits4, c.MaxBits4, c.MinBits6, c.MaxBits6, 100*c.Coverage))
		default:
			if free, n := v.Good.PrefixFree(p); !free {
				why = append(why, fmt.Sprintf("prefix %s carries %.0f%% but holds %d known-good clients", p, 100*min(float64(got)/excess, 1), n))
				break
			}
			m.Rung, m.Prefixes = RungPrefix, []netip.Prefix{p}
			m.Evidence.Covered = min(float64(got)/excess, 1)
			m.Reason = fmt.Sprintf("rung prefix: %s carries %.0f%% of the traffic above baseline and holds no known-good client (%s); %s",
				p, 100*m.Evidence.Covered, strings.Join(why, "; "), head)
			m.Reason = strings.Replace(m.Reason, " ()", "", 1)
			return m
		}
	}

	// Rung 3: flow rules on the victim.
	m.Rung = RungFlowRule
	m.Rules, m.Evidence.Covered = v.flowRules(in, dst, s, ev, &why)
	m.Reason = fmt.Sprintf("rung flow-rule: %s (%s); %s", describeRules(m.Rules), strings.Join(why, "; "), head)
	return m
}

// Detections are the mitigation's source prefixes as detections, for
// the ban store's rails and lifecycle (Detector "victim"); flow rules
// have none.
func (m Mitigation) Detections() []Detection {
	out := make([]Detection, 0, len(m.Prefixes))
	for _, p := range m.Prefixes {
		out = append(out, Detection{Prefix: p, Detector: "victim", Reason: m.Reason, Rate: m.Evidence.PPS * m.Evidence.Covered, HostGroup: m.HostGroup})
	}
	return out
}

func describeRules(rs []rule.FlowRule) string {
	var out []string
	for _, r := range rs {
		out = append(out, r.String())
	}
	return strings.Join(out, " + ")
}

// heavyPPS is the rate above which one source is worth a ban: far above
// what one of the victim's sources sends normally.
func (v *Victims) heavyPPS(s *victimState) float64 {
	c := &v.Config
	per := 0.0
	if s.learned(c.LearnIntervals) && s.srcs.mean > 0 {
		per = s.pps.mean / s.srcs.mean
	}
	return max(c.HeavyFactor*per, c.HeavyMinPPS)
}

// heavySources are the (at most MaxSourceBans) heaviest sources to dst
// above heavyPPS that are not known-good, the packets they carry, and how
// many sources were above heavyPPS in all. Known-good sources above it are
// appended to spared, never banned: sending at any rate from a member's
// address is what a spoofer aiming the ban at that member does (issue 32:
// 8 members spoofed at 10× their rate lost membership and were banned).
func (v *Victims) heavySources(t *Traffic, dst int32, s *victimState, spared *[]netip.Addr) ([]netip.Prefix, uint64, int) {
	lim := uint64(v.heavyPPS(s) * t.Interval.Seconds())
	h := &pairHeap{}
	n := 0
	for _, p := range t.Pairs {
		if p.Dst != dst || p.Packets < lim {
			continue
		}
		if v.Good.has(t.srcs.keys[p.Src]) {
			if len(*spared) < v.Config.MaxSourceBans {
				*spared = append(*spared, t.SourceAddr(int(p.Src)))
			}
			continue
		}
		n++
		if h.Len() < v.Config.MaxSourceBans {
			heap.Push(h, p)
		} else if p.Packets > (*h)[0].Packets {
			(*h)[0] = p
			heap.Fix(h, 0)
		}
	}
	var got uint64
	seen := map[int32]bool{}
	var out []netip.Prefix
	for _, p := range *h {
		got += p.Packets
		if !seen[p.Src] {
			seen[p.Src] = true
			out = append(out, host(t.SourceAddr(int(p.Src))))
		}
	}
	return out, got, n
}

// pairHeap is a min-heap of pairs by packets.
type pairHeap []PairCount

func (h pairHeap) Len() int           { return len(h) }
func (h pairHeap) Less(i, j int) bool { return h[i].Packets < h[j].Packets }
func (h pairHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *pairHeap) Push(x any)        { *h = append(*h, x.(PairCount)) }
func (h *pairHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// narrowestPrefix is the longest source prefix (no finer than MaxBits,
// no coarser than MinBits) whose sources sent dst at least need packets,
// found by walking down from the root while one half of the current
// prefix still carries need. Each step reads the next 8 bits of every
// source in a histogram (one pass over the pairs per byte, not per bit),
// so a /24 costs three passes and a /64 eight, with 2 KiB of scratch.
func (v *Victims) narrowestPrefix(t *Traffic, dst int32, need uint64) (netip.Prefix, uint64, bool) {
	c := &v.Config
	var fam4, fam6 uint64
	for _, p := range t.Pairs {
		if p.Dst != dst {
			continue
		}
		if t.srcs.keys[p.Src].is4() {
			fam4 += p.Packets
		} else {
			fam6 += p.Packets
		}
	}
	var cur Key
	var depth, start, minBits, maxBits int
	var got uint64
	switch {
	case need > 0 && fam4 >= need:
		cur, start, minBits, maxBits, got = Key{0, 0xffff << 32}, 96, c.MinBits4, c.MaxBits4, fam4
	case need > 0 && fam6 >= need:
		cur, start, minBits, maxBits, got = Key{}, 0, c.MinBits6, c.MaxBits6, fam6
	default:
		return netip.Prefix{}, 0, false
	}
	depth = start
	var hist [256]uint64
	for depth < start+maxBits {
		clear(hist[:])
		for _, p := range t.Pairs {
			if p.Dst != dst {
				continue
			}
			k := t.srcs.keys[p.Src]
			if k.is4() != (start == 96) || !k.hasPrefix(cur, depth) {
				continue
			}
			hist[k.byteAt(depth)] += p.Packets
		}
		// Descend bit by bit within the byte.
		val, w, stopped := 0, 0, false
		for w < min(8, start+maxBits-depth) {
			lo, hi := uint64(0), uint64(0)
			shift := 7 - w // buckets whose top w+1 bits are val<<1|x
			for b := range 256 {
				switch b >> shift {
				case val << 1:
					lo += hist[b]
				case val<<1 | 1:
					hi += hist[b]
				}
			}
			switch {
			case lo >= need:
				val, got = val<<1, lo
			case hi >= need:
				val, got = val<<1|1, hi
			default:
				stopped = true
			}
			if stopped {
				break
			}
			w++
		}
		if w > 0 {
			cur = cur.withByte(depth, uint8(val<<(8-w)))
		}
		depth += w
		if stopped || w < 8 {
			break
		}
	}
	bits := depth - start
	if bits < minBits {
		return netip.Prefix{}, 0, false
	}
	p, err := cur.Addr().Prefix(bits)
	if err != nil {
		return netip.Prefix{}, 0, false
	}
	return p, got, true
}

// hasPrefix reports whether the first n bits of k are those of p.
func (k Key) hasPrefix(p Key, n int) bool {
	switch {
	case n <= 0:
		return true
	case n < 64:
		return (k.hi^p.hi)>>(64-n) == 0
	case n == 64:
		return k.hi == p.hi
	case n < 128:
		return k.hi == p.hi && (k.lo^p.lo)>>(128-n) == 0
	}
	return k == p
}

// byteAt is the byte of k starting at bit pos (a multiple of 8).
func (k Key) byteAt(pos int) uint8 {
	if pos < 64 {
		return uint8(k.hi >> (56 - pos))
	}
	return uint8(k.lo >> (120 - pos))
}

// withByte is k with the byte at bit pos (a multiple of 8) set to b.
func (k Key) withByte(pos int, b uint8) Key {
	if pos < 64 {
		sh := uint(56 - pos)
		k.hi = k.hi&^(0xff<<sh) | uint64(b)<<sh
	} else if pos < 128 {
		sh := uint(120 - pos)
		k.lo = k.lo&^(0xff<<sh) | uint64(b)<<sh
	}
	return k
}

// synFlood reports whether d's traffic is a SYN flood: the SYN rate is
// over its baseline and at least SYNShare of the TCP above the baseline is
// SYNs (or, before a baseline, TCP is most of the traffic and SYNShare of
// it is SYNs). The share is of the excess, not of all TCP: a flood that
// has only begun when the interval ends is a minority of a busy server's
// TCP, yet all of what is new.
func (v *Victims) synFlood(t *Traffic, d *Dest, ev Evidence, s *victimState) bool {
	c := &v.Config
	if d.TCP.Packets == 0 {
		return false
	}
	syn, tcp := float64(d.TCP.SYNs), float64(d.TCP.Packets)
	if !s.learned(c.LearnIntervals) {
		return syn >= c.SYNShare*tcp && d.TCP.Packets*2 > d.Packets
	}
	if ev.Signals&SigSYN == 0 {
		return false
	}
	secs := t.Interval.Seconds()
	synEx, tcpEx := syn-s.syn.mean*secs, tcp-s.tcp.mean*secs
	return synEx > 0 && synEx >= c.SYNShare*max(tcpEx, synEx)
}

// synEscalation is the flow-rule rung again for a SYN flood on a victim
// whose flow rules in force (prior) have no SYN cookies: the syn-cookie
// rule alone, the others staying.
func (v *Victims) synEscalation(in Input, dst int32, s *victimState, ev Evidence, prior []Mitigation) Mitigation {
	v.nextID++
	m := Mitigation{ID: v.nextID, Victim: in.Traffic.DestAddr(int(dst)), Evidence: ev, Rung: RungFlowRule}
	var why []string
	rules, _ := v.flowRules(in, dst, s, ev, &why)
	for _, r := range rules {
		if isSYNRule(r) {
			m.Rules = append(m.Rules, r)
		}
	}
	d := &in.Traffic.Dests[dst]
	m.Evidence.Covered = min(float64(d.TCP.SYNs)/float64(max(d.Packets, 1)), 1)
	m.Reason = fmt.Sprintf("rung flow-rule: %s (escalated: a SYN flood on top of the %d mitigations in force (last: %s), which have no SYN cookies; %s)",
		describeRules(m.Rules), len(prior), describeRules(prior[len(prior)-1].Rules), strings.Join(why, "; "))
	return m
}

// flowRules builds the flow rules for a victim whose flood no source or
// prefix rule can stop, and the share of the excess they match:
//   - a SYN flood (SYN rate over baseline and at least SYNShare of the
//     victim's TCP): syn-cookie for the victim, on the dominant TCP
//     destination port if one carries PortShare, and before it a drop of
//     the SYN sizes that carry the flood and clean traffic does not send
//     (synsize.go);
//   - reflection (UDP over baseline, and amplification source ports
//     carrying PortShare of UDP): per port, drop when the victim's clean
//     traffic did not use that source port (under AmpBaselineShare),
//     else rate-limit;
//   - otherwise a rate-limit of the flooded protocol (and port when one
//     dominates) at max(RateFactor × the baseline rate, RateFloorPPS).
//
// Every rule carries KnownGoodBypass, drops included: a known-good
// client's packets pass whatever the action.
func (v *Victims) flowRules(in Input, dst int32, s *victimState, ev Evidence, why *[]string) ([]rule.FlowRule, float64) {
	t, c := in.Traffic, &v.Config
	victim := t.DestAddr(int(dst))
	d := &t.Dests[dst]
	// Port counts of a profile shared by every destination are the
	// victim's only when its traffic is most of them; otherwise the top
	// port may be another server's normal traffic, and a rule on it would
	// miss the flood.
	view := func(proto uint8, pkts uint64) *PortProfile {
		pp, own := v.ports(in, victim)
		if pp == nil || own {
			return pp
		}
		var total uint64
		switch {
		case t.Overflow > 0:
			// The profile counts every packet that passed, the feature
			// buffers only the keys they had room for: a flood that
			// overflowed them is in the profile whole and in the
			// victim's count in part, and compared with the profile it
			// looked like another server's (a SYN flood then got a
			// cookie rule on every port, which the management rail
			// refused, and no rule at all). Like with like: the
			// victim's share of what the buffers counted.
			for i := range t.Dests {
				if proto == 17 {
					total += t.Dests[i].UDP.Packets
				} else {
					total += t.Dests[i].TCP.Packets
				}
			}
		case proto == 17:
			total = v.udpTotal(pp)
		default:
			_, _, total = pp.Top(6, DstPort)
		}
		if total == 0 || float64(pkts) < v.Config.PortShare*float64(total) {
			*why = append(*why, fmt.Sprintf("the shared port profile is not %s's (it has %.0f%% of the %s packets): no port named", victim, 100*float64(pkts)/float64(max(total, 1)), protoWord(proto)))
			return nil
		}
		return pp
	}
	ppTCP, ppUDP := view(6, d.TCP.Packets), view(17, d.UDP.Packets)
	learned := s.learned(c.LearnIntervals)
	rate := func(b *baseline) uint64 {
		r := c.RateFloorPPS
		if learned {
			r = max(c.RateFactor*b.mean, r)
		}
		return uint64(math.Ceil(r))
	}
	base := rule.FlowRule{Dst: host(victim), KnownGoodBypass: true}
	var rules []rule.FlowRule
	var matched float64 // packets of the interval the rules match
	add := func(r rule.FlowRule, pkts float64, note string) {
		if err := r.Check(); err != nil {
			*why = append(*why, fmt.Sprintf("rule %s refused: %v", r, err))
			return
		}
		rules = append(rules, r)
		matched += pkts
		if note != "" {
			*why = append(*why, note)
		}
	}
	tcpFlood := ev.Signals&(SigTCP|SigSYN) != 0 || (!learned && d.TCP.Packets*2 > d.Packets)
	udpFlood := ev.Signals&SigUDP != 0 || (!learned && d.UDP.Packets*2 > d.Packets)

	if v.synFlood(t, d, ev, s) {
		r := base
		r.Proto, r.Action = 6, rule.FlowSYNCookie
		note := fmt.Sprintf("SYN flood: %.0f SYN/s (baseline %.0f), %.0f%% of TCP are SYNs", ev.SYNPPS, ev.BaselineSYN, 100*float64(d.TCP.SYNs)/float64(d.TCP.Packets))
		if pp := ppTCP; pp != nil {
			if port, n, total := pp.Top(6, DstPort); total > 0 && float64(n) >= c.PortShare*float64(total) {
				r.DstPorts = rule.PortRange{Lo: port, Hi: port}
				note += fmt.Sprintf("; TCP port %d carries %.0f%%", port, 100*float64(n)/float64(total))
			}
		}
		add(r, float64(d.TCP.SYNs), note)
		if ppTCP != nil {
			for _, sr := range v.synSizeRules(r, ppTCP, s, why) {
				add(sr, 0, "") // its SYNs are the cookie rule's count already
			}
		}
		tcpFlood = false
	}
	if pp := ppUDP; udpFlood && pp != nil {
		udp := v.udpTotal(pp)
		var ampPkts uint64
		type hit struct {
			i    int
			port uint16
			n    uint64
		}
		var hits []hit
		for i, port := range c.AmpPorts {
			if n := pp.UDPSrc[port]; udp > 0 && float64(n) >= 0.05*float64(udp) {
				hits = append(hits, hit{i, port, n})
				ampPkts += n
			}
		}
		if udp > 0 && float64(ampPkts) >= c.PortShare*float64(udp) {
			for _, h := range hits {
				share := float64(h.n) / float64(udp)
				r := base
				r.Proto, r.SrcPorts = 17, rule.PortRange{Lo: h.port, Hi: h.port}
				pkts := share * float64(d.UDP.Packets)
				if learned && float64(s.amp[h.i]) < c.AmpBaselineShare || !learned {
					r.Action = rule.FlowDrop
					add(r, pkts, fmt.Sprintf("reflection from UDP source port %d (%.0f%% of UDP), which %s's clean traffic did not use: drop", h.port, 100*share, victim))
				} else {
					r.Action, r.RatePPS = rule.FlowRateLimit, uint64(math.Ceil(max(c.RateFactor*float64(s.amp[h.i])*s.udp.mean, c.RateFloorPPS)))
					add(r, pkts, fmt.Sprintf("reflection from UDP source port %d (%.0f%% of UDP), which %s uses normally (%.1f%%): rate-limit", h.port, 100*share, victim, 100*s.amp[h.i]))
				}
			}
			udpFlood = false
		}
	}
	if udpFlood {
		r := base
		r.Proto, r.Action, r.RatePPS = 17, rule.FlowRateLimit, rate(&s.udp)
		note := v.namePort(&r, ppUDP, 17)
		add(r, float64(d.UDP.Packets), "UDP over baseline: rate-limit"+note)
	}
	if tcpFlood {
		r := base
		r.Proto, r.Action, r.RatePPS = 6, rule.FlowRateLimit, rate(&s.tcp)
		note := v.namePort(&r, ppTCP, 6)
		add(r, float64(d.TCP.Packets), "TCP over baseline: rate-limit"+note)
	}
	if len(rules) == 0 {
		r := base
		r.Action, r.RatePPS = rule.FlowRateLimit, rate(&s.pps)
		add(r, float64(d.Packets), "no protocol stands out: rate-limit all of it")
	}
	return rules, min(matched/max(float64(d.Packets), 1), 1)
}

func protoWord(p uint8) string {
	if p == 6 {
		return "TCP"
	}
	return "UDP"
}

// namePort narrows r to the destination port, else the source port, that
// carries PortShare of proto, and says so.
func (v *Victims) namePort(r *rule.FlowRule, pp *PortProfile, proto uint8) string {
	if pp == nil {
		return ""
	}
	if port, n, total := pp.Top(proto, DstPort); total > 0 && float64(n) >= v.Config.PortShare*float64(total) {
		r.DstPorts = rule.PortRange{Lo: port, Hi: port}
		return fmt.Sprintf(" on destination port %d (%.0f%%)", port, 100*float64(n)/float64(total))
	}
	if port, n, total := pp.Top(proto, SrcPort); total > 0 && float64(n) >= v.Config.PortShare*float64(total) {
		r.SrcPorts = rule.PortRange{Lo: port, Hi: port}
		return fmt.Sprintf(" from source port %d (%.0f%%)", port, 100*float64(n)/float64(total))
	}
	return ""
}
