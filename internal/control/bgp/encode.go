// SPDX-License-Identifier: Apache-2.0

package bgp

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"slices"

	"github.com/osrg/gobgp/v4/pkg/packet/bgp"

	"github.com/tierwall/tierwall/internal/control/bgp/community"
	"github.com/tierwall/tierwall/internal/rule"
)

// Well-known communities put on every announcement.
const (
	communityBlackhole = uint32(community.Blackhole) // RFC 7999
	communityNoExport  = uint32(bgp.COMMUNITY_NO_EXPORT)
)

// Checked once here rather than trusted: the two packages spell NO_EXPORT
// independently.
var _ = [1]struct{}{}[uint32(community.NoExport)-communityNoExport]

// DefaultBytesPerPacket converts between tierwall's packet rates and
// FlowSpec's traffic-rate, which counts bytes per second (RFC 8955
// §7.3): a rule whose Length is a range is taken at the middle of it,
// any other at this size. Announcer and receiver use the same
// conversion, so a rate-limit survives the round trip.
const DefaultBytesPerPacket = 500

// bytesPerPacket is the packet size at which f's rate is converted.
func bytesPerPacket(f *rule.FlowRule) float64 {
	if f.Length.Any() {
		return DefaultBytesPerPacket
	}
	return max(float64(f.Length.Lo+f.Length.Hi)/2, 1)
}

// wire is a route as GoBGP takes it: its family, NLRI and attributes.
type wire struct {
	family bgp.Family
	nlri   bgp.NLRI
	attrs  []bgp.PathAttributeInterface
	// key names the NLRI (GoBGP keeps one local path per NLRI), attr
	// what else is sent, so that a changed action is re-sent and an
	// unchanged route is not.
	key, attr string
	// comms are the well-known communities of the route's kind, until
	// addCommunities completes them and adds the attribute.
	comms []uint32
}

// encoder turns routes into wire form with the speaker's configuration.
type encoder struct {
	asn         uint32
	nextHop4    netip.Addr
	nextHop6    netip.Addr
	communities []uint32
	large       []community.Large
}

func (e *encoder) encode(r Route) (wire, error) {
	var w wire
	var err error
	switch r.Kind {
	case RTBH:
		w, err = e.encodeRTBH(r.Prefix)
	case FlowSpec:
		w, err = e.encodeFlow(r.Flow)
	default:
		return wire{}, fmt.Errorf("%w: route kind %d", rule.ErrInvalid, r.Kind)
	}
	if err != nil {
		return wire{}, err
	}
	e.addCommunities(&w, r)
	return w, nil
}

// addCommunities puts the configured communities and r's own on w, after
// the well-known ones the kind carries, each once and in that order (a
// reader of the peer's RIB finds BLACKHOLE first), and the large
// communities in their own attribute (RFC 8092).
func (e *encoder) addCommunities(w *wire, r Route) {
	comms := w.comms
	for _, c := range e.communities {
		if !slices.Contains(comms, c) {
			comms = append(comms, c)
		}
	}
	for _, c := range r.Communities {
		if !slices.Contains(comms, uint32(c)) {
			comms = append(comms, uint32(c))
		}
	}
	var large []community.Large
	for _, l := range slices.Concat(e.large, r.LargeCommunities) {
		if !slices.Contains(large, l) {
			large = append(large, l)
		}
	}
	w.attrs = append(w.attrs, bgp.NewPathAttributeCommunities(comms))
	w.attr += fmt.Sprintf(" comm %v", comms)
	if len(large) > 0 {
		ls := make([]*bgp.LargeCommunity, len(large))
		for i, l := range large {
			ls[i] = bgp.NewLargeCommunity(l.Global, l.Local1, l.Local2)
		}
		w.attrs = append(w.attrs, bgp.NewPathAttributeLargeCommunities(ls))
		w.attr += fmt.Sprintf(" large %v", large)
	}
	w.comms = comms
}

