// SPDX-License-Identifier: Apache-2.0

package detect

import (
	"fmt"
	"iter"
	"net/netip"
	"slices"
	"strings"

	"github.com/tierwall/tierwall/internal/rule"
)

// Victims detects floods per victim (destination), not per source: a
// flood from a million spoofed addresses is invisible one source at a
// time and, to the entropy detector, looks like a busy hour, but its
// victim sees its packet, byte or SYN rate leave its baseline, and its
// source population change in ways that do not scale away: how many
// distinct sources, how many never seen in the recent past, and what
// share of them send one or two packets. Detection needs no concentration
// of the attack anywhere: it fires on the victim's numbers in the first
// interval of the flood.
//
// For each attacked victim a mitigation ladder (ladder.go) picks the
// narrowest rule that stops the flood without touching the victim's
// known-good clients. Observe returns every decision as a value: what to
// apply, what to withdraw and why; it changes nothing outside its own
// state, so a monitor-only daemon logs what an enforcing one applies.
//
// Memory, whatever the traffic: at most MaxVictims destinations (288
// bytes each and a map slot: ~1.3 MiB at 4096), the known-good set
// (Good.Cap entries of 40 bytes and a map slot: ~5 MiB at 65536), two
// Bloom filters (512 KiB), and per-interval scratch of 4 bytes per
// destination of the interval plus 24 per judged destination (at most
// 2·MaxVictims), dropped when far larger than the interval needs.
// Nothing grows with the number of sources.
type Victims struct {
	Config VictimConfig
	// Good is the known-good set, learned from clean intervals; the
	// daemon pushes its members into the data plane.
	Good KnownGood
	// Groups give destinations in host groups their own thresholds and
	// action (nil: none).
	Groups *HostGroups
	// Protects reports whether the daemon protects a destination (this
	// host's addresses, the protected and host-group prefixes): only
	// their clients can become known-good. nil: none.
	Protects func(netip.Addr) bool
	// Connections lists this host's TCP connections past their
	// handshake, as (remote, local) addresses (nil: none); read only in
	// an interval whose feature buffers overflowed (learnGood).
	Connections func() iter.Seq2[netip.Addr, netip.Addr]

	idx     map[Key]int32
	vs      []victimState
	hand    int // clock hand for eviction sampling
	epoch   uint32
	recent  *recentSources
	nextID  uint64
	attacks int // victims with an attack on

	// Per-interval scratch, kept between intervals.
	dslot  []int32 // position in Traffic.Dests → position in acc, -1: not judged
	dprot  []bool  // position in Traffic.Dests → protected (learnGood)
	acc    []destAcc
	totals map[*PortProfile]uint64
	sizes  *synSizes // the host's clean SYN sizes (synsize.go)
}

// quietDest marks, in dslot, a destination too quiet to judge
// (TrackPPS), whose traffic is learned from as clean.
const quietDest = -2

// destAcc is one judged destination's source population this interval.
type destAcc struct {
	dst                int32 // position in Traffic.Dests
	distinct, new, few uint32
	vi                 int32 // position in vs, -1: untracked
	clean              bool
}

