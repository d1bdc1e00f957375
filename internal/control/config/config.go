// SPDX-License-Identifier: Apache-2.0

// Package config is the daemon's YAML configuration: parsing (unknown
// fields are errors), defaults, and validation whose errors name the field
// and the value, so an operator sees at once what to fix.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"reflect"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/tierwall/tierwall/internal/errdefs"
	"github.com/tierwall/tierwall/internal/rule"
)

// ErrInvalid wraps every configuration error.
// It is errdefs.ErrInvalid to errors.Is, as the CLI's exit code needs.
var ErrInvalid = errdefs.Invalid("invalid configuration")

// Config is the daemon's configuration.
type Config struct {
	Role      string        `yaml:"role"`      // mitigation (default), probe or network
	Interface string        `yaml:"interface"` // host interface carrying the XDP filter or the probe
	Interval  time.Duration `yaml:"interval"`  // control-loop period, 100ms..1m (default 1s)
	// Nice is the daemon's scheduling niceness, -20..19 (default -10):
	// the loop must run when it wakes, even with the host's CPUs busy,
	// or a flood's rule waits (daemon/priority.go).
	Nice      *int      `yaml:"nice"`
	StateFile string    `yaml:"state_file"`
	Log       Log       `yaml:"log"`
	Capacity  Capacity  `yaml:"capacity"`
	Hardware  Hardware  `yaml:"hardware"`
	Detectors Detectors `yaml:"detectors"`
	// HostGroups: per-network thresholds and actions (hostgroups.go).
	HostGroups []HostGroup `yaml:"hostgroups"`
	Bans       Bans        `yaml:"bans"`
	Rails      Rails       `yaml:"rails"`
	API        API         `yaml:"api"`
	Metrics    Metrics     `yaml:"metrics"`
	Probe      Probe       `yaml:"probe"`
	Synproxy   Synproxy    `yaml:"synproxy"`
	Alerts     Alerts      `yaml:"alerts"`
	// BGP: RTBH and FlowSpec upstream, FlowSpec from the fleet (bgp.go).
	BGP BGP `yaml:"bgp"`
	// Telemetry: network mode, detection from routers' flow telemetry
	// (telemetry.go).
	Telemetry Telemetry `yaml:"telemetry"`
}

// DefaultNice is the daemon's niceness when the file names none.
const DefaultNice = -10

// NiceOrDefault is Nice, or DefaultNice when unset.
func (c *Config) NiceOrDefault() int {
	if c.Nice == nil {
		return DefaultNice
	}
	return *c.Nice
}

// Synproxy is what the SYN-cookie stage announces in the protected
// server's name (syn-cookie flow rules): it must be the server's own MSS
// and window scale, since SYNPROXY translates sequence numbers between
// client and server, not windows.
type Synproxy struct {
	MSS    uint16 `yaml:"mss"`    // default 1460
	WScale uint8  `yaml:"wscale"` // default 7
}

type Log struct {
	Format string `yaml:"format"` // text or json
	Level  string `yaml:"level"`  // debug, info, warn, error
}

// Capacity sizes the maps when the daemon attaches a fresh filter.
type Capacity struct {
	Exact4   int `yaml:"exact4"`
	Exact6   int `yaml:"exact6"`
	Prefix   int `yaml:"prefix"`
	Allow    int `yaml:"allow"`
	Features int `yaml:"features"`
	// FlowRules bounds the flow rules (operator's and the ladder's);
	// KnownGood the known-good list of each family.
	FlowRules int `yaml:"flow_rules"`
	KnownGood int `yaml:"known_good"`
	// MemoryMiB is the daemon's memory budget (0: none): its Go heap is
	// held under what the data plane's mapped tables leave of it.
	MemoryMiB int `yaml:"memory_mib"`
}