func (e *encoder) encodeRTBH(p netip.Prefix) (wire, error) {
	if err := rule.CheckPrefix(p); err != nil {
		return wire{}, fmt.Errorf("rtbh: %w", err)
	}
	family, nh := bgp.RF_IPv4_UC, e.nextHop4
	if p.Addr().Is6() {
		family, nh = bgp.RF_IPv6_UC, e.nextHop6
	}
	if !nh.IsValid() {
		return wire{}, fmt.Errorf("%w: rtbh %s: no next hop for its family (bgp.announce.next_hop4/6)", rule.ErrInvalid, p)
	}
	nlri, err := bgp.NewIPAddrPrefix(p)
	if err != nil {
		return wire{}, fmt.Errorf("%w: rtbh %s: %w", rule.ErrInvalid, p, err)
	}
	attrs := []bgp.PathAttributeInterface{bgp.NewPathAttributeOrigin(bgp.BGP_ORIGIN_ATTR_TYPE_IGP)}
	if family == bgp.RF_IPv4_UC {
		a, err := bgp.NewPathAttributeNextHop(nh)
		if err != nil {
			return wire{}, fmt.Errorf("%w: rtbh next hop %s: %w", rule.ErrInvalid, nh, err)
		}
		attrs = append(attrs, a)
	} else {
		a, err := bgp.NewPathAttributeMpReachNLRI(family, []bgp.PathNLRI{{NLRI: nlri}}, nh)
		if err != nil {
			return wire{}, fmt.Errorf("%w: rtbh next hop %s: %w", rule.ErrInvalid, nh, err)
		}
		attrs = append(attrs, a)
	}
	return wire{family: family, nlri: nlri, attrs: attrs, comms: []uint32{communityBlackhole, communityNoExport},
		key: "rtbh " + p.String(), attr: fmt.Sprintf("nh %s", nh)}, nil
}

func (e *encoder) encodeFlow(f Flow) (wire, error) {
	if f.Action == rule.FlowSYNCookie {
		return wire{}, fmt.Errorf("%w: flowspec %s: syn-cookie is a local mitigation, not a FlowSpec action", rule.ErrInvalid, f.FlowRule)
	}
	rate, err := trafficRate(&f.FlowRule)
	if err != nil {
		return wire{}, fmt.Errorf("flowspec %s: %w", f.FlowRule, err)
	}
	family, comps, err := flowComponents(f)
	if err != nil {
		return wire{}, err
	}
	nlri, err := bgp.NewFlowSpecUnicast(family, comps)
	if err != nil {
		return wire{}, fmt.Errorf("%w: flowspec %s: %w", rule.ErrInvalid, f.FlowRule, err)
	}
	// FlowSpec has no next hop (RFC 8955 §4): MP_REACH carries none.
	mp, err := bgp.NewPathAttributeMpReachNLRI(family, []bgp.PathNLRI{{NLRI: nlri}})
	if err != nil {
		return wire{}, fmt.Errorf("%w: flowspec %s: %w", rule.ErrInvalid, f.FlowRule, err)
	}
	as := uint16(0)
	if e.asn <= math.MaxUint16 {
		as = uint16(e.asn) // informational only (RFC 8955 §7.3)
	}
	attrs := []bgp.PathAttributeInterface{
		bgp.NewPathAttributeOrigin(bgp.BGP_ORIGIN_ATTR_TYPE_IGP),
		mp,
		bgp.NewPathAttributeExtendedCommunities([]bgp.ExtendedCommunityInterface{bgp.NewTrafficRateExtended(as, rate)}),
	}
	return wire{family: family, nlri: nlri, attrs: attrs, comms: []uint32{communityNoExport},
		key: "flowspec " + nlri.String(), attr: fmt.Sprintf("rate %v", rate)}, nil
}

// trafficRate is the traffic-rate (bytes/s) announcing f's action.
func trafficRate(f *rule.FlowRule) (float32, error) {
	switch f.Action {
	case rule.FlowDrop:
		return 0, nil
	case rule.FlowRateLimit:
		if f.RatePPS == 0 {
			return 0, fmt.Errorf("%w: a rate-limit needs a rate above 0", rule.ErrInvalid)
		}
		r := float64(f.RatePPS) * bytesPerPacket(f)
		if r > math.MaxFloat32 {
			return 0, fmt.Errorf("%w: rate %d pps overflows traffic-rate", rule.ErrInvalid, f.RatePPS)
		}
		return float32(r), nil
	}
	return 0, fmt.Errorf("%w: action %s has no FlowSpec encoding", rule.ErrInvalid, f.Action)
}

