// SPDX-License-Identifier: Apache-2.0

package bgppeer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// FRR is a running FRR bgpd (8.4), alone: no zebra (-Z), so it installs
// nothing in the namespace's kernel tables and needs no other daemon
// (it logs that it cannot reach zebra and the table manager, and still
// marks directly received next hops valid); read back with vtysh on its
// own vty socket directory, so instances never clash with each other or
// a system FRR.
//
// What FRR 8.4 does with FlowSpec, seen through gobgpd:
//   - it refuses a numeric "!=" term (lt|gt) as "Bad flowspec format or
//     NLRI options not supported" and resets the session, dropping every
//     route of it; every other operator and component it takes;
//   - it prints AND and OR numeric terms alike (" , "), so Routes reads
//     them as AND (a range); bitmask terms keep it (",&" is AND);
//   - its FlowSpec JSON shows no communities, and traffic-rate without
//     its AS ("FS:rate 0.000000");
//   - it only receives FlowSpec: it cannot originate it.
type FRR struct {
	*proc
	o      Options
	vtyDir string
}

const frrBgpd = "/usr/lib/frr/bgpd"

// StartFRR writes frr.conf and runs bgpd in o.Netns.
func StartFRR(ctx context.Context, o Options) (*FRR, error) {
	if err := o.check(); err != nil {
		return nil, fmt.Errorf("frr: %w", err)
	}
	if len(o.StaticFlowSpec) > 0 {
		return nil, errors.New("frr: bgpd 8.4 originates no FlowSpec (it only receives it)")
	}
	dir, err := tempDir("frr")
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "frr.conf")
	if err := os.WriteFile(conf, []byte(frrConfig(o)), 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("frr config: %w", err)
	}
	args := []string{"-Z", "-S", "-f", conf, "-i", filepath.Join(dir, "bgpd.pid"), "--vty_socket", dir, "-P", "0", "--log", "stdout"}
	if o.LocalAddr.IsValid() {
		args = append(args, "-l", o.LocalAddr.String())
	}
	p, err := startProc(o.Netns, dir, frrBgpd, args...)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	f := &FRR{proc: p, o: o, vtyDir: dir}
	if err := p.waitReady(ctx, 15*time.Second, func(ctx context.Context) error {
		_, err := f.Vtysh(ctx, "show bgp summary json")
		return err
	}); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func frrConfig(o Options) string {
	var b strings.Builder
	fmt.Fprintf(&b, "frr defaults traditional\nhostname bgppeer\n!\nrouter bgp %d\n bgp router-id %s\n", o.ASN, o.RouterID)
	// 8.4 refuses eBGP routes without a policy (RFC 8212), and would wait
	// for zebra to validate networks.
	b.WriteString(" no bgp ebgp-requires-policy\n no bgp network import-check\n no bgp default ipv4-unicast\n")
	ns := o.neighbors()
	for _, n := range ns {
		fmt.Fprintf(&b, " neighbor %s remote-as %d\n", n.Addr, n.ASN)
		// The default connect timer is 120 s.
		fmt.Fprintf(&b, " neighbor %s timers connect 2\n", n.Addr)
		if o.Password != "" {
			fmt.Fprintf(&b, " neighbor %s password %s\n", n.Addr, o.Password)
		}
		if o.LocalAddr.IsValid() && o.LocalAddr.Is4() == n.Addr.Is4() {
			fmt.Fprintf(&b, " neighbor %s update-source %s\n", n.Addr, o.LocalAddr)
		}
	}
	for _, af := range []string{"ipv4 unicast", "ipv6 unicast", "ipv4 flowspec", "ipv6 flowspec"} {
		fmt.Fprintf(&b, " !\n address-family %s\n", af)
		for _, n := range ns {
			fmt.Fprintf(&b, "  neighbor %s activate\n", n.Addr)
			if n.RRClient {
				fmt.Fprintf(&b, "  neighbor %s route-reflector-client\n", n.Addr)
			}
		}
		b.WriteString(" exit-address-family\n")
	}
	b.WriteString("!\n")
	return b.String()
}

// Vtysh runs one vtysh command against this bgpd.
func (f *FRR) Vtysh(ctx context.Context, command string) (string, error) {
	out, err := output(ctx, "vtysh", "--vty_socket", f.vtyDir, "-c", command)
	return string(out), err
}

func (f *FRR) Close() error { return f.stop() }

