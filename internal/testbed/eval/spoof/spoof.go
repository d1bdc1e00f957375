// SPDX-License-Identifier: Apache-2.0

// Package spoof is `make eval-spoof`: floods whose sources cannot be
// listed (spoofed ranges, IPv6, reflection, SYN) against the daemon's
// defaults on the lab, with paced clients and the host's own exchanges
// watched, written to docs/EVALUATION-SPOOF.md and docs/eval/spoof*.json.
package spoof

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tierwall/tierwall/internal/control/api"
	"github.com/tierwall/tierwall/internal/control/apiv1"
	"github.com/tierwall/tierwall/internal/control/mitigate"
	"github.com/tierwall/tierwall/internal/datapath"
	"github.com/tierwall/tierwall/internal/testbed/demo"
	"github.com/tierwall/tierwall/internal/testbed/eval/evalkit"
	"github.com/tierwall/tierwall/internal/testbed/gen"
	"github.com/tierwall/tierwall/internal/testbed/harness"
	"github.com/tierwall/tierwall/internal/testbed/lab"
	"github.com/tierwall/tierwall/internal/tier/nicstage"
)

// Scenario is a flood whose sources cannot be listed.
type Scenario struct {
	Name  string       `json:"name"`
	Dst   netip.Addr   `json:"dst"`
	Spoof netip.Prefix `json:"spoof,omitzero"` // random sources in it
	// Reflectors are fixed sources (from the generator's attack net), one
	// generator per source port: a reflection flood.
	Reflectors int      `json:"reflectors,omitempty"`
	SrcPorts   []uint16 `json:"src_ports,omitempty"`
	SYN        bool     `json:"syn,omitempty"`
	DstPort    uint16   `json:"dst_port,omitempty"`
	// Rate caps the flood at this many packets/s (0: the generator's
	// full rate, or Params.Rate).
	Rate uint64 `json:"rate_pps,omitempty"`
	// FirstRate, for FirstFor, opens the flood at another rate (a burst
	// that gets a source caught, then a rate that keeps it held).
	FirstRate uint64        `json:"first_rate_pps,omitempty"`
	FirstFor  time.Duration `json:"first_for_ns,omitempty"`
	// Sources, with Spoof: the flood comes from this many fixed
	// addresses numbered from Spoof's start (trafgen.Addresses), not
	// from random ones.
	Sources int `json:"sources,omitempty"`
	// PreACKs: before the flood, this many spoofed TCP ACKs from each of
	// the Sources to the victim's port: an attempt to buy known-good
	// membership without a handshake.
	PreACKs int `json:"pre_acks,omitempty"`
	// SpoofClient: the flood's source is the first client's own address.
	SpoofClient bool `json:"spoof_client,omitempty"`
	// Clients overrides Params.Clients.
	Clients int `json:"clients,omitempty"`
	// Clients6: the clients are IPv6, in the host's own /64 (SixClients),
	// and fetch from http://[Host6]/.
	Clients6 bool `json:"clients6,omitempty"`
	// ThinSpoof and ThinRate add a second generator: random sources in
	// ThinSpoof at ThinRate, beside the main flood (a thin spread over
	// many prefixes, one of them the clients').
	ThinSpoof netip.Prefix `json:"thin_spoof,omitzero"`
	ThinRate  uint64       `json:"thin_rate_pps,omitempty"`
	// Warmup: the same flood at the victim for this long as soon as the
	// daemon starts, inside the entropy detector's first intervals (its
	// baseline is learned then), then the reference phase lengthened by
	// WarmupQuiet for the baseline to finish from quiet intervals; the
	// row says whether the entropy detector named the main flood.
	Warmup time.Duration `json:"warmup_ns,omitempty"`
	// SYNSizeDrop runs the daemon with detectors.victim.syn_size_drop:
	// the SYN flood's size dropped before its cookies.
	SYNSizeDrop bool `json:"syn_size_drop,omitempty"`
}

// WarmupQuiet is how long a Warmup scenario's reference phase runs after
// the warm-up flood: the withdrawal's quiet intervals and the entropy
// detector's 30-interval history at the evaluation's 500 ms interval,
// with room to spare.
const WarmupQuiet = 25 * time.Second

// SixClients are the IPv6 clients' addresses: in the lab's shared /64
// with the host (fd70::/64), from fd70::1:0.
func SixClients(n int) []netip.Addr { return demo.AddrsFrom(netip.MustParseAddr("fd70::1:0"), n) }

