// SPDX-License-Identifier: Apache-2.0

package telemetry

import (
	"cmp"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/tierwall/tierwall/internal/control/detect"
)

// Kind is a slice of a destination's traffic with thresholds of its own.
type Kind uint8

const (
	KindAll Kind = iota
	KindUDP
	KindTCP
	KindSYN // TCP with SYN and without ACK
	KindICMP
	KindFrag
	kindAmp // first of the amplification source ports, in AmpPorts order
)

// AmpPorts are the UDP source ports of the reflection floods network mode
// counts apart: DNS, NTP, CLDAP, SSDP, memcached, chargen, SNMP (a subset
// of detect.DefaultAmpPorts, the ones seen in volumetric floods).
var AmpPorts = []uint16{53, 123, 389, 1900, 11211, 19, 161}

// NumKinds is the number of kinds, amplification ports included.
var NumKinds = int(kindAmp) + len(AmpPorts)

const numKinds = 13 // int(kindAmp) + len(AmpPorts), as a constant for arrays

var kindNames = []string{"all", "udp", "tcp", "syn", "icmp", "frag"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	if i := int(k - kindAmp); i < len(AmpPorts) {
		return fmt.Sprintf("amp:%d", AmpPorts[i])
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// MarshalText makes kinds readable in JSON.
func (k Kind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// ParseKind reads a kind's name: all, udp, tcp, syn, icmp, frag, or
// amp:PORT for one of AmpPorts.
func ParseKind(s string) (Kind, error) {
	if i := slices.Index(kindNames, s); i >= 0 {
		return Kind(i), nil
	}
	for i, p := range AmpPorts {
		if s == fmt.Sprintf("amp:%d", p) {
			return kindAmp + Kind(i), nil
		}
	}
	return 0, fmt.Errorf("kind %q is not all, udp, tcp, syn, icmp, frag or amp:PORT (PORT one of %v)", s, AmpPorts)
}

// Limits are the rates over which a kind is an attack; zero: not tested.
type Limits struct {
	PPS     float64 `json:"pps,omitempty"`
	BPS     float64 `json:"bps,omitempty"` // bits/s
	FlowsPS float64 `json:"flows_ps,omitempty"`
}

func (l Limits) set() bool { return l.PPS > 0 || l.BPS > 0 || l.FlowsPS > 0 }

// Thresholds are Limits per kind.
type Thresholds [numKinds]Limits

// GroupPolicy is network mode's part of a host group (detect.HostGroup
// holds its prefixes, its per-host pps, bps and SYN/s, and its action).
type GroupPolicy struct {
	// Host overrides the detector's per-host thresholds, per kind.
	Host Thresholds
	// Total is the group's traffic over all its addresses: a carpet
	// bombing sends each address less than its threshold.
	Total Thresholds
	// UplinkBPS is what the group's uplinks carry (bits/s): an attack
	// over it is blackholed (RTBH), since no filter behind a full link
	// helps. Zero: never blackholed, unless Uplinks says otherwise.
	UplinkBPS float64
	// Uplinks are the group's uplink interfaces: with no UplinkBPS, the
	// capacity is their ifSpeed from the sFlow counter samples
	// (Decoder.Uplinks); with one, they are only shown.
	Uplinks []Uplink
}

// DetectorConfig configures the detector; zero fields take the defaults
// in parentheses.
type DetectorConfig struct {
	// Tick is how often destinations are judged (100ms); Window the time
	// constant of the rates' exponential average (250ms): after a step to
	// R, the rate reads R·(1-e^(-t/Window)), 0.86 R after 2 windows.
	Tick, Window time.Duration
	// MinSamples is how many sampled packets (decayed like the rates)
	// a destination needs before it is judged (3): at 1:1000 one sample
	// reads as 4,000 pps in a 250 ms window.
	MinSamples float64
	// Host are the per-destination thresholds outside any group policy.
	Host Thresholds
	// Groups are the host groups (nil: none) and Policies their network
	// policy by name.
	Groups   *detect.HostGroups
	Policies map[string]GroupPolicy
	// MaxDests bounds the destinations with state (65536); traffic to
	// others still counts in its group's total.
	MaxDests int
	// WithdrawAfter: an attack is over after its traffic stayed under
	// half its thresholds this long (10s).
	WithdrawAfter time.Duration
	// Protects limits detection to the protected network (nil: every
	// destination is judged).
	Protects func(netip.Addr) bool
}

func (c *DetectorConfig) defaults() {
	if c.Tick <= 0 {
		c.Tick = 100 * time.Millisecond
	}
	if c.Window <= 0 {
		c.Window = 250 * time.Millisecond
	}
	if c.MinSamples <= 0 {
		c.MinSamples = 3
	}
	if c.MaxDests <= 0 {
		c.MaxDests = 65536
	}
	if c.WithdrawAfter <= 0 {
		c.WithdrawAfter = 10 * time.Second
	}
}

// rates are decayed sums: packets, bytes and flows per kind, and the raw
// samples behind them.
type rates struct {
	p, b, f [numKinds]float64
	samples float64
}

// summary is what the samples of a destination looked like: the
// signature a FlowSpec rule is built from.
type summary struct {
	sport, dport topPorts
	// lengths over the current and the previous window period
	minLen, maxLen    [2]uint16
	flagsOR, flagsAND uint8
	proto             [4]float64 // udp, tcp, icmp, other
	lenPeriod         int64
	haveFlags         bool
}

// topPorts is a space-saving top-4 of ports with decayed weights.
type topPorts struct {
	port [4]uint16
	w    [4]float64
}

func (t *topPorts) add(p uint16, w float64) {
	lo := 0
	for i := range t.port {
		if t.port[i] == p && t.w[i] > 0 {
			t.w[i] += w
			return
		}
		if t.w[i] < t.w[lo] {
			lo = i
		}
	}
	// Space-saving: the lightest entry is replaced and keeps its weight,
	// so that a port's weight is never under-counted.
	t.port[lo], t.w[lo] = p, t.w[lo]+w
}

func (t *topPorts) decay(a float64) {
	for i := range t.w {
		t.w[i] *= a
	}
}

// top is the heaviest port and its share of total.
func (t *topPorts) top(total float64) (uint16, float64) {
	best := 0
	for i := range t.w {
		if t.w[i] > t.w[best] {
			best = i
		}
	}
	if total <= 0 {
		return 0, 0
	}
	return t.port[best], min(1, t.w[best]/total)
}

// dest is one judged destination, or one group's total.
type dest struct {
	addr  netip.Addr
	group *detect.HostGroup // nil: none
	// stale: a group total whose group a reload removed (or whose total
	// policy it dropped), kept only until its attack ends.
	stale  bool
	tick   int64
	r      rates
	sum    summary
	attack *Attack
	first  time.Time // first record of the current episode (over MinSamples)
}

// Attack is a flood the feed shows: on one destination, or on a group's
// total (carpet bombing).
type Attack struct {
	ID string `json:"id"`
	// Dst is the victim, or for a carpet bombing the group's prefixes.
	Dst    []netip.Prefix `json:"dst"`
	Group  string         `json:"group,omitempty"`
	Carpet bool           `json:"carpet,omitempty"`
	// Kinds are those over their thresholds when detected.
	Kinds []Kind `json:"kinds"`
	// Rates at detection and peak (all kinds), scaled by sampling.
	PPS     float64 `json:"pps"`
	BPS     float64 `json:"bps"`
	FlowsPS float64 `json:"flows_ps"`
	PeakPPS float64 `json:"peak_pps"`
	PeakBPS float64 `json:"peak_bps"`
	// Signature is the sampled headers' summary.
	Signature Signature `json:"signature"`
	// FirstRecord is when the first record of the flood arrived (after a
	// quiet destination), Detected when it was judged an attack, Ended
	// when it was judged over (zero: on).
	FirstRecord time.Time `json:"first_record"`
	Detected    time.Time `json:"detected"`
	Ended       time.Time `json:"ended,omitzero"`
	Monitor     bool      `json:"monitor,omitempty"` // the group's action is monitor
	quietSince  time.Time
}

// Signature is what the attack's sampled headers had in common.
type Signature struct {
	// Proto is the IP protocol of at least 80% of the packets (0: mixed).
	Proto uint8 `json:"proto,omitempty"`
	// SrcPort and DstPort are a port of at least 80% of them (0: spread),
	// SrcPortShare and DstPortShare their shares.
	SrcPort      uint16  `json:"src_port,omitempty"`
	DstPort      uint16  `json:"dst_port,omitempty"`
	SrcPortShare float64 `json:"src_port_share"`
	DstPortShare float64 `json:"dst_port_share"`
	// MinLen and MaxLen are the IP lengths sampled.
	MinLen uint16 `json:"min_len"`
	MaxLen uint16 `json:"max_len"`
	// SYNOnly: every sampled TCP packet had SYN and no ACK.
	SYNOnly bool `json:"syn_only,omitempty"`
	// FragShare is the share of fragments.
	FragShare float64 `json:"frag_share"`
}

// Detector is the pipeline after the decoder: records scaled by their
// sampling rate feed per-destination and per-group rates, judged every
// tick. Safe for concurrent use: the collector adds, a ticker judges.
type Detector struct {
	cfg   DetectorConfig
	decay float64 // per tick

	mu     sync.Mutex
	dests  map[netip.Addr]*dest
	totals map[*detect.HostGroup]*dest // per group with a total policy, made on first use
	tick   int64
	// at is the latest time Add or Judge was given: how far into its
	// tick a destination's sums are (filled).
	at        time.Time
	untracked uint64 // records to destinations past MaxDests
	outside   uint64 // records to destinations outside Protects
	attacks   []*Attack
	ended     []Attack // recent, newest last, at most maxEnded
	nextID    uint64
}

const maxEnded = 64

// NewDetector returns a detector.
func NewDetector(cfg DetectorConfig) *Detector {
	cfg.defaults()
	return &Detector{cfg: cfg, dests: map[netip.Addr]*dest{}, totals: map[*detect.HostGroup]*dest{},
		decay: math.Exp(-float64(cfg.Tick) / float64(cfg.Window))}
}

// total is g's total, nil when its policy judges none.
func (d *Detector) total(g *detect.HostGroup, t int64) *dest {
	if g == nil {
		return nil
	}
	if s := d.totals[g]; s != nil {
		return s
	}
	if p, ok := d.cfg.Policies[g.Name]; !ok || p.Total == (Thresholds{}) {
		return nil
	}
	s := &dest{group: g, tick: t}
	d.totals[g] = s
	return s
}

// tickAt is the tick number of a time.
func (d *Detector) tickAt(now time.Time) int64 { return now.UnixNano() / int64(d.cfg.Tick) }

// catchUp decays s to tick t.
func (d *Detector) catchUp(s *dest, t int64) {
	if s.tick >= t {
		return
	}
	n := t - s.tick
	s.tick = t
	a := math.Pow(d.decay, float64(n))
	if a < 1e-6 {
		s.r = rates{}
		s.sum.sport, s.sum.dport = topPorts{}, topPorts{}
		s.sum.proto = [4]float64{}
		return
	}
	for k := range s.r.p {
		s.r.p[k] *= a
		s.r.b[k] *= a
		s.r.f[k] *= a
	}
	s.r.samples *= a
	s.sum.sport.decay(a)
	s.sum.dport.decay(a)
	for i := range s.sum.proto {
		s.sum.proto[i] *= a
	}
}

// Add counts records that arrived at now.
func (d *Detector) Add(now time.Time, rs []Record) {
	d.mu.Lock()
	defer d.mu.Unlock()
	t := d.tickAt(now)
	if now.After(d.at) {
		d.at = now
	}
	for i := range rs {
		r := &rs[i]
		if d.cfg.Protects != nil && !d.cfg.Protects(r.Dst) {
			d.outside++
			continue
		}
		s := d.dests[r.Dst]
		if s == nil {
			g := d.cfg.Groups.Lookup(r.Dst)
			if len(d.dests) >= d.cfg.MaxDests {
				d.untracked++
				if tot := d.total(g, t); tot != nil {
					d.count(tot, t, now, r)
				}
				continue
			}
			s = &dest{addr: r.Dst, group: g, tick: t}
			d.dests[r.Dst] = s
		}
		d.count(s, t, now, r)
		if tot := d.total(s.group, t); tot != nil {
			d.count(tot, t, now, r)
		}
	}
}

func (d *Detector) count(s *dest, t int64, now time.Time, r *Record) {
	d.catchUp(s, t)
	w := float64(r.Rate) * max(r.LossScale, 1)
	if !r.At.IsZero() {
		// Sent ticks ago and held on the way: counted as decayed as
		// if it had arrived then.
		if age := t - d.tickAt(r.At); age > 0 {
			w *= math.Pow(d.decay, float64(age))
		}
	}
	if r.Duration > d.cfg.Window {
		// A record of a long flow holds what the flow sent over its whole
		// life: only the last window's share of it is in the window.
		w *= float64(d.cfg.Window) / float64(r.Duration)
	}
	p, b := float64(r.Packets)*w, float64(r.Bytes)*w*8
	f := 0.0
	if r.Flow {
		f = float64(r.Rate) * max(r.LossScale, 1)
	}
	if s.r.samples < d.cfg.MinSamples/4 && s.attack == nil {
		s.first = now // quiet before: this record may be the flood's first
	}
	// The evidence is the packets the exporter saw, before scaling: one
	// sFlow sample is one, an unsampled NetFlow record of a second of a
	// flood is thousands.
	s.r.samples += float64(max(r.Packets, 1))
	add := func(k Kind) { s.r.p[k] += p; s.r.b[k] += b; s.r.f[k] += f }
	add(KindAll)
	pi := 3
	switch r.IPProto {
	case protoUDP:
		add(KindUDP)
		pi = 0
		if !r.Fragment || r.SrcPort != 0 {
			if i := slices.Index(AmpPorts, r.SrcPort); i >= 0 {
				add(kindAmp + Kind(i))
			}
		}
	case protoTCP:
		add(KindTCP)
		pi = 1
		if r.TCPFlags&(flagSYN|flagACK) == flagSYN {
			add(KindSYN)
		}
	case protoICMP, protoICMPv6:
		add(KindICMP)
		pi = 2
	}
	if r.Fragment {
		add(KindFrag)
	}
	sm := &s.sum
	sm.proto[pi] += p
	if r.IPProto == protoUDP || r.IPProto == protoTCP {
		sm.sport.add(r.SrcPort, p)
		sm.dport.add(r.DstPort, p)
	}
	if r.IPProto == protoTCP {
		if !sm.haveFlags {
			sm.flagsOR, sm.flagsAND, sm.haveFlags = r.TCPFlags, r.TCPFlags, true
		}
		sm.flagsOR |= r.TCPFlags
		sm.flagsAND &= r.TCPFlags
	}
	// Lengths over whole windows: the current period and the previous.
	if period := t * int64(d.cfg.Tick) / int64(d.cfg.Window); period != sm.lenPeriod {
		if period == sm.lenPeriod+1 {
			sm.minLen[1], sm.maxLen[1] = sm.minLen[0], sm.maxLen[0]
		} else {
			sm.minLen[1], sm.maxLen[1] = 0, 0
		}
		sm.minLen[0], sm.maxLen[0], sm.lenPeriod = 0, 0, period
	}
	if r.MinLen > 0 {
		if sm.minLen[0] == 0 || r.MinLen < sm.minLen[0] {
			sm.minLen[0] = r.MinLen
		}
		sm.maxLen[0] = max(sm.maxLen[0], r.MaxLen)
	}
}

// perSec turns s's decayed sum x into a rate. A steady rate R adds
// R·Tick a tick and sums to R·Tick/(1-decay) at a tick's end; a fraction
// φ into the next, the sum is decayed once and holds only φ of that
// tick's share: R·Tick·(decay + φ(1-decay))/(1-decay). Judged just after
// a tick begins (as the ticker judges), the end-of-tick reading is a
// decay's share of R, two thirds at the defaults: a steady flood 1.4
// times its threshold was never detected. So the sum is read for the
// part of its tick elapsed at the latest time the detector was given.
func (d *Detector) perSec(s *dest, x float64) float64 {
	return x * (1 - d.decay) / d.cfg.Tick.Seconds() / d.filled(s)
}

// filled is decay + φ(1-decay), φ how far into s's tick d.at is (a
// whole tick when d.at is not in it).
func (d *Detector) filled(s *dest) float64 {
	phi := 1.0
	if !d.at.IsZero() && d.tickAt(d.at) == s.tick {
		phi = min(max(float64(d.at.UnixNano()-s.tick*int64(d.cfg.Tick))/float64(d.cfg.Tick), 0), 1)
	}
	return d.decay + phi*(1-d.decay)
}

// now is the tick the detector's latest time is in: what a reading
// between two Judges catches up to.
func (d *Detector) now() int64 {
	if d.at.IsZero() {
		return d.tick
	}
	return max(d.tick, d.tickAt(d.at))
}

// Rate is a destination's current rates of one kind (for tests and top).
func (d *Detector) rate(s *dest, k Kind) Limits {
	return Limits{PPS: d.perSec(s, s.r.p[k]), BPS: d.perSec(s, s.r.b[k]), FlowsPS: d.perSec(s, s.r.f[k])}
}

// thresholds is what s is judged against: its group's policy where set,
// the group's per-host pps/bps/SYN/s (detect.HostGroup), else the
// detector's.
func (d *Detector) thresholds(s *dest, total bool) (Thresholds, *detect.HostGroup) {
	g := s.group
	if total {
		return d.cfg.Policies[g.Name].Total, g
	}
	th := d.cfg.Host
	if g != nil {
		if g.PPS > 0 {
			th[KindAll].PPS = g.PPS
		}
		if g.BPS > 0 {
			th[KindAll].BPS = g.BPS
		}
		if g.SYNPPS > 0 {
			th[KindSYN].PPS = g.SYNPPS
		}
		if p, ok := d.cfg.Policies[g.Name]; ok {
			for k, l := range p.Host {
				if l.set() {
					th[k] = l
				}
			}
		}
	}
	return th, g
}

// over lists the kinds of s over their thresholds scaled by f.
func (d *Detector) over(s *dest, th *Thresholds, f float64) []Kind {
	var ks []Kind
	for k := range th {
		l := th[k]
		if !l.set() {
			continue
		}
		r := d.rate(s, Kind(k))
		if (l.PPS > 0 && r.PPS > l.PPS*f) || (l.BPS > 0 && r.BPS > l.BPS*f) || (l.FlowsPS > 0 && r.FlowsPS > l.FlowsPS*f) {
			ks = append(ks, Kind(k))
		}
	}
	return ks
}

// Judge is the tick: every destination and group total is judged at now;
// it returns the attacks that started and those that ended.
func (d *Detector) Judge(now time.Time) (started, ended []Attack) {
	d.mu.Lock()
	defer d.mu.Unlock()
	t := d.tickAt(now)
	d.tick = t
	if now.After(d.at) {
		d.at = now
	}
	judge := func(s *dest, total bool) {
		d.catchUp(s, t)
		th, g := d.thresholds(s, total)
		if s.attack == nil {
			if s.r.samples < d.cfg.MinSamples {
				return
			}
			ks := d.over(s, &th, 1)
			if len(ks) == 0 {
				return
			}
			a := d.newAttack(s, g, total, ks, now)
			s.attack = a
			d.attacks = append(d.attacks, a)
			started = append(started, *a)
			return
		}
		a := s.attack
		r := d.rate(s, KindAll)
		a.PeakPPS, a.PeakBPS = max(a.PeakPPS, r.PPS), max(a.PeakBPS, r.BPS)
		a.Signature = d.signature(s)
		if len(d.over(s, &th, 0.5)) > 0 {
			a.quietSince = time.Time{}
			return
		}
		if a.quietSince.IsZero() {
			a.quietSince = now
		}
		if now.Sub(a.quietSince) >= d.cfg.WithdrawAfter {
			a.Ended = now
			s.attack = nil
			ended = append(ended, *a)
			d.attacks = slices.DeleteFunc(d.attacks, func(x *Attack) bool { return x == a })
			d.ended = append(d.ended, *a)
			if len(d.ended) > maxEnded {
				d.ended = slices.Delete(d.ended, 0, len(d.ended)-maxEnded)
			}
		}
	}
	for a, s := range d.dests {
		judge(s, false)
		// Forget what decayed to nothing: the map holds only live
		// destinations.
		if s.attack == nil && s.r.samples < 1e-3 {
			delete(d.dests, a)
		}
	}
	for g, s := range d.totals {
		judge(s, true)
		if s.stale && s.attack == nil {
			delete(d.totals, g)
		}
	}
	return started, ended
}

// SetConfig applies a reloaded configuration: the thresholds, the host
// groups and their policies, MinSamples and WithdrawAfter, judged from
// the next tick on. Tick, Window, MaxDests and Protects stay as they
// started: the first two give the decayed sums kept their meaning, and
// the collector's sockets and bounds are a restart's. Destinations move to
// the groups that now hold them; a group's total carries over by the
// group's name, and one whose group or total policy is gone is judged
// against nothing, so its attack ends after WithdrawAfter and it goes.
// Attacks on now keep their ID and group.
func (d *Detector) SetConfig(cfg DetectorConfig) {
	def := cfg
	def.defaults()
	d.mu.Lock()
	defer d.mu.Unlock()
	// Field by field, not d.cfg = cfg: Partial reads Tick and Protects
	// without d.mu.
	d.cfg.Host, d.cfg.Groups, d.cfg.Policies = cfg.Host, cfg.Groups, cfg.Policies
	d.cfg.MinSamples, d.cfg.WithdrawAfter = def.MinSamples, def.WithdrawAfter
	for _, s := range d.dests {
		s.group = d.cfg.Groups.Lookup(s.addr)
	}
	totals := map[*detect.HostGroup]*dest{}
	for g, s := range d.totals {
		ng := d.groupNamed(g)
		if p, ok := d.cfg.Policies[g.Name]; ng != nil && ok && p.Total != (Thresholds{}) {
			s.group, s.stale = ng, false
			totals[ng] = s
			continue
		}
		if s.attack != nil {
			s.stale = true
			totals[g] = s
		}
	}
	d.totals = totals
}

// groupNamed is the reloaded group of g's name, found at one of g's
// prefixes (nil: none there now; a total for it is made again on its
// first traffic).
func (d *Detector) groupNamed(g *detect.HostGroup) *detect.HostGroup {
	for _, p := range g.Prefixes {
		if ng := d.cfg.Groups.Lookup(p.Addr()); ng != nil && ng.Name == g.Name {
			return ng
		}
	}
	return nil
}

func (d *Detector) newAttack(s *dest, g *detect.HostGroup, total bool, ks []Kind, now time.Time) *Attack {
	d.nextID++
	r := d.rate(s, KindAll)
	a := &Attack{Kinds: ks, PPS: r.PPS, BPS: r.BPS, FlowsPS: r.FlowsPS, PeakPPS: r.PPS, PeakBPS: r.BPS,
		Signature: d.signature(s), FirstRecord: s.first, Detected: now, Carpet: total}
	if g != nil {
		a.Group = g.Name
		a.Monitor = g.Action == detect.ActionMonitor
	}
	if total {
		a.Dst = slices.Clone(g.Prefixes)
		a.ID = fmt.Sprintf("net-%d-%s", d.nextID, g.Name)
	} else {
		a.Dst = []netip.Prefix{netip.PrefixFrom(s.addr, s.addr.BitLen())}
		a.ID = fmt.Sprintf("net-%d-%s", d.nextID, s.addr)
	}
	return a
}

// signature summarises s's samples; a protocol or port is named at 80%.
func (d *Detector) signature(s *dest) Signature {
	sm := &s.sum
	var sig Signature
	all := s.r.p[KindAll]
	if all <= 0 {
		return sig
	}
	for i, p := range []uint8{protoUDP, protoTCP, protoICMP} {
		if sm.proto[i] >= 0.8*all {
			sig.Proto = p
		}
	}
	if sig.Proto == protoICMP && s.addr.Is6() {
		sig.Proto = protoICMPv6
	}
	ported := sm.proto[0] + sm.proto[1]
	sp, sps := sm.sport.top(ported)
	dp, dps := sm.dport.top(ported)
	sig.SrcPortShare, sig.DstPortShare = sps, dps
	if sps >= 0.8 {
		sig.SrcPort = sp
	}
	if dps >= 0.8 {
		sig.DstPort = dp
	}
	sig.MinLen, sig.MaxLen = sm.minLen[0], sm.maxLen[0]
	if sm.minLen[1] > 0 && (sig.MinLen == 0 || sm.minLen[1] < sig.MinLen) {
		sig.MinLen = sm.minLen[1]
	}
	sig.MaxLen = max(sig.MaxLen, sm.maxLen[1])
	sig.SYNOnly = sm.haveFlags && s.r.p[KindSYN] >= 0.99*s.r.p[KindTCP] && s.r.p[KindTCP] > 0
	sig.FragShare = s.r.p[KindFrag] / all
	return sig
}

// Attacks lists the attacks on now, then the recently ended ones.
func (d *Detector) Attacks() []Attack {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]Attack, 0, len(d.attacks)+len(d.ended))
	for _, a := range d.attacks {
		out = append(out, *a)
	}
	return append(out, d.ended...)
}

// Talker is one destination's rates now, for `tierwall telemetry top`.
type Talker struct {
	Dst   netip.Addr        `json:"dst"`
	Group string            `json:"group,omitempty"`
	Kinds map[string]Limits `json:"kinds"`
}

// Top is the n destinations with the most packets now.
func (d *Detector) Top(n int) []Talker {
	d.mu.Lock()
	defer d.mu.Unlock()
	ss := make([]*dest, 0, len(d.dests))
	for _, s := range d.dests {
		d.catchUp(s, d.now())
		ss = append(ss, s)
	}
	slices.SortFunc(ss, func(a, b *dest) int {
		if c := cmp.Compare(b.r.p[KindAll], a.r.p[KindAll]); c != 0 {
			return c
		}
		return a.addr.Compare(b.addr)
	})
	out := []Talker{}
	for _, s := range ss[:min(n, len(ss))] {
		t := Talker{Dst: s.addr, Kinds: map[string]Limits{}}
		if s.group != nil {
			t.Group = s.group.Name
		}
		for k := 0; k < numKinds; k++ {
			if l := d.rate(s, Kind(k)); l.PPS >= 0.5 {
				t.Kinds[Kind(k).String()] = l
			}
		}
		out = append(out, t)
	}
	return out
}

// Untracked is how many records went to destinations past MaxDests.
func (d *Detector) Untracked() uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.untracked
}

// Outside is how many records (aggregates' records over the bus) went to
// destinations outside the protected network, judged nowhere.
func (d *Detector) Outside() uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.outside
}

// UnmarshalText reads what MarshalText wrote (the API's clients).
func (k *Kind) UnmarshalText(b []byte) error {
	v, err := ParseKind(string(b))
	*k = v
	return err
}
