// SPDX-License-Identifier: Apache-2.0

package datapath

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/tierwall/tierwall/internal/pkt"
	"github.com/tierwall/tierwall/internal/rule"
)

// The flow rules TestFixtures runs against, in order (the first match
// decides). Their destinations are nobody else's in the fixtures.
var fixtureFlowRules = []string{
	"dst 198.18.0.0/24 proto udp sport 53 drop",                       // 0: reflection
	"dst 198.18.0.0/24 proto tcp dport 80 flags S/SA syn-cookie",      // 1
	"dst 198.18.0.0/24 proto udp dport 9000-9100 length 0-100 drop",   // 2
	"dst 198.18.0.0/24 frag later drop",                               // 3
	"dst 198.18.1.0/24 proto udp rate-limit 1",                        // 4
	"dst 198.18.2.0/24 proto udp drop bypass-known-good",              // 5
	"dst 198.18.3.0/24 proto udp rate-limit 1 bypass-known-good",      // 6
	"dst 2001:db8:f10::/48 proto udp sport 123 drop",                  // 7
	"dst 2001:db8:f11::/48 proto udp drop bypass-known-good",          // 8
	"dst 198.18.0.0/23 proto udp rate-limit 4000000000",               // 9: passes all
	"dst 2001:db8:f12::/48 proto tcp flags S/SA length 0-60 drop",     // 10
	"dst 2001:db8:f12::/48 proto tcp dport 443 flags S/SA syn-cookie", // 11
}

var knownGood = []string{"10.7.7.7", "2001:db8:600d::7"}

func mustFlowRules(t *testing.T, ss []string) []rule.FlowRule {
	t.Helper()
	var out []rule.FlowRule
	for _, s := range ss {
		r, err := rule.ParseFlowRule(strings.Fields(s))
		if err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		out = append(out, r)
	}
	return out
}