func (f *FRR) Sessions(ctx context.Context) (map[netip.Addr]string, error) {
	out, err := f.Vtysh(ctx, "show bgp summary json")
	if err != nil {
		return nil, err
	}
	var sum map[string]struct {
		Peers map[string]struct {
			State string `json:"state"`
		} `json:"peers"`
	}
	if err := json.Unmarshal([]byte(out), &sum); err != nil {
		return nil, fmt.Errorf("show bgp summary json: %w", err)
	}
	m := map[netip.Addr]string{}
	// Every family lists the same sessions.
	for _, fam := range sum {
		for a, p := range fam.Peers {
			addr, err := netip.ParseAddr(a)
			if err != nil {
				return nil, fmt.Errorf("show bgp summary json: %w", err)
			}
			m[addr] = strings.ToLower(p.State)
		}
	}
	return m, nil
}

func (f *FRR) Established(ctx context.Context) (bool, error) {
	s, err := f.Sessions(ctx)
	return allEstablished(f.o.neighbors(), s), err
}

func (f *FRR) Routes(ctx context.Context, fam Family) ([]Route, error) {
	switch fam {
	case IPv4Unicast, IPv6Unicast:
		return f.unicast(ctx, fam)
	case IPv4FlowSpec, IPv6FlowSpec:
		return f.flowspec(ctx, fam)
	}
	return nil, fmt.Errorf("frr: family %q", fam)
}

// unicast reads show bgp ... json detail: in 8.4 a prefix's array
// starts with a header object, then one object per path.
func (f *FRR) unicast(ctx context.Context, fam Family) ([]Route, error) {
	afi := map[Family]string{IPv4Unicast: "ipv4", IPv6Unicast: "ipv6"}[fam]
	cmd := "show bgp " + afi + " unicast json detail"
	out, err := f.Vtysh(ctx, cmd)
	if err != nil {
		return nil, err
	}
	var t struct {
		Routes map[string][]struct {
			Community *struct {
				String string `json:"string"`
			} `json:"community"`
			LargeCommunity *struct {
				String string `json:"string"`
			} `json:"largeCommunity"`
			ExtCommunity *struct {
				String string `json:"string"`
			} `json:"extendedCommunity"`
			Nexthops []struct {
				IP    string `json:"ip"`
				Scope string `json:"scope"`
			} `json:"nexthops"`
			Peer *struct {
				PeerID string `json:"peerId"`
			} `json:"peer"`
		} `json:"routes"`
	}
	if err := json.Unmarshal([]byte(out), &t); err != nil {
		return nil, fmt.Errorf("%s: %w", cmd, err)
	}
	rs := []Route{}
	for prefix, paths := range t.Routes {
		for _, p := range paths {
			if p.Peer == nil || p.Peer.PeerID == "" || p.Peer.PeerID == "(unspec)" {
				continue // the header, or a route of its own
			}
			r := Route{Family: fam, NLRI: prefix}
			for _, nh := range p.Nexthops {
				if nh.Scope != "link-local" {
					r.NextHop = nh.IP
					break
				}
			}
			if p.Community != nil {
				r.Communities = frrCommunities(p.Community.String)
			}
			if p.LargeCommunity != nil {
				// "65000:666:1 4200000000:1:2": already canonical.
				r.LargeCommunities = strings.Fields(p.LargeCommunity.String)
			}
			if p.ExtCommunity != nil {
				r.ExtCommunities = frrExtCommunities(p.ExtCommunity.String)
			}
			rs = append(rs, r)
		}
	}
	return sortRoutes(rs), nil
}

func frrCommunities(s string) []string {
	var cs []string
	for _, c := range strings.Fields(s) {
		if n, ok := wellKnown[c]; ok {
			c = n
		}
		cs = append(cs, c)
	}
	return cs
}

// frrExtCommunities reads FRR's text: "FS:rate 0.000000" for
// traffic-rate (without its AS); others kept as shown.
func frrExtCommunities(s string) []string {
	var es []string
	for _, m := range regexp.MustCompile(`(\S+:\S+(?: [0-9.]+)?)`).FindAllString(s, -1) {
		if v, ok := strings.CutPrefix(m, "FS:rate "); ok {
			if r, err := strconv.ParseFloat(v, 32); err == nil {
				m = TrafficRate(float32(r))
			}
		}
		es = append(es, m)
	}
	return es
}

