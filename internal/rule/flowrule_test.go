// SPDX-License-Identifier: Apache-2.0

package rule

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestParseFlowRuleRoundTrip(t *testing.T) {
	for _, in := range []string{
		"dst 198.51.100.7/32 proto udp sport 53 rate-limit 1000 bypass-known-good",
		"dst 2001:db8::/64 proto tcp dport 80 flags S/SA syn-cookie",
		"dst 198.51.100.0/24 proto udp dport 1000-2000 length 0-64 frag none drop",
		"dst 198.51.100.0/24 frag later drop",
		"dst 198.51.100.0/24 proto 47 drop",
	} {
		r, err := ParseFlowRule(strings.Fields(in))
		if err != nil {
			t.Fatalf("%q: %v", in, err)
		}
		if got := r.String(); got != in {
			t.Errorf("round trip:\n got %q\nwant %q", got, in)
		}
	}
}

func TestParseFlowRuleRefuses(t *testing.T) {
	for _, in := range []string{
		"",                                  // no dst, no action
		"dst 198.51.100.7/32",               // no action
		"dst 0.0.0.0/0 drop",                // wider than /8
		"dst ::/0 drop",                     // wider than /16
		"dst ::ffff:198.51.100.7/128 drop",  // mapped
		"dst 198.51.100.7/24 drop",          // host bits
		"dst 198.51.100.7/32 dport 80 drop", // ports without tcp/udp
		"dst 198.51.100.7/32 proto udp flags S/S drop",
		"dst 198.51.100.7/32 proto tcp flags SA/S drop", // value outside mask
		"dst 198.51.100.7/32 proto udp dport 9-1 drop",
		"dst 198.51.100.7/32 proto udp dport 70000 drop",
		"dst 198.51.100.7/32 proto udp rate-limit 0",
		"dst 198.51.100.7/32 proto udp syn-cookie",
		"dst 198.51.100.7/32 proto udp dport 53 frag later drop",
		"dst 198.51.100.7/32 proto udp frag maybe drop",
		"dst 198.51.100.7/32 proto udp drop extra",
		"dst 198.51.100.7/32 proto",
	} {
		if _, err := ParseFlowRule(strings.Fields(in)); !errors.Is(err, ErrInvalid) {
			t.Errorf("%q: %v, want ErrInvalid", in, err)
		}
	}
}

func TestFlowRuleMatch(t *testing.T) {
	victim := netip.MustParseAddr("198.51.100.7")
	refl, _ := ParseFlowRule(strings.Fields("dst 198.51.100.0/24 proto udp sport 53 drop"))
	syn, _ := ParseFlowRule(strings.Fields("dst 198.51.100.7/32 proto tcp dport 80 flags S/SA syn-cookie"))
	for _, c := range []struct {
		r           FlowRule
		dst         netip.Addr
		proto       uint8
		sport, dprt uint16
		flags       uint8
		frag        FragmentMatch
		want        bool
	}{
		{refl, victim, 17, 53, 4444, 0, FragNone, true},
		{refl, netip.MustParseAddr("::ffff:198.51.100.7"), 17, 53, 4444, 0, FragNone, true},
		{refl, victim, 17, 54, 4444, 0, FragNone, false},
		{refl, victim, 6, 53, 4444, 0, FragNone, false},
		{refl, netip.MustParseAddr("198.51.101.7"), 17, 53, 4444, 0, FragNone, false},
		{refl, victim, 17, 0, 0, 0, FragLater, false}, // no ports to match
		{syn, victim, 6, 1234, 80, TCPSyn, FragNone, true},
		{syn, victim, 6, 1234, 80, TCPSyn | TCPAck, FragNone, false},
		{syn, victim, 6, 1234, 443, TCPSyn, FragNone, false},
	} {
		if got := c.r.Match(c.dst, c.proto, c.sport, c.dprt, c.flags, 100, c.frag); got != c.want {
			t.Errorf("%s on %v proto %d %d→%d flags %#x frag %d: %v, want %v", c.r, c.dst, c.proto, c.sport, c.dprt, c.flags, c.frag, got, c.want)
		}
	}
}
