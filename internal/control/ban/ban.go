// SPDX-License-Identifier: Apache-2.0

// Package ban is the ban lifecycle of the control loop: what is blocked,
// why, since when, and until when; the safety rails every new ban passes;
// the rate monitor that lifts bans on sources gone quiet (Miano et al.
// §IV-D); and the state file that carries all of it across restarts.
//
// The Store decides; it never touches the data plane. The daemon applies
// the store's state to the tiers and reconciles them on start.
package ban

import (
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"time"

	"github.com/tierwall/tierwall/internal/control/detect"
)

// Ban is one blocked prefix with its history.
type Ban struct {
	Prefix    netip.Prefix `json:"prefix"`
	Detector  string       `json:"detector"`
	Reason    string       `json:"reason"`
	FirstSeen time.Time    `json:"first_seen"`
	LastSeen  time.Time    `json:"last_seen"` // last detection or last interval over threshold
	Rate      float64      `json:"rate_pps"`  // last measured rate (both tiers)
	PeakRate  float64      `json:"peak_rate_pps"`
	// Expires is when the ban ends whatever the traffic; zero: never
	// (static lists, operator bans).
	Expires time.Time `json:"expires,omitzero"`
	// QuietSince is when the rate last fell below the unban threshold
	// (zero while above it).
	QuietSince time.Time `json:"quiet_since,omitzero"`
	Manual     bool      `json:"manual,omitempty"` // operator ban: the rate monitor leaves it
	// Forced: the operator banned it past the rails' width limit.
	Forced bool `json:"forced,omitempty"`
}

// Rails are the safety limits on new bans.
type Rails struct {
	Allow     []netip.Prefix // never banned, whatever detectors say
	Protected []netip.Prefix // own infrastructure: a ban covering it is refused
	// MaxNewPerInterval and MaxTotal bound automatic bans; 0 = no limit.
	MaxNewPerInterval int
	MaxTotal          int
	// MonitorOnly: detect and report, ban nothing.
	MonitorOnly bool
	// MaxEstablishedShare trips a circuit breaker when the new bans of one
	// interval would cover more than this share of the established sources
	// (seen for several intervals before: the regular clients), 0 = off. A
	// detector gone wrong must not black-hole the service. Packet share
	// would not do: in a flood the attack is most of the packets.
	MaxEstablishedShare float64
	// WidestBan4 and WidestBan6 are the shortest prefix lengths a ban may
	// have (0: any): a ban of 0.0.0.0/0 drops all traffic. Only an
	// operator's forced ban goes past them.
	WidestBan4, WidestBan6 int
	// WidestAuto4 and WidestAuto6 are the shortest prefix lengths of an
	// automatic ban (a detection; threat lists, the operator's word,
	// excepted), 0: as WidestBan. A spoofed flood over a /8 got a /8 ban
	// that took every client inside along (issue 32); spread that wide,
	// it is the victim's flow rules' to meet.
	WidestAuto4, WidestAuto6 int
	// Management are this host's own addresses and default gateways: no
	// ban may cover one, forced or not.
	Management []Managed
}

// Catastrophic says why a ban on p would be a catastrophe ("" when it
// would not): it covers one of this host's management addresses, or it is
// wider than the width limit and not forced.
func (r *Rails) Catastrophic(p netip.Prefix, force bool) string {
	for _, m := range r.Management {
		if p.Contains(m.Addr) {
			return fmt.Sprintf("covering this host's %s %s (never banned, not even by force)", m.What, m.Addr)
		}
	}
	if !force {
		if limit, wide := TooWide(p, r.WidestBan4, r.WidestBan6); wide {
			return fmt.Sprintf("wider than /%d, the widest ban the rails allow (force to override)", limit)
		}
	}
	return ""
}

// Managed is an address the host is managed through.
type Managed struct {
	Addr netip.Addr `json:"addr"`
	What string     `json:"what"` // "address of eth0", "default gateway via eth0"
}

// Refusal is a detection that did not become a ban.
type Refusal struct {
	Detection detect.Detection `json:"detection"`
	Why       string           `json:"why"`
}