// VictimConfig holds the detector's thresholds; zero fields take the
// defaults in parentheses.
type VictimConfig struct {
	MaxVictims int     // destinations with state (4096)
	TrackPPS   float64 // a destination gets state (a baseline) from this rate (100)
	K          float64 // threshold = mean + K·band (4)
	RelFloor   float64 // band at least this share of the mean (0.25)
	// Floors: never an attack below these, learned baseline or not.
	MinPPS        float64 // victim packets/s (1000)
	MinSYNPPS     float64 // victim SYN/s (500)
	MinNewSources float64 // band floor of the new-source count (50)
	// Cold thresholds judge a victim without a learned baseline (fewer
	// than LearnIntervals clean intervals, or no room to track it).
	ColdPPS        float64 // (50000)
	ColdNewSources float64 // (5000)
	LearnIntervals int     // clean intervals before the baseline is used (5)

	// Ladder.
	Coverage      float64 // share of the excess traffic a rung must match (0.9)
	MaxSourceBans int     // source bans per victim at most (16)
	HeavyFactor   float64 // a ban-worthy source sends ≥ this × the baseline per-source rate (10)
	HeavyMinPPS   float64 // and at least this (500)
	SevereFactor  float64 // prefix rules need the victim at ≥ this × its baseline (10)
	MinBits4      int     // coarsest IPv4 prefix (16: wider spoofed floods get flow rules on the victim)
	MaxBits4      int     // finest IPv4 prefix of the prefix rung (24)
	MinBits6      int     // coarsest IPv6 prefix (48)
	MaxBits6      int     // finest IPv6 prefix (64)
	PortShare     float64 // a port (or set of amplification ports) is named at this share (0.8)
	SYNShare      float64 // share of the victim's TCP that is SYN in a SYN flood (0.5)
	// AmpPorts are the UDP source ports of reflection floods; a victim
	// whose clean traffic had less than AmpBaselineShare (0.01) of its
	// UDP from one of them gets a drop rule for it, else a rate-limit.
	AmpPorts         []uint16
	AmpBaselineShare float64
	// SYNSizeDrop adds to a SYN flood's cookies a drop of its SYN sizes
	// that clean traffic sent at under AmpBaselineShare of the victim's
	// clean SYN rate (synsize.go); off by default.
	SYNSizeDrop  bool
	RateFactor   float64 // rate-limit = max(RateFactor × baseline pps, RateFloorPPS) (4)
	RateFloorPPS float64 // (1000)

	// Withdrawal: offered traffic (passed + dropped by the mitigation)
	// under mean + WithdrawK·band for WithdrawAfter intervals in a row.
	WithdrawK     float64 // (1): below the detection threshold, for hysteresis
	WithdrawAfter int     // (5)
	// EscalateAfter intervals in a row with the passed traffic still over
	// threshold add the next mitigation (at most MaxMitigations per
	// victim).
	EscalateAfter  int // (2)
	MaxMitigations int // (3)
	// RecentRotate is how many intervals a source stays "recent" (one to
	// two times this) for the new-source count (300).
	RecentRotate int
}

// DefaultAmpPorts are UDP services abused for reflection and
// amplification: chargen, DNS, portmap, NTP, NetBIOS, SNMP, CLDAP, ARD,
// WS-Discovery, SSDP, mDNS, Ubiquiti discovery, memcached.
var DefaultAmpPorts = []uint16{19, 53, 111, 123, 137, 161, 389, 3283, 3702, 1900, 5353, 10001, 11211}

func (c *VictimConfig) defaults() {
	f := func(v *float64, d float64) {
		if *v <= 0 {
			*v = d
		}
	}
	i := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	i(&c.MaxVictims, 4096)
	f(&c.TrackPPS, 100)
	f(&c.K, 4)
	f(&c.RelFloor, 0.25)
	f(&c.MinPPS, 1000)
	f(&c.MinSYNPPS, 500)
	f(&c.MinNewSources, 50)
	f(&c.ColdPPS, 50000)
	f(&c.ColdNewSources, 5000)
	i(&c.LearnIntervals, 5)
	f(&c.Coverage, 0.9)
	i(&c.MaxSourceBans, 16)
	f(&c.HeavyFactor, 10)
	f(&c.HeavyMinPPS, 500)
	f(&c.SevereFactor, 10)
	i(&c.MinBits4, 16)
	i(&c.MaxBits4, 24)
	i(&c.MinBits6, 48)
	i(&c.MaxBits6, 64)
	f(&c.PortShare, 0.8)
	f(&c.SYNShare, 0.5)
	if c.AmpPorts == nil {
		c.AmpPorts = DefaultAmpPorts
	}
	if len(c.AmpPorts) > maxAmp {
		c.AmpPorts = c.AmpPorts[:maxAmp]
	}
	f(&c.AmpBaselineShare, 0.01)
	f(&c.RateFactor, 4)
	f(&c.RateFloorPPS, 1000)
	f(&c.WithdrawK, 1)
	i(&c.WithdrawAfter, 5)
	i(&c.EscalateAfter, 2)
	i(&c.MaxMitigations, 3)
	i(&c.RecentRotate, 300)
}

// maxAmp bounds the amplification ports with a per-victim baseline.
const maxAmp = 16

// victimState is what the detector keeps per destination.
type victimState struct {
	key  Key
	last uint32 // epoch last seen
	// Baselines of the rates (per second) and of the source population
	// (per interval).
	pps, bps, syn, tcp, udp baseline
	srcs, news, few         baseline
	amp                     [maxAmp]float32 // EWMA share of UDP packets from each AmpPorts source port
	attack                  *attackState
}

func (v *victimState) learned(n int) bool { return v.pps.n >= uint32(n) }

// attackState is an attack in progress on one victim.
type attackState struct {
	since  uint32 // epoch it was detected
	quiet  int    // intervals in a row with the offered rate under the withdraw threshold
	hot    int    // intervals in a row with the passed traffic still anomalous
	active []Mitigation
}