// flowComponents encodes the match of f (RFC 8955 §4.2, RFC 8956 §3).
func flowComponents(f Flow) (bgp.Family, []bgp.FlowSpecComponentInterface, error) {
	var is6 bool
	switch {
	case f.Dst.IsValid() && f.Src.IsValid() && f.Dst.Addr().Is6() != f.Src.Addr().Is6():
		return 0, nil, fmt.Errorf("%w: flowspec: source %s and destination %s of different families", rule.ErrInvalid, f.Src, f.Dst)
	case f.Dst.IsValid():
		is6 = f.Dst.Addr().Is6()
	case f.Src.IsValid():
		is6 = f.Src.Addr().Is6()
	default:
		return 0, nil, fmt.Errorf("%w: flowspec: neither destination nor source prefix", rule.ErrInvalid)
	}
	family := bgp.RF_FS_IPv4_UC
	if is6 {
		family = bgp.RF_FS_IPv6_UC
	}
	var comps []bgp.FlowSpecComponentInterface
	for _, pc := range []struct {
		p   netip.Prefix
		dst bool
	}{{f.Dst, true}, {f.Src, false}} {
		if !pc.p.IsValid() {
			continue
		}
		if err := rule.CheckPrefix(pc.p); err != nil {
			return 0, nil, fmt.Errorf("flowspec: %w", err)
		}
		ap, err := bgp.NewIPAddrPrefix(pc.p)
		if err != nil {
			return 0, nil, fmt.Errorf("%w: flowspec prefix %s: %w", rule.ErrInvalid, pc.p, err)
		}
		switch {
		case is6 && pc.dst:
			comps = append(comps, bgp.NewFlowSpecDestinationPrefix6(ap, 0))
		case is6:
			comps = append(comps, bgp.NewFlowSpecSourcePrefix6(ap, 0))
		case pc.dst:
			comps = append(comps, bgp.NewFlowSpecDestinationPrefix(ap))
		default:
			comps = append(comps, bgp.NewFlowSpecSourcePrefix(ap))
		}
	}
	if f.Proto != 0 {
		comps = append(comps, bgp.NewFlowSpecComponent(bgp.FLOW_SPEC_TYPE_IP_PROTO, numEq(uint64(f.Proto))))
	}
	if !f.DstPorts.Any() {
		comps = append(comps, bgp.NewFlowSpecComponent(bgp.FLOW_SPEC_TYPE_DST_PORT, numRange(f.DstPorts.Lo, f.DstPorts.Hi)))
	}
	if !f.SrcPorts.Any() {
		comps = append(comps, bgp.NewFlowSpecComponent(bgp.FLOW_SPEC_TYPE_SRC_PORT, numRange(f.SrcPorts.Lo, f.SrcPorts.Hi)))
	}
	if f.TCPFlags.Mask != 0 {
		comps = append(comps, bgp.NewFlowSpecComponent(bgp.FLOW_SPEC_TYPE_TCP_FLAG, tcpFlagItems(f.TCPFlags)))
	}
	if !f.Length.Any() {
		comps = append(comps, bgp.NewFlowSpecComponent(bgp.FLOW_SPEC_TYPE_PKT_LEN, numRange(f.Length.Lo, f.Length.Hi)))
	}
	if f.Fragment != rule.FragAny {
		items, err := fragmentItems(f.Fragment)
		if err != nil {
			return 0, nil, err
		}
		comps = append(comps, bgp.NewFlowSpecComponent(bgp.FLOW_SPEC_TYPE_FRAGMENT, items))
	}
	return family, comps, nil
}

func numEq(v uint64) []*bgp.FlowSpecComponentItem {
	return []*bgp.FlowSpecComponentItem{bgp.NewFlowSpecComponentItem(bgp.DEC_NUM_OP_EQ, v)}
}

// numRange is ==lo, or >=lo AND <=hi.
func numRange(lo, hi uint16) []*bgp.FlowSpecComponentItem {
	if lo == hi {
		return numEq(uint64(lo))
	}
	return []*bgp.FlowSpecComponentItem{
		bgp.NewFlowSpecComponentItem(bgp.DEC_NUM_OP_GT_EQ, uint64(lo)),
		bgp.NewFlowSpecComponentItem(bgp.DEC_NUM_OP_AND|bgp.DEC_NUM_OP_LT_EQ, uint64(hi)),
	}
}