// Hardware selects the NIC tier.
type Hardware struct {
	// Backend: none (XDP only), auto (probe flower then n-tuple on
	// Interface), flower, ntuple, or emulated.
	Backend  string        `yaml:"backend"`
	Capacity int           `yaml:"capacity"` // K; flower cannot report it
	MaxRate  float64       `yaml:"max_rate_pps"`
	Emulated EmulatedNIC   `yaml:"emulated"`
	Latency  time.Duration `yaml:"update_latency"` // initial estimate for the budget
}

// EmulatedNIC locates the emulated NIC stage.
type EmulatedNIC struct {
	Netns string `yaml:"netns"` // namespace holding both NIC ports
	Wire  string `yaml:"wire"`  // wire-facing port (the stage's interface)
	Host  string `yaml:"host"`  // host-facing port
}

type Detectors struct {
	Rate    RateDetector    `yaml:"rate"`
	Entropy EntropyDetector `yaml:"entropy"`
	Lists   ListDetector    `yaml:"lists"`
	Victim  VictimDetector  `yaml:"victim"`
	Heavy   HeavyDetector   `yaml:"heavy"` // heavy.go
}

// RateDetector is the per-source rate detector. Every rate is per source;
// "bps" is bits per second (IP bytes × 8), never bytes: the key keeps the
// networking convention (and existing files) and the unit is said wherever
// it is shown.
type RateDetector struct {
	Enabled        bool              `yaml:"enabled"`
	PPS            float64           `yaml:"pps"`
	BPS            float64           `yaml:"bps"` // bits/s
	SYNPPS         float64           `yaml:"syn_pps"`
	PerProto       map[uint8]float64 `yaml:"per_proto_pps"`
	LearnIntervals int               `yaml:"learn_intervals"`
	Margin         float64           `yaml:"margin"`
	MinPPS         float64           `yaml:"min_pps"` // floor under the learned threshold (0: 1000)
	// CeilingPPS caps the learned threshold and flags sources above it
	// while learning; Quantile is the share of per-source rates learned.
	CeilingPPS float64 `yaml:"ceiling_pps"`
	Quantile   float64 `yaml:"quantile"`
}

type EntropyDetector struct {
	Enabled bool    `yaml:"enabled"`
	History int     `yaml:"history"`
	K       float64 `yaml:"k"`
	MinPPS  float64 `yaml:"min_pps"` // total pps below which nothing is an attack
	Prefix4 int     `yaml:"prefix4"`
	Prefix6 int     `yaml:"prefix6"`
	// SourceMinPPS: a source is named (banned) only above this rate of its
	// own (0: detectors.rate.min_pps), so a jump on an idle link does not
	// ban its small senders.
	SourceMinPPS float64 `yaml:"source_min_pps"`
}

// EntropySourceFloor is the rate a source must exceed to be named by the
// entropy detector.
func (c *Config) EntropySourceFloor() float64 {
	if c.Detectors.Entropy.SourceMinPPS > 0 {
		return c.Detectors.Entropy.SourceMinPPS
	}
	return c.Detectors.Rate.MinPPS
}

// MaxFlowRules is the data plane's flow-rule table (bpf/lib: TW_FRULE_MAX;
// the datapath refuses more).
const MaxFlowRules = 64

