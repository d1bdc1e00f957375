// SPDX-License-Identifier: Apache-2.0

package config

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tierwall/tierwall/internal/control/bgp"
	"github.com/tierwall/tierwall/internal/control/detect"
	"github.com/tierwall/tierwall/internal/control/telemetry"
	"github.com/tierwall/tierwall/internal/rule"
)

// Telemetry is network mode (docs/NETWORK.md): detection from the routers'
// sFlow, NetFlow and IPFIX, and actions upstream through the BGP speaker.
type Telemetry struct {
	Enabled bool `yaml:"enabled"`
	// Listen: UDP addresses; each takes every protocol (default
	// ["0.0.0.0:6343", "0.0.0.0:2055"]: sFlow's and NetFlow's ports).
	Listen []string `yaml:"listen"`
	// Mode: enforce (announce), dry-run (plan and report) or monitor
	// (detect only).
	Mode      string              `yaml:"mode"`
	Exporters []TelemetryExporter `yaml:"exporters"`
	// Networks are the prefixes network mode protects (FastNetMon's
	// networks_list): only destinations inside them are judged. Default:
	// the host groups' prefixes and rails.protected; one of the three is
	// needed (telemetryNetworks).
	Networks []string `yaml:"networks"`
	// Bounds: templates per exporter, exporters, destinations tracked.
	MaxTemplates    int `yaml:"max_templates"`
	MaxExporters    int `yaml:"max_exporters"`
	MaxDestinations int `yaml:"max_destinations"`
	// Tick, Window, MinSamples and WithdrawAfter: see telemetry.DetectorConfig.
	Tick          time.Duration `yaml:"tick"`
	Window        time.Duration `yaml:"window"`
	MinSamples    float64       `yaml:"min_samples"`
	WithdrawAfter time.Duration `yaml:"withdraw_after"`
	// Thresholds per destination host, by kind: all, udp, tcp, syn, icmp,
	// frag, amp (every amplification port) or amp:PORT.
	Thresholds map[string]TelemetryLimits `yaml:"thresholds"`
	// Groups: network policy per host group (hostgroups:), by name.
	Groups   map[string]TelemetryGroup `yaml:"groups"`
	FlowSpec TelemetryFlowSpec         `yaml:"flowspec"`
	// Scaleout splits network mode over NATS JetStream (docs/SCALEOUT.md):
	// this daemon is one of its collectors or detectors (scaleout.go).
	Scaleout TelemetryScaleout `yaml:"scaleout"`
}

// TelemetryExporter is a router allowed to send telemetry.
type TelemetryExporter struct {
	Address      string `yaml:"address"`
	Name         string `yaml:"name"`
	SamplingRate uint32 `yaml:"sampling_rate"` // when its datagrams say none; the lower when they differ (Decoder.rate)
}

// TelemetryLimits: zero fields are not tested.
type TelemetryLimits struct {
	PPS     float64 `yaml:"pps"`
	BPS     float64 `yaml:"bps"` // bits/s
	FlowsPS float64 `yaml:"flows_ps"`
}

// TelemetryGroup is a host group's network policy.
type TelemetryGroup struct {
	Thresholds map[string]TelemetryLimits `yaml:"thresholds"` // per host
	Total      map[string]TelemetryLimits `yaml:"total"`      // over the group
	UplinkBPS  float64                    `yaml:"uplink_bps"` // RTBH above it (0: never)
	// Communities and LargeCommunities (RFC 8092) are added to the
	// group's RTBH routes, besides BLACKHOLE and bgp.announce's: the
	// group's uplinks may go to a provider with a blackhole community of
	// its own.
	Communities      []string `yaml:"communities"`
	LargeCommunities []string `yaml:"large_communities"`
	// Uplinks: the group's uplink interfaces (TelemetryUplink, below).
	Uplinks []TelemetryUplink `yaml:"uplinks"`
}

// TelemetryFlowSpec is the FlowSpec action of an attack's rule.
type TelemetryFlowSpec struct {
	Action  string `yaml:"action"` // rate-limit (default) or drop
	RatePPS uint64 `yaml:"rate_pps"`
}

