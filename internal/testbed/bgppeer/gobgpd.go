// SPDX-License-Identifier: Apache-2.0

package bgppeer

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Gobgpd is a running gobgpd, read back with the gobgp CLI over gRPC on
// 127.0.0.1 of its namespace (a non-default port, found free there).
type Gobgpd struct {
	*proc
	o    Options
	port int
}

// StartGobgpd writes gobgpd.toml and runs gobgpd in o.Netns.
func StartGobgpd(ctx context.Context, o Options) (*Gobgpd, error) {
	if err := o.check(); err != nil {
		return nil, fmt.Errorf("gobgpd: %w", err)
	}
	port, err := freePort(o.Netns)
	if err != nil {
		return nil, fmt.Errorf("gobgpd: %w", err)
	}
	dir, err := tempDir("gobgpd")
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "gobgpd.toml")
	if err := os.WriteFile(conf, []byte(gobgpdConfig(o)), 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("gobgpd config: %w", err)
	}
	p, err := startProc(o.Netns, dir, "gobgpd", "-f", conf, "-t", "toml", "-p",
		"--api-hosts", fmt.Sprintf("127.0.0.1:%d", port), "--pprof-disable")
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	g := &Gobgpd{proc: p, o: o, port: port}
	if err := p.waitReady(ctx, 15*time.Second, func(ctx context.Context) error {
		_, err := g.cli(ctx, "global", "-j")
		return err
	}); err != nil {
		g.Close()
		return nil, err
	}
	for _, s := range o.StaticFlowSpec {
		f := strings.Fields(s)
		if len(f) < 2 {
			g.Close()
			return nil, fmt.Errorf("gobgpd: static FlowSpec %q is not of the form FAMILY match MATCH then ACTION", s)
		}
		if _, err := g.cli(ctx, append([]string{"global", "rib", "-a", f[0], "add"}, f[1:]...)...); err != nil {
			g.Close()
			return nil, fmt.Errorf("gobgpd: static FlowSpec %q: %w", s, err)
		}
	}
	return g, nil
}

func gobgpdConfig(o Options) string {
	var b strings.Builder
	fmt.Fprintf(&b, "[global.config]\n  as = %d\n  router-id = %q\n  port = 179\n", o.ASN, o.RouterID)
	if o.LocalAddr.IsValid() {
		fmt.Fprintf(&b, "  local-address-list = [%q]\n", o.LocalAddr)
	}
	for _, n := range o.neighbors() {
		fmt.Fprintf(&b, "\n[[neighbors]]\n  [neighbors.config]\n    neighbor-address = %q\n    peer-as = %d\n", n.Addr, n.ASN)
		if o.Password != "" {
			fmt.Fprintf(&b, "    auth-password = %q\n", o.Password)
		}
		// The default connect-retry is 120 s: a peer that starts after
		// us would wait that long.
		b.WriteString("  [neighbors.timers.config]\n    connect-retry = 2\n    idle-hold-time-after-reset = 2\n")
		if o.LocalAddr.IsValid() && o.LocalAddr.Is4() == n.Addr.Is4() {
			fmt.Fprintf(&b, "  [neighbors.transport.config]\n    local-address = %q\n", o.LocalAddr)
		}
		if n.RRClient {
			fmt.Fprintf(&b, "  [neighbors.route-reflector.config]\n    route-reflector-client = true\n    route-reflector-cluster-id = %q\n", o.RouterID)
		}
		for _, f := range Families {
			fmt.Fprintf(&b, "  [[neighbors.afi-safis]]\n    [neighbors.afi-safis.config]\n      afi-safi-name = %q\n", f)
		}
	}
	return b.String()
}

// cli runs gobgp against this gobgpd.
func (g *Gobgpd) cli(ctx context.Context, args ...string) ([]byte, error) {
	return output(ctx, "ip", append([]string{"netns", "exec", g.o.Netns, "gobgp", "-p", strconv.Itoa(g.port)}, args...)...)
}

// CLI runs gobgp with args against this gobgpd (for what Options do not
// cover: gobgp global rib add, neighbor reset).
func (g *Gobgpd) CLI(ctx context.Context, args ...string) (string, error) {
	out, err := g.cli(ctx, args...)
	return string(out), err
}

func (g *Gobgpd) Close() error { return g.stop() }

var gobgpStates = map[int]string{1: "idle", 2: "connect", 3: "active", 4: "opensent", 5: "openconfirm", 6: "established"}

func (g *Gobgpd) Sessions(ctx context.Context) (map[netip.Addr]string, error) {
	out, err := g.cli(ctx, "neighbor", "-j")
	if err != nil {
		return nil, err
	}
	var ns []struct {
		State struct {
			NeighborAddress string `json:"neighbor_address"`
			SessionState    int    `json:"session_state"`
		} `json:"state"`
	}
	if err := json.Unmarshal(out, &ns); err != nil {
		return nil, fmt.Errorf("gobgp neighbor -j: %w", err)
	}
	m := map[netip.Addr]string{}
	for _, n := range ns {
		a, err := netip.ParseAddr(n.State.NeighborAddress)
		if err != nil {
			return nil, fmt.Errorf("gobgp neighbor -j: %w", err)
		}
		m[a] = gobgpStates[n.State.SessionState]
		if m[a] == "" {
			m[a] = fmt.Sprintf("state %d", n.State.SessionState)
		}
	}
	return m, nil
}

func (g *Gobgpd) Established(ctx context.Context) (bool, error) {
	s, err := g.Sessions(ctx)
	return allEstablished(g.o.neighbors(), s), err
}