// VictimDetector is the per-destination detector and its mitigation
// ladder (source bans, a source prefix, flow rules with a known-good
// bypass, SYN cookies): what stops floods whose sources are spoofed or
// countless. Zero values take the detector's defaults (detect.VictimConfig).
type VictimDetector struct {
	Enabled bool `yaml:"enabled"`
	// K: a victim is attacked above its learned mean + K deviations.
	K float64 `yaml:"k"`
	// MinPPS: never an attack below this (per victim).
	MinPPS float64 `yaml:"min_pps"`
	// ColdPPS judges a destination with no baseline yet (volume that
	// is established TCP, ≥ 90% without SYN from sources sending more
	// than two packets, is not judged by it).
	ColdPPS float64 `yaml:"cold_pps"`
	// LearnIntervals: clean intervals before a baseline is used.
	LearnIntervals int `yaml:"learn_intervals"`
	// Coverage: the share of the excess a rung must match.
	Coverage float64 `yaml:"coverage"`
	// RateFactor and RateFloorPPS size a rate-limit rule:
	// max(rate_factor × baseline, rate_floor_pps).
	RateFactor   float64 `yaml:"rate_factor"`
	RateFloorPPS float64 `yaml:"rate_floor_pps"`
	// WithdrawAfter quiet intervals end a mitigation.
	WithdrawAfter int `yaml:"withdraw_after"`
	// MaxVictims bounds the destinations with a baseline.
	MaxVictims int `yaml:"max_victims"`
	// KnownGoodPPS is what one known-good client may pass the ladder's
	// flow rules with outside this host's TCP connections (its new
	// connections' SYNs, UDP), all CPUs together: its address alone can
	// be spoofed, its connections cannot (0: 1000).
	KnownGoodPPS int `yaml:"known_good_pps"`
	// SYNSizeDrop lets a SYN flood's rules drop its SYNs by IP length
	// where the host's clean traffic does not send that size, ahead of
	// the SYN cookies (off: cookies answer every SYN). A dropped SYN
	// costs a verdict, a cookie a SYN-ACK sent to the spoofed address;
	// a new client whose SYNs have the flood's size and that is not
	// known-good is refused while the rule lasts. docs/ARCHITECTURE.md
	// has what was measured either way.
	SYNSizeDrop bool `yaml:"syn_size_drop"`
	// SYNGuardPPS is the SYN guard's rate (bpf/lib/synguard.h): SYNs a
	// second per CPU that sources which are not known good may pass to
	// the host's stack while no rule decides them; the rest are dropped
	// in XDP within the jiffy, after the detector counted them. It holds
	// the interval before the ladder's SYN-cookie rule, in which the
	// kernel alone would meet a SYN flood. 0: off.
	SYNGuardPPS int `yaml:"syn_guard_pps"`
}

// DefaultSYNGuardPPS is detectors.victim.syn_guard_pps unless set: far
// above the new connections a host's unverified clients open on one CPU,
// and a small share of that CPU for the stack, where a SYN and its cookie
// SYN-ACK cost microseconds. At 50,000 the lab's host, under a busy loop,
// still lost a 0.8 Mpps flood's clients' SYNs in its receive ring before
// the rule (they kept 88-89% of their connections); at 10,000, 97%
// (docs/ARCHITECTURE.md).
const DefaultSYNGuardPPS = 10000

// MaxSYNGuardPPS bounds detectors.victim.syn_guard_pps (the data plane's
// own bound, datapath.MaxSynGuardPPS).
const MaxSYNGuardPPS = 100_000_000

type ListDetector struct {
	Enabled bool     `yaml:"enabled"`
	Paths   []string `yaml:"paths"`
}

type Bans struct {
	TTL time.Duration `yaml:"ttl"` // automatic bans end this long after the last detection (0: never)
	// Hold: a ban is lifted after its rate stayed below UnbanPPS this long.
	Hold time.Duration `yaml:"hold"`
	// UnbanPPS: the rate monitor's threshold; 0 takes the rate detector's
	// learned threshold, else its static pps, else 100.
	UnbanPPS float64 `yaml:"unban_pps"`
	// AggregateIPv6: when AggregateMin or more addresses of one IPv6
	// prefix of this length are detected in an interval, ban the prefix
	// instead (0: off).
	AggregateIPv6 int `yaml:"aggregate_ipv6"`
	AggregateMin  int `yaml:"aggregate_min"`
}

