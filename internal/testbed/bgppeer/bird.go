// SPDX-License-Identifier: Apache-2.0

package bgppeer

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Bird is a running BIRD 2, read back with birdc on its control socket.
//
// What BIRD 2.0.12 needs and does: FlowSpec tables must be declared (there
// are no default ones); it has no FlowSpec action keywords, so traffic-rate
// is written as a generic extended community (0x8006xxxx, the rate's
// float32 bits); on a directly connected eBGP session it refuses a
// NEXT_HOP that is not on the link ("not directly reachable") and drops
// the route, so an RTBH discard next hop only stays with gateway
// recursive (as configured here: the route is kept, unreachable).
type Bird struct {
	*proc
	o    Options
	sock string
}

// BIRD has no default FlowSpec tables; these are the ones the generated
// configuration declares.
var birdTables = map[Family]string{IPv4Unicast: "master4", IPv6Unicast: "master6", IPv4FlowSpec: "flowtab4", IPv6FlowSpec: "flowtab6"}

// StartBird writes bird.conf and runs bird -f in o.Netns.
func StartBird(ctx context.Context, o Options) (*Bird, error) {
	if err := o.check(); err != nil {
		return nil, fmt.Errorf("bird: %w", err)
	}
	conf, err := birdConfig(o)
	if err != nil {
		return nil, err
	}
	dir, err := tempDir("bird")
	if err != nil {
		return nil, err
	}
	cf := filepath.Join(dir, "bird.conf")
	if err := os.WriteFile(cf, []byte(conf), 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("bird config: %w", err)
	}
	sock := filepath.Join(dir, "bird.ctl")
	p, err := startProc(o.Netns, dir, "bird", "-f", "-c", cf, "-s", sock, "-P", filepath.Join(dir, "bird.pid"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	b := &Bird{proc: p, o: o, sock: sock}
	if err := p.waitReady(ctx, 15*time.Second, func(ctx context.Context) error {
		out, err := b.Birdc(ctx, "show status")
		if err == nil && !strings.Contains(out, "Daemon is up and running") {
			err = fmt.Errorf("birdc show status: %s", out)
		}
		return err
	}); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

func birdConfig(o Options) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "router id %s;\nlog stderr all;\nflow4 table flowtab4;\nflow6 table flowtab6;\nprotocol device {}\n", o.RouterID)
	var static4, static6 []string
	for _, s := range o.StaticFlowSpec {
		s = strings.TrimSuffix(strings.TrimSpace(s), ";")
		// Without its own attributes a route is a discard rule; BIRD
		// 2.0.12 has no FlowSpec action keywords, the extended community
		// is written as generic (type 0x80, subtype 0x06, rate as a
		// float32: 0).
		if strings.Count(s, "{") < 2 {
			s += " { bgp_ext_community.add((generic, 0x80060000, 0)); }"
		}
		switch {
		case strings.HasPrefix(s, "flow4"):
			static4 = append(static4, s)
		case strings.HasPrefix(s, "flow6"):
			static6 = append(static6, s)
		default:
			return "", fmt.Errorf("bird: static FlowSpec %q is not flow4 { ... } or flow6 { ... }", s)
		}
	}
	for i, rs := range [][]string{static4, static6} {
		if len(rs) == 0 {
			continue
		}
		v := []string{"4", "6"}[i]
		fmt.Fprintf(&b, "protocol static static_flow%s {\n  flow%s { table flowtab%s; };\n", v, v, v)
		for _, r := range rs {
			fmt.Fprintf(&b, "  route %s;\n", r)
		}
		b.WriteString("}\n")
	}
	for i, n := range o.neighbors() {
		fmt.Fprintf(&b, "protocol bgp peer%d {\n", i)
		if o.LocalAddr.IsValid() && o.LocalAddr.Is4() == n.Addr.Is4() {
			fmt.Fprintf(&b, "  local %s as %d;\n", o.LocalAddr, o.ASN)
		} else {
			fmt.Fprintf(&b, "  local as %d;\n", o.ASN)
		}
		fmt.Fprintf(&b, "  neighbor %s as %d;\n", n.Addr, n.ASN)
		if o.Password != "" {
			fmt.Fprintf(&b, "  password %q;\n", o.Password)
		}
		if n.RRClient {
			b.WriteString("  rr client;\n")
		}
		// Defaults wait 120 s between attempts and up to 300 s after an
		// error: longer than any test.
		b.WriteString("  connect retry time 2;\n  error wait time 1, 4;\n")
		// Unicast (RTBH) routes carry a discard next hop that is not on
		// the link: resolved recursively they stay in the table
		// (unreachable) instead of being refused as a bad NEXT_HOP.
		b.WriteString("  ipv4 { import all; export none; gateway recursive; igp table master4; };\n")
		b.WriteString("  ipv6 { import all; export none; gateway recursive; igp table master6; };\n")
		b.WriteString("  flow4 { table flowtab4; import all; export all; };\n")
		b.WriteString("  flow6 { table flowtab6; import all; export all; };\n")
		b.WriteString("}\n")
	}
	return b.String(), nil
}

// Birdc runs one birdc command.
func (b *Bird) Birdc(ctx context.Context, command string) (string, error) {
	out, err := output(ctx, "birdc", append([]string{"-s", b.sock}, strings.Fields(command)...)...)
	return string(out), err
}

func (b *Bird) Close() error { return b.stop() }

func (b *Bird) Sessions(ctx context.Context) (map[netip.Addr]string, error) {
	m := map[netip.Addr]string{}
	for i, n := range b.o.neighbors() {
		out, err := b.Birdc(ctx, fmt.Sprintf("show protocols all peer%d", i))
		if err != nil {
			return nil, err
		}
		st := "unknown"
		for _, l := range strings.Split(out, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), "BGP state:"); ok {
				st = strings.ToLower(strings.TrimSpace(v))
				break
			}
		}
		m[n.Addr] = st
	}
	return m, nil
}

