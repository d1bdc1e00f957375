// SPDX-License-Identifier: Apache-2.0

package bgp

import (
	"encoding/json"
	"errors"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/osrg/gobgp/v4/pkg/packet/bgp"

	"github.com/tierwall/tierwall/internal/control/bgp/community"
	"github.com/tierwall/tierwall/internal/rule"
)

func mustRule(t *testing.T, s string) rule.FlowRule {
	t.Helper()
	r, err := rule.ParseFlowRule(strings.Fields(s))
	if err != nil {
		t.Fatalf("rule %q: %v", s, err)
	}
	return r
}

// wireRoundTrip serialises the NLRI and attributes as they go on the
// wire and parses them back, so that the decoder sees what a peer sends.
func wireRoundTrip(t *testing.T, w wire) (bgp.NLRI, []bgp.PathAttributeInterface) {
	t.Helper()
	b, err := w.nlri.Serialize()
	if err != nil {
		t.Fatalf("serialise NLRI: %v", err)
	}
	n, err := bgp.NLRIFromSlice(w.family, b)
	if err != nil {
		t.Fatalf("parse NLRI: %v", err)
	}
	var attrs []bgp.PathAttributeInterface
	for _, a := range w.attrs {
		ab, err := a.Serialize()
		if err != nil {
			t.Fatalf("serialise %s: %v", a.GetType(), err)
		}
		pa, err := bgp.GetPathAttribute(ab)
		if err != nil {
			t.Fatalf("attribute %s: %v", a.GetType(), err)
		}
		if err := pa.DecodeFromBytes(ab); err != nil {
			t.Fatalf("decode %s: %v", a.GetType(), err)
		}
		attrs = append(attrs, pa)
	}
	return n, attrs
}

func TestFlowRoundTrip(t *testing.T) {
	enc := encoder{asn: 65000, communities: []uint32{65001<<16 | 666}}
	src := netip.MustParsePrefix
	for _, tc := range []struct {
		rule string
		src  netip.Prefix
	}{
		{rule: "dst 198.51.100.7/32 drop"},
		{rule: "dst 198.51.100.0/24 proto udp sport 53 drop"},
		{rule: "dst 198.51.100.7/32 proto udp dport 1000-2000 sport 0-1023 rate-limit 1000"},
		{rule: "dst 198.51.100.7/32 proto tcp dport 80 flags S/SA drop"},
		{rule: "dst 198.51.100.7/32 proto tcp flags 0/SAFR drop"},
		{rule: "dst 198.51.100.7/32 proto tcp flags SA/SA rate-limit 7"},
		{rule: "dst 198.51.100.7/32 proto udp length 0-64 frag none rate-limit 250000"},
		{rule: "dst 198.51.100.7/32 frag fragment drop"},
		{rule: "dst 198.51.100.7/32 proto udp frag later drop"},
		{rule: "dst 198.51.100.7/32 proto icmp length 1400-1500 drop"},
		{rule: "dst 2001:db8::7/128 proto udp dport 53 drop"},
		{rule: "dst 2001:db8::/64 proto tcp dport 443 flags S/SA rate-limit 5000"},
		{rule: "dst 2001:db8::/64 proto udp length 100-200 frag later drop"},
		{rule: "dst 198.51.100.0/24 drop", src: src("203.0.113.9/32")},
		{rule: "dst 2001:db8::/48 drop", src: src("2001:db8:bad::/48")},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			f := Flow{Src: tc.src, FlowRule: mustRule(t, tc.rule)}
			w, err := enc.encode(Route{Kind: FlowSpec, Flow: f})
			if err != nil {
				t.Fatalf("encode: %v", err)
			}
			wantFam := bgp.RF_FS_IPv4_UC
			if f.Dst.Addr().Is6() {
				wantFam = bgp.RF_FS_IPv6_UC
			}
			if w.family != wantFam {
				t.Errorf("family %s, want %s", w.family, wantFam)
			}
			nlri, attrs := wireRoundTrip(t, w)
			got, err := decodeFlow(nlri, attrs)
			if err != nil {
				t.Fatalf("decode %s: %v", nlri, err)
			}
			if got != f {
				t.Errorf("round trip:\n got %+v\nwant %+v\nNLRI %s", got, f, nlri)
			}
			var comms []uint32
			for _, a := range attrs {
				if c, ok := a.(*bgp.PathAttributeCommunities); ok {
					comms = c.Value
				}
			}
			if !slices.Contains(comms, communityNoExport) || !slices.Contains(comms, 65001<<16|666) || slices.Contains(comms, communityBlackhole) {
				t.Errorf("communities %v: want NO_EXPORT and 65001:666, not BLACKHOLE", comms)
			}
		})
	}
}