// Scenarios are the floods: random sources in a /16, a /9,
// all of IPv4, IPv6 in a /48 and across ::/1, a reflection flood from
// DNS and NTP ports, and a random-source SYN flood on nginx, at full rate
// and at two lower rates: where the host's CPU, not the defence, is what
// limits the clients, the lower rates show up to where it holds.
func Scenarios() []Scenario {
	return []Scenario{
		{Name: "udp-spoof-16", Dst: lab.Host4, Spoof: netip.MustParsePrefix("10.200.0.0/16"), DstPort: 9},
		{Name: "udp-spoof-9", Dst: lab.Host4, Spoof: netip.MustParsePrefix("10.128.0.0/9"), DstPort: 9},
		{Name: "udp-spoof-all4", Dst: lab.Host4, Spoof: netip.MustParsePrefix("0.0.0.0/0"), DstPort: 9},
		{Name: "udp-spoof6-48", Dst: lab.Host6, Spoof: netip.MustParsePrefix("fd00:bad:1::/48"), DstPort: 9},
		{Name: "udp-spoof6-half", Dst: lab.Host6, Spoof: netip.MustParsePrefix("::/1"), DstPort: 9},
		{Name: "reflection-53-123", Dst: lab.Host4, Reflectors: 10000, SrcPorts: []uint16{53, 123}, DstPort: 40000},
		{Name: "syn-spoof", Dst: lab.Host4, Spoof: netip.MustParsePrefix("10.128.0.0/9"), SYN: true, DstPort: 80},
		{Name: "syn-spoof-500k", Dst: lab.Host4, Spoof: netip.MustParsePrefix("10.128.0.0/9"), SYN: true, DstPort: 80, Rate: 500_000},
		{Name: "syn-spoof-200k", Dst: lab.Host4, Spoof: netip.MustParsePrefix("10.128.0.0/9"), SYN: true, DstPort: 80, Rate: 200_000},
		// The same flood as syn-spoof-500k met by the daemon with
		// syn_size_drop: the flood's bare 40-byte SYNs, a size the
		// clients' Linux stacks (60 bytes) never send, dropped before
		// the cookies; no SYN-ACK leaves for a spoofed address.
		{Name: "syn-spoof-500k-sizes", Dst: lab.Host4, Spoof: netip.MustParsePrefix("10.128.0.0/9"), SYN: true, DstPort: 80, Rate: 500_000, SYNSizeDrop: true},
		// Issue 32's: the defence aimed at the clients it protects.
		{Name: "acks-then-syn-2000", Dst: lab.Host4, Spoof: netip.MustParsePrefix("10.201.0.0/16"), Sources: 2000, PreACKs: 3, SYN: true, DstPort: 80},
		{Name: "client-spoofed", Dst: lab.Host4, SpoofClient: true, DstPort: 9, FirstRate: 150_000, FirstFor: 2 * time.Second, Rate: 3_000},
		{Name: "udp-spoof-8-200-clients", Dst: lab.Host4, Spoof: netip.MustParsePrefix("10.0.0.0/8"), DstPort: 9, Clients: 200},
		// The main flood from all of IPv4 and 1% of it (10 kpps beside
		// about 1 Mpps) spread over the 64 /24s of 10.70.0.0/18, the
		// clients' 10.70.1.0/24 among them.
		{Name: "thin-1pct-64x24", Dst: lab.Host4, Spoof: netip.MustParsePrefix("0.0.0.0/0"), DstPort: 9,
			ThinSpoof: netip.MustParsePrefix("10.70.0.0/18"), ThinRate: 10_000},
		// One address of the /64 the clients share with the host.
		{Name: "udp-spoof6-shared-64", Dst: lab.Host6, Spoof: netip.MustParsePrefix("fd70::bad/128"), DstPort: 9, Clients6: true},
		// A flood in the entropy detector's first intervals, then the
		// same flood once its baseline is learned. The detector names
		// the prefixes of spoofed few-packet sources that carry 1% of
		// them and its rate floor each: random IPv6 sources in a /44
		// (sixteen /48s, one packet a source) are such a flood in the
		// one interval it meets before the victim's rule drops it; IPv4
		// ranges small enough for 1% a /24 send many packets a source.
		{Name: "entropy-warmup", Dst: lab.Host6, Spoof: netip.MustParsePrefix("fd00:bad:10::/44"), DstPort: 9, Warmup: 4 * time.Second},
	}
}