func (b *Bird) Established(ctx context.Context) (bool, error) {
	s, err := b.Sessions(ctx)
	return allEstablished(b.o.neighbors(), s), err
}

func (b *Bird) Routes(ctx context.Context, f Family) ([]Route, error) {
	t, ok := birdTables[f]
	if !ok {
		return nil, fmt.Errorf("bird: family %q", f)
	}
	out, err := b.Birdc(ctx, "show route all table "+t)
	if err != nil {
		return nil, err
	}
	rs, err := decodeBirdRoutes(f, out)
	if err != nil {
		return nil, fmt.Errorf("birdc show route all table %s: %w", t, err)
	}
	return rs, nil
}

// birdRouteLine starts a route: the network (a prefix, or flow4 { ... })
// or, for another path to the same network, blanks; then the route's
// type and "[protocol ...".
var birdRouteLine = regexp.MustCompile(`^(\S.*?|\s+)\s+(?:unicast|unreachable|blackhole|prohibited)?\s*\[(\S+) `)

// decodeBirdRoutes reads birdc's show route all: a route's first line,
// then tab-indented attributes ("Type: BGP univ", "BGP.next_hop: ...").
func decodeBirdRoutes(f Family, out string) ([]Route, error) {
	type entry struct {
		r   Route
		bgp bool
	}
	var es []*entry
	var cur *entry
	var net string
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "BIRD ") || strings.HasPrefix(l, "Table ") || strings.TrimSpace(l) == "" {
			continue
		}
		if strings.HasPrefix(l, "\t") && !birdRouteLine.MatchString(l) || strings.HasPrefix(l, "\tvia") {
			if cur == nil {
				return nil, fmt.Errorf("attribute before a route: %q", l)
			}
			k, v, _ := strings.Cut(strings.TrimSpace(l), ":")
			v = strings.TrimSpace(v)
			switch k {
			case "Type":
				cur.bgp = strings.HasPrefix(v, "BGP")
			case "BGP.next_hop":
				cur.r.NextHop = strings.Fields(v)[0] // IPv6: global, then link-local
			case "BGP.community":
				for _, c := range regexp.MustCompile(`\((\d+),(\d+)\)`).FindAllStringSubmatch(v, -1) {
					cur.r.Communities = append(cur.r.Communities, c[1]+":"+c[2])
				}
			case "BGP.large_community":
				// "(65000, 666, 1) (4200000000, 1, 2)"
				for _, c := range regexp.MustCompile(`\((\d+), *(\d+), *(\d+)\)`).FindAllStringSubmatch(v, -1) {
					cur.r.LargeCommunities = append(cur.r.LargeCommunities, c[1]+":"+c[2]+":"+c[3])
				}
			case "BGP.ext_community":
				for _, c := range regexp.MustCompile(`\(([^)]*)\)`).FindAllStringSubmatch(v, -1) {
					cur.r.ExtCommunities = append(cur.r.ExtCommunities, birdExtCommunity(c[1]))
				}
			}
			continue
		}
		m := birdRouteLine.FindStringSubmatch(l)
		if m == nil {
			return nil, fmt.Errorf("line %q", l)
		}
		if s := strings.TrimSpace(m[1]); s != "" {
			net = s
		}
		if net == "" {
			return nil, fmt.Errorf("path without a network: %q", l)
		}
		nlri := net
		if f == IPv4FlowSpec || f == IPv6FlowSpec {
			var err error
			if nlri, err = birdFlowNLRI(net); err != nil {
				return nil, err
			}
		}
		cur = &entry{r: Route{Family: f, NLRI: nlri}}
		es = append(es, cur)
	}
	rs := []Route{}
	for _, e := range es {
		if e.bgp {
			if f == IPv4FlowSpec || f == IPv6FlowSpec {
				e.r.NextHop = ""
			}
			rs = append(rs, e.r)
		}
	}
	return sortRoutes(rs), nil
}