// Store holds the bans.
type Store struct {
	Rails Rails
	TTL   time.Duration // automatic bans expire this long after LastSeen; 0 = never

	// PrefixLift: an automatic prefix ban (not a single address) lifts on
	// its own attack's rate: once its rate stays under this share of its
	// peak (and so under the per-source threshold scaled to the flood it
	// stopped), 0: the per-source threshold alone. A /8 ban was held up
	// 114 s by one legitimate /24's 3,000 pps: over the per-source
	// threshold, but a seventh of the flood that set it (issue 32).
	PrefixLift float64

	// Baselines are values detectors learned (e.g. "rate_pps"), kept in
	// the state file so a restart mid-attack does not learn from it.
	Baselines map[string]float64

	// RefreshEvery is how often Save also writes bans whose rate, expiry
	// or quiet time changed (changes of what is banned are written by
	// every Save); 0 means every Save.
	RefreshEvery time.Duration

	// The bans are dense: ban i is list[i], its prefix prefixes[i] and
	// its meter meters[i], and index maps a prefix to i. Per-interval work
	// (counters, rates, the rate monitor) walks these slices instead of
	// doing a map lookup per ban per stage: at 500K bans each lookup stage
	// cost about a quarter of a second. A removal moves the last ban into
	// the hole, so indices are stable between changes only.
	list     []Ban
	prefixes []netip.Prefix
	meters   []Meter
	touched  []bool // refresh fields changed since they were last written
	// peakSaved is each ban's peak as the state files last recorded it: a
	// peak that outgrows it by peakPrompt is written by the next Save, not
	// left to the refresh (see raisePeak).
	peakSaved []float64
	index     map[netip.Prefix]int32

	lengths map[plen]int // bans per prefix length, for covered

	clients []netip.Addr // the verified clients, for the breaker (SetClients)

	// pending are the prefixes added, replaced or removed since the last
	// Save: what the journal must record. Where a ban is enforced is not
	// the store's: placement.Offloader knows what is in hardware.
	pending   map[netip.Prefix]struct{}
	j         *journal
	loadedGen uint64 // snapshot generation Load read: the next one is newer
	loading   bool   // Load is filling the store: changes are not pending

	// Warnings are what Load recovered from (a torn journal tail), for
	// the daemon to log.
	Warnings []string
}

// Meter is what the daemon measured of one ban: its last cumulative XDP
// packet count, and the rate over the last interval both tiers saw.
type Meter struct {
	Packets  uint64
	Read     bool // Packets holds a reading
	Rate     float64
	Measured bool // Rate holds a measurement (the rate monitor uses it)
}

// NewStore makes an empty store.
func NewStore(r Rails, ttl time.Duration) *Store {
	return &Store{Rails: r, TTL: ttl, index: map[netip.Prefix]int32{}, pending: map[netip.Prefix]struct{}{}}
}

// at returns the ban on p, nil when there is none. The pointer is valid
// until the next change of the bans.
func (s *Store) at(p netip.Prefix) *Ban {
	if i, ok := s.index[p]; ok {
		return &s.list[i]
	}
	return nil
}

// peakPrompt is how far a ban's peak may grow past what the state files
// hold before the next Save writes it rather than the refresh. The peak
// decides what BGP announces and when a prefix ban lifts; left to the
// refresh, a restart within RefreshEvery of the peak brought back an
// older one (10,140 pps came back as 3,092) and could withdraw a route
// docs/BGP.md says survives a restart. Writing every new maximum would
// cost a record per ban each time a noisy rate sets one; a quarter keeps
// the records few. Flush, at a clean stop, writes the rest exactly.
const peakPrompt = 1.25

// raisePeak records rate r in ban i's peak.
func (s *Store) raisePeak(i int, r float64) {
	b := &s.list[i]
	if !(r > b.PeakRate) {
		return
	}
	b.PeakRate = r
	s.touched[i] = true
	if r > peakPrompt*s.peakSaved[i] {
		s.pending[b.Prefix] = struct{}{}
	}
}

// overlaps reports whether two prefixes share any address.
func overlaps(a, b netip.Prefix) bool { return a.Overlaps(b) }

// guarded says why p may not be banned: it lies inside allowlisted or
// protected space. A prefix that only overlaps such space can be banned:
// Exempt names what must pass in the data plane's allowlist first, so
// spoofing from a /24 that holds one allowed address cannot make the /24
// unbannable.
func (s *Store) guarded(p netip.Prefix) string { return s.guard(p, false) }