// tcpFlagItems encodes (flags & Mask) == Value as "all of Value set" AND
// "none of Mask&^Value set" (RFC 8955 §4.2.2.9's match and not bits).
func tcpFlagItems(m rule.TCPFlagMatch) []*bgp.FlowSpecComponentItem {
	var items []*bgp.FlowSpecComponentItem
	if m.Value != 0 {
		items = append(items, bgp.NewFlowSpecComponentItem(bgp.BITMASK_FLAG_OP_MATCH, uint64(m.Value)))
	}
	if clear := m.Mask &^ m.Value; clear != 0 {
		op := uint8(bgp.BITMASK_FLAG_OP_NOT)
		if len(items) > 0 {
			op |= bgp.BITMASK_FLAG_OP_AND
		}
		items = append(items, bgp.NewFlowSpecComponentItem(op, uint64(clear)))
	}
	return items
}

// Fragment bits of type 12 (RFC 8955 §4.2.2.12).
const (
	fragIsF = bgp.FRAG_FLAG_IS
	fragFF  = bgp.FRAG_FLAG_FIRST
)

func fragmentItems(m rule.FragmentMatch) ([]*bgp.FlowSpecComponentItem, error) {
	switch m {
	case rule.FragNone: // not IsF
		return []*bgp.FlowSpecComponentItem{bgp.NewFlowSpecComponentItem(bgp.BITMASK_FLAG_OP_NOT, fragIsF)}, nil
	case rule.FragAnyFrag: // IsF
		return []*bgp.FlowSpecComponentItem{bgp.NewFlowSpecComponentItem(bgp.BITMASK_FLAG_OP_MATCH, fragIsF)}, nil
	case rule.FragLater: // IsF and not FF
		return []*bgp.FlowSpecComponentItem{
			bgp.NewFlowSpecComponentItem(bgp.BITMASK_FLAG_OP_MATCH, fragIsF),
			bgp.NewFlowSpecComponentItem(bgp.BITMASK_FLAG_OP_AND|bgp.BITMASK_FLAG_OP_NOT, fragFF),
		}, nil
	}
	return nil, fmt.Errorf("%w: fragment match %d", rule.ErrInvalid, m)
}

// errUnsupported marks what a received rule asks that the data plane
// cannot do; its text is the Remote's Refused.
var errUnsupported = errors.New("unsupported")

func unsupported(format string, a ...any) error {
	return fmt.Errorf("%w: %s", errUnsupported, fmt.Sprintf(format, a...))
}

// decodeFlow reads a received FlowSpec NLRI and its attributes back into
// a Flow. An error says why the data plane cannot enforce it; the Flow
// returned with it is as much as could be read, for the operator.
func decodeFlow(nlri bgp.NLRI, attrs []bgp.PathAttributeInterface) (Flow, error) {
	var f Flow
	fs, ok := nlri.(*bgp.FlowSpecNLRI)
	if !ok {
		return f, unsupported("not a FlowSpec NLRI (%T)", nlri)
	}
	// The only other component a source prefix may come with is the
	// destination: the data plane matches a source only as a ban.
	other := false
	for _, c := range fs.Value {
		switch c := c.(type) {
		case *bgp.FlowSpecDestinationPrefix:
			f.Dst = c.Prefix.Prefix
		case *bgp.FlowSpecSourcePrefix:
			f.Src = c.Prefix.Prefix
		case *bgp.FlowSpecDestinationPrefix6:
			if c.Offset != 0 {
				return f, unsupported("IPv6 destination prefix offset %d", c.Offset)
			}
			f.Dst = c.Prefix.Prefix
		case *bgp.FlowSpecSourcePrefix6:
			if c.Offset != 0 {
				return f, unsupported("IPv6 source prefix offset %d", c.Offset)
			}
			f.Src = c.Prefix.Prefix
		case *bgp.FlowSpecComponent:
			other = true
			if err := decodeComponent(&f.FlowRule, c); err != nil {
				return f, err
			}
		default:
			return f, unsupported("component %s", c.Type())
		}
	}
	if f.Src.IsValid() && other {
		return f, unsupported("a source prefix with more than a destination")
	}
	if err := decodeAction(&f.FlowRule, attrs); err != nil {
		return f, err
	}
	return f, nil
}