// flowspec reads show bgp ... flowspec detail json: 8.4 prints one JSON
// array per route, one after the other ([{match}, {"ecomlist": ...},
// {"time": ...}]). Its plain json has no extended communities.
func (f *FRR) flowspec(ctx context.Context, fam Family) ([]Route, error) {
	afi := map[Family]string{IPv4FlowSpec: "ipv4", IPv6FlowSpec: "ipv6"}[fam]
	cmd := "show bgp " + afi + " flowspec detail json"
	out, err := f.Vtysh(ctx, cmd)
	if err != nil {
		return nil, err
	}
	rs, err := decodeFRRFlowSpec(fam, out)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cmd, err)
	}
	return rs, nil
}

var frrFlowKeys = []struct {
	key string
	typ int
}{
	{"to", 1}, {"from", 2}, {"proto", 3}, {"port", 4}, {"dstp", 5}, {"srcp", 6},
	{"type", 7}, {"code", 8}, {"tcp", 9}, {"pktlen", 10}, {"dscp", 11}, {"pktfrag", 12}, {"flowlabel", 13},
}

func decodeFRRFlowSpec(fam Family, out string) ([]Route, error) {
	dec := json.NewDecoder(strings.NewReader(out))
	rs := []Route{}
	for {
		var objs []map[string]string
		if err := dec.Decode(&objs); err == io.EOF {
			break
		} else if err != nil {
			return nil, err
		}
		r := Route{Family: fam}
		var parts []string
		for _, o := range objs {
			if e, ok := o["ecomlist"]; ok {
				r.ExtCommunities = frrExtCommunities(e)
			}
			if c, ok := o["community"]; ok {
				r.Communities = frrCommunities(c)
			}
		}
		if len(objs) == 0 {
			continue
		}
		match := objs[0]
		for _, k := range frrFlowKeys {
			v, ok := match[k.key]
			if !ok {
				continue
			}
			name := componentNames[k.typ]
			if k.typ == 1 || k.typ == 2 {
				p, off, hasOff := strings.Cut(v, "/off ")
				if hasOff && strings.TrimSpace(off) != "0" {
					p += "/off " + strings.TrimSpace(off)
				}
				parts = append(parts, name+" "+p)
				continue
			}
			t, err := frrTerms(k.typ, v)
			if err != nil {
				return nil, err
			}
			parts = append(parts, name+" "+t)
		}
		r.NLRI = strings.Join(parts, " ")
		rs = append(rs, r)
	}
	return sortRoutes(rs), nil
}

// frrTerms reads FRR's "= 6 ", ">= 80 , <= 81 ", "=  2 &∋ ! 16". FRR
// 8.4 prints numeric terms joined by " , " whatever their AND bit (a
// range is what the speaker sends, so "," is read as AND), and bitmask
// terms as ",&" (AND) or "," (OR) then {=|∋}[ ! ]value: = all of, ∋ any
// of, ! negating.
func frrTerms(typ int, s string) (string, error) {
	if isBitmask(typ) {
		return frrBitmask(s)
	}
	var out []string
	for _, t := range strings.Split(s, ",") {
		t = strings.TrimSpace(t)
		if t == "" {
			continue
		}
		var op, v string
		for _, o := range []string{"!=", ">=", "<=", "=", ">", "<"} {
			if r, ok := strings.CutPrefix(t, o); ok {
				op, v = o, strings.TrimSpace(r)
				break
			}
		}
		if _, err := strconv.ParseUint(v, 10, 32); op == "" || err != nil {
			return "", fmt.Errorf("FlowSpec term %q of %q", t, s)
		}
		out = append(out, op+v)
	}
	return strings.Join(out, "&"), nil
}

var frrBitmaskTerm = regexp.MustCompile(`^\s*,?\s*([&|]?)\s*(=|∋)\s*(!?)\s*(\d+)\s*`)

func frrBitmask(s string) (string, error) {
	var b strings.Builder
	rest := s
	for first := true; strings.TrimSpace(rest) != ""; first = false {
		m := frrBitmaskTerm.FindStringSubmatch(rest)
		if m == nil {
			return "", fmt.Errorf("bitmask terms %q at %q", s, rest)
		}
		rest = rest[len(m[0]):]
		switch {
		case first:
		case m[1] == "&":
			b.WriteByte('&')
		default:
			b.WriteByte(',')
		}
		n, _ := strconv.ParseUint(m[4], 10, 16)
		pre := map[[2]string]string{{"∋", ""}: "", {"=", ""}: "=", {"∋", "!"}: "!", {"=", "!"}: "!="}[[2]string{m[2], m[3]}]
		fmt.Fprintf(&b, "%s0x%x", pre, n)
	}
	return b.String(), nil
}