// guard is guarded, with the width limit lifted by force.
func (s *Store) guard(p netip.Prefix, force bool) string {
	if why := s.Rails.Catastrophic(p, force); why != "" {
		return why
	}
	for _, a := range s.Rails.Allow {
		if within(p, a) {
			return "allowlisted (" + a.String() + ")"
		}
	}
	for _, a := range s.Rails.Protected {
		if within(p, a) {
			return "inside protected " + a.String()
		}
	}
	return ""
}

// Guarded says why the rails refuse a ban on p ("" when they do not). A
// ban the operator forced past the width limit stays past it.
func (s *Store) Guarded(p netip.Prefix) string {
	if b := s.at(p); b != nil && b.Forced {
		return s.guard(p, true)
	}
	return s.guarded(p)
}

// TooWide reports whether p is shorter than the limit of its family
// (widest4 for IPv4, widest6 for IPv6; 0: no limit), and that limit.
func TooWide(p netip.Prefix, widest4, widest6 int) (int, bool) {
	limit := widest4
	if p.Addr().Is6() {
		limit = widest6
	}
	return limit, limit > 0 && p.Bits() < limit
}

// within reports whether p lies entirely inside q.
func within(p, q netip.Prefix) bool { return q.Bits() <= p.Bits() && q.Contains(p.Addr()) }

// Exempt lists the allowlisted and protected prefixes that a ban on p
// overlaps without containing them whole or in part: they must pass in the
// data plane's allowlist (which wins over every block) before p is blocked.
func (s *Store) Exempt(p netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, a := range append(append([]netip.Prefix(nil), s.Rails.Allow...), s.Rails.Protected...) {
		if overlaps(a, p) && !within(p, a) {
			out = append(out, a)
		}
	}
	return out
}

// autoTooWide says why an automatic ban on d is wider than the rails let
// a detector go ("" when it is not).
func (s *Store) autoTooWide(d detect.Detection) string {
	if d.Detector == "list" {
		return ""
	}
	w4, w6 := s.Rails.WidestAuto4, s.Rails.WidestAuto6
	if w4 == 0 {
		w4 = s.Rails.WidestBan4
	}
	if w6 == 0 {
		w6 = s.Rails.WidestBan6
	}
	if limit, wide := TooWide(d.Prefix, w4, w6); wide {
		return fmt.Sprintf("too wide: wider than /%d, the widest automatic ban (rails.max_auto_ban_prefix_v4/v6)", limit)
	}
	return ""
}