var gobgpFamilies = map[Family]string{IPv4Unicast: "ipv4", IPv6Unicast: "ipv6", IPv4FlowSpec: "ipv4-flowspec", IPv6FlowSpec: "ipv6-flowspec"}

// gobgpPath is what gobgp global rib -j shows of a path.
type gobgpPath struct {
	NLRI       json.RawMessage   `json:"nlri"`
	Attrs      []json.RawMessage `json:"attrs"`
	NeighborIP string            `json:"neighbor-ip"`
}

func (g *Gobgpd) Routes(ctx context.Context, f Family) ([]Route, error) {
	fam, ok := gobgpFamilies[f]
	if !ok {
		return nil, fmt.Errorf("gobgpd: family %q", f)
	}
	out, err := g.cli(ctx, "global", "rib", "-a", fam, "-j")
	if err != nil {
		return nil, err
	}
	rs, err := decodeGobgpRIB(f, out)
	if err != nil {
		return nil, fmt.Errorf("gobgp global rib -a %s -j: %w", fam, err)
	}
	return rs, nil
}

func decodeGobgpRIB(f Family, out []byte) ([]Route, error) {
	var rib map[string][]gobgpPath
	if err := json.Unmarshal(out, &rib); err != nil {
		return nil, err
	}
	rs := []Route{}
	for key, paths := range rib {
		for _, p := range paths {
			// Ours (StaticFlowSpec, gobgp global rib add) have no
			// neighbour.
			if p.NeighborIP == "" || p.NeighborIP == "<nil>" {
				continue
			}
			r := Route{Family: f}
			var err error
			if f == IPv4Unicast || f == IPv6Unicast {
				var n struct{ Prefix string }
				err = json.Unmarshal(p.NLRI, &n)
				r.NLRI = n.Prefix
			} else {
				r.NLRI, err = gobgpFlowNLRI(p.NLRI)
			}
			if err != nil {
				return nil, fmt.Errorf("%s: %w", key, err)
			}
			if err := gobgpAttrs(&r, p.Attrs); err != nil {
				return nil, fmt.Errorf("%s: %w", key, err)
			}
			rs = append(rs, r)
		}
	}
	return sortRoutes(rs), nil
}

func gobgpFlowNLRI(raw json.RawMessage) (string, error) {
	var n struct {
		Value []struct {
			Type   int             `json:"type"`
			Value  json.RawMessage `json:"value"`
			Offset int             `json:"offset"`
		} `json:"value"`
	}
	if err := json.Unmarshal(raw, &n); err != nil {
		return "", err
	}
	var parts []string
	for _, c := range n.Value {
		name := componentNames[c.Type]
		if name == "" {
			return "", fmt.Errorf("FlowSpec component type %d", c.Type)
		}
		switch c.Type {
		case 1, 2:
			var p struct{ Prefix string }
			if err := json.Unmarshal(c.Value, &p); err != nil {
				return "", err
			}
			v := p.Prefix
			if c.Offset != 0 {
				v += fmt.Sprintf("/off %d", c.Offset)
			}
			parts = append(parts, name+" "+v)
		default:
			var items []struct {
				Op    byte   `json:"op"`
				Value uint64 `json:"value"`
			}
			if err := json.Unmarshal(c.Value, &items); err != nil {
				return "", fmt.Errorf("component %s: %w", name, err)
			}
			ops, vals := make([]byte, len(items)), make([]uint64, len(items))
			for i, it := range items {
				ops[i], vals[i] = it.Op, it.Value
			}
			parts = append(parts, name+" "+terms(c.Type, ops, vals))
		}
	}
	return strings.Join(parts, " "), nil
}

func gobgpAttrs(r *Route, attrs []json.RawMessage) error {
	for _, raw := range attrs {
		var a struct {
			Type        int             `json:"type"`
			NextHop     string          `json:"nexthop"`
			Communities []uint32        `json:"communities"`
			Value       json.RawMessage `json:"value"`
		}
		if err := json.Unmarshal(raw, &a); err != nil {
			return fmt.Errorf("attribute: %w", err)
		}
		switch a.Type {
		case 3, 14: // NEXT_HOP, MP_REACH_NLRI
			if r.Family == IPv4Unicast || r.Family == IPv6Unicast {
				r.NextHop = a.NextHop
			}
		case 8:
			for _, c := range a.Communities {
				r.Communities = append(r.Communities, community(c))
			}
		case 32: // LARGE_COMMUNITY, RFC 8092
			var ls []struct{ ASN, LocalData1, LocalData2 uint32 }
			if err := json.Unmarshal(a.Value, &ls); err != nil {
				return fmt.Errorf("large communities: %w", err)
			}
			for _, l := range ls {
				r.LargeCommunities = append(r.LargeCommunities, fmt.Sprintf("%d:%d:%d", l.ASN, l.LocalData1, l.LocalData2))
			}
		case 16:
			var ecs []json.RawMessage
			if err := json.Unmarshal(a.Value, &ecs); err != nil {
				return fmt.Errorf("extended communities: %w", err)
			}
			for _, e := range ecs {
				var tr struct {
					Type    int     `json:"type"`
					Subtype int     `json:"subtype"`
					Rate    float32 `json:"rate"`
				}
				if err := json.Unmarshal(e, &tr); err != nil {
					return fmt.Errorf("extended community: %w", err)
				}
				if tr.Type == 0x80 && tr.Subtype == 0x06 {
					r.ExtCommunities = append(r.ExtCommunities, TrafficRate(tr.Rate))
				} else {
					r.ExtCommunities = append(r.ExtCommunities, string(e))
				}
			}
		}
	}
	return nil
}