type Rails struct {
	Allow               []string `yaml:"allow"`
	Protected           []string `yaml:"protected"`
	MaxNewPerInterval   int      `yaml:"max_new_per_interval"`
	MaxTotal            int      `yaml:"max_total"`
	MonitorOnly         bool     `yaml:"monitor_only"`
	MaxEstablishedShare float64  `yaml:"max_established_share"`
	// The widest ban and allowlist entry accepted without force, as the
	// shortest prefix length per family (0: any): a ban of 0.0.0.0/0
	// drops all traffic, an allow of ::/0 turns IPv6 filtering off.
	MaxBanPrefixV4 int `yaml:"max_ban_prefix_v4"`
	MaxBanPrefixV6 int `yaml:"max_ban_prefix_v6"`
	// The widest automatic ban (detectors, the ladder's prefix rung) as
	// the shortest prefix length per family: a flood spread wider is met
	// on the destination side (flow rules on the victim), since a wide
	// source ban takes every client inside it along (a /8 ban within
	// 0.4 s of a spoofed flood, issue 32). Wider only when the operator
	// sets it.
	MaxAutoBanPrefixV4 int `yaml:"max_auto_ban_prefix_v4"`
	MaxAutoBanPrefixV6 int `yaml:"max_auto_ban_prefix_v6"`
	MaxAllowPrefixV4   int `yaml:"max_allow_prefix_v4"`
	MaxAllowPrefixV6   int `yaml:"max_allow_prefix_v6"`
	// ManagementPorts are the TCP ports this host is managed through
	// (default 22, SSH): no flow rule may match their sessions to the
	// host's own addresses, forced or not, nor any rule the BGP sessions.
	ManagementPorts []uint16 `yaml:"management_ports"`

	AllowPrefixes     []netip.Prefix `yaml:"-"`
	ProtectedPrefixes []netip.Prefix `yaml:"-"`
}

// AutoBanLimits are the widest automatic bans per family as prefix
// lengths: max_auto_ban_prefix_v4/v6, or where 0, max_ban_prefix_v4/v6
// (0 again: any).
func (r *Rails) AutoBanLimits() (v4, v6 int) {
	v4, v6 = r.MaxAutoBanPrefixV4, r.MaxAutoBanPrefixV6
	if v4 == 0 {
		v4 = r.MaxBanPrefixV4
	}
	if v6 == 0 {
		v6 = r.MaxBanPrefixV6
	}
	return v4, v6
}

// AllowTooWide reports whether p is wider than the allowlist's limit for
// its family, and that limit.
func (r *Rails) AllowTooWide(p netip.Prefix) (int, bool) {
	limit := r.MaxAllowPrefixV4
	if p.Addr().Is6() {
		limit = r.MaxAllowPrefixV6
	}
	return limit, limit > 0 && p.Bits() < limit
}

type API struct {
	Socket    string `yaml:"socket"`     // unix socket, mode 0600 ("" disables)
	TCP       string `yaml:"tcp"`        // optional localhost address, needs a token
	TokenFile string `yaml:"token_file"` // bearer token for TCP
	MaxBody   int64  `yaml:"max_body"`   // bytes (default 64 KiB)

	Token string `yaml:"-"`
}

// Metrics is the read-only metrics listener: /metrics and /healthz over
// TCP with no token, so a central Prometheus can scrape without holding
// the API's write token. Off by default; any address, loopback or not,
// since scraping from another host is the point.
type Metrics struct {
	Listen string `yaml:"listen"` // address:port, e.g. "127.0.0.1:9477" or "[::]:9477" ("" disables)
}

// Load reads and validates path. Its errors name the file, the line and
// the field (tierwall.yaml:7: detectors.rate.intreval: unknown field; did
// you mean "interval"?).
func Load(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return ParseFile(path, b)
}

// Parse decodes YAML, applies defaults and validates.
func Parse(b []byte) (*Config, error) { return ParseFile("", b) }