// Propose turns one interval's detections into bans, through the rails.
// share(p) is the fraction of the established sources inside prefix p (for
// the per-interval circuit breaker); the breaker over all active bans
// reads the verified clients (SetClients). Existing bans are refreshed.
func (s *Store) Propose(now time.Time, ds []detect.Detection, share func(netip.Prefix) float64) (added []Ban, refused []Refusal, breaker bool) {
	var fresh []detect.Detection
	for _, d := range ds {
		if why := s.guarded(d.Prefix); why != "" {
			refused = append(refused, Refusal{d, why})
			continue
		}
		if why := s.autoTooWide(d); why != "" {
			refused = append(refused, Refusal{d, why})
			continue
		}
		if i, ok := s.index[d.Prefix]; ok {
			b := &s.list[i]
			s.touched[i] = true
			b.LastSeen, b.Rate = now, d.Rate
			s.raisePeak(int(i), d.Rate)
			b.QuietSince = time.Time{}
			if s.TTL > 0 && !b.Manual && !b.Expires.IsZero() {
				b.Expires = now.Add(s.TTL)
			}
			continue
		}
		if s.covered(d.Prefix) {
			continue // a broader ban already blocks it
		}
		fresh = append(fresh, d)
	}
	// Heaviest first, so limits keep the ones that matter.
	sort.SliceStable(fresh, func(i, j int) bool { return fresh[i].Rate > fresh[j].Rate })
	if s.Rails.MonitorOnly {
		for _, d := range fresh {
			refused = append(refused, Refusal{d, "monitor-only"})
		}
		return nil, refused, false
	}
	if s.Rails.MaxEstablishedShare > 0 && share != nil {
		// Only what this interval would really ban counts: detections past
		// the per-interval or total limit wait for a later interval.
		admit := len(fresh)
		if n := s.Rails.MaxNewPerInterval; n > 0 {
			admit = min(admit, n)
		}
		if n := s.Rails.MaxTotal; n > 0 {
			admit = min(admit, max(n-len(s.list), 0))
		}
		var total float64
		for _, d := range fresh[:admit] {
			total += share(d.Prefix)
		}
		if total > s.Rails.MaxEstablishedShare {
			for _, d := range fresh {
				refused = append(refused, Refusal{d, fmt.Sprintf("circuit breaker: new bans would cover %.0f%% of the established sources (limit %.0f%%)", 100*total, 100*s.Rails.MaxEstablishedShare)})
			}
			return nil, refused, true
		}
	}
	var cb *coverage
	if s.Rails.MaxEstablishedShare > 0 && len(s.clients) > 0 {
		cb = s.coverage()
	}
	for i, d := range fresh {
		if cb != nil {
			if n := cb.would(d.Prefix); n > 0 && float64(cb.covered+n) > s.Rails.MaxEstablishedShare*float64(len(s.clients)) {
				refused = append(refused, Refusal{d, fmt.Sprintf("circuit breaker: the automatic bans in force and this one would cover %d of the %d verified clients (limit %.0f%%)",
					cb.covered+n, len(s.clients), 100*s.Rails.MaxEstablishedShare)})
				breaker = true
				continue
			}
		}
		switch {
		case s.Rails.MaxNewPerInterval > 0 && len(added) >= s.Rails.MaxNewPerInterval:
			refused = append(refused, Refusal{d, fmt.Sprintf("more than %d new bans this interval", s.Rails.MaxNewPerInterval)})
			continue
		case s.Rails.MaxTotal > 0 && len(s.list) >= s.Rails.MaxTotal:
			for _, r := range fresh[i:] {
				refused = append(refused, Refusal{r, fmt.Sprintf("ban limit %d reached", s.Rails.MaxTotal)})
			}
			return added, refused, false
		}
		b := Ban{Prefix: d.Prefix, Detector: d.Detector, Reason: d.Reason, FirstSeen: now, LastSeen: now,
			Rate: d.Rate, PeakRate: d.Rate}
		if s.TTL > 0 && d.Detector != "list" {
			b.Expires = now.Add(s.TTL)
		}
		s.put(b)
		added = append(added, b)
		if cb != nil {
			cb.take(d.Prefix)
		}
	}
	return added, refused, breaker
}

// SetClients gives the breaker over all active bans the clients it
// protects: the verified (known-good) clients. Their count is the
// denominator whether or not a ban silences them, so waves of bans
// cannot each take a share of what the last ones left (issue 32).
func (s *Store) SetClients(as []netip.Addr) { s.clients = as }

// coverage is the breaker's count of verified clients under automatic
// bans: those covered by bans in force, and the ones this interval's
// bans take.
type coverage struct {
	covered int
	free    []netip.Addr // clients no automatic ban covers yet
}

// coverage counts the clients that an automatic ban in force covers:
// one lookup per client and prefix length in use.
func (s *Store) coverage() *coverage {
	c := &coverage{}
	for _, a := range s.clients {
		if s.autoCovered(a) {
			c.covered++
		} else {
			c.free = append(c.free, a)
		}
	}
	return c
}

// would is how many clients not covered yet p covers.
func (c *coverage) would(p netip.Prefix) int {
	n := 0
	for _, a := range c.free {
		if p.Contains(a) {
			n++
		}
	}
	return n
}

// take counts p's clients as covered.
func (c *coverage) take(p netip.Prefix) {
	out := c.free[:0]
	for _, a := range c.free {
		if p.Contains(a) {
			c.covered++
			continue
		}
		out = append(out, a)
	}
	c.free = out
}

// autoCovered reports whether an automatic ban in force covers a.
func (s *Store) autoCovered(a netip.Addr) bool {
	a = a.Unmap()
	for bits, n := range s.lengths {
		if n == 0 || bits.v6 != a.Is6() {
			continue
		}
		q, err := a.Prefix(bits.n)
		if err != nil {
			continue
		}
		if i, ok := s.index[q]; ok && !s.list[i].Manual {
			return true
		}
	}
	return false
}