// validateTelemetry checks the section by building it.
func (c *Config) validateTelemetry() error {
	if !c.Telemetry.Enabled {
		if c.Telemetry.Scaleout.Role != "" {
			return bad("telemetry.scaleout.role", c.Telemetry.Scaleout.Role, "needs telemetry.enabled: true")
		}
		return nil
	}
	// The role first: what the rest requires depends on it.
	if _, err := c.ScaleoutConfig(); err != nil {
		return err
	}
	_, err := c.TelemetryConfig()
	return err
}

func thresholds(field string, m map[string]TelemetryLimits) (telemetry.Thresholds, error) {
	var th telemetry.Thresholds
	// "amp" first, so that amp:PORT overrides it whatever the map order.
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	})
	for _, k := range keys {
		l := m[k]
		if l.PPS < 0 || l.BPS < 0 || l.FlowsPS < 0 {
			return th, bad(field+"."+k, fmt.Sprintf("%+v", l), "is negative")
		}
		tl := telemetry.Limits{PPS: l.PPS, BPS: l.BPS, FlowsPS: l.FlowsPS}
		if k == "amp" {
			for _, p := range telemetry.AmpPorts {
				kk, _ := telemetry.ParseKind(fmt.Sprintf("amp:%d", p))
				if _, own := m[kk.String()]; !own {
					th[kk] = tl
				}
			}
			continue
		}
		kind, err := telemetry.ParseKind(k)
		if err != nil {
			return th, bad(field+"."+k, k, strings.TrimPrefix(err.Error(), fmt.Sprintf("kind %q ", k)))
		}
		th[kind] = tl
	}
	return th, nil
}