// The rate on the wire is bytes per second at the rule's packet size.
func TestTrafficRateBytes(t *testing.T) {
	for _, tc := range []struct {
		rule string
		want float32
	}{
		{"dst 198.51.100.7/32 drop", 0},
		{"dst 198.51.100.7/32 rate-limit 1000", 1000 * DefaultBytesPerPacket},
		{"dst 198.51.100.7/32 length 100-300 rate-limit 10", 2000},
	} {
		r := mustRule(t, tc.rule)
		got, err := trafficRate(&r)
		if err != nil || got != tc.want {
			t.Errorf("%s: rate %v, %v; want %v", tc.rule, got, err, tc.want)
		}
	}
}

func TestEncodeRefused(t *testing.T) {
	enc := encoder{asn: 65000, nextHop4: netip.MustParseAddr("192.0.2.1")}
	for _, r := range []Route{
		{Kind: FlowSpec, Flow: Flow{FlowRule: mustRule(t, "dst 198.51.100.7/32 proto tcp flags S/SA syn-cookie")}},
		{Kind: RTBH, Prefix: netip.MustParsePrefix("2001:db8::1/128")}, // no next_hop6
		{Kind: RTBH, Prefix: netip.MustParsePrefix("198.51.100.1/24")}, // host bits
		{Kind: FlowSpec, Flow: Flow{Src: netip.MustParsePrefix("2001:db8::/64"), FlowRule: mustRule(t, "dst 198.51.100.0/24 drop")}},
		{Kind: FlowSpec},
		{Kind: 9},
	} {
		if _, err := enc.encode(r); !errors.Is(err, rule.ErrInvalid) {
			t.Errorf("%+v: err %v, want rule.ErrInvalid", r, err)
		}
	}
}

// decodeRaw decodes a hand-built NLRI with one traffic-rate 0 action.
func decodeRaw(t *testing.T, family bgp.Family, ecs []bgp.ExtendedCommunityInterface, comps ...bgp.FlowSpecComponentInterface) (Flow, error) {
	t.Helper()
	n, err := bgp.NewFlowSpecUnicast(family, comps)
	if err != nil {
		t.Fatal(err)
	}
	if ecs == nil {
		ecs = []bgp.ExtendedCommunityInterface{bgp.NewTrafficRateExtended(0, 0)}
	}
	w := wire{family: family, nlri: n, attrs: []bgp.PathAttributeInterface{bgp.NewPathAttributeExtendedCommunities(ecs)}}
	nlri, attrs := wireRoundTrip(t, w)
	return decodeFlow(nlri, attrs)
}