// covered reports whether an existing broader ban contains p: one map
// lookup per prefix length in use, not a scan of every ban.
func (s *Store) covered(p netip.Prefix) bool {
	for bits, n := range s.lengths {
		if n == 0 || bits.v6 != p.Addr().Is6() || bits.n >= p.Bits() {
			continue
		}
		q, err := p.Addr().Prefix(bits.n)
		if err == nil {
			if _, ok := s.index[q]; ok {
				return true
			}
		}
	}
	return false
}

// plen is a prefix length of one family.
type plen struct {
	v6 bool
	n  int
}

// put adds or replaces a ban; a replaced ban keeps its meter.
func (s *Store) put(b Ban) {
	if s.lengths == nil {
		s.lengths = map[plen]int{}
	}
	if s.index == nil {
		s.index, s.pending = map[netip.Prefix]int32{}, map[netip.Prefix]struct{}{}
	}
	if !s.loading {
		s.pending[b.Prefix] = struct{}{}
	}
	if i, ok := s.index[b.Prefix]; ok {
		s.list[i] = b
		return
	}
	s.lengths[plen{b.Prefix.Addr().Is6(), b.Prefix.Bits()}]++
	s.index[b.Prefix] = int32(len(s.list))
	s.list = append(s.list, b)
	s.prefixes = append(s.prefixes, b.Prefix)
	s.meters = append(s.meters, Meter{})
	s.touched = append(s.touched, false)
	s.peakSaved = append(s.peakSaved, 0) // pending: the next Save writes it
}

// del removes the ban on p, moving the last ban into its place.
func (s *Store) del(p netip.Prefix) bool {
	i, ok := s.index[p]
	if !ok {
		return false
	}
	s.lengths[plen{p.Addr().Is6(), p.Bits()}]--
	last := int32(len(s.list) - 1)
	if i != last {
		s.list[i], s.prefixes[i], s.meters[i], s.touched[i] = s.list[last], s.prefixes[last], s.meters[last], s.touched[last]
		s.peakSaved[i] = s.peakSaved[last]
		s.index[s.prefixes[i]] = i
	}
	s.list[last] = Ban{} // drop its strings for the GC
	s.list, s.prefixes, s.meters, s.touched = s.list[:last], s.prefixes[:last], s.meters[:last], s.touched[:last]
	s.peakSaved = s.peakSaved[:last]
	delete(s.index, p)
	if !s.loading {
		s.pending[p] = struct{}{}
	}
	return true
}

// Add records an operator ban (no expiry unless ttl > 0, never lifted by
// the rate monitor). The rails apply: allowlisted or protected space is
// refused with an error.
func (s *Store) Add(now time.Time, p netip.Prefix, reason string, ttl time.Duration) (Ban, error) {
	if why := s.guarded(p); why != "" {
		return Ban{}, fmt.Errorf("%w: %s is %s", ErrRefused, p, why)
	}
	b := &Ban{Prefix: p, Detector: "operator", Reason: reason, FirstSeen: now, LastSeen: now, Manual: true}
	if ttl > 0 {
		b.Expires = now.Add(ttl)
	}
	if old := s.at(p); old != nil {
		b.FirstSeen = old.FirstSeen
	}
	s.put(*b)
	return *b, nil
}

// Put stores b as it is: how a caller undoes a change it could not apply.
func (s *Store) Put(b Ban) { s.put(b) }

// ErrRefused is a ban the rails refuse.
var ErrRefused = errors.New("ban refused")

// Remove deletes a ban; false when there was none.
func (s *Store) Remove(p netip.Prefix) bool {
	return s.del(p)
}

// Unban is a ban lifted, and why.
type Unban struct {
	Ban Ban    `json:"ban"`
	Why string `json:"why"`
}

// Monitor is the rate monitor plus expiry: rates maps banned prefixes to
// their current rate in pps (both tiers), recorded in their meters; then
// see MonitorMeters.
func (s *Store) Monitor(now time.Time, rates map[netip.Prefix]float64, threshold float64, hold time.Duration) []Unban {
	for p, r := range rates {
		if i, ok := s.index[p]; ok {
			s.meters[i].Rate, s.meters[i].Measured = r, true
		}
	}
	return s.MonitorMeters(now, threshold, hold)
}