// TelemetryConfig is network mode's configuration for package telemetry.
func (c *Config) TelemetryConfig() (telemetry.Config, error) {
	t := c.Telemetry
	var out telemetry.Config
	out.Listen = t.Listen
	if len(out.Listen) == 0 {
		out.Listen = []string{"0.0.0.0:6343", "0.0.0.0:2055"}
	}
	mode, err := telemetry.ParseMode(t.Mode)
	if err != nil {
		return out, bad("telemetry.mode", t.Mode, "is not enforce, dry-run or monitor")
	}
	role := t.Scaleout.Role
	if role == ScaleoutDetector {
		// A detector hears its collectors over the bus, never a router:
		// what would say otherwise is refused rather than ignored.
		if len(t.Listen) > 0 {
			return out, bad("telemetry.listen", fmt.Sprint(t.Listen), "is for collectors: a scaleout detector listens to no router (remove it)")
		}
		if len(t.Exporters) > 0 {
			return out, bad("telemetry.exporters", fmt.Sprintf("%d exporters", len(t.Exporters)), "are for collectors: a scaleout detector listens to no router (remove them)")
		}
		out.Listen = nil
	} else if len(t.Exporters) == 0 {
		return out, bad("telemetry.exporters", "[]", "needs at least one exporter: datagrams from others are ignored")
	}
	// Checked here, not first at start: a listen address the socket
	// cannot take passed --check and stopped the daemon.
	for i, l := range t.Listen {
		host, port, err := net.SplitHostPort(l)
		if err != nil {
			return out, bad(fmt.Sprintf("telemetry.listen[%d]", i), l, "is not host:port (e.g. 0.0.0.0:6343, [::]:6343)")
		}
		if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 && port != "0" {
			return out, bad(fmt.Sprintf("telemetry.listen[%d]", i), l, "has no UDP port (0-65535)")
		}
		if _, err := netip.ParseAddr(host); host != "" && err != nil {
			return out, bad(fmt.Sprintf("telemetry.listen[%d]", i), l, "needs an IP address or none (\":6343\": every address), not a name")
		}
	}
	for i, e := range t.Exporters {
		a, err := netip.ParseAddr(e.Address)
		if err != nil {
			return out, bad(fmt.Sprintf("telemetry.exporters[%d].address", i), e.Address, "is not an IP address")
		}
		out.Decoder.Exporters = append(out.Decoder.Exporters, telemetry.ExporterConfig{Address: a, Name: e.Name, SamplingRate: e.SamplingRate})
	}
	out.Decoder.MaxTemplates, out.Decoder.MaxExporters = t.MaxTemplates, t.MaxExporters
	for f, v := range map[string]int{"max_templates": t.MaxTemplates, "max_exporters": t.MaxExporters, "max_destinations": t.MaxDestinations} {
		if v < 0 || v > 1<<22 {
			return out, bad("telemetry."+f, v, "outside 0..4194304")
		}
	}
	if t.Tick < 0 || t.Window < 0 || t.WithdrawAfter < 0 || t.MinSamples < 0 {
		return out, bad("telemetry", fmt.Sprintf("tick=%v window=%v withdraw_after=%v min_samples=%v", t.Tick, t.Window, t.WithdrawAfter, t.MinSamples), "must not be negative")
	}
	if t.Tick > 0 && (t.Tick < 10*time.Millisecond || t.Tick > 10*time.Second) {
		return out, bad("telemetry.tick", t.Tick, "outside 10ms..10s")
	}
	out.Detector = telemetry.DetectorConfig{Tick: t.Tick, Window: t.Window, MinSamples: t.MinSamples,
		MaxDests: t.MaxDestinations, WithdrawAfter: t.WithdrawAfter, Policies: map[string]telemetry.GroupPolicy{}}
	if out.Detector.Host, err = thresholds("telemetry.thresholds", t.Thresholds); err != nil {
		return out, err
	}
	if out.Detector.Groups, err = c.DetectHostGroups(); err != nil {
		return out, err
	}
	if out.Detector.Protects, err = c.telemetryNetworks(); err != nil {
		return out, err
	}
	rtbh := map[string]telemetry.Communities{}
	for name, g := range t.Groups {
		f := "telemetry.groups." + name
		if !slices.ContainsFunc(c.HostGroups, func(h HostGroup) bool { return h.Name == name }) {
			return out, bad(f, name, "is not the name of a host group (hostgroups:)")
		}
		var p telemetry.GroupPolicy
		if p.Host, err = thresholds(f+".thresholds", g.Thresholds); err != nil {
			return out, err
		}
		if p.Total, err = thresholds(f+".total", g.Total); err != nil {
			return out, err
		}
		if g.UplinkBPS < 0 {
			return out, bad(f+".uplink_bps", g.UplinkBPS, "is negative")
		}
		p.UplinkBPS = g.UplinkBPS
		if p.Uplinks, err = telemetryUplinks(f+".uplinks", g.Uplinks, out.Decoder.Exporters, role == ScaleoutDetector); err != nil {
			return out, err
		}
		out.Detector.Policies[name] = p
		if err := fromBGP(bgp.CheckCommunities(f, g.Communities, g.LargeCommunities)); err != nil {
			return out, err
		}
		if len(g.Communities)+len(g.LargeCommunities) > 0 {
			if g.UplinkBPS == 0 && len(g.Uplinks) == 0 {
				return out, bad(f+".communities", fmt.Sprint(append(slices.Clone(g.Communities), g.LargeCommunities...)), "are for the group's RTBH routes, and without uplink_bps or uplinks it has none")
			}
			rtbh[name] = telemetry.Communities{Standard: slices.Clone(g.Communities), Large: slices.Clone(g.LargeCommunities)}
		}
	}
	out.Action = telemetry.ActionConfig{Mode: mode, RatePPS: t.FlowSpec.RatePPS, Policies: out.Detector.Policies, RTBH: rtbh}
	switch t.FlowSpec.Action {
	case "", "rate-limit":
		out.Action.FlowAction = rule.FlowRateLimit
	case "drop":
		out.Action.FlowAction = rule.FlowDrop
	default:
		return out, bad("telemetry.flowspec.action", t.FlowSpec.Action, "is not rate-limit or drop")
	}
	// A collector counts and publishes; its detectors judge, with theirs.
	if role != ScaleoutCollector && out.Detector.Host == (telemetry.Thresholds{}) && len(out.Detector.Policies) == 0 {
		return out, bad("telemetry.thresholds", "{}", "are empty: nothing would ever be detected")
	}
	return out, nil
}

// --- Uplink interfaces (sFlow counter samples) ---