func decodeComponent(r *rule.FlowRule, c *bgp.FlowSpecComponent) error {
	t := c.Type()
	switch t {
	case bgp.FLOW_SPEC_TYPE_IP_PROTO:
		lo, hi, err := numericRange(c.Items, math.MaxUint8)
		if err != nil || lo != hi || lo == 0 {
			return unsupported("protocol test that is not one protocol")
		}
		r.Proto = uint8(lo)
	case bgp.FLOW_SPEC_TYPE_DST_PORT, bgp.FLOW_SPEC_TYPE_SRC_PORT, bgp.FLOW_SPEC_TYPE_PKT_LEN:
		lo, hi, err := numericRange(c.Items, math.MaxUint16)
		if err != nil {
			return unsupported("%s: %v", t, err)
		}
		switch t {
		case bgp.FLOW_SPEC_TYPE_DST_PORT:
			r.DstPorts = rule.PortRange{Lo: uint16(lo), Hi: uint16(hi)}
		case bgp.FLOW_SPEC_TYPE_SRC_PORT:
			r.SrcPorts = rule.PortRange{Lo: uint16(lo), Hi: uint16(hi)}
		default:
			r.Length = rule.Range16{Lo: uint16(lo), Hi: uint16(hi)}
		}
	case bgp.FLOW_SPEC_TYPE_TCP_FLAG:
		m, err := decodeTCPFlags(c.Items)
		if err != nil {
			return err
		}
		r.TCPFlags = m
	case bgp.FLOW_SPEC_TYPE_FRAGMENT:
		m, err := decodeFragment(c.Items)
		if err != nil {
			return err
		}
		r.Fragment = m
	default:
		// type 4 (port, either direction), ICMP type/code, DSCP, flow
		// label and anything newer.
		return unsupported("component %s", t)
	}
	return nil
}

// numericRange reads one range out of numeric operator items: ==v, >=lo
// (or >), <=hi (or <), or the AND of a lower and an upper bound. ORs,
// != and more than two terms are more than one range.
func numericRange(items []*bgp.FlowSpecComponentItem, maxV uint64) (lo, hi uint64, err error) {
	if len(items) == 0 || len(items) > 2 {
		return 0, 0, errors.New("not a single range")
	}
	lo, hi = 0, maxV
	haveLo, haveHi := false, false
	for i, it := range items {
		if i > 0 && it.Op&bgp.DEC_NUM_OP_AND == 0 {
			return 0, 0, errors.New("not a single range (OR)")
		}
		v := it.Value
		if v > maxV {
			return 0, 0, fmt.Errorf("value %d out of range", v)
		}
		switch it.Op & 0x07 {
		case bgp.DEC_NUM_OP_EQ:
			if len(items) != 1 {
				return 0, 0, errors.New("not a single range")
			}
			return v, v, nil
		case bgp.DEC_NUM_OP_GT_EQ, bgp.DEC_NUM_OP_GT:
			if it.Op&0x07 == bgp.DEC_NUM_OP_GT {
				if v == maxV {
					return 0, 0, errors.New("empty range")
				}
				v++
			}
			if haveLo {
				return 0, 0, errors.New("not a single range")
			}
			lo, haveLo = v, true
		case bgp.DEC_NUM_OP_LT_EQ, bgp.DEC_NUM_OP_LT:
			if it.Op&0x07 == bgp.DEC_NUM_OP_LT {
				if v == 0 {
					return 0, 0, errors.New("empty range")
				}
				v--
			}
			if haveHi {
				return 0, 0, errors.New("not a single range")
			}
			hi, haveHi = v, true
		default:
			return 0, 0, errors.New("not a single range (!=, true or false)")
		}
	}
	if lo > hi {
		return 0, 0, errors.New("empty range")
	}
	return lo, hi, nil
}

// decodeTCPFlags reads an AND of "these bits all set" and "these bits all
// clear" terms into a mask/value match; anything else (OR, "not all
// set") is not one mask/value test.
func decodeTCPFlags(items []*bgp.FlowSpecComponentItem) (rule.TCPFlagMatch, error) {
	var m rule.TCPFlagMatch
	for i, it := range items {
		if i > 0 && it.Op&bgp.BITMASK_FLAG_OP_AND == 0 {
			return m, unsupported("TCP flags OR")
		}
		if it.Value > 0xff || it.Value == 0 {
			return m, unsupported("TCP flags value %#x", it.Value)
		}
		v := uint8(it.Value)
		not, match := it.Op&bgp.BITMASK_FLAG_OP_NOT != 0, it.Op&bgp.BITMASK_FLAG_OP_MATCH != 0
		switch {
		case !not && (match || v&(v-1) == 0): // all of v set (one bit: any = all)
			if m.Mask&v&^m.Value != 0 {
				return m, unsupported("contradictory TCP flags")
			}
			m.Mask |= v
			m.Value |= v
		case not && !match: // none of v set
			if m.Value&v != 0 {
				return m, unsupported("contradictory TCP flags")
			}
			m.Mask |= v
		default:
			return m, unsupported("TCP flags test that is not a mask/value match")
		}
	}
	return m, nil
}