// birdExtCommunity: traffic-rate is shown as generic: "generic,
// 0x8006XXXX, 0xRATE" (XXXX the AS, RATE the float32's bits).
func birdExtCommunity(s string) string {
	f := strings.Split(s, ",")
	if len(f) == 3 && strings.TrimSpace(f[0]) == "generic" {
		hi, err1 := strconv.ParseUint(strings.TrimSpace(f[1]), 0, 32)
		lo, err2 := strconv.ParseUint(strings.TrimSpace(f[2]), 0, 32)
		if err1 == nil && err2 == nil && hi>>16 == 0x8006 {
			return TrafficRate(math.Float32frombits(uint32(lo)))
		}
	}
	return "(" + s + ")"
}

var birdComponents = []struct {
	kw  string
	typ int
}{
	{"dst", 1}, {"src", 2}, {"proto", 3}, {"next header", 3}, {"port", 4}, {"dport", 5}, {"sport", 6},
	{"icmp type", 7}, {"icmp code", 8}, {"tcp flags", 9}, {"length", 10}, {"dscp", 11}, {"fragment", 12}, {"label", 13},
}

var birdFragBits = map[string]uint64{"dont_fragment": 1, "is_fragment": 2, "first_fragment": 4, "last_fragment": 8}

// birdFlowNLRI turns BIRD's "flow4 { dst 10.0.0.0/24; proto 17; dport
// 80..81; tcp flags !0x0/0x2; fragment is_fragment; }" into canonical
// form. BIRD shows a bitmask term as [!]value/mask (the ! negating):
// any of v is !0/v, all of v is v/v, none of v is 0/v, not all of v is
// !v/v; fragments by name (name: v/v, !name: 0/v).
func birdFlowNLRI(s string) (string, error) {
	open, close := strings.Index(s, "{"), strings.LastIndex(s, "}")
	if open < 0 || close < open {
		return "", fmt.Errorf("FlowSpec %q", s)
	}
	var parts []string
	for _, c := range strings.Split(s[open+1:close], ";") {
		c = strings.TrimSpace(c)
		if c == "" {
			continue
		}
		typ, name, rest := 0, "", ""
		for _, bc := range birdComponents {
			if r, ok := strings.CutPrefix(c, bc.kw+" "); ok {
				typ, name, rest = bc.typ, componentNames[bc.typ], strings.TrimSpace(r)
				break
			}
		}
		if typ == 0 {
			return "", fmt.Errorf("FlowSpec component %q of %q", c, s)
		}
		if typ == 1 || typ == 2 {
			p, off, hasOff := strings.Cut(rest, " offset ")
			v := p
			if hasOff && strings.TrimSpace(off) != "0" {
				v += "/off " + strings.TrimSpace(off)
			}
			parts = append(parts, name+" "+v)
			continue
		}
		v, err := birdTerms(typ, rest)
		if err != nil {
			return "", fmt.Errorf("FlowSpec %q: %w", s, err)
		}
		parts = append(parts, name+" "+v)
	}
	return strings.Join(parts, " "), nil
}

