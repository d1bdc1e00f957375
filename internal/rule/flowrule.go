// SPDX-License-Identifier: Apache-2.0

package rule

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/tierwall/tierwall/internal/enum"
)

// A FlowRule matches traffic by what it is sent to and what it looks like,
// not by who sends it: the rule for floods whose sources are spoofed or
// countless. Its match fields and actions are those of BGP FlowSpec
// (RFC 8955 for IPv4, RFC 8956 for IPv6) on purpose, so that the same rule
// can be announced upstream. A zero field matches anything.
type FlowRule struct {
	// Dst is the destination prefix (FlowSpec type 1); required, so that
	// a rule never covers more than the victim.
	Dst netip.Prefix `json:"dst"`
	// Proto is the IP protocol (type 3), 0 for any.
	Proto uint8 `json:"proto,omitempty"`
	// DstPorts and SrcPorts are inclusive port ranges (types 5 and 6);
	// the zero range matches any port, and a range only matches TCP and
	// UDP packets.
	DstPorts PortRange `json:"dst_ports,omitzero"`
	SrcPorts PortRange `json:"src_ports,omitzero"`
	// TCPFlags matches (flags & Mask) == Value (type 9); Mask 0: any.
	TCPFlags TCPFlagMatch `json:"tcp_flags,omitzero"`
	// Length is the IP packet length, inclusive (type 10).
	Length Range16 `json:"length,omitzero"`
	// Fragment selects fragments (type 12).
	Fragment FragmentMatch `json:"fragment,omitempty"`

	Action FlowAction `json:"action"`
	// RatePPS is the packets per second a RateLimit rule lets through in
	// all (FlowSpec's traffic-rate action counts bytes; tierwall limits
	// packets, which is what costs a host, and announces the byte rate
	// at the rule's packet size).
	RatePPS uint64 `json:"rate_pps,omitempty"`
	// KnownGoodBypass lets sources on the known-good list (clients that
	// completed a TCP handshake, or were steady before the attack) pass
	// whatever the action.
	KnownGoodBypass bool `json:"known_good_bypass,omitempty"`
}

// FlowAction is what a FlowRule does with the packets it matches.
type FlowAction uint8

const (
	FlowDrop      FlowAction = iota + 1 // drop them all (FlowSpec traffic-rate 0)
	FlowRateLimit                       // pass RatePPS, drop the rest
	FlowSYNCookie                       // answer SYNs with cookies in XDP; pass only validated ACKs (TCP only)
)

var flowActionNames = enum.New("flow action", ErrInvalid, map[FlowAction]string{
	FlowDrop: "drop", FlowRateLimit: "rate-limit", FlowSYNCookie: "syn-cookie",
})

func (a FlowAction) String() string { return flowActionNames.String(a) }

// MarshalText and UnmarshalText make actions readable in JSON and YAML.
func (a FlowAction) MarshalText() ([]byte, error) { return flowActionNames.Marshal(a) }

func (a *FlowAction) UnmarshalText(b []byte) error { return flowActionNames.Unmarshal(a, b) }

// PortRange is an inclusive range of ports; the zero value is any port.
type PortRange struct {
	Lo uint16 `json:"lo"`
	Hi uint16 `json:"hi"`
}

// Any reports whether r matches every port.
func (r PortRange) Any() bool { return r == PortRange{} }

// Contains reports whether port p is in r.
func (r PortRange) Contains(p uint16) bool { return r.Any() || (p >= r.Lo && p <= r.Hi) }

func (r PortRange) String() string {
	if r.Lo == r.Hi {
		return strconv.Itoa(int(r.Lo))
	}
	return fmt.Sprintf("%d-%d", r.Lo, r.Hi)
}

// Range16 is an inclusive range of packet lengths; the zero value is any.
type Range16 struct {
	Lo uint16 `json:"lo"`
	Hi uint16 `json:"hi"`
}

// Any reports whether r matches every length.
func (r Range16) Any() bool { return r == Range16{} }