func mustAddrs(t *testing.T, ss []string) []netip.Addr {
	t.Helper()
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

// flowRuleName names fixture flow rule i as observe does: by its String.
func flowRuleName(i int) string {
	r, err := rule.ParseFlowRule(strings.Fields(fixtureFlowRules[i]))
	if err != nil {
		panic(err)
	}
	return r.String()
}

type flowPkt struct {
	src, dst     string
	proto        uint8
	sport, dport uint16
	flags        uint8
	payload      int  // bytes of payload; 0: "tierwall", -1: none
	first, later bool // first fragment (MF), later fragment (offset)
	vlan         bool
}

func (f flowPkt) build() []byte {
	src, dst := netip.MustParseAddr(f.src), netip.MustParseAddr(f.dst)
	fr := pkt.Frame{DstMAC: dstMAC, SrcMAC: srcMAC, Src: src, Dst: dst, Proto: f.proto,
		SrcPort: f.sport, DstPort: f.dport, TCPFlags: f.flags, Payload: []byte("tierwall")}
	switch {
	case f.payload > 0:
		fr.Payload = make([]byte, f.payload)
	case f.payload < 0:
		fr.Payload = nil
	}
	if f.vlan {
		fr.VLANs, fr.QinQ = []uint16{100, 10}, true
	}
	fr.MoreFragments = f.first
	if f.later {
		fr.FragOffset = 185
	}
	if (f.first || f.later) && src.Is6() {
		fr.Ext = []uint8{pkt.ExtFragment}
	}
	return fr.Build()
}

// primeAll empties a rate-limit rule's bucket on every CPU: the rule
// admits one packet per CPU (rate 1 pps, a burst of one), then the next
// only after nr_cpus seconds.
func primeAll(frame []byte) func(t *testing.T, d *Datapath) {
	return func(t *testing.T, d *Datapath) {
		for cpu := 0; cpu < int(d.sizes.ncpu); cpu++ {
			onCPU(t, cpu, func() {
				if _, err := d.Program().Run(&ebpf.RunOptions{Data: frame, Repeat: 3}); err != nil {
					t.Errorf("priming: %v", err)
				}
			})
		}
	}
}

func flowFixtures() []fixture {
	const (
		clean  = "10.9.9.9"
		clean6 = "2001:db8:c1ea::1"
		victim = "198.18.0.10"
	)
	udp, tcp := uint8(pkt.ProtoUDP), uint8(pkt.ProtoTCP)
	syn, synack := uint8(pkt.TCPFlagSYN), uint8(pkt.TCPFlagSYN|pkt.TCPFlagACK)
	cases := []struct {
		name   string
		p      flowPkt
		reason string
		rule   string // "" for none
	}{
		{"reflection", flowPkt{src: clean, dst: victim, proto: udp, sport: 53, dport: 4444}, "drop_flow", flowRuleName(0)},
		{"reflection/qinq", flowPkt{src: clean, dst: victim, proto: udp, sport: 53, dport: 4444, vlan: true}, "drop_flow", flowRuleName(0)},
		// Source lists come first: a blocked source is dropped as
		// such, an allowlisted one passes whatever the flow rules say.
		{"reflection/blocked-source", flowPkt{src: "192.0.2.1", dst: victim, proto: udp, sport: 53}, "drop_exact", "192.0.2.1/32"},
		{"reflection/allowlisted-source", flowPkt{src: "203.0.113.7", dst: victim, proto: udp, sport: 53}, "allowlisted", "203.0.113.0/24"},
		// IPv4 rules catch IPv6 packets to the IPv4-mapped destination,
		// from native and from mapped sources, but not a native IPv6
		// destination that merely ends in the same 32 bits.
		{"reflection/mapped-dst", flowPkt{src: clean6, dst: "::ffff:" + victim, proto: udp, sport: 53}, "drop_flow", flowRuleName(0)},
		{"reflection/mapped-src-and-dst", flowPkt{src: "::ffff:" + clean, dst: "::ffff:" + victim, proto: udp, sport: 53}, "drop_flow", flowRuleName(0)},
		{"reflection/ipv6-lookalike-dst", flowPkt{src: clean6, dst: "2001:db8::c612:a", proto: udp, sport: 53}, "pass", ""},
		{"reflection/compat-dst", flowPkt{src: clean6, dst: "::" + victim, proto: udp, sport: 53}, "pass", ""},
		// First match: not rule 0 (port), so the wide rate limit.
		{"first-match/falls-through", flowPkt{src: clean, dst: victim, proto: udp, sport: 54, dport: 53}, "pass", flowRuleName(9)},
		{"syn-cookie/no-proxy", flowPkt{src: clean, dst: victim, proto: tcp, sport: 40000, dport: 80, flags: syn}, "synproxy_missing", flowRuleName(1)},
		{"syn-cookie/synack", flowPkt{src: clean, dst: victim, proto: tcp, sport: 40000, dport: 80, flags: synack}, "pass", ""},
		{"syn-cookie/other-port", flowPkt{src: clean, dst: victim, proto: tcp, sport: 40000, dport: 81, flags: syn}, "pass", ""},
		{"port-range/short", flowPkt{src: clean, dst: victim, proto: udp, sport: 1000, dport: 9050}, "drop_flow", flowRuleName(2)},
		{"port-range/edge", flowPkt{src: clean, dst: victim, proto: udp, sport: 1000, dport: 9100}, "drop_flow", flowRuleName(2)},
		{"port-range/outside", flowPkt{src: clean, dst: victim, proto: udp, sport: 1000, dport: 9101}, "pass", flowRuleName(9)},
		{"length/long", flowPkt{src: clean, dst: victim, proto: udp, sport: 1000, dport: 9050, payload: 200}, "pass", flowRuleName(9)},
		// Ports are matched in unfragmented packets and first
		// fragments, never in later ones (which carry none); "frag
		// later" is what catches those.
		{"fragment/first-has-ports", flowPkt{src: clean, dst: victim, proto: udp, sport: 53, first: true}, "drop_flow", flowRuleName(0)},
		{"fragment/later", flowPkt{src: clean, dst: victim, proto: udp, later: true}, "drop_flow", flowRuleName(3)},
		{"fragment/later-mapped-dst", flowPkt{src: clean6, dst: "::ffff:" + victim, proto: udp, later: true}, "drop_flow", flowRuleName(3)},
		{"ipv6/reflection", flowPkt{src: clean6, dst: "2001:db8:f10::5", proto: udp, sport: 123}, "drop_flow", flowRuleName(7)},
		{"ipv6/first-fragment", flowPkt{src: clean6, dst: "2001:db8:f10::5", proto: udp, sport: 123, first: true}, "drop_flow", flowRuleName(7)},
		{"ipv6/later-fragment-no-ports", flowPkt{src: clean6, dst: "2001:db8:f10::5", proto: udp, later: true}, "pass", ""},
		{"ipv6/other-port", flowPkt{src: clean6, dst: "2001:db8:f10::5", proto: udp, sport: 124}, "pass", ""},
		// TCP flags and length: a bare SYN to f12 is 60 bytes of IPv6
		// (header and TCP header), one with a payload is longer.
		{"ipv6/syn-short", flowPkt{src: clean6, dst: "2001:db8:f12::5", proto: tcp, sport: 1, dport: 443, flags: syn, payload: -1}, "drop_flow", flowRuleName(10)},
		{"ipv6/syn-long", flowPkt{src: clean6, dst: "2001:db8:f12::5", proto: tcp, sport: 1, dport: 443, flags: syn}, "synproxy_missing", flowRuleName(11)},
		{"ipv6/ack", flowPkt{src: clean6, dst: "2001:db8:f12::5", proto: tcp, sport: 1, dport: 443, flags: pkt.TCPFlagACK, payload: -1}, "pass", ""},
		{"known-good/drop-rule", flowPkt{src: "10.7.7.7", dst: "198.18.2.5", proto: udp, sport: 1, dport: 2}, "pass_known_good", flowRuleName(5)},
		{"known-good/mapped-source", flowPkt{src: "::ffff:10.7.7.7", dst: "198.18.2.5", proto: udp, sport: 1, dport: 2}, "pass_known_good", flowRuleName(5)},
		{"known-good/unknown-source", flowPkt{src: clean, dst: "198.18.2.5", proto: udp, sport: 1, dport: 2}, "drop_flow", flowRuleName(5)},
		{"known-good/ipv6", flowPkt{src: "2001:db8:600d::7", dst: "2001:db8:f11::1", proto: udp, sport: 1, dport: 2}, "pass_known_good", flowRuleName(8)},
		{"known-good/ipv6-unknown", flowPkt{src: clean6, dst: "2001:db8:f11::1", proto: udp, sport: 1, dport: 2}, "drop_flow", flowRuleName(8)},
	}
	var out []fixture
	for _, c := range cases {
		out = append(out, fixture{name: "flow/" + c.name, frame: c.p.build(), reason: c.reason, rule: c.rule})
	}
	// Rate limits: over the bucket on every CPU, the next packet is
	// dropped; a known-good source bypasses the bucket altogether.
	over := flowPkt{src: clean, dst: "198.18.1.5", proto: udp, sport: 1, dport: 2}.build()
	out = append(out, fixture{name: "flow/rate-limit/over", frame: over, reason: "drop_flow_rate",
		rule: flowRuleName(4), before: primeAll(over)})
	good := flowPkt{src: "10.7.7.7", dst: "198.18.3.5", proto: udp, sport: 1, dport: 2}.build()
	out = append(out, fixture{name: "flow/rate-limit/known-good", frame: good, reason: "pass_known_good",
		rule: flowRuleName(6), before: primeAll(good)})
	return out
}