// TelemetryUplink names one of a host group's uplinks: an interface of
// a configured exporter, by ifIndex. Without uplink_bps, the group's
// capacity is the sum of its uplinks' ifSpeed from their sFlow counter
// samples (docs/NETWORK.md, Uplink capacity).
type TelemetryUplink struct {
	Exporter string `yaml:"exporter"` // a configured exporter's name or address
	IfIndex  uint32 `yaml:"if_index"`
}

// telemetryUplinks resolves a group's uplinks against the exporters. A
// scale-out detector (byAddress) configures no exporter: its collectors
// hear them and report their interfaces over the bus, so it names each
// by address.
func telemetryUplinks(field string, ups []TelemetryUplink, exs []telemetry.ExporterConfig, byAddress bool) ([]telemetry.Uplink, error) {
	var out []telemetry.Uplink
	for i, u := range ups {
		f := fmt.Sprintf("%s[%d]", field, i)
		var addr netip.Addr
		if byAddress {
			a, err := netip.ParseAddr(u.Exporter)
			if err != nil {
				return nil, bad(f+".exporter", u.Exporter, "is not an IP address: a scaleout detector names an uplink's exporter by address (the names are its collectors')")
			}
			addr = a
		} else {
			j := slices.IndexFunc(exs, func(e telemetry.ExporterConfig) bool {
				return e.Name != "" && e.Name == u.Exporter || e.Address.String() == u.Exporter
			})
			if j < 0 {
				return nil, bad(f+".exporter", u.Exporter, "is not the name or address of a configured exporter (telemetry.exporters)")
			}
			addr = exs[j].Address
		}
		if u.IfIndex == 0 {
			return nil, bad(f+".if_index", u.IfIndex, "is not an ifIndex (they start at 1)")
		}
		up := telemetry.Uplink{Exporter: addr.Unmap(), IfIndex: u.IfIndex}
		if slices.Contains(out, up) {
			return nil, bad(f, fmt.Sprintf("%s ifIndex %d", u.Exporter, u.IfIndex), "is named twice")
		}
		out = append(out, up)
	}
	return out, nil
}

// telemetryNetworks is the lookup of the network network mode protects:
// telemetry.networks, else the host groups' prefixes and rails.protected.
// A network is required. Routers export what crosses them in both
// directions, and judged wherever it goes, a flood of spoofed SYNs "from"
// an address outside the network (a verified client of it, say) to its
// servers turned their SYN-ACKs into an attack on that address, which
// network mode then announced upstream: a FlowSpec rule on every packet
// to the client, replies included, or its blackhole.
func (c *Config) telemetryNetworks() (func(netip.Addr) bool, error) {
	var nets []netip.Prefix
	if len(c.Telemetry.Networks) > 0 {
		var err error
		if nets, err = prefixes("telemetry.networks", c.Telemetry.Networks); err != nil {
			return nil, err
		}
	} else {
		for _, g := range c.HostGroups {
			nets = append(nets, g.Parsed...)
		}
		nets = append(nets, c.Rails.ProtectedPrefixes...)
	}
	if len(nets) == 0 {
		return nil, bad("telemetry.networks", "[]", "needs the prefixes network mode protects (or host groups, or rails.protected): a destination outside them is not this network's to judge, and judging every one lets spoofed traffic aim the routers at any address")
	}
	seen := map[netip.Prefix]bool{}
	var uniq []netip.Prefix
	for _, p := range nets {
		if p = p.Masked(); p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		if !seen[p] {
			seen[p] = true
			uniq = append(uniq, p)
		}
	}
	// Asked for every record: a few prefixes (the common network) are
	// compared in turn, a few ns each, where the map's probe cost some
	// 40 ns, 8% of what a datagram of six records costs to ingest.
	if len(uniq) <= 8 {
		return func(a netip.Addr) bool {
			a = a.Unmap()
			for _, p := range uniq {
				if p.Contains(a) {
					return true
				}
			}
			return false
		}, nil
	}
	h, err := detect.NewHostGroups([]detect.HostGroup{{Name: "networks", Prefixes: uniq}})
	if err != nil {
		return nil, bad("telemetry.networks", fmt.Sprint(c.Telemetry.Networks), err.Error())
	}
	return func(a netip.Addr) bool { return h.Lookup(a) != nil }, nil
}