// TCPFlagMatch matches when (flags & Mask) == Value.
type TCPFlagMatch struct {
	Mask  uint8 `json:"mask"`
	Value uint8 `json:"value"`
}

// FragmentMatch selects packets by fragmentation (FlowSpec type 12's
// is-fragment and first-fragment bits, as one choice).
type FragmentMatch uint8

const (
	FragAny     FragmentMatch = iota // fragmented or not
	FragNone                         // only unfragmented packets
	FragAnyFrag                      // any fragment (first or later)
	FragLater                        // non-first fragments, which carry no ports
)

var fragNames = map[FragmentMatch]string{FragAny: "", FragNone: "none", FragAnyFrag: "fragment", FragLater: "later"}

// TCP flag bits.
const (
	TCPFin = 0x01
	TCPSyn = 0x02
	TCPRst = 0x04
	TCPAck = 0x10
)

// Check rejects a rule the data plane could not apply as its operator
// meant it.
func (r *FlowRule) Check() error {
	if err := CheckPrefix(r.Dst); err != nil {
		return fmt.Errorf("flow rule destination: %w", err)
	}
	switch {
	case r.Dst.Addr().Is4() && r.Dst.Bits() < 8, r.Dst.Addr().Is6() && r.Dst.Bits() < 16:
		// A rule is for a victim, not for the Internet: a typo here
		// would rate-limit everything.
		return fmt.Errorf("%w: flow rule destination %s is wider than /8 (IPv4) or /16 (IPv6)", ErrInvalid, r.Dst)
	case r.DstPorts.Lo > r.DstPorts.Hi, r.SrcPorts.Lo > r.SrcPorts.Hi:
		return fmt.Errorf("%w: flow rule port range is empty", ErrInvalid)
	case (!r.DstPorts.Any() || !r.SrcPorts.Any()) && r.Proto != 6 && r.Proto != 17:
		return fmt.Errorf("%w: flow rule ports need proto tcp (6) or udp (17)", ErrInvalid)
	case r.TCPFlags.Mask != 0 && r.Proto != 6:
		return fmt.Errorf("%w: flow rule TCP flags need proto tcp (6)", ErrInvalid)
	case r.TCPFlags.Value&^r.TCPFlags.Mask != 0:
		return fmt.Errorf("%w: flow rule TCP flag value %#x has bits outside its mask %#x", ErrInvalid, r.TCPFlags.Value, r.TCPFlags.Mask)
	case r.Length.Lo > r.Length.Hi:
		return fmt.Errorf("%w: flow rule length range is empty", ErrInvalid)
	case r.Fragment > FragLater:
		return fmt.Errorf("%w: flow rule fragment match %d", ErrInvalid, r.Fragment)
	case r.Fragment == FragLater && (!r.DstPorts.Any() || !r.SrcPorts.Any() || r.TCPFlags.Mask != 0):
		return fmt.Errorf("%w: later fragments carry no ports or flags to match", ErrInvalid)
	}
	switch r.Action {
	case FlowDrop:
		if r.RatePPS != 0 {
			return fmt.Errorf("%w: a drop rule has no rate", ErrInvalid)
		}
	case FlowRateLimit:
		if r.RatePPS == 0 {
			return fmt.Errorf("%w: a rate-limit rule needs a rate above 0 (use drop)", ErrInvalid)
		}
	case FlowSYNCookie:
		if r.Proto != 6 || r.RatePPS != 0 {
			return fmt.Errorf("%w: syn-cookie rules are TCP (proto 6) without a rate", ErrInvalid)
		}
	default:
		return fmt.Errorf("%w: flow rule action %d", ErrInvalid, r.Action)
	}
	return nil
}