// ParseFile is Parse with errors located in file.
func ParseFile(file string, b []byte) (*Config, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		e := syntaxError(err)
		e.File = file
		return nil, e
	}
	c := Default()
	chk := checker{lines: map[string]int{}}
	chk.walk(&doc, reflect.TypeOf(c), "")
	if len(chk.errs) > 0 {
		for _, e := range chk.errs {
			e.File = file
		}
		return nil, chk.errs
	}
	if len(doc.Content) > 0 { // empty file: defaults
		// The walk found nothing the decoder refuses; KnownFields stays as
		// a second guard should the two ever disagree.
		dec := yaml.NewDecoder(bytes.NewReader(b))
		dec.KnownFields(true)
		if err := dec.Decode(c); err != nil && !errors.Is(err, io.EOF) {
			return nil, &FieldError{File: file, Msg: err.Error()}
		}
	}
	if err := c.Validate(); err != nil {
		return nil, locate(err, file, chk.lines)
	}
	return c, nil
}

// Default is the configuration every field starts from.
func Default() *Config {
	return &Config{
		Role:      RoleMitigation,
		Probe:     defaultProbe(),
		Interval:  time.Second,
		StateFile: "/var/lib/tierwall/state.json",
		Log:       Log{Format: "text", Level: "info"},
		Hardware:  Hardware{Backend: "none", MaxRate: 5e6, Latency: 2 * time.Millisecond},
		Detectors: Detectors{
			// A learned per-source threshold lives in [1000, 5000] pps: an
			// idle link must not teach one a single real client crosses.
			Rate:    RateDetector{Enabled: true, LearnIntervals: 30, Margin: 2, MinPPS: 1000, CeilingPPS: 5000, Quantile: 0.99},
			Entropy: EntropyDetector{Enabled: true, History: 30, K: 3, MinPPS: 1000, Prefix4: 24, Prefix6: 48},
			Victim:  VictimDetector{Enabled: true, SYNGuardPPS: DefaultSYNGuardPPS},
			Heavy:   defaultHeavy(),
		},
		Bans:   Bans{TTL: time.Hour, Hold: 30 * time.Second, AggregateIPv6: 64, AggregateMin: 3},
		Rails:  Rails{MaxNewPerInterval: 1000, MaxTotal: 500000, MaxEstablishedShare: 0.5, MaxBanPrefixV4: 8, MaxBanPrefixV6: 32, MaxAutoBanPrefixV4: 16, MaxAutoBanPrefixV6: 48, MaxAllowPrefixV4: 8, MaxAllowPrefixV6: 32, ManagementPorts: []uint16{22}},
		API:    API{Socket: "/run/tierwall/api.sock", MaxBody: 64 << 10},
		Alerts: defaultAlerts(),
	}
}