// Input is what the daemon hands Observe each interval.
type Input struct {
	// Traffic is the interval's passed traffic (required).
	Traffic *Traffic
	// Ports is the port profile of the same traffic; nil: no port is
	// ever named in a rule and reflection is not recognised.
	Ports *PortProfile
	// VictimPorts, when set, gives a victim's own port profile (nil: use
	// Ports).
	VictimPorts func(victim netip.Addr) *PortProfile
	// Dropped is, per victim with an active mitigation, the packets its
	// rules dropped this interval (their matched-packet counters'
	// growth, less what a rate-limit passed): passed plus dropped is the
	// offered rate that decides withdrawal. Without it, a mitigation that
	// works would be withdrawn after WithdrawAfter intervals and put back
	// when the flood shows again.
	Dropped map[netip.Addr]uint64
}

// Decision is what one interval concluded.
type Decision struct {
	// Attacks are the victims judged under attack this interval (new or
	// ongoing), with the numbers behind the judgement.
	Attacks []Judgement
	// Apply are new mitigations; a victim may gain one more when the
	// earlier ones do not stop its flood.
	Apply []Mitigation
	// Withdraw are mitigations whose attack is over.
	Withdraw []Withdrawal
	// Unjudged counts destinations this interval that were not judged
	// (more busy destinations than 2·MaxVictims).
	Unjudged int
}

// Judgement is one victim's anomaly.
type Judgement struct {
	Victim   netip.Addr `json:"victim"`
	New      bool       `json:"new"` // the attack started this interval
	Evidence Evidence   `json:"evidence"`
	// HostGroup is the victim's host group and Action what it leads to
	// (both empty outside any group).
	HostGroup string `json:"hostgroup,omitempty"`
	Action    string `json:"action,omitempty"`
}

// judgement is one victim's Judgement, with its host group.
func judgement(victim netip.Addr, isNew bool, ev Evidence, g *HostGroup) Judgement {
	j := Judgement{Victim: victim, New: isNew, Evidence: ev}
	if g != nil {
		j.HostGroup, j.Action = g.Name, g.Action.String()
	}
	return j
}

// Withdrawal ends a mitigation.
type Withdrawal struct {
	ID         uint64     `json:"id"`
	Victim     netip.Addr `json:"victim"`
	Rung       Rung       `json:"rung"`
	Reason     string     `json:"reason"`
	OfferedPPS float64    `json:"offered_pps"`
}

// Signals are the tests that fired for a victim.
type Signals uint16

const (
	SigPPS     Signals = 1 << iota // packets/s over baseline
	SigBPS                         // bits/s over baseline
	SigSYN                         // SYN/s over baseline
	SigTCP                         // TCP packets/s over baseline
	SigUDP                         // UDP packets/s over baseline
	SigSources                     // distinct sources over baseline
	SigNew                         // new sources over baseline
	SigFew                         // share of one- or two-packet sources over baseline
	SigCold                        // judged without a learned baseline
	sigVolume  = SigPPS | SigBPS | SigSYN | SigTCP | SigUDP
	sigPop     = SigSources | SigNew | SigFew
)

var signalNames = []string{"pps", "bps", "syn", "tcp", "udp", "sources", "new-sources", "few-packet-sources", "cold"}