// decodeFragment accepts the three fragment tests the data plane has.
func decodeFragment(items []*bgp.FlowSpecComponentItem) (rule.FragmentMatch, error) {
	is := func(it *bgp.FlowSpecComponentItem, op uint8, v uint64) bool {
		return it.Op&^(bgp.BITMASK_FLAG_OP_END|0x30) == op && it.Value == v
	}
	switch {
	case len(items) == 1 && is(items[0], bgp.BITMASK_FLAG_OP_NOT, fragIsF):
		return rule.FragNone, nil
	case len(items) == 1 && (is(items[0], bgp.BITMASK_FLAG_OP_MATCH, fragIsF) || is(items[0], 0, fragIsF)):
		return rule.FragAnyFrag, nil
	case len(items) == 2 && (is(items[0], bgp.BITMASK_FLAG_OP_MATCH, fragIsF) || is(items[0], 0, fragIsF)) &&
		is(items[1], bgp.BITMASK_FLAG_OP_AND|bgp.BITMASK_FLAG_OP_NOT, fragFF):
		return rule.FragLater, nil
	}
	return 0, unsupported("fragment test other than not-a-fragment, is-fragment or later fragments")
}

// decodeAction reads the FlowSpec action (RFC 8955 §7) out of the
// extended communities: only traffic-rate is enforceable.
func decodeAction(r *rule.FlowRule, attrs []bgp.PathAttributeInterface) error {
	var rates []float32
	for _, a := range attrs {
		ec, ok := a.(*bgp.PathAttributeExtendedCommunities)
		if !ok {
			continue
		}
		for _, c := range ec.Value {
			typ, sub := c.GetTypes()
			if typ < bgp.EC_TYPE_GENERIC_TRANSITIVE_EXPERIMENTAL || typ > bgp.EC_TYPE_GENERIC_TRANSITIVE_EXPERIMENTAL3 {
				continue // route targets and the like: not actions
			}
			switch {
			case typ == bgp.EC_TYPE_GENERIC_TRANSITIVE_EXPERIMENTAL && sub == bgp.EC_SUBTYPE_FLOWSPEC_TRAFFIC_RATE:
				tr, ok := c.(*bgp.TrafficRateExtended)
				if !ok {
					return unsupported("malformed traffic-rate")
				}
				rates = append(rates, tr.Rate)
			case sub == bgp.EC_SUBTYPE_FLOWSPEC_TRAFFIC_ACTION:
				return unsupported("traffic-action (sample/terminal)")
			case sub == bgp.EC_SUBTYPE_FLOWSPEC_REDIRECT, sub == bgp.EC_SUBTYPE_FLOWSPEC_REDIRECT_IP6:
				return unsupported("redirect action")
			case sub == bgp.EC_SUBTYPE_FLOWSPEC_TRAFFIC_REMARK:
				return unsupported("traffic-marking action")
			default:
				return unsupported("FlowSpec action %#x/%#x", typ, sub)
			}
		}
	}
	if len(rates) == 0 {
		return unsupported("no action: nothing to enforce")
	}
	for _, x := range rates[1:] {
		if x != rates[0] {
			return unsupported("conflicting traffic-rates")
		}
	}
	rate := float64(rates[0])
	switch {
	case math.IsNaN(rate) || math.IsInf(rate, 0) || rate < 0:
		return unsupported("traffic-rate %v", rate)
	case rate == 0:
		r.Action = rule.FlowDrop
		return nil
	}
	pps := math.Round(rate / bytesPerPacket(r))
	if pps < 1 {
		// Less than a packet a second is nothing at all.
		r.Action = rule.FlowDrop
		return nil
	}
	r.Action, r.RatePPS = rule.FlowRateLimit, uint64(min(pps, math.MaxUint32))
	return nil
}