// birdTerms: terms joined by "&&" (AND) or "," / "||" (OR).
func birdTerms(typ int, s string) (string, error) {
	var b bytes.Buffer
	for i, or := range regexp.MustCompile(`\s*(?:,|\|\|)\s*`).Split(s, -1) {
		if i > 0 {
			b.WriteByte(',')
		}
		for j, t := range strings.Split(or, "&&") {
			if j > 0 {
				b.WriteByte('&')
			}
			t = strings.TrimSpace(t)
			var c string
			var err error
			if isBitmask(typ) {
				c, err = birdBitmask(typ, t)
			} else {
				c, err = birdNumeric(t)
			}
			if err != nil {
				return "", err
			}
			b.WriteString(c)
		}
	}
	return b.String(), nil
}

func birdNumeric(t string) (string, error) {
	if lo, hi, ok := strings.Cut(t, ".."); ok {
		return ">=" + strings.TrimSpace(lo) + "&<=" + strings.TrimSpace(hi), nil
	}
	for _, op := range []string{"!=", ">=", "<=", ">", "<", "="} {
		if v, ok := strings.CutPrefix(t, op); ok {
			return op + strings.TrimSpace(v), nil
		}
	}
	if _, err := strconv.ParseUint(t, 10, 32); err != nil {
		return "", fmt.Errorf("numeric term %q", t)
	}
	return "=" + t, nil
}

func birdBitmask(typ int, t string) (string, error) {
	neg := false
	if r, ok := strings.CutPrefix(t, "!"); ok {
		neg, t = true, r
	}
	var val, mask uint64
	if typ == 12 && !strings.Contains(t, "/") {
		name, zero := strings.CutPrefix(t, "!")
		bit, ok := birdFragBits[name]
		if !ok {
			return "", fmt.Errorf("fragment term %q", t)
		}
		mask = bit
		if !zero {
			val = bit
		}
	} else {
		v, m, ok := strings.Cut(t, "/")
		var err1, err2 error
		val, err1 = strconv.ParseUint(strings.TrimSpace(v), 0, 16)
		mask, err2 = strconv.ParseUint(strings.TrimSpace(m), 0, 16)
		if !ok || err1 != nil || err2 != nil {
			return "", fmt.Errorf("bitmask term %q", t)
		}
	}
	switch {
	case val == mask && !neg:
		return fmt.Sprintf("=0x%x", mask), nil
	case val == mask:
		return fmt.Sprintf("!=0x%x", mask), nil
	case val == 0 && neg:
		return fmt.Sprintf("0x%x", mask), nil
	case val == 0:
		return fmt.Sprintf("!0x%x", mask), nil
	case !neg && val&^mask == 0:
		// (flags & mask) == val: BIRD's fold of "all of val and none of
		// the rest".
		return fmt.Sprintf("=0x%x&!0x%x", val, mask&^val), nil
	}
	return "", fmt.Errorf("bitmask term %q has no canonical form", t)
}