func (s Signals) String() string {
	var out []string
	for i, n := range signalNames {
		if s&(1<<i) != 0 {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ",")
}

// MarshalText makes signals readable in JSON.
func (s Signals) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Evidence is the measured numbers behind a judgement or a mitigation.
type Evidence struct {
	Signals      Signals `json:"signals"`
	PPS          float64 `json:"pps"`
	BPS          float64 `json:"bps"`
	SYNPPS       float64 `json:"syn_pps"`
	TCPPPS       float64 `json:"tcp_pps"`
	UDPPPS       float64 `json:"udp_pps"`
	Sources      int     `json:"sources"`
	NewSources   int     `json:"new_sources"`
	FewShare     float64 `json:"few_packet_share"`
	BaselinePPS  float64 `json:"baseline_pps"`
	ThresholdPPS float64 `json:"threshold_pps"`
	BaselineSYN  float64 `json:"baseline_syn_pps"`
	BaselineSrcs float64 `json:"baseline_sources"`
	BaselineNew  float64 `json:"baseline_new_sources"`
	// Covered is the share of the traffic above baseline that the
	// mitigation's rules match (0 for a judgement).
	Covered float64 `json:"covered"`
}

// NewVictims makes a detector with config c (zero fields: defaults).
func NewVictims(c VictimConfig) *Victims {
	c.defaults()
	v := &Victims{Config: c, idx: make(map[Key]int32, c.MaxVictims), vs: make([]victimState, 0, c.MaxVictims),
		recent: newRecentSources(c.RecentRotate)}
	v.Good.defaults()
	return v
}

// Attacks is the number of victims with an attack on.
func (v *Victims) Attacks() int { return v.attacks }

// Tracked is the number of destinations with state (at most MaxVictims).
func (v *Victims) Tracked() int { return len(v.vs) }

// Baseline reports a victim's learned packet rate and whether it is
// learned.
func (v *Victims) Baseline(a netip.Addr) (pps float64, ok bool) {
	if i, found := v.idx[KeyOf(a.Unmap())]; found {
		s := &v.vs[i]
		return s.pps.mean, s.learned(v.Config.LearnIntervals)
	}
	return 0, false
}

// Active is every mitigation in force, by victim.
func (v *Victims) Active() []Mitigation {
	var out []Mitigation
	for i := range v.vs {
		if a := v.vs[i].attack; a != nil {
			out = append(out, a.active...)
		}
	}
	return out
}

// Observe judges one interval and returns what to apply and withdraw.
func (v *Victims) Observe(in Input) Decision {
	t := in.Traffic
	c := &v.Config
	v.epoch++
	if v.totals == nil {
		v.totals = map[*PortProfile]uint64{}
	}
	clear(v.totals)
	var dec Decision
	secs := t.Interval.Seconds()
	if secs <= 0 {
		return dec
	}

	// Which destinations to judge: the tracked ones and those busy enough
	// to deserve a baseline, at most 2·MaxVictims. A spray of quiet
	// destinations costs a scan, no state.
	if cap(v.dslot) < len(t.Dests) || cap(v.dslot) > 4*max(len(t.Dests), 1024) {
		v.dslot = make([]int32, len(t.Dests))
	}
	v.dslot = v.dslot[:len(t.Dests)]
	v.acc = v.acc[:0]
	minPkts := c.TrackPPS * secs
	untracked := 0
	for i := range t.Dests {
		v.dslot[i] = -1
		vi, tracked := v.idx[t.dsts.keys[i]]
		if !tracked && float64(t.Dests[i].Packets) < minPkts && !v.Groups.Lookup(t.DestAddr(i)).judged(t.Rate(t.Dests[i].Packets)) {
			// Too quiet to be attacked or worth a baseline, but its
			// clients are clients: learned from like a clean victim's.
			v.dslot[i] = quietDest
			continue
		}
		if !tracked {
			// The tracked destinations are always judged (at most
			// MaxVictims); new ones up to as many again, so a spray of
			// busy destinations cannot push a known victim out of
			// judgement.
			if untracked >= c.MaxVictims {
				dec.Unjudged++
				continue
			}
			untracked++
			vi = -1
		} else {
			// Seen now: no newcomer judged before it may evict it.
			v.vs[vi].last = v.epoch
		}
		v.dslot[i] = int32(len(v.acc))
		v.acc = append(v.acc, destAcc{dst: int32(i), vi: vi})
	}

	// The source population of each judged destination: one pass over the
	// pairs, a Bloom lookup each. A source sending two protocols to one
	// victim counts twice; the baseline counts the same way.
	for _, p := range t.Pairs {
		s := v.dslot[p.Dst]
		if s < 0 {
			continue // not judged
		}
		a := &v.acc[s]
		a.distinct++
		if p.Packets <= 2 {
			a.few++
		}
		if !v.recent.seen(t.srcs.keys[p.Src]) {
			a.new++
		}
	}

	for ai := range v.acc {
		a := &v.acc[ai]
		if a.vi < 0 {
			a.vi = v.track(t.dsts.keys[a.dst])
		}
		v.judge(in, a, &dec)
	}
	// Victims under attack that sent nothing through this interval (every
	// packet dropped, or the flood moved on): only their offered rate
	// counts.
	for i := range v.vs {
		s := &v.vs[i]
		if s.attack != nil && s.last != v.epoch {
			s.last = v.epoch
			v.settle(in, s, 0, false, false, &dec)
		}
	}

	// Learn from clean destinations only, and only from complete
	// intervals (with overflow the counts are short).
	if t.Overflow == 0 {
		for _, p := range t.Pairs {
			s := v.dslot[p.Dst]
			if s == -1 || s >= 0 && !v.acc[s].clean {
				continue
			}
			v.recent.add(t.srcs.keys[p.Src])
		}
	}
	clean := t.Overflow == 0 && v.attacks == 0 && dec.Unjudged == 0 && len(dec.Attacks) == 0
	for i := range v.acc {
		clean = clean && v.acc[i].clean
	}
	if v.sizes == nil {
		v.sizes = new(synSizes)
	}
	v.sizes.observe(in.Ports, secs, clean)
	v.learnGood(t)
	v.learnConnected(t)
	v.recent.tick()
	v.Good.tick(v.attacks > 0)
	return dec
}

// learnGood offers the known-good set the TCP and UDP sources of the
// destinations the daemon protects, in any interval: membership is the
// kernel's word (KnownGood.Verify), which a flood cannot fake, so it is
// asked during attacks too (a restart in the middle of one must not leave
// the clients out). Traffic to anything else (a quiet destination behind
// this host, an address it does not own) teaches nothing: spoofed ACKs to
// them made members before.
func (v *Victims) learnGood(t *Traffic) {
	if v.Protects == nil {
		return
	}
	if cap(v.dprot) < len(t.Dests) {
		v.dprot = make([]bool, len(t.Dests), max(len(t.Dests), 64))
	}
	v.dprot = v.dprot[:len(t.Dests)]
	some := false
	for i := range t.Dests {
		v.dprot[i] = v.Protects(t.DestAddr(i))
		some = some || v.dprot[i]
	}
	if !some {
		return
	}
	for i, p := range t.Pairs {
		if !v.dprot[p.Dst] || t.PairProto(i) == 0 {
			continue
		}
		v.Good.see(t.srcs.keys[p.Src], t.DestAddr(int(p.Dst)), t.PairNonSYN(i))
	}
}

// learnConnected joins, in an interval whose feature buffers overflowed,
// the remote ends of this host's connections to the destinations it
// protects. A random-source flood fills the buffers within milliseconds of
// each interval, and the traffic then holds only the sources of its first
// packets: a client that connected during the flood was never asked about
// and could not join, so the flood's rate limit held it and the prefix
// rung could not see it; members that kept talking were not verified
// again and left after MaxAge. The kernel's table is the same proof the
// traffic leads to (verifyHandshake), read without the traffic.
func (v *Victims) learnConnected(t *Traffic) {
	if t.Overflow == 0 || v.Connections == nil || v.Protects == nil {
		return
	}
	prot := map[netip.Addr]bool{}
	for remote, local := range v.Connections() {
		p, ok := prot[local]
		if !ok {
			p = v.Protects(local)
			prot[local] = p
		}
		if p {
			v.Good.vouched(KeyOf(remote))
		}
	}
}

// track finds room for a destination's state: a new entry under
// MaxVictims, else one of a sample of entries that are idle (unseen for
// 4·RecentRotate intervals) or not yet learned, and not under attack; -1
// when there is none (the destination is judged cold, without state).
func (v *Victims) track(k Key) int32 {
	if len(v.vs) < v.Config.MaxVictims {
		v.vs = append(v.vs, victimState{key: k, last: v.epoch})
		v.idx[k] = int32(len(v.vs) - 1)
		return int32(len(v.vs) - 1)
	}
	return v.evictFor(k, false)
}

// evictFor replaces one of a sample of entries by k: one idle or not yet
// learned, or with force (k is under attack) the least recently seen;
// never one under attack or seen this interval. -1 when none qualifies.
func (v *Victims) evictFor(k Key, force bool) int32 {
	idle := uint32(4 * v.Config.RecentRotate)
	best := -1
	for range evictSample {
		v.hand = (v.hand + 1) % len(v.vs)
		s := &v.vs[v.hand]
		if s.attack != nil || s.last == v.epoch {
			continue
		}
		if v.epoch-s.last > idle || !s.learned(v.Config.LearnIntervals) {
			best = v.hand
			break
		}
		if force && (best < 0 || s.last < v.vs[best].last) {
			best = v.hand
		}
	}
	if best < 0 {
		return -1
	}
	s := &v.vs[best]
	delete(v.idx, s.key)
	*s = victimState{key: k, last: v.epoch}
	v.idx[k] = int32(best)
	return int32(best)
}

// judge measures one destination against its baseline, starts or
// continues its attack, and marks it clean when nothing fired.
func (v *Victims) judge(in Input, a *destAcc, dec *Decision) {
	t, c := in.Traffic, &v.Config
	d := &t.Dests[a.dst]
	var s *victimState
	if a.vi >= 0 {
		s = &v.vs[a.vi]
		s.last = v.epoch
	} else {
		s = &victimState{key: t.dsts.keys[a.dst]} // untracked: judged cold, forgotten
	}
	victim := t.DestAddr(int(a.dst))
	g := v.Groups.Lookup(victim)
	ev := v.measure(t, d, a, s)
	g.apply(&ev)
	anomalous := ev.Signals&(sigVolume|sigPop) != 0
	// An attack is a volume anomaly, or new sources surging while the
	// rate is up at all: the source-population test is not
	// scale-invariant, so a spoofed flood too small to move the rate
	// past its threshold is still caught once it lifts it past one band.
	attack := ev.Signals&sigVolume != 0 ||
		(ev.Signals&SigNew != 0 && ev.PPS > s.pps.threshold(1, c.RelFloor, 0) && ev.PPS >= c.MinPPS && (g == nil || g.PPS == 0))
	if attack && a.vi < 0 {
		// An attacked destination deserves state (for its withdrawal)
		// more than any quiet one: make room if a sample allows.
		if a.vi = v.evictFor(s.key, true); a.vi >= 0 {
			s = &v.vs[a.vi]
		}
	}
	if s.attack == nil && attack && a.vi >= 0 {
		// Only a tracked victim keeps an attack (and its withdrawal);
		// an untracked one is still reported.
		s.attack = &attackState{since: v.epoch}
		v.attacks++
		dec.Attacks = append(dec.Attacks, judgement(victim, true, ev, g))
		if g != nil && g.Action == ActionMonitor {
			return // reported, tracked for its end, never mitigated
		}
		m := v.ladder(in, a.dst, s, ev, nil)
		s.attack.active = append(s.attack.active, m)
		dec.Apply = append(dec.Apply, m)
		return
	}
	if s.attack == nil {
		if attack { // untracked
			dec.Attacks = append(dec.Attacks, judgement(victim, true, ev, g))
			if g == nil || g.Action != ActionMonitor {
				dec.Apply = append(dec.Apply, v.ladder(in, a.dst, s, ev, nil))
			}
			return
		}
		if !anomalous {
			a.clean = true
			if in.Traffic.Overflow == 0 && a.vi >= 0 {
				v.learn(in, s, d, a)
			}
		}
		return
	}
	if attack {
		dec.Attacks = append(dec.Attacks, judgement(victim, false, ev, g))
	}
	v.settle(in, s, a.dst, attack, ev.Signals&sigPop != 0, dec)
}

// settle runs an ongoing attack's interval: withdraw after WithdrawAfter
// quiet intervals of offered traffic, escalate after EscalateAfter
// intervals in which the passed traffic alone stayed anomalous (hot; dst
// is then the victim's position in Traffic.Dests, judged this interval).
func (v *Victims) settle(in Input, s *victimState, dst int32, hot, pop bool, dec *Decision) {
	t, c := in.Traffic, &v.Config
	at := s.attack
	victim := s.key.Addr()
	var passed uint64
	if i := t.dsts.get(s.key); i >= 0 {
		passed = t.Dests[i].Packets
	}
	offered := t.Rate(passed + in.Dropped[victim])
	limit := max(s.pps.threshold(c.WithdrawK, c.RelFloor, 0), c.MinPPS)
	if !s.learned(c.LearnIntervals) {
		limit = c.MinPPS
	}
	// Only the MinPPS floor to withdraw against: a victim attacked before
	// its baseline was learned (attacked intervals teach nothing), or
	// learned while it was idle, before its clients came. Its clients'
	// own load above MinPPS held the attack on for good after the flood
	// (and the entropy detector, which learns only while no attack is
	// on, with it). Then the flood is gone when its flow rules drop
	// nothing and what passes shows no source-population anomaly (no
	// surge of new, few-packet sources): the clients' steady load. Bans
	// the attack made keep their own lifecycle (the rate monitor).
	floorOnly := limit == c.MinPPS
	if g := v.Groups.Lookup(victim); g != nil && g.PPS > 0 {
		limit, floorOnly = g.PPS, false // the group's threshold, learned baseline or not
	}
	rulesIdle := floorOnly && in.Dropped[victim] == 0 && !pop
	if offered < limit || rulesIdle {
		at.quiet++
	} else {
		at.quiet = 0
	}
	if at.quiet >= c.WithdrawAfter {
		why := fmt.Sprintf("offered %.0f pps (passed + dropped) under %.0f for %d intervals", offered, limit, at.quiet)
		if offered >= limit {
			why = fmt.Sprintf("its flow rules dropped nothing and no surge of new sources for %d intervals (no baseline above min_pps to judge its offered %.0f pps by)", at.quiet, offered)
		}
		for _, m := range at.active {
			dec.Withdraw = append(dec.Withdraw, Withdrawal{ID: m.ID, Victim: victim, Rung: m.Rung, OfferedPPS: offered,
				Reason: fmt.Sprintf("attack on %s over: %s", victim, why)})
		}
		s.attack = nil
		v.attacks--
		return
	}
	if !hot {
		at.hot = 0
		return
	}
	at.hot++
	// A monitored group's attack has no mitigation to escalate from.
	if at.hot < c.EscalateAfter || len(at.active) == 0 || len(at.active) >= c.MaxMitigations {
		return
	}
	a := v.acc[v.dslot[dst]]
	ev := v.measure(t, &t.Dests[dst], &a, s)
	v.Groups.Lookup(victim).apply(&ev)
	var m Mitigation
	if at.active[len(at.active)-1].Rung == RungFlowRule {
		switch {
		case !hasSYNCookie(at.active) && v.synFlood(t, &t.Dests[dst], ev, s):
			// A SYN flood on a victim without SYN cookies yet (its
			// rate-limit came for an earlier surge): the limit would
			// pass its rate of spoofed SYNs to the stack.
			m = v.synEscalation(in, dst, s, ev, at.active)
			if len(m.Rules) == 0 {
				return
			}
		default:
			// Flow rules are the last rung: a rate-limit passes up to
			// its rate by design, so what passes may well stay over the
			// threshold, and that alone is no reason to climb. A vector
			// that no rule in force matches is: an attacker who first
			// drew a rate-limit on one port (a surge of its own) then
			// flooded another, and 2.3M packets passed unopposed.
			// Only a rule that names a protocol is a vector: "no
			// protocol stands out, rate-limit all of it" over what the
			// rules in force let pass is their allowance, not a flood.
			m = v.ladder(in, dst, s, ev, at.active)
			if m.Rung == RungFlowRule {
				m.Rules = slices.DeleteFunc(uncovered(m.Rules, at.active), func(r rule.FlowRule) bool { return r.Proto == 0 })
				if len(m.Rules) == 0 {
					return
				}
				m.Reason = "new vector: " + m.Reason
			}
		}
	} else {
		m = v.ladder(in, dst, s, ev, at.active)
	}
	at.hot = 0
	at.active = append(at.active, m)
	dec.Apply = append(dec.Apply, m)
}

// uncovered are the rules of rs that no flow rule of ms already matches
// (the same or a wider match, whatever its action or rate).
func uncovered(rs []rule.FlowRule, ms []Mitigation) []rule.FlowRule {
	var out []rule.FlowRule
	for _, r := range rs {
		covered := false
		for _, m := range ms {
			for _, a := range m.Rules {
				covered = covered || matchCovers(a, r)
			}
		}
		if !covered {
			out = append(out, r)
		}
	}
	return out
}

// matchCovers reports whether every packet b matches, a matches too:
// each of a's fields is unset or the same as b's.
func matchCovers(a, b rule.FlowRule) bool {
	return a.Dst.Bits() <= b.Dst.Bits() && a.Dst.Contains(b.Dst.Addr()) &&
		(a.Proto == 0 || a.Proto == b.Proto) &&
		(a.DstPorts == rule.PortRange{} || a.DstPorts == b.DstPorts) &&
		(a.SrcPorts == rule.PortRange{} || a.SrcPorts == b.SrcPorts) &&
		(a.TCPFlags.Mask == 0 || a.TCPFlags == b.TCPFlags) &&
		(a.Length == rule.Range16{} || a.Length == b.Length) &&
		(a.Fragment == b.Fragment || a.Fragment == rule.FragmentMatch(0))
}

func hasSYNCookie(ms []Mitigation) bool {
	for _, m := range ms {
		for _, r := range m.Rules {
			if r.Action == rule.FlowSYNCookie {
				return true
			}
		}
	}
	return false
}

// measure computes a destination's numbers and which tests fire.
func (v *Victims) measure(t *Traffic, d *Dest, a *destAcc, s *victimState) Evidence {
	c := &v.Config
	ev := Evidence{PPS: t.Rate(d.Packets), BPS: 8 * t.Rate(d.Bytes), SYNPPS: t.Rate(d.SYNs),
		TCPPPS: t.Rate(d.TCP.Packets), UDPPPS: t.Rate(d.UDP.Packets),
		Sources: int(a.distinct), NewSources: int(a.new)}
	if a.distinct > 0 {
		ev.FewShare = float64(a.few) / float64(a.distinct)
	}
	if !s.learned(c.LearnIntervals) {
		ev.Signals = SigCold
		ev.ThresholdPPS = c.ColdPPS
		if ev.PPS > c.ColdPPS && !establishedTCP(d, ev) {
			ev.Signals |= SigPPS
		}
		if float64(a.new) > c.ColdNewSources {
			ev.Signals |= SigNew
		}
		return ev
	}
	k, rel := c.K, c.RelFloor
	ev.BaselinePPS, ev.BaselineSYN = s.pps.mean, s.syn.mean
	ev.BaselineSrcs, ev.BaselineNew = s.srcs.mean, s.news.mean
	ev.ThresholdPPS = max(s.pps.threshold(k, rel, 0), c.MinPPS)
	fire := func(sig Signals, x float64, b *baseline, floor float64) {
		if x > b.threshold(k, rel, 0) && x > floor {
			ev.Signals |= sig
		}
	}
	fire(SigPPS, ev.PPS, &s.pps, c.MinPPS)
	fire(SigBPS, ev.BPS, &s.bps, c.MinPPS*8*64)
	fire(SigSYN, ev.SYNPPS, &s.syn, c.MinSYNPPS)
	fire(SigTCP, ev.TCPPPS, &s.tcp, c.MinPPS)
	fire(SigUDP, ev.UDPPPS, &s.udp, c.MinPPS)
	if float64(a.new) > s.news.threshold(k, rel, c.MinNewSources) {
		ev.Signals |= SigNew
	}
	if float64(a.distinct) > s.srcs.threshold(k, rel, c.MinNewSources) {
		ev.Signals |= SigSources
	}
	if a.distinct >= 100 && ev.FewShare > max(s.few.mean+0.3, 0.5) {
		ev.Signals |= SigFew
	}
	return ev
}

// establishedTCP is a destination's traffic that, without a baseline,
// volume alone does not make an attack: at least 90% of it TCP without
// SYN (the rest of handshakes a spoofed source cannot answer) from
// sources that mostly send more than two packets. A busy server's own
// clients look like this when the daemon starts (measured: the demo's 256
// keep-alive clients at 58K pps on a faster host crossed the 50K cold
// threshold, and the prefix rung, with no client known-good yet, banned
// their /24). A flood that does not look like this (UDP, SYNs, spoofed
// one- or two-packet sources) still fires; one that does (an ACK flood
// from real hosts) is left to the per-source detectors until the
// baseline is learned.
func establishedTCP(d *Dest, ev Evidence) bool {
	if d.Packets == 0 || ev.FewShare >= 0.5 {
		return false
	}
	nonSYN := d.TCP.Packets - min(d.SYNs, d.TCP.Packets)
	return float64(nonSYN) >= 0.9*float64(d.Packets)
}

// learn feeds a clean interval to a victim's baselines.
func (v *Victims) learn(in Input, s *victimState, d *Dest, a *destAcc) {
	t := in.Traffic
	s.pps.learn(t.Rate(d.Packets))
	s.bps.learn(8 * t.Rate(d.Bytes))
	s.syn.learn(t.Rate(d.SYNs))
	s.tcp.learn(t.Rate(d.TCP.Packets))
	s.udp.learn(t.Rate(d.UDP.Packets))
	s.srcs.learn(float64(a.distinct))
	s.news.learn(float64(a.new))
	few := 0.0
	if a.distinct > 0 {
		few = float64(a.few) / float64(a.distinct)
	}
	s.few.learn(few)
	first := s.pps.n == 1
	if pp, _ := v.ports(in, s.key.Addr()); pp != nil {
		udp := v.udpTotal(pp)
		for i, port := range v.Config.AmpPorts {
			share := 0.0
			if udp > 0 {
				share = float64(pp.UDPSrc[port]) / float64(udp)
			}
			s.amp[i] += float32(ewmaAlpha * (share - float64(s.amp[i])))
			if first {
				s.amp[i] = float32(share)
			}
		}
	}
}

// udpTotal is the UDP packets of a profile, summed once per interval
// and profile: a sum over 65536 ports per clean victim would be most of
// an interval's work.
func (v *Victims) udpTotal(pp *PortProfile) uint64 {
	if n, ok := v.totals[pp]; ok {
		return n
	}
	var n uint64
	for _, x := range pp.UDPSrc {
		n += x
	}
	if len(v.totals) < 64 { // per-victim profiles: bounded cache, recomputed beyond
		v.totals[pp] = n
	}
	return n
}

// ports is the port profile to read for victim, and whether it is the
// victim's own (else it is shared by all traffic).
func (v *Victims) ports(in Input, victim netip.Addr) (pp *PortProfile, own bool) {
	if in.VictimPorts != nil {
		if p := in.VictimPorts(victim); p != nil {
			return p, true
		}
	}
	return in.Ports, false
}