// Match is the same test as the data plane's, for tests, simulations and
// the ladder's look at what a rule would catch. src and dst are the
// packet's addresses (IPv4-mapped sources already unmapped); sport and
// dport are 0 where the packet has none.
func (r *FlowRule) Match(dst netip.Addr, proto uint8, sport, dport uint16, flags uint8, length uint16, frag FragmentMatch) bool {
	if !r.Dst.Contains(dst.Unmap()) && !r.Dst.Contains(dst) {
		return false
	}
	if r.Proto != 0 && r.Proto != proto {
		return false
	}
	hasPorts := (proto == 6 || proto == 17) && frag != FragLater
	if (!r.DstPorts.Any() || !r.SrcPorts.Any()) && !hasPorts {
		return false
	}
	if !r.DstPorts.Contains(dport) || !r.SrcPorts.Contains(sport) {
		return false
	}
	if r.TCPFlags.Mask != 0 && (proto != 6 || frag == FragLater || flags&r.TCPFlags.Mask != r.TCPFlags.Value) {
		return false
	}
	if !r.Length.Any() && (length < r.Length.Lo || length > r.Length.Hi) {
		return false
	}
	switch r.Fragment {
	case FragNone:
		return frag == FragNone || frag == FragAny
	case FragAnyFrag:
		return frag == FragAnyFrag || frag == FragLater
	case FragLater:
		return frag == FragLater
	}
	return true
}

// String is the rule in ParseFlowRule's syntax.
func (r FlowRule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "dst %s", r.Dst)
	if r.Proto != 0 {
		fmt.Fprintf(&b, " proto %s", ProtoName(r.Proto))
	}
	if !r.DstPorts.Any() {
		fmt.Fprintf(&b, " dport %s", r.DstPorts)
	}
	if !r.SrcPorts.Any() {
		fmt.Fprintf(&b, " sport %s", r.SrcPorts)
	}
	if r.TCPFlags.Mask != 0 {
		fmt.Fprintf(&b, " flags %s/%s", flagNames(r.TCPFlags.Value), flagNames(r.TCPFlags.Mask))
	}
	if !r.Length.Any() {
		fmt.Fprintf(&b, " length %d-%d", r.Length.Lo, r.Length.Hi)
	}
	if r.Fragment != FragAny {
		fmt.Fprintf(&b, " frag %s", fragNames[r.Fragment])
	}
	fmt.Fprintf(&b, " %s", r.Action)
	if r.Action == FlowRateLimit {
		fmt.Fprintf(&b, " %d", r.RatePPS)
	}
	if r.KnownGoodBypass {
		b.WriteString(" bypass-known-good")
	}
	return b.String()
}

// ProtoName is an IP protocol's name as rules and the NIC tier print it
// (tcp, udp, icmp, icmpv6), else its number.
func ProtoName(p uint8) string {
	switch p {
	case 6:
		return "tcp"
	case 17:
		return "udp"
	case 1:
		return "icmp"
	case 58:
		return "icmpv6"
	}
	return strconv.Itoa(int(p))
}

var flagLetters = []struct {
	bit    uint8
	letter byte
}{{TCPFin, 'F'}, {TCPSyn, 'S'}, {TCPRst, 'R'}, {0x08, 'P'}, {TCPAck, 'A'}, {0x20, 'U'}, {0x40, 'E'}, {0x80, 'C'}}

func flagNames(f uint8) string {
	if f == 0 {
		return "0"
	}
	var b []byte
	for _, l := range flagLetters {
		if f&l.bit != 0 {
			b = append(b, l.letter)
		}
	}
	return string(b)
}

func parseFlags(s string) (uint8, error) {
	if s == "0" {
		return 0, nil
	}
	var f uint8
	for i := 0; i < len(s); i++ {
		ok := false
		for _, l := range flagLetters {
			if s[i] == l.letter {
				f |= l.bit
				ok = true
			}
		}
		if !ok {
			return 0, fmt.Errorf("%w: TCP flag %q: want letters of FSRPAUEC", ErrInvalid, s[i])
		}
	}
	return f, nil
}