// Validate checks every field and resolves derived ones (prefix lists,
// the API token).
func (c *Config) Validate() error {
	if strings.TrimSpace(c.Interface) == "" && c.Role != RoleNetwork {
		return bad("interface", `""`, "is required (role network alone runs without one)")
	}
	if c.Interval < 100*time.Millisecond || c.Interval > time.Minute {
		return bad("interval", c.Interval, "outside 100ms..1m")
	}
	if c.Nice != nil && (*c.Nice < -20 || *c.Nice > 19) {
		return bad("nice", *c.Nice, "outside -20..19")
	}
	if c.StateFile == "" {
		return bad("state_file", `""`, "is required")
	}
	switch c.Log.Format {
	case "text", "json":
	default:
		return bad("log.format", c.Log.Format, "is not text or json")
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		return bad("log.level", c.Log.Level, "is not debug, info, warn or error")
	}
	for f, v := range map[string]int{"capacity.exact4": c.Capacity.Exact4, "capacity.exact6": c.Capacity.Exact6,
		"capacity.prefix": c.Capacity.Prefix, "capacity.allow": c.Capacity.Allow, "capacity.features": c.Capacity.Features,
		"capacity.known_good": c.Capacity.KnownGood} {
		if v < 0 || v > 1<<26 {
			return bad(f, v, "outside 0..67108864")
		}
	}
	if m := c.Capacity.MemoryMiB; m != 0 && (m < 64 || m > 1<<20) {
		return bad("capacity.memory_mib", m, "outside 64..1048576 (0: no budget)")
	}
	h := &c.Hardware
	switch h.Backend {
	case "none", "auto", "flower", "ntuple":
	case "emulated":
		if h.Emulated.Wire == "" || h.Emulated.Host == "" {
			return bad("hardware.emulated", fmt.Sprintf("wire=%q host=%q", h.Emulated.Wire, h.Emulated.Host), "needs both ports")
		}
	default:
		return bad("hardware.backend", h.Backend, "is not none, auto, flower, ntuple or emulated")
	}
	if h.Capacity < 0 || h.Capacity > 1<<16 {
		return bad("hardware.capacity", h.Capacity, "outside 0..65536")
	}
	if h.MaxRate <= 0 {
		return bad("hardware.max_rate_pps", h.MaxRate, "must be positive")
	}
	if h.Latency < 0 || h.Latency > time.Second {
		return bad("hardware.update_latency", h.Latency, "outside 0..1s")
	}
	r := &c.Detectors.Rate
	for f, v := range map[string]float64{"detectors.rate.pps": r.PPS, "detectors.rate.syn_pps": r.SYNPPS, "detectors.rate.min_pps": r.MinPPS, "detectors.rate.ceiling_pps": r.CeilingPPS} {
		if v < 0 {
			return bad(f, v, "is negative")
		}
	}
	if r.BPS < 0 {
		return bad("detectors.rate.bps", r.BPS, "is negative (bits per second)")
	}
	if r.Margin != 0 && r.Margin < 1 {
		return bad("detectors.rate.margin", r.Margin, "must be at least 1")
	}
	if r.LearnIntervals < 0 {
		return bad("detectors.rate.learn_intervals", r.LearnIntervals, "is negative")
	}
	if r.Quantile < 0 || r.Quantile > 1 {
		return bad("detectors.rate.quantile", r.Quantile, "outside 0..1")
	}
	if r.CeilingPPS > 0 && r.MinPPS > r.CeilingPPS {
		return bad("detectors.rate.min_pps", r.MinPPS, fmt.Sprintf("above ceiling_pps %v", r.CeilingPPS))
	}
	if b := c.Bans; b.AggregateIPv6 != 0 && (b.AggregateIPv6 < 16 || b.AggregateIPv6 > 127 || b.AggregateMin < 2) {
		return bad("bans.aggregate_ipv6", fmt.Sprintf("%d (min %d)", b.AggregateIPv6, b.AggregateMin), "needs 16..127 and aggregate_min >= 2, or 0 for off")
	}
	e := &c.Detectors.Entropy
	if e.Enabled && (e.History < 2 || e.K <= 0) {
		return bad("detectors.entropy", fmt.Sprintf("history=%d k=%v", e.History, e.K), "needs history >= 2 and k > 0")
	}
	if e.MinPPS < 0 || e.SourceMinPPS < 0 {
		return bad("detectors.entropy", fmt.Sprintf("min_pps=%v source_min_pps=%v", e.MinPPS, e.SourceMinPPS), "must not be negative")
	}
	if e.Prefix4 < 8 || e.Prefix4 > 32 {
		return bad("detectors.entropy.prefix4", e.Prefix4, "outside 8..32")
	}
	if e.Prefix6 < 16 || e.Prefix6 > 128 {
		return bad("detectors.entropy.prefix6", e.Prefix6, "outside 16..128")
	}
	if c.Capacity.FlowRules < 0 || c.Capacity.FlowRules > MaxFlowRules {
		return bad("capacity.flow_rules", c.Capacity.FlowRules, fmt.Sprintf("outside 0..%d", MaxFlowRules))
	}
	v := &c.Detectors.Victim
	for f, x := range map[string]float64{"detectors.victim.k": v.K, "detectors.victim.min_pps": v.MinPPS, "detectors.victim.cold_pps": v.ColdPPS,
		"detectors.victim.rate_factor": v.RateFactor, "detectors.victim.rate_floor_pps": v.RateFloorPPS,
		"detectors.victim.learn_intervals": float64(v.LearnIntervals), "detectors.victim.withdraw_after": float64(v.WithdrawAfter),
		"detectors.victim.max_victims": float64(v.MaxVictims), "detectors.victim.known_good_pps": float64(v.KnownGoodPPS),
		"detectors.victim.syn_guard_pps": float64(v.SYNGuardPPS)} {
		if x < 0 {
			return bad(f, x, "is negative")
		}
	}
	if c.Synproxy.MSS != 0 && (c.Synproxy.MSS < 536 || c.Synproxy.MSS > 9000) {
		return bad("synproxy.mss", c.Synproxy.MSS, "outside 536..9000")
	}
	if c.Synproxy.WScale > 14 {
		return bad("synproxy.wscale", c.Synproxy.WScale, "above 14")
	}
	if v.Coverage < 0 || v.Coverage > 1 {
		return bad("detectors.victim.coverage", v.Coverage, "outside 0..1")
	}
	if v.MaxVictims > 1<<20 {
		return bad("detectors.victim.max_victims", v.MaxVictims, "above 1048576")
	}
	if v.KnownGoodPPS > 1<<30 {
		return bad("detectors.victim.known_good_pps", v.KnownGoodPPS, "above 1073741824")
	}
	if v.SYNGuardPPS > MaxSYNGuardPPS {
		return bad("detectors.victim.syn_guard_pps", v.SYNGuardPPS, fmt.Sprintf("above %d", MaxSYNGuardPPS))
	}
	if c.Detectors.Lists.Enabled {
		for i, p := range c.Detectors.Lists.Paths {
			if _, err := os.Stat(p); err != nil {
				return bad(fmt.Sprintf("detectors.lists.paths[%d]", i), p, "cannot be read: "+err.Error())
			}
		}
	}
	switch c.Role {
	case RoleMitigation:
	case RoleProbe:
		if err := c.Probe.validate(); err != nil {
			return err
		}
	case RoleNetwork:
		if err := c.validateNetworkRole(); err != nil {
			return err
		}
	default:
		return bad("role", c.Role, "is not mitigation, probe or network")
	}
	if c.Role == RoleMitigation && !r.Enabled && !e.Enabled && !c.Detectors.Lists.Enabled && !v.Enabled {
		return bad("detectors", "all", "are disabled: nothing would ever be banned")
	}
	if c.Bans.TTL < 0 || c.Bans.Hold < 0 || c.Bans.UnbanPPS < 0 {
		return bad("bans", fmt.Sprintf("ttl=%v hold=%v unban_pps=%v", c.Bans.TTL, c.Bans.Hold, c.Bans.UnbanPPS), "must not be negative")
	}
	var err error
	if c.Rails.AllowPrefixes, err = prefixes("rails.allow", c.Rails.Allow); err != nil {
		return err
	}
	if c.Rails.ProtectedPrefixes, err = prefixes("rails.protected", c.Rails.Protected); err != nil {
		return err
	}
	if err := c.validateHostGroups(); err != nil {
		return err
	}
	if err := c.validateTelemetry(); err != nil {
		return err
	}
	if c.Rails.MaxNewPerInterval < 0 || c.Rails.MaxTotal < 0 {
		return bad("rails", fmt.Sprintf("max_new_per_interval=%d max_total=%d", c.Rails.MaxNewPerInterval, c.Rails.MaxTotal), "must not be negative")
	}
	if c.Rails.MaxEstablishedShare < 0 || c.Rails.MaxEstablishedShare > 1 {
		return bad("rails.max_established_share", c.Rails.MaxEstablishedShare, "outside 0..1")
	}
	for f, v := range map[string][2]int{"rails.max_ban_prefix_v4": {c.Rails.MaxBanPrefixV4, 32}, "rails.max_ban_prefix_v6": {c.Rails.MaxBanPrefixV6, 128},
		"rails.max_allow_prefix_v4": {c.Rails.MaxAllowPrefixV4, 32}, "rails.max_allow_prefix_v6": {c.Rails.MaxAllowPrefixV6, 128},
		"rails.max_auto_ban_prefix_v4": {c.Rails.MaxAutoBanPrefixV4, 32}, "rails.max_auto_ban_prefix_v6": {c.Rails.MaxAutoBanPrefixV6, 128}} {
		if v[0] < 0 || v[0] > v[1] {
			return bad(f, v[0], fmt.Sprintf("outside 0..%d", v[1]))
		}
	}
	for i, p := range c.Rails.ManagementPorts {
		if p == 0 {
			return bad(fmt.Sprintf("rails.management_ports[%d]", i), p, "is not a TCP port")
		}
	}
	for i, p := range c.Rails.AllowPrefixes {
		if limit, wide := c.Rails.AllowTooWide(p); wide {
			return bad(fmt.Sprintf("rails.allow[%d]", i), p, fmt.Sprintf("is wider than /%d (rails.max_allow_prefix_v4/v6): it would let that traffic past every ban", limit))
		}
	}
	if c.Metrics.Listen != "" {
		ap, err := netip.ParseAddrPort(c.Metrics.Listen)
		if err != nil || ap.Port() == 0 {
			return bad("metrics.listen", c.Metrics.Listen, "must be an address:port such as 127.0.0.1:9477 or [::]:9477")
		}
		if c.Metrics.Listen == c.API.TCP {
			return bad("metrics.listen", c.Metrics.Listen, "is api.tcp: the metrics listener is a separate, read-only one")
		}
	}
	if err := c.Detectors.Heavy.validate(); err != nil {
		return err
	}
	if h := c.Detectors.Heavy; h.Enabled && h.TTL < 2*c.Interval {
		// A catch is judged one or two intervals after it is made; an
		// entry that expired first would let the flood through meanwhile.
		return bad("detectors.heavy.ttl", h.TTL, fmt.Sprintf("is under two intervals (%v): the daemon judges a catch within two", 2*c.Interval))
	}
	if err := validateBGP(&c.BGP); err != nil {
		return err
	}
	if err := c.Alerts.validate(); err != nil {
		return err
	}
	if c.API.MaxBody <= 0 || c.API.MaxBody > 16<<20 {
		return bad("api.max_body", c.API.MaxBody, "outside 1..16777216")
	}
	if c.API.TCP != "" {
		ap, err := netip.ParseAddrPort(c.API.TCP)
		if err != nil || !ap.Addr().IsLoopback() {
			return bad("api.tcp", c.API.TCP, "must be a loopback address:port")
		}
		if c.API.TokenFile == "" {
			return bad("api.token_file", `""`, "is required with api.tcp")
		}
		tok, err := os.ReadFile(c.API.TokenFile)
		if err != nil {
			return bad("api.token_file", c.API.TokenFile, "cannot be read: "+err.Error())
		}
		if c.API.Token = strings.TrimSpace(string(tok)); len(c.API.Token) < 16 {
			return bad("api.token_file", c.API.TokenFile, "holds a token shorter than 16 characters")
		}
	}
	return nil
}

func prefixes(field string, ss []string) ([]netip.Prefix, error) {
	out, i, err := rule.ParseList(ss)
	if err != nil {
		return nil, bad(fmt.Sprintf("%s[%d]", field, i), ss[i], "is not an address or prefix: "+err.Error())
	}
	return out, nil
}