func TestDecodeUnsupported(t *testing.T) {
	ap := func(s string) *bgp.IPAddrPrefix {
		p, err := bgp.NewIPAddrPrefix(netip.MustParsePrefix(s))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	dst := bgp.NewFlowSpecDestinationPrefix(ap("198.51.100.0/24"))
	item := bgp.NewFlowSpecComponentItem
	comp := bgp.NewFlowSpecComponent
	for name, tc := range map[string]struct {
		fam   bgp.Family
		ecs   []bgp.ExtendedCommunityInterface
		comps []bgp.FlowSpecComponentInterface
	}{
		"port (type 4)":       {comps: []bgp.FlowSpecComponentInterface{dst, comp(bgp.FLOW_SPEC_TYPE_PORT, []*bgp.FlowSpecComponentItem{item(bgp.DEC_NUM_OP_EQ, 80)})}},
		"icmp type":           {comps: []bgp.FlowSpecComponentInterface{dst, comp(bgp.FLOW_SPEC_TYPE_ICMP_TYPE, []*bgp.FlowSpecComponentItem{item(bgp.DEC_NUM_OP_EQ, 8)})}},
		"dscp":                {comps: []bgp.FlowSpecComponentInterface{dst, comp(bgp.FLOW_SPEC_TYPE_DSCP, []*bgp.FlowSpecComponentItem{item(bgp.DEC_NUM_OP_EQ, 46)})}},
		"two port ranges":     {comps: []bgp.FlowSpecComponentInterface{dst, comp(bgp.FLOW_SPEC_TYPE_DST_PORT, []*bgp.FlowSpecComponentItem{item(bgp.DEC_NUM_OP_EQ, 80), item(bgp.DEC_NUM_OP_EQ, 443)})}},
		"length not in range": {comps: []bgp.FlowSpecComponentInterface{dst, comp(bgp.FLOW_SPEC_TYPE_PKT_LEN, []*bgp.FlowSpecComponentItem{item(bgp.DEC_NUM_OP_NOT_EQ, 64)})}},
		"source with proto": {comps: []bgp.FlowSpecComponentInterface{dst, bgp.NewFlowSpecSourcePrefix(ap("203.0.113.0/24")),
			comp(bgp.FLOW_SPEC_TYPE_IP_PROTO, []*bgp.FlowSpecComponentItem{item(bgp.DEC_NUM_OP_EQ, 17)})}},
		"ipv6 offset": {fam: bgp.RF_FS_IPv6_UC, comps: []bgp.FlowSpecComponentInterface{bgp.NewFlowSpecDestinationPrefix6(ap("2001:db8::/64"), 8)}},
		"redirect":    {ecs: []bgp.ExtendedCommunityInterface{bgp.NewRedirectTwoOctetAsSpecificExtended(65001, 100)}, comps: []bgp.FlowSpecComponentInterface{dst}},
		"mark":        {ecs: []bgp.ExtendedCommunityInterface{bgp.NewTrafficRemarkExtended(10)}, comps: []bgp.FlowSpecComponentInterface{dst}},
		"sample":      {ecs: []bgp.ExtendedCommunityInterface{bgp.NewTrafficActionExtended(false, true)}, comps: []bgp.FlowSpecComponentInterface{dst}},
		"no action":   {ecs: []bgp.ExtendedCommunityInterface{}, comps: []bgp.FlowSpecComponentInterface{dst}},
	} {
		fam := tc.fam
		if fam == 0 {
			fam = bgp.RF_FS_IPv4_UC
		}
		_, err := decodeRaw(t, fam, tc.ecs, tc.comps...)
		if !errors.Is(err, errUnsupported) {
			t.Errorf("%s: err %v, want unsupported", name, err)
		}
	}
	// The action-less rule says so in words the operator reads.
	_, err := decodeRaw(t, bgp.RF_FS_IPv4_UC, []bgp.ExtendedCommunityInterface{}, dst)
	if err == nil || !strings.Contains(err.Error(), "no action: nothing to enforce") {
		t.Errorf("no action: %v", err)
	}
	// A rate below one packet a second is a drop.
	f, err := decodeRaw(t, bgp.RF_FS_IPv4_UC, []bgp.ExtendedCommunityInterface{bgp.NewTrafficRateExtended(0, 100)}, dst)
	if err != nil || f.Action != rule.FlowDrop || f.RatePPS != 0 {
		t.Errorf("rate 100 B/s: %+v, %v; want drop", f, err)
	}
	// A one-sided port bound is one range.
	f, err = decodeRaw(t, bgp.RF_FS_IPv4_UC, nil, dst, comp(bgp.FLOW_SPEC_TYPE_IP_PROTO, []*bgp.FlowSpecComponentItem{item(bgp.DEC_NUM_OP_EQ, 17)}),
		comp(bgp.FLOW_SPEC_TYPE_DST_PORT, []*bgp.FlowSpecComponentItem{item(bgp.DEC_NUM_OP_GT, 1023)}))
	if err != nil || f.DstPorts != (rule.PortRange{Lo: 1024, Hi: 65535}) {
		t.Errorf("dport >1023: %+v, %v", f.DstPorts, err)
	}
}

// Routes go through the API as JSON and come back the same.
func TestRouteJSONRoundTrip(t *testing.T) {
	in := []Route{
		{Kind: RTBH, Prefix: netip.MustParsePrefix("203.0.113.7/32"), Reason: "ban", Rate: 5},
		{Kind: FlowSpec, Flow: Flow{Src: netip.MustParsePrefix("203.0.113.7/32"), FlowRule: rule.FlowRule{Dst: netip.MustParsePrefix("192.0.2.0/24"), Action: rule.FlowDrop}}},
		{Kind: FlowSpec, Flow: Flow{FlowRule: rule.FlowRule{Dst: netip.MustParsePrefix("2001:db8::/64"), Proto: 17,
			DstPorts: rule.PortRange{Lo: 53, Hi: 53}, Action: rule.FlowRateLimit, RatePPS: 1000}}},
	}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out []Route
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip:\n%+v\n%+v\n%s", in, out, b)
	}
	var k Kind
	if err := k.UnmarshalText([]byte("blackhole")); err == nil {
		t.Fatal("an unknown kind was accepted")
	}
}