// Row is one scenario's outcome.
type Row struct {
	Scenario Scenario `json:"scenario"`
	Interval float64  `json:"interval_s"`
	Sent     uint64   `json:"sent"`
	SentMpps float64  `json:"sent_mpps"`
	// DetectIntervals is how many daemon intervals passed from the
	// flood's start to the first mitigation (ban or flow rule) event; -1:
	// never.
	DetectIntervals float64 `json:"detect_intervals"`
	// DroppedFrom3 is the share of the flood's packets dropped in XDP from
	// the third interval on (drop verdicts over packets sent then).
	DroppedFrom3 float64 `json:"dropped_from_third_interval"`
	// ReachedXDP is the share of the flood's packets sent from the third
	// interval on that XDP saw; BaselinePassPPS the clients' packets/s
	// XDP saw in the reference phase.
	ReachedXDP      float64  `json:"reached_xdp"`
	BaselinePassPPS float64  `json:"baseline_pass_pps"`
	Mitigations     []string `json:"mitigations"` // what the daemon put in force, as its events say
	// SlowIntervals are the daemon's "slow" events during the flood:
	// intervals that took longer than the interval, with their largest
	// stages (a rule decided in one reaches XDP only when it ends).
	SlowIntervals []string `json:"slow_intervals,omitempty"`
	// EntropyAfter, in a Warmup scenario: intervals from the main
	// flood's start to the entropy detector's first detection in it (-1:
	// none); EntropyWarmup: its detections during the warm-up flood.
	EntropyAfter float64 `json:"entropy_after_intervals,omitempty"`
	// EntropyLearned and AttacksOn, in a Warmup scenario, are the
	// daemon's gauges as the main flood starts: intervals the entropy
	// detector learned (it judges from its history, 30), and victims
	// with an attack on (while any is, it learns nothing).
	EntropyLearned float64 `json:"entropy_learned_at_flood,omitempty"`
	AttacksOn      float64 `json:"attacks_on_at_flood,omitempty"`
	EntropyWarmup  int     `json:"entropy_warmup_detections,omitempty"`
	BaselineRPS    float64 `json:"baseline_rps"`
	AttackRPS      float64 `json:"attack_rps"`
	// IdealRPS is the clients' rate under the same flood with the ideal
	// filter on the host's port instead of the defence (idealPhase; 0:
	// the scenario has none), IdealReachedXDP the share of that flood
	// that reached it.
	IdealRPS        float64 `json:"ideal_rps,omitempty"`
	IdealReachedXDP float64 `json:"ideal_reached_xdp,omitempty"`
	// AttackRPSFrom3 is the clients' rate from the third interval on,
	// once the daemon has decided: what the defence's steady state leaves
	// them, apart from the intervals before its decision.
	AttackRPSFrom3 float64 `json:"attack_rps_from_third_interval"`
	// HostCPUBefore and HostCPUDuring are the host CPU's busy share (%)
	// with the clients alone and during the flood: the headroom the
	// clients' paced load leaves, and what the flood took of it.
	HostCPUBefore float64 `json:"host_cpu_before_pct"`
	HostCPUDuring float64 `json:"host_cpu_during_pct"`
	// ClientPace is each client's offered rate (requests or connections
	// per second; 0: unpaced).
	ClientPace  float64 `json:"client_pace"`
	ClientFails uint64  `json:"client_failures"`
	// ClientsBanned are bans that ever covered a client address.
	ClientsBanned []string `json:"clients_banned"`
	// Reflection: the host's own DNS and NTP exchanges, answered/asked,
	// without and with the flood.
	ExchBase   [2]uint64 `json:"exchanges_baseline,omitempty"`
	ExchAttack [2]uint64 `json:"exchanges_attack,omitempty"`
	// SYN flood: connections the host's TCP stack accepted (PassiveOpens)
	// and SYN cookies it sent itself, during the flood, against the
	// clients' connections.
	PassiveOpens  uint64 `json:"passive_opens,omitempty"`
	KernelCookies uint64 `json:"kernel_syncookies_sent,omitempty"`
	ClientConns   uint64 `json:"client_connections,omitempty"`
	// KernelCookiesFrom3 are the kernel's own SYN cookies from the third
	// interval on: SYNs that reached the TCP stack with its backlog full.
	KernelCookiesFrom3 uint64 `json:"kernel_syncookies_from_third_interval,omitempty"`
	// BeforeFlood are mitigations the daemon applied while only the
	// legitimate clients were sending: false positives.
	BeforeFlood []string `json:"before_flood,omitempty"`
	// PassedFrom3 is what XDP passed to the host's stack from sources
	// not known good from the third interval on (verdict pass: matched
	// no rule, or admitted under a rate limit).
	PassedFrom3 uint64 `json:"passed_from_third_interval"`
	// SYNsToStack and SYNsToStackFrom3 are the attack SYNs that reached
	// the host's stack (TCP SYNs from outside the clients' networks,
	// counted in its prerouting hook: host.go's synCounter), over the
	// flood and from its third interval; SYN floods only.
	SYNsToStack      uint64 `json:"attack_syns_to_stack,omitempty"`
	SYNsToStackFrom3 uint64 `json:"attack_syns_to_stack_from_third_interval"`
	// EgressInternet is what the host sent to addresses outside the lab
	// (the SYN-ACKs answering spoofed SYNs), dropped at the NIC's
	// transmit side as the internet would take them.
	EgressInternet uint64 `json:"egress_internet,omitempty"`
	// TxRefused is what the host's XDP_TX (the cookie SYN-ACKs) found
	// the ring to the card full for, over the flood: a NIC's transmit
	// ring overflowing, counted by the host port (veth's xdp_tx_errors).
	TxRefused      uint64 `json:"xdp_tx_refused,omitempty"`
	DaemonMaxRSSMB uint64 `json:"daemon_max_rss_mb"`
	// DaemonMaxAnonMB is the largest RssAnon: the daemon's own pages (Go
	// heap, stacks), what grows with the sources; the rest of its RSS is
	// mapped: the binary and the kernel's feature buffers, whose pages
	// the kernel holds from attach whether or not the daemon reads them.
	DaemonMaxAnonMB uint64 `json:"daemon_max_anon_mb"`
	// RuleInXDP is intervals from the flood's start to the first sample
	// (every 100 ms) that found a flow rule in XDP (-1 or 0: none, or one
	// from before); Sample3Lag is how long before the third interval the
	// sample the "from the 3rd interval" counts start from was taken (a
	// starved sampler makes it long).
	RuleInXDP  float64 `json:"rule_in_xdp_intervals"`
	Sample3Lag float64 `json:"sample3_lag_s"`
	// KnownGoodGained is how many of the flood's Sources were on XDP's
	// known-good list after the spoofed ACKs (PreACKs) and at the end.
	KnownGoodGained [2]int `json:"known_good_gained,omitempty"`
	// Watched* is the first client's own request rate, when the flood
	// spoofs its address (SpoofClient), before and during.
	WatchedBaseRPS   float64 `json:"watched_client_baseline_rps,omitempty"`
	WatchedAttackRPS float64 `json:"watched_client_attack_rps,omitempty"`
	// WidestBan is the widest ban the daemon applied during the flood
	// ("" for none).
	WidestBan string `json:"widest_ban,omitempty"`
	// Verdicts are XDP's verdict counters' growth during the flood.
	Verdicts map[string]uint64 `json:"verdicts"`
	// FlowRules are the flow rules in force at the end, with counters.
	FlowRules []mitigate.Rule `json:"flow_rules"`
}

// Params drive Run.
type Params struct {
	Tierwall string
	Only     string // run the scenarios whose name contains one of these (comma-separated)
	Baseline time.Duration
	Attack   time.Duration
	Interval time.Duration
	Clients  int
	// ClientRate and ConnRate pace each client (requests/s, keep-alive;
	// new connections/s in the SYN floods).
	ClientRate, ConnRate float64
	// Rate caps the flood (packets/s, all generators together); 0: the
	// generator's full rate.
	Rate uint64
	// Background runs a CPU-bound process (BusyLoop) at nice 0 on each
	// CPU for the whole run: a server under attack is rarely otherwise
	// idle.
	Background bool
	// Card puts the emulated NIC in hybrid mode and gives the daemon its
	// table: source bans (the top K) and the flow rules' policers drop
	// there, before the host's port, as on a card that polices.
	Card bool
	// LoadBefore is /proc/loadavg's three averages before the run: what
	// else the machine was doing (the caller reads it: "" says nothing).
	LoadBefore string
	Log        io.Writer
}