func parseRange(s, what string) (lo, hi uint16, err error) {
	a, b, isRange := strings.Cut(s, "-")
	if !isRange {
		b = a
	}
	x, err1 := strconv.ParseUint(a, 10, 16)
	y, err2 := strconv.ParseUint(b, 10, 16)
	if err1 != nil || err2 != nil || x > y {
		return 0, 0, fmt.Errorf("%w: %s %q: want N or LO-HI within 0-65535", ErrInvalid, what, s)
	}
	return uint16(x), uint16(y), nil
}

// ParseFlowRule reads a rule from words, as typed on the command line:
//
//	dst 198.51.100.7/32 proto udp sport 53 rate-limit 1000 bypass-known-good
//	dst 2001:db8::/64 proto tcp dport 80 flags S/SA syn-cookie
//	dst 198.51.100.0/24 proto udp length 0-64 frag none drop
//
// It returns a checked rule or an error naming the bad word.
func ParseFlowRule(words []string) (FlowRule, error) {
	var r FlowRule
	next := func(i int, what string) (string, error) {
		if i+1 >= len(words) {
			return "", fmt.Errorf("%w: %s needs a value", ErrInvalid, what)
		}
		return words[i+1], nil
	}
	for i := 0; i < len(words); i++ {
		w := words[i]
		switch w {
		case "dst", "proto", "dport", "sport", "flags", "length", "frag", "rate-limit":
			v, err := next(i, w)
			if err != nil {
				return r, err
			}
			i++
			if err := r.set(w, v); err != nil {
				return r, err
			}
		case "drop":
			r.Action = FlowDrop
		case "syn-cookie":
			r.Action = FlowSYNCookie
		case "bypass-known-good":
			r.KnownGoodBypass = true
		default:
			return r, fmt.Errorf("%w: flow rule: unknown word %q", ErrInvalid, w)
		}
	}
	if !r.Dst.IsValid() {
		return r, fmt.Errorf("%w: flow rule needs dst PREFIX", ErrInvalid)
	}
	return r, r.Check()
}

func (r *FlowRule) set(w, v string) error {
	switch w {
	case "dst":
		p, err := Parse(v)
		if err != nil {
			return err
		}
		r.Dst = p
	case "proto":
		switch v {
		case "tcp":
			r.Proto = 6
		case "udp":
			r.Proto = 17
		case "icmp":
			r.Proto = 1
		case "icmpv6":
			r.Proto = 58
		default:
			n, err := strconv.ParseUint(v, 10, 8)
			if err != nil || n == 0 {
				return fmt.Errorf("%w: proto %q: want tcp, udp, icmp, icmpv6 or 1-255", ErrInvalid, v)
			}
			r.Proto = uint8(n)
		}
	case "dport", "sport":
		lo, hi, err := parseRange(v, w)
		if err != nil {
			return err
		}
		if w == "dport" {
			r.DstPorts = PortRange{lo, hi}
		} else {
			r.SrcPorts = PortRange{lo, hi}
		}
	case "length":
		lo, hi, err := parseRange(v, w)
		if err != nil {
			return err
		}
		r.Length = Range16{lo, hi}
	case "flags":
		val, mask, ok := strings.Cut(v, "/")
		if !ok {
			return fmt.Errorf("%w: flags %q: want VALUE/MASK, e.g. S/SA", ErrInvalid, v)
		}
		fv, err := parseFlags(val)
		if err != nil {
			return err
		}
		fm, err := parseFlags(mask)
		if err != nil {
			return err
		}
		r.TCPFlags = TCPFlagMatch{Mask: fm, Value: fv}
	case "frag":
		for k, name := range fragNames {
			if name == v && k != FragAny {
				r.Fragment = k
				return nil
			}
		}
		return fmt.Errorf("%w: frag %q: want none, fragment or later", ErrInvalid, v)
	case "rate-limit":
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n == 0 {
			return fmt.Errorf("%w: rate-limit %q: want packets per second above 0", ErrInvalid, v)
		}
		r.Action, r.RatePPS = FlowRateLimit, n
	}
	return nil
}