// A route's communities follow the well-known ones and bgp.announce's,
// each once; large ones go in their own attribute (RFC 8092), which is
// left out when there are none; both are part of what re-sends a route.
func TestEncodeCommunities(t *testing.T) {
	enc := encoder{asn: 65000, nextHop4: netip.MustParseAddr("192.0.2.1"), communities: []uint32{64500<<16 | 666},
		large: []community.Large{{Global: 65000, Local1: 666, Local2: 1}}}
	r := Route{Kind: RTBH, Prefix: netip.MustParsePrefix("198.51.100.7/32"),
		Communities:      []community.Standard{64600<<16 | 666, 64500<<16 | 666, community.Blackhole},
		LargeCommunities: []community.Large{{Global: 4200000000, Local1: 666, Local2: 2}, {Global: 65000, Local1: 666, Local2: 1}}}
	w, err := enc.encode(r)
	if err != nil {
		t.Fatal(err)
	}
	_, attrs := wireRoundTrip(t, w)
	var comms []uint32
	var large []string
	for _, a := range attrs {
		switch a := a.(type) {
		case *bgp.PathAttributeCommunities:
			comms = a.Value
		case *bgp.PathAttributeLargeCommunities:
			for _, l := range a.Values {
				large = append(large, l.String())
			}
		}
	}
	if want := []uint32{communityBlackhole, communityNoExport, 64500<<16 | 666, 64600<<16 | 666}; !slices.Equal(comms, want) {
		t.Errorf("communities %v, want %v", comms, want)
	}
	if want := []string{"65000:666:1", "4200000000:666:2"}; !slices.Equal(large, want) {
		t.Errorf("large communities %v, want %v", large, want)
	}
	r2 := r
	r2.LargeCommunities = nil
	w2, err := enc.encode(r2)
	if err != nil {
		t.Fatal(err)
	}
	if w2.key != w.key || w2.attr == w.attr {
		t.Errorf("key %q/%q, attr %q/%q: want the same key and another attr", w.key, w2.key, w.attr, w2.attr)
	}
	enc.large = nil
	w3, err := enc.encode(Route{Kind: FlowSpec, Flow: Flow{FlowRule: mustRule(t, "dst 198.51.100.7/32 drop")}})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range w3.attrs {
		if _, ok := a.(*bgp.PathAttributeLargeCommunities); ok {
			t.Errorf("an empty large communities attribute on %s", w3.key)
		}
	}
}