// Run runs each scenario on the lab: a fresh daemon (default
// detectors, the emulated NIC forwarding everything, so every drop is
// XDP's), legitimate HTTP clients for Baseline, then the flood at the
// generator's full rate for Attack with the clients still running.
func Run(ctx context.Context, p Params) (_ []Row, err error) {
	if p.Baseline == 0 {
		p.Baseline = 12 * time.Second
	}
	if p.Attack == 0 {
		p.Attack = 12 * time.Second
	}
	if p.Interval == 0 {
		p.Interval = 500 * time.Millisecond
	}
	if p.Clients == 0 {
		p.Clients = 64
	}
	release, err := lab.Hold(ctx, "make eval-spoof", p.Log)
	if err != nil {
		return nil, err
	}
	defer release()
	if err := lab.Up(); err != nil {
		return nil, err
	}
	defer func() {
		if derr := lab.Down(); derr != nil && err == nil {
			err = derr
		}
	}()
	if err := lab.StartNginx(); err != nil {
		return nil, err
	}
	if p.Background {
		stop, err := startBackground()
		if err != nil {
			return nil, err
		}
		defer stop()
		// The clients (this process's goroutines) stand for other
		// machines, which the server's load does not slow: above the
		// loops, they take what they need of CPU 0 and the loop there
		// the rest (the generator's thread keeps its own value). At
		// nice 0 the loop on CPU 0 took their CPU, not the host's: in
		// syn-spoof-500k their connection rate under the loops was
		// 85-89% with SYN cookies and 75-81% with the size drop
		// (2026-12-07, three runs each), 98-100% of the quiet run's
		// 1,915/s with the loop on CPU 1 only, whose host then met the
		// same flood.
		unfavour, err := evalkit.Favour(ClientNice)
		if err != nil {
			return nil, err
		}
		defer unfavour()
	}
	// The lab split as in LabModes: the wire and the card are outside
	// the host. CPU 0 runs the generator, the NIC stage and the clients
	// (this process: demo.Load's goroutines); CPU 1 runs the host: its
	// NAPI and XDP, nginx and the daemon. Without it the clients, nginx
	// and the host's XDP drops met on whichever CPU the scheduler chose,
	// and the clients' share of their CPU, not the defence, set their
	// rate under attack.
	if err := evalkit.PinComm("nginx", evalkit.RxCPU); err != nil {
		return nil, err
	}
	restore, err := evalkit.PinProcess(evalkit.GenCPU)
	if err != nil {
		return nil, err
	}
	defer restore()
	most := p.Clients
	for _, sc := range Scenarios() {
		most = max(most, sc.Clients)
	}
	clients := demo.ClientAddrs(most)
	for _, c := range append(slices.Clone(clients), SixClients(p.Clients)...) {
		args := []string{"ip", "-n", lab.NSInet, "addr", "replace", c.String() + "/16", "dev", lab.IfInet}
		if c.Is6() {
			args = []string{"ip", "-n", lab.NSInet, "addr", "replace", c.String() + "/64", "dev", lab.IfInet, "nodad"}
		}
		if err := harness.Run(args...); err != nil {
			return nil, err
		}
	}
	// A sink for the reference phase: the generator at the same rate
	// into a veth pair inside the internet namespace, so the clients'
	// no-attack rate is measured with the generator's own CPU taken
	// (attackers cost the host nothing on a real network; here they share
	// the machine).
	for _, c := range [][]string{
		{"ip", "-n", lab.NSInet, "link", "del", sinkIf},
		{"ip", "-n", lab.NSInet, "link", "add", sinkIf, "type", "veth", "peer", "name", sinkIf + "p"},
		{"ip", "-n", lab.NSInet, "link", "set", sinkIf, "up"},
		{"ip", "-n", lab.NSInet, "link", "set", sinkIf + "p", "up"},
	} {
		if err := harness.Run(c...); err != nil && c[4] != "del" {
			return nil, err
		}
	}
	defer func() { _ = harness.Run("ip", "-n", lab.NSInet, "link", "del", sinkIf) }()
	// The sink receives as the card does during the attack: each frame
	// taken off the ring by a NAPI at SCHED_FIFO on the card's CPU, then
	// dropped. Without a receiver the generator's frames died at its own
	// transmit, and the card's per-packet work, which the attack phase
	// pays on the CPU the clients share (the lab's internet side: CPU 0
	// was 96-100% busy, CPU 1 had a fifth spare, in udp-spoof-9), was
	// missing from the reference: the clients' loss to the emulated card
	// counted as the host's.
	var sink *gen.Sink
	if err := evalkit.InNS(lab.NSInet, -1, func() error { var e error; sink, e = gen.NewSink(sinkIf+"p", false); return e }); err != nil {
		return nil, fmt.Errorf("the reference's sink: %w", err)
	}
	defer sink.Close()
	if err := evalkit.PinNAPIFirst(lab.NSInet, sinkIf+"p", evalkit.NICCPU); err != nil {
		return nil, fmt.Errorf("the reference's sink: %w", err)
	}
	var rows []Row
	for _, sc := range Scenarios() {
		if p.Only != "" && !slices.ContainsFunc(strings.Split(p.Only, ","), func(o string) bool { return strings.Contains(sc.Name, o) }) {
			continue
		}
		n := p.Clients
		if sc.Clients > 0 {
			n = sc.Clients
		}
		cs := clients[:n]
		if sc.Clients6 {
			cs = SixClients(n)
		}
		r, err := spoofCell(ctx, p, sc, cs)
		if err != nil {
			return rows, fmt.Errorf("%s: %w", sc.Name, err)
		}
		fmt.Fprintf(p.Log, "eval-spoof: %-18s sent %.2f Mpps (%.0f%% reached XDP), detected after %.1f intervals, %.1f%% dropped from the 3rd interval, HTTP %.0f → %.0f req/s (host CPU %.0f%% → %.0f%%), %d client bans, daemon peak RSS %d MB (its own pages %d MB); %s\n",
			sc.Name, r.SentMpps, 100*r.ReachedXDP, r.DetectIntervals, 100*r.DroppedFrom3, r.BaselineRPS, r.AttackRPS, r.HostCPUBefore, r.HostCPUDuring, len(r.ClientsBanned), r.DaemonMaxRSSMB, r.DaemonMaxAnonMB, strings.Join(r.Mitigations, "; "))
		fmt.Fprintf(p.Log, "  XDP verdicts during the flood: %v; first flow rule seen in XDP after %.1f intervals; the 3rd interval's sample %.2f s early; HTTP from the 3rd interval %.0f req/s (%.0f%%)\n", r.Verdicts, r.RuleInXDP, r.Sample3Lag, r.AttackRPSFrom3, 100*r.AttackRPSFrom3/max(r.BaselineRPS, 1))
		if sc.PreACKs > 0 {
			fmt.Fprintf(p.Log, "  of the %d sources, on the known-good list after their spoofed ACKs: %d, at the end: %d\n", sc.Sources, r.KnownGoodGained[0], r.KnownGoodGained[1])
		}
		if sc.SpoofClient {
			fmt.Fprintf(p.Log, "  the spoofed client's own HTTP: %.0f → %.0f req/s\n", r.WatchedBaseRPS, r.WatchedAttackRPS)
		}
		if r.WidestBan != "" {
			fmt.Fprintf(p.Log, "  widest ban %s\n", r.WidestBan)
		}
		for _, b := range r.BeforeFlood {
			fmt.Fprintf(p.Log, "  before the flood (a false positive): %s\n", b)
		}
		for _, fr := range r.FlowRules {
			fmt.Fprintf(p.Log, "  flow rule %s: matched %d, dropped %d, known-good %d\n", fr.FlowRule, fr.Counters.Packets, fr.Counters.Dropped, fr.Counters.PassedKnownGood)
		}
		if len(sc.SrcPorts) > 0 || sc.SYN {
			fmt.Fprintf(p.Log, "  exchanges answered %v before, %v during; passive opens %d for %d client connections, kernel SYN cookies %d (%d from the 3rd interval); XDP passed to the stack from the 3rd interval %d; attack SYNs that reached the stack %d (%d from the 3rd interval); sent to the internet %d, refused by the full ring to the card %d\n",
				r.ExchBase, r.ExchAttack, r.PassiveOpens, r.ClientConns, r.KernelCookies, r.KernelCookiesFrom3, r.PassedFrom3, r.SYNsToStack, r.SYNsToStackFrom3, r.EgressInternet, r.TxRefused)
		}
		for i, b := range r.ClientsBanned {
			if i == 3 {
				fmt.Fprintf(p.Log, "  … %d more client bans\n", len(r.ClientsBanned)-3)
				break
			}
			fmt.Fprintf(p.Log, "  client ban %s\n", b)
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// spoofCell runs one scenario on the lab: the NIC stage and a fresh
// daemon, the reference phase, the flood with the clients running, then
// the daemon's account of it.
func spoofCell(ctx context.Context, p Params, sc Scenario, clients []netip.Addr) (_ Row, err error) {
	if sc.SpoofClient {
		sc.Spoof = netip.PrefixFrom(clients[0], 32)
	}
	row := Row{Scenario: sc, Interval: p.Interval.Seconds(), DetectIntervals: -1}
	nic, egress, closeNIC, err := attachNIC(sc.SYN, p.Card)
	if err != nil {
		return row, err
	}
	defer func() { err = errors.Join(err, closeNIC()) }()
	env, err := newSpoofEnv(p, sc, clients)
	if err != nil {
		return row, err
	}
	if idealFor(sc) {
		// Before the daemon: the ideal filter takes the host's port.
		if err := idealPhase(ctx, p, sc, &row, env); err != nil {
			return row, fmt.Errorf("ideal filter: %w", err)
		}
	}
	dir, err := os.MkdirTemp("", "tierwall-spoof")
	if err != nil {
		return row, err
	}
	defer os.RemoveAll(dir)
	dmn, err := startSpoofDaemon(p, sc, dir)
	if err != nil {
		return row, err
	}
	defer dmn.Stop()
	// The daemon's XDP gave the host's port a NAPI: the host's CPU.
	if err := evalkit.PinNAPIFirst(lab.NSHost, lab.IfHost, evalkit.RxCPU); err != nil {
		return row, err
	}
	var host *datapath.Datapath
	if err := evalkit.InNS(lab.NSHost, -1, func() error { var e error; host, e = datapath.Open(lab.IfHost, ""); return e }); err != nil {
		return row, err
	}
	defer host.Close()
	rss := &maxRSS{pid: dmn.Cmd.Process.Pid}
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	go rss.watch(rctx)

	env.client, env.host = dmn.Client, host
	exch := &exchanger{}
	if len(sc.SrcPorts) > 0 {
		stop, err := exch.start(ctx, sc.SrcPorts)
		if err != nil {
			return row, err
		}
		defer stop()
	}
	warmFrom, err := spoofReference(ctx, p, sc, &row, env)
	if err != nil {
		return row, err
	}
	// attackFrom is when the attacker's first packet left: the flood's
	// start, or its spoofed ACKs'. The daemon's mitigations before it are
	// false positives; after it, answers to the attack.
	var attackFrom time.Time
	if sc.PreACKs > 0 {
		// The spoofed ACKs, then two intervals for the daemon to learn
		// from them, if it would.
		attackFrom = time.Now()
		if err := spoofACKs(sc, env.inetMAC, env.hostMAC); err != nil {
			return row, err
		}
		time.Sleep(2 * p.Interval)
		if row.KnownGoodGained[0], err = knownGoodOf(host, sc); err != nil {
			return row, err
		}
	}
	row.ExchBase = exch.take()

	tcp0, err := tcpStats()
	if err != nil {
		return row, err
	}
	var syns0, tx0 uint64
	if sc.SYN {
		removeSYNs, err := countStackSYNs()
		if err != nil {
			return row, err
		}
		defer removeSYNs()
		if syns0, err = stackSYNs(); err != nil {
			return row, err
		}
		if tx0, err = txRefused(); err != nil {
			return row, err
		}
	}
	v0, err := host.Stats()
	if err != nil {
		return row, err
	}
	load := &demo.Load{NewConns: sc.SYN, Rate: p.clientRate(sc)}
	actx, acancel := context.WithCancel(ctx)
	defer acancel()
	loadDone := make(chan struct{})
	go func() { load.Run(actx, lab.NSInet, env.url, env.others); close(loadDone) }()
	var watched *demo.Load
	if sc.SpoofClient {
		watched = &demo.Load{Rate: p.clientRate(sc)}
		go watched.Run(actx, lab.NSInet, env.url, clients[:1])
	}

	// The flood; XDP's counters sampled so the share from the third
	// interval on can be read.
	smp := &xdpSampler{host: host, nic: nic}
	sctx, scancel := context.WithCancel(ctx)
	go smp.run(sctx)
	// Every time below counts from the flood's first frame, not from
	// when the generators were asked to start: their set-up (sockets,
	// XDP programs, source tables) is not the attack.
	var (
		start          time.Time
		okAtStart      uint64
		watchedAtStart uint64
		atkCPU         evalkit.CPUMark
		once           sync.Once
		begun          = make(chan struct{})
	)
	began := func(t time.Time) {
		once.Do(func() {
			start, okAtStart, atkCPU = t, load.OK.Load(), evalkit.MarkCPU(evalkit.RxCPU)
			if watched != nil {
				watchedAtStart = watched.OK.Load()
			}
			close(begun)
		})
	}
	// The host's TCP counters and the clients' count at the third
	// interval: before the daemon's first decision the flood meets only
	// the kernel.
	third := &atThird{done: make(chan struct{}), syns: sc.SYN}
	go third.take(actx, begun, func() time.Time { return start.Add(3 * p.Interval) }, load)
	if sc.Warmup > 0 {
		if text, err := dmn.Client.Metrics(ctx); err == nil {
			row.EntropyLearned, row.AttacksOn = gauge(text, "tierwall_entropy_learned_intervals"), gauge(text, "tierwall_victim_attacks_on")
		}
		fmt.Fprintf(p.Log, "  as the main flood starts: the entropy detector learned %.0f intervals; %.0f attacks on\n", row.EntropyLearned, row.AttacksOn)
	}
	// The entropy detector's first detection of the main flood, polled
	// while it runs: the daemon keeps only its last 1,000 detections.
	entropy := make(chan time.Time, 1)
	if sc.Warmup > 0 {
		go firstEntropy(actx, dmn.Client, begun, func() time.Time { return start }, p.Interval/2, entropy)
	} else {
		entropy <- time.Time{}
	}
	var sent uint64
	var gerr error
	if sc.FirstFor > 0 {
		sent, gerr = env.flood(actx, lab.IfInet, sc.FirstFor, sc.FirstRate, began)
		if gerr == nil {
			var more uint64
			more, gerr = env.flood(actx, lab.IfInet, p.Attack-sc.FirstFor, env.floodRate, nil)
			sent += more
		}
	} else {
		sent, gerr = env.flood(actx, lab.IfInet, p.Attack, env.floodRate, began)
	}
	end := time.Now()
	okAtEnd := load.OK.Load()
	var watchedAtEnd uint64
	if watched != nil {
		watchedAtEnd = watched.OK.Load()
	}
	var atkPct float64
	select {
	case <-begun:
		atkPct = atkCPU.BusyPct()
	default:
	}
	scancel()
	acancel()
	<-loadDone
	if gerr != nil {
		return row, fmt.Errorf("generator: %w", gerr)
	}
	select {
	case <-begun:
	default:
		return row, errors.New("generator: no frame sent")
	}
	elapsed := end.Sub(start)
	row.HostCPUDuring = atkPct
	row.Sent = sent
	row.SentMpps = float64(row.Sent) / elapsed.Seconds() / 1e6
	row.AttackRPS = float64(okAtEnd-okAtStart) / elapsed.Seconds()
	if watched != nil {
		row.WatchedAttackRPS = float64(watchedAtEnd-watchedAtStart) / elapsed.Seconds()
	}
	if sc.PreACKs > 0 {
		if row.KnownGoodGained[1], err = knownGoodOf(host, sc); err != nil {
			return row, err
		}
	}
	row.ClientFails = load.Failed.Load()
	row.ExchAttack = exch.take()
	tcp1, err := row.hostAfter(host, egress, v0)
	if err != nil {
		return row, err
	}
	if err := dmn.Client.Do(ctx, "GET", "/v1/flowrules", nil, &row.FlowRules); err != nil {
		return row, fmt.Errorf("daemon flow rules: %w", err)
	}
	<-third.done
	if !third.at.IsZero() && end.After(third.at) {
		row.AttackRPSFrom3 = float64(okAtEnd-third.ok) / end.Sub(third.at).Seconds()
	}
	if third.tcp != nil {
		row.KernelCookiesFrom3 = tcp1["TcpExt:SyncookiesSent"] - third.tcp["TcpExt:SyncookiesSent"]
	}
	if sc.SYN {
		syns1, err := stackSYNs()
		if err != nil {
			return row, err
		}
		if third.synErr != nil {
			return row, third.synErr
		}
		row.SYNsToStack, row.SYNsToStackFrom3 = syns1-syns0, syns1-third.stackSYNs
		tx1, err := txRefused()
		if err != nil {
			return row, err
		}
		row.TxRefused = tx1 - tx0
	}
	row.PassiveOpens = tcp1["Tcp:PassiveOpens"] - tcp0["Tcp:PassiveOpens"]
	row.KernelCookies = tcp1["TcpExt:SyncookiesSent"] - tcp0["TcpExt:SyncookiesSent"]
	if sc.SYN {
		row.ClientConns = load.OK.Load() + load.Failed.Load()
	}

	row.fromThird(smp, start, elapsed, p.Interval)

	if entropyAt := <-entropy; sc.Warmup > 0 {
		row.EntropyAfter = -1
		if !entropyAt.IsZero() {
			row.EntropyAfter = max(entropyAt.Sub(start).Seconds(), 0) / p.Interval.Seconds()
		}
		fmt.Fprintf(p.Log, "  entropy detector: first detection of the main flood after %.1f intervals (-1: none)\n", row.EntropyAfter)
	}
	// The daemon's account: first mitigation, what it chose, bans on
	// clients.
	var events []apiv1.Event
	if err := dmn.Client.Do(ctx, "GET", "/v1/events", nil, &events); err != nil {
		return row, fmt.Errorf("daemon events: %w", err)
	}
	row.account(events, p, clients, spoofTimes{start: start, attackFrom: attackFrom, warmFrom: warmFrom})
	rcancel()
	row.DaemonMaxRSSMB, row.DaemonMaxAnonMB = rss.max.Load()>>20, rss.anon.Load()>>20
	return row, nil
}

// atThird is what is read at the flood's third interval: the host's TCP
// counters and the clients' completed requests, and when.
type atThird struct {
	tcp  map[string]uint64
	ok   uint64
	at   time.Time
	done chan struct{}
	// syns: also read the attack SYNs that reached the stack (stackSYNs).
	syns      bool
	stackSYNs uint64
	synErr    error
}

// take waits for the flood to begin, then for when (known once it has
// begun), and reads; it gives up with ctx.
func (a *atThird) take(ctx context.Context, begun <-chan struct{}, when func() time.Time, load *demo.Load) {
	defer close(a.done)
	select {
	case <-begun:
	case <-ctx.Done():
		return
	}
	select {
	case <-time.After(time.Until(when())):
		a.ok, a.at = load.OK.Load(), time.Now()
		a.tcp, _ = tcpStats()
		if a.syns {
			a.stackSYNs, a.synErr = stackSYNs()
		}
	case <-ctx.Done():
	}
}

// spoofEnv is what a scenario's phases share: the clients' URL, the
// clients run together and the one watched apart (SpoofClient), the
// flood and its rate, the daemon's API and the host's data plane.
type spoofEnv struct {
	url              string
	others, watched  []netip.Addr
	inetMAC, hostMAC net.HardwareAddr
	flood            func(ctx context.Context, iface string, dur time.Duration, rate uint64, began func(time.Time)) (uint64, error)
	floodRate        uint64
	client           *api.Client
	host             *datapath.Datapath
}

// newSpoofEnv is what a scenario's phases share before its daemon runs.
func newSpoofEnv(p Params, sc Scenario, clients []netip.Addr) (spoofEnv, error) {
	e := spoofEnv{url: hostURL(sc), others: clients, watched: clients[:1], floodRate: p.floodRate(sc)}
	if sc.SpoofClient {
		e.others = clients[1:] // the first is watched apart
	}
	var err error
	if e.hostMAC, err = lab.MAC(lab.NSHost, lab.IfHost); err != nil {
		return e, err
	}
	if e.inetMAC, err = lab.MAC(lab.NSInet, lab.IfInet); err != nil {
		return e, err
	}
	e.flood = (&spoofFlooder{sc: sc, inetMAC: e.inetMAC, hostMAC: e.hostMAC, background: p.Background}).run
	return e, nil
}

// spoofReference is a scenario's reference phase: the clients alone at
// the victim and the same flood into the sink, the daemon learning the
// victim and its clients meanwhile; with a Warmup, the flood at the
// victim first (its start returned). It fills the row's reference rates.
func spoofReference(ctx context.Context, p Params, sc Scenario, row *Row, e spoofEnv) (warmFrom time.Time, err error) {
	_, t0, _ := xdpCounts(e.host)
	// Reference: the clients alone at the victim, the same flood into the
	// sink; the daemon learns the victim and its clients meanwhile.
	base := &demo.Load{NewConns: sc.SYN, Rate: p.clientRate(sc)}
	refStart, refLen := time.Now(), p.Baseline
	if sc.Warmup > 0 {
		refLen += sc.Warmup + WarmupQuiet
	}
	bctx, bcancel := context.WithTimeout(ctx, refLen)
	defer bcancel()
	baseDone := make(chan struct{})
	refCPU := evalkit.MarkCPU(evalkit.RxCPU)
	go func() { base.Run(bctx, lab.NSInet, e.url, e.others); close(baseDone) }()
	var watchedBase *demo.Load
	var okFrom, watchedFrom uint64
	xdpTotal := func() uint64 { _, t, _ := xdpCounts(e.host); return t }
	if sc.SpoofClient {
		// The spoofed client's own rate, apart from the others'.
		watchedBase = &demo.Load{Rate: p.clientRate(sc)}
		go watchedBase.Run(bctx, lab.NSInet, e.url, e.watched)
	}
	if sc.Warmup > 0 {
		wstart := time.Now()
		warmFrom = wstart
		if _, err := e.flood(bctx, lab.IfInet, sc.Warmup, e.floodRate, nil); err != nil && bctx.Err() == nil {
			return warmFrom, fmt.Errorf("warm-up flood: %w", err)
		}
		if row.EntropyWarmup, err = entropyDetections(ctx, e.client, wstart); err != nil {
			return warmFrom, err
		}
		fmt.Fprintf(p.Log, "  warm-up flood %v: %d entropy detections (the baseline learning)\n", sc.Warmup, row.EntropyWarmup)
		// The reference rates count from here: the warm-up is not the
		// clients' normal.
		okFrom, t0 = base.OK.Load(), xdpTotal()
		if watchedBase != nil {
			watchedFrom = watchedBase.OK.Load()
		}
	}
	refFrom := time.Now()
	_, ferr := e.flood(bctx, sinkIf, refLen-time.Since(refStart), e.floodRate, nil)
	<-baseDone
	bcancel()
	row.HostCPUBefore, row.ClientPace = refCPU.BusyPct(), p.clientRate(sc)
	if ferr != nil && bctx.Err() == nil {
		return warmFrom, fmt.Errorf("generator into the sink: %w", ferr)
	}
	refSecs := time.Since(refFrom).Seconds()
	row.BaselineRPS = float64(base.OK.Load()-okFrom) / refSecs
	if watchedBase != nil {
		row.WatchedBaseRPS = float64(watchedBase.OK.Load()-watchedFrom) / refSecs
	}
	_, t1, _ := xdpCounts(e.host)
	row.BaselinePassPPS = float64(t1-t0) / refSecs
	return warmFrom, nil
}

// fromThird fills the row's shares from the third interval on (the
// flood began at start and lasted elapsed) from the sampler's counts.
func (row *Row) fromThird(smp *xdpSampler, start time.Time, elapsed, interval time.Duration) {
	// From the third interval on: XDP's drops over the flood's packets
	// that reached XDP then (every packet XDP saw, less the clients', at
	// their reference rate). Packets the generator sent that never reached
	// XDP (the veth rings between, full at the generator's rate) are
	// counted apart: they are lost to the attacker and cost the host
	// nothing.
	t3 := start.Add(3 * interval)
	s3, sEnd, ruleAt := smp.at(t3)
	if !ruleAt.IsZero() {
		row.RuleInXDP = ruleAt.Sub(start).Seconds() / interval.Seconds()
	}
	if !s3.at.IsZero() {
		row.Sample3Lag = t3.Sub(s3.at).Seconds()
	}
	if !s3.at.IsZero() && sEnd.at.After(s3.at) {
		row.PassedFrom3 = sEnd.passed - s3.passed
		window := sEnd.at.Sub(s3.at).Seconds()
		legit := row.BaselinePassPPS * window
		if arrived := float64(sEnd.total-s3.total) - legit; arrived > 0 {
			row.DroppedFrom3 = min(float64(sEnd.drops-s3.drops)/arrived, 1)
		}
		if sent := float64(row.Sent) * window / elapsed.Seconds(); sent > 0 {
			row.ReachedXDP = min((float64(sEnd.total-s3.total)-legit)/sent, 1)
		}
	}
}

// hostAfter reads, after the flood, the host's TCP counters (returned),
// what the NIC's transmit side sent to the internet (egress: nil in
// floods without one) and XDP's verdicts since v0 into the row.
func (row *Row) hostAfter(host *datapath.Datapath, egress *nicstage.Egress, v0 *datapath.Stats) (map[string]uint64, error) {
	tcp1, err := tcpStats()
	if err != nil {
		return nil, err
	}
	if egress != nil {
		st, err := egress.Stats()
		if err != nil {
			return nil, err
		}
		row.EgressInternet = st["internet"].Packets
	}
	v1, err := host.Stats()
	if err != nil {
		return nil, err
	}
	row.Verdicts = map[string]uint64{}
	for v, c := range v1.Verdicts {
		if d := c.Packets - v0.Verdicts[v].Packets; d > 0 {
			row.Verdicts[v] = d
		}
	}
	return tcp1, nil
}

// spoofTimes are a scenario's moments: the main flood's first frame, the
// attacker's first packet (its spoofed ACKs, or the flood), the warm-up
// flood's start (zero: none).
type spoofTimes struct{ start, attackFrom, warmFrom time.Time }

// account reads the daemon's events into row: what it put in force
// before the flood (false positives), its first mitigation, what it
// chose, slow intervals, the widest ban and bans that covered a client.
func (row *Row) account(events []apiv1.Event, p Params, clients []netip.Addr, t spoofTimes) {
	legit := map[netip.Addr]bool{lab.Client4: true}
	for _, c := range clients {
		legit[c] = true
	}
	for _, e := range events {
		if t.attackFrom.IsZero() {
			t.attackFrom = t.start
		}
		if !t.warmFrom.IsZero() && !e.Time.Before(t.warmFrom) && e.Time.Before(t.start) {
			continue // the warm-up flood's answer and its withdrawal
		}
		if e.Time.Before(t.attackFrom) {
			// Clients alone: anything the daemon put in force then
			// was a false positive, reported as such.
			if e.Kind == "ban" || e.Kind == "mitigation" {
				row.BeforeFlood = append(row.BeforeFlood, e.Kind+": "+e.Detail)
			}
			continue
		}
		switch e.Kind {
		case "slow":
			fmt.Fprintf(p.Log, "  daemon slow: %s\n", e.Detail)
			row.SlowIntervals = append(row.SlowIntervals, e.Detail)
		case "refused", "error", "overflow":
			if e.Kind == "error" {
				fmt.Fprintf(p.Log, "  daemon error: %s\n", e.Detail)
			}
			if len(row.Mitigations) < 6 {
				row.Mitigations = append(row.Mitigations, e.Kind+": "+e.Detail)
			}
		case "ban", "mitigation":
			if row.DetectIntervals < 0 {
				row.DetectIntervals = max(e.Time.Sub(t.start).Seconds(), 0) / p.Interval.Seconds() // 0: in force before the flood (its spoofed ACKs met it)
			}
			if e.Kind == "mitigation" && len(row.Mitigations) < 6 {
				row.Mitigations = append(row.Mitigations, e.Detail)
			}
			if e.Kind == "ban" && e.Prefix.IsValid() {
				if w, err := netip.ParsePrefix(row.WidestBan); err != nil || e.Prefix.Bits()-e.Prefix.Addr().BitLen() < w.Bits()-w.Addr().BitLen() {
					row.WidestBan = e.Prefix.String()
				}
				for c := range legit {
					if e.Prefix.Contains(c) {
						row.ClientsBanned = append(row.ClientsBanned, e.Prefix.String()+" ("+e.Detail+")")
						break
					}
				}
			}
		}
	}
}

// hostURL is the page the clients fetch: the host's IPv6 address when
// the scenario's clients are IPv6.
func hostURL(sc Scenario) string {
	if sc.Clients6 {
		return "http://[" + lab.Host6.String() + "]/"
	}
	return "http://" + lab.Host4.String() + "/"
}

// floodRate is the scenario's rate, or the run's.
func (p Params) floodRate(sc Scenario) uint64 {
	if sc.Rate != 0 {
		return sc.Rate
	}
	return p.Rate
}

// clientRate is one client's pace in sc.
func (p Params) clientRate(sc Scenario) float64 {
	if sc.SYN {
		return p.ConnRate
	}
	return p.ClientRate
}