// MonitorMeters is the rate monitor plus expiry over the rates in the
// meters. A ban whose rate stayed below threshold for hold is lifted, as is
// one past its expiry. Operator bans only expire. Lists re-add what they
// still contain on the next interval. One pass over the dense slices, no
// map lookup per ban.
func (s *Store) MonitorMeters(now time.Time, threshold float64, hold time.Duration) []Unban {
	var out []Unban
	// Backwards: del moves the last ban, already visited, into the hole.
	for i := len(s.list) - 1; i >= 0; i-- {
		b, m := &s.list[i], &s.meters[i]
		if m.Measured {
			b.Rate = m.Rate
			s.raisePeak(i, m.Rate)
			if !b.Manual && b.Detector != "list" && m.Rate >= threshold && s.TTL > 0 && !b.Expires.IsZero() {
				b.Expires = now.Add(s.TTL) // still attacking: see below
			}
		}
		if !b.Expires.IsZero() && !now.Before(b.Expires) {
			out = append(out, Unban{*b, "expired"})
			s.del(b.Prefix)
			continue
		}
		if b.Manual || b.Detector == "list" {
			continue
		}
		limit := threshold
		if s.PrefixLift > 0 && !b.Prefix.IsSingleIP() {
			limit = max(threshold, s.PrefixLift*b.PeakRate)
		}
		if b.Rate >= limit {
			b.QuietSince = time.Time{}
			b.LastSeen = now
			// Banned traffic never reaches the detectors again: while its
			// counters show the attack going on, the ban is extended.
			if s.TTL > 0 && !b.Expires.IsZero() {
				b.Expires = now.Add(s.TTL)
			}
			s.touched[i] = true
			continue
		}
		if b.QuietSince.IsZero() {
			b.QuietSince = now
			s.touched[i] = true
		}
		if now.Sub(b.QuietSince) >= hold {
			out = append(out, Unban{*b, fmt.Sprintf("below %.0f pps for %v", limit, hold)})
			s.del(b.Prefix)
		}
	}
	sort.Slice(out, func(i, j int) bool { return lessPrefix(out[i].Ban.Prefix, out[j].Ban.Prefix) })
	return out
}

// All returns the bans, sorted by prefix (address, then length).
func (s *Store) All() []Ban {
	out := append([]Ban(nil), s.list...)
	sort.Slice(out, func(i, j int) bool { return lessPrefix(out[i].Prefix, out[j].Prefix) })
	return out
}

// Each yields every ban in no particular order, without the copy and sort
// of All: for passes over every ban each interval.
func (s *Store) Each(yield func(Ban) bool) {
	for _, b := range s.list {
		if !yield(b) {
			return
		}
	}
}

// lessPrefix orders prefixes without formatting them: at 500K bans a sort
// by String() costs more than the rest of the interval.
func lessPrefix(a, b netip.Prefix) bool {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c < 0
	}
	return a.Bits() < b.Bits()
}

// Prefixes returns the banned prefixes in the store's dense order, the
// order of Meters: for per-interval work that needs no sort. The slice is
// the store's own: read it, do not keep it past the next change of the bans.
func (s *Store) Prefixes() []netip.Prefix { return s.prefixes }

// Meters returns the bans' meters, parallel to Prefixes: the daemon
// records its counter readings and rates in them. Valid until the next
// change of the bans.
func (s *Store) Meters() []Meter { return s.meters }

// IndexOf is p's index in Prefixes and Meters, -1 when p is not banned.
func (s *Store) IndexOf(p netip.Prefix) int {
	if i, ok := s.index[p]; ok {
		return int(i)
	}
	return -1
}

// Meter returns the meter of the ban on p.
func (s *Store) Meter(p netip.Prefix) (Meter, bool) {
	if i, ok := s.index[p]; ok {
		return s.meters[i], true
	}
	return Meter{}, false
}

// ListBans returns the bans of one detector, in no order.
func (s *Store) ListBans(detector string) []netip.Prefix {
	var out []netip.Prefix
	for i := range s.list {
		if s.list[i].Detector == detector {
			out = append(out, s.list[i].Prefix)
		}
	}
	return out
}

// Len is the number of bans.
func (s *Store) Len() int { return len(s.list) }

// Get returns the ban on p.
func (s *Store) Get(p netip.Prefix) (Ban, bool) {
	if b := s.at(p); b != nil {
		return *b, true
	}
	return Ban{}, false
}
