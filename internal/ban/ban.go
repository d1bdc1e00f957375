// Package ban is the ban lifecycle of the control loop: what is blocked,
// why, since when, and until when; the safety rails every new ban passes;
// the rate monitor that lifts bans on sources gone quiet (Miano et al.
// §IV-D); and the state file that carries all of it across restarts.
//
// The Store decides; it never touches the data plane. The daemon applies
// the store's state to the tiers and reconciles them on start.
package ban

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/tierwall/tierwall/internal/detect"
	"github.com/tierwall/tierwall/internal/rule"
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
	Tier      string       `json:"tier"` // "xdp" or "hw" (also in XDP)
	// Expires is when the ban ends whatever the traffic; zero: never
	// (static lists, operator bans).
	Expires time.Time `json:"expires,omitzero"`
	// QuietSince is when the rate last fell below the unban threshold
	// (zero while above it).
	QuietSince time.Time `json:"quiet_since,omitzero"`
	Manual     bool      `json:"manual,omitempty"` // operator ban: the rate monitor leaves it
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

	// Baselines are values detectors learned (e.g. "rate_pps"), kept in
	// the state file so a restart mid-attack does not learn from it.
	Baselines map[string]float64

	bans    map[netip.Prefix]*Ban
	lengths map[plen]int   // bans per prefix length, for covered
	tiers   map[string]int // bans per tier, kept as bans change
}

// NewStore makes an empty store.
func NewStore(r Rails, ttl time.Duration) *Store {
	return &Store{Rails: r, TTL: ttl, bans: map[netip.Prefix]*Ban{}}
}

// overlaps reports whether two prefixes share any address.
func overlaps(a, b netip.Prefix) bool { return a.Overlaps(b) }

// guarded says why p may not be banned: it lies inside allowlisted or
// protected space. A prefix that only overlaps such space can be banned:
// Exempt names what must pass in the data plane's allowlist first, so
// spoofing from a /24 that holds one allowed address cannot make the /24
// unbannable.
func (s *Store) guarded(p netip.Prefix) string {
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

// Guarded says why the rails refuse a ban on p ("" when they do not).
func (s *Store) Guarded(p netip.Prefix) string { return s.guarded(p) }

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

// Propose turns one interval's detections into bans, through the rails.
// share(p) is the fraction of the established sources inside prefix p (for
// the circuit breaker). Existing bans are refreshed.
func (s *Store) Propose(now time.Time, ds []detect.Detection, share func(netip.Prefix) float64) (added []Ban, refused []Refusal, breaker bool) {
	var fresh []detect.Detection
	for _, d := range ds {
		if why := s.guarded(d.Prefix); why != "" {
			refused = append(refused, Refusal{d, why})
			continue
		}
		if b, ok := s.bans[d.Prefix]; ok {
			b.LastSeen, b.Rate = now, d.Rate
			b.PeakRate = max(b.PeakRate, d.Rate)
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
			admit = min(admit, max(n-len(s.bans), 0))
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
	for i, d := range fresh {
		switch {
		case s.Rails.MaxNewPerInterval > 0 && len(added) >= s.Rails.MaxNewPerInterval:
			refused = append(refused, Refusal{d, fmt.Sprintf("more than %d new bans this interval", s.Rails.MaxNewPerInterval)})
			continue
		case s.Rails.MaxTotal > 0 && len(s.bans) >= s.Rails.MaxTotal:
			for _, r := range fresh[i:] {
				refused = append(refused, Refusal{r, fmt.Sprintf("ban limit %d reached", s.Rails.MaxTotal)})
			}
			return added, refused, false
		}
		b := &Ban{Prefix: d.Prefix, Detector: d.Detector, Reason: d.Reason, FirstSeen: now, LastSeen: now,
			Rate: d.Rate, PeakRate: d.Rate, Tier: "xdp"}
		if s.TTL > 0 && d.Detector != "list" {
			b.Expires = now.Add(s.TTL)
		}
		s.put(b)
		added = append(added, *b)
	}
	return added, refused, false
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
			if _, ok := s.bans[q]; ok {
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

func (s *Store) put(b *Ban) {
	if s.lengths == nil {
		s.lengths, s.tiers = map[plen]int{}, map[string]int{}
	}
	if old, ok := s.bans[b.Prefix]; ok {
		s.tiers[old.Tier]--
	} else {
		s.lengths[plen{b.Prefix.Addr().Is6(), b.Prefix.Bits()}]++
	}
	s.tiers[b.Tier]++
	s.bans[b.Prefix] = b
}

func (s *Store) del(p netip.Prefix) bool {
	b, ok := s.bans[p]
	if !ok {
		return false
	}
	delete(s.bans, p)
	s.lengths[plen{p.Addr().Is6(), p.Bits()}]--
	s.tiers[b.Tier]--
	return true
}

// Add records an operator ban (no expiry unless ttl > 0, never lifted by
// the rate monitor). The rails apply: allowlisted or protected space is
// refused with an error.
func (s *Store) Add(now time.Time, p netip.Prefix, reason string, ttl time.Duration) (Ban, error) {
	if why := s.guarded(p); why != "" {
		return Ban{}, fmt.Errorf("%w: %s is %s", ErrRefused, p, why)
	}
	b := &Ban{Prefix: p, Detector: "operator", Reason: reason, FirstSeen: now, LastSeen: now, Tier: "xdp", Manual: true}
	if ttl > 0 {
		b.Expires = now.Add(ttl)
	}
	if old, ok := s.bans[p]; ok {
		b.FirstSeen = old.FirstSeen
	}
	s.put(b)
	return *b, nil
}

// Put stores b as it is: how a caller undoes a change it could not apply.
func (s *Store) Put(b Ban) { s.put(&b) }

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

// Monitor is the rate monitor plus expiry: rates maps each banned prefix
// to its current rate in pps (both tiers). A ban whose rate stayed below
// threshold for hold is lifted, as is one past its expiry. Operator bans
// only expire. Lists re-add what they still contain on the next interval.
func (s *Store) Monitor(now time.Time, rates map[netip.Prefix]float64, threshold float64, hold time.Duration) []Unban {
	var out []Unban
	for p, b := range s.bans {
		if r, ok := rates[p]; ok {
			b.Rate = r
			b.PeakRate = max(b.PeakRate, r)
			if !b.Manual && b.Detector != "list" && r >= threshold && s.TTL > 0 && !b.Expires.IsZero() {
				b.Expires = now.Add(s.TTL) // still attacking: see below
			}
		}
		if !b.Expires.IsZero() && !now.Before(b.Expires) {
			out = append(out, Unban{*b, "expired"})
			s.del(p)
			continue
		}
		if b.Manual || b.Detector == "list" {
			continue
		}
		if b.Rate >= threshold {
			b.QuietSince = time.Time{}
			b.LastSeen = now
			// Banned traffic never reaches the detectors again: while its
			// counters show the attack going on, the ban is extended.
			if s.TTL > 0 && !b.Expires.IsZero() {
				b.Expires = now.Add(s.TTL)
			}
			continue
		}
		if b.QuietSince.IsZero() {
			b.QuietSince = now
		}
		if now.Sub(b.QuietSince) >= hold {
			out = append(out, Unban{*b, fmt.Sprintf("below %.0f pps for %v", threshold, hold)})
			s.del(p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Ban.Prefix.String() < out[j].Ban.Prefix.String() })
	return out
}

// SetTier records where a ban is enforced.
func (s *Store) SetTier(p netip.Prefix, tier string) {
	if b, ok := s.bans[p]; ok && b.Tier != tier {
		s.tiers[b.Tier]--
		s.tiers[tier]++
		b.Tier = tier
	}
}

// All returns the bans, sorted by prefix (address, then length).
func (s *Store) All() []Ban {
	out := make([]Ban, 0, len(s.bans))
	for _, b := range s.bans {
		out = append(out, *b)
	}
	sort.Slice(out, func(i, j int) bool { return lessPrefix(out[i].Prefix, out[j].Prefix) })
	return out
}

// lessPrefix orders prefixes without formatting them: at 500K bans a sort
// by String() costs more than the rest of the interval.
func lessPrefix(a, b netip.Prefix) bool {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c < 0
	}
	return a.Bits() < b.Bits()
}

// Prefixes returns the banned prefixes in no order: for per-interval work
// that needs no sort.
func (s *Store) Prefixes() []netip.Prefix {
	out := make([]netip.Prefix, 0, len(s.bans))
	for p := range s.bans {
		out = append(out, p)
	}
	return out
}

// Tiers counts the bans per tier (kept as bans change: no scan).
func (s *Store) Tiers() map[string]int {
	out := make(map[string]int, len(s.tiers))
	for t, n := range s.tiers {
		if n > 0 {
			out[t] = n
		}
	}
	return out
}

// ListBans returns the bans of one detector, in no order.
func (s *Store) ListBans(detector string) []netip.Prefix {
	var out []netip.Prefix
	for p, b := range s.bans {
		if b.Detector == detector {
			out = append(out, p)
		}
	}
	return out
}

// Len is the number of bans.
func (s *Store) Len() int { return len(s.bans) }

// Get returns the ban on p.
func (s *Store) Get(p netip.Prefix) (Ban, bool) {
	b, ok := s.bans[p]
	if !ok {
		return Ban{}, false
	}
	return *b, true
}

type stateFile struct {
	Version   int                `json:"version"`
	Saved     time.Time          `json:"saved"`
	Bans      []Ban              `json:"bans"`
	Baselines map[string]float64 `json:"baselines,omitempty"`
}

const stateVersion = 1

// Save writes the bans to path atomically: a temporary file in the same
// directory, fsynced, renamed over the old one, directory fsynced. A crash
// leaves the old state or the new one, never a torn file.
func (s *Store) Save(path string, now time.Time) error {
	b, err := json.MarshalIndent(stateFile{Version: stateVersion, Saved: now, Bans: s.All(), Baselines: s.Baselines}, "", " ")
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, ".state-*")
	if err != nil {
		return fmt.Errorf("writing state: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("writing state: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("syncing state: %w", err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("replacing state: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // best effort: the rename is done; if a crash loses it, Load finds the previous state (or none)
		d.Close()
	}
	return nil
}

// Load reads a state file written by Save, dropping bans that expired
// while nothing was running (returned as unbans). A missing file is an
// empty store.
func (s *Store) Load(path string, now time.Time) ([]Unban, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading state: %w", err)
	}
	var st stateFile
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("state file %s is corrupt: %w", path, err)
	}
	if st.Version != stateVersion {
		return nil, fmt.Errorf("state file %s has version %d, this tierwall reads %d", path, st.Version, stateVersion)
	}
	var gone []Unban
	s.bans, s.lengths, s.tiers = map[netip.Prefix]*Ban{}, nil, nil
	s.Baselines = st.Baselines
	for i := range st.Bans {
		bn := st.Bans[i]
		// One bad entry (edited by hand, written by another version) is
		// dropped and reported; it never stops the daemon from starting.
		if err := rule.CheckPrefix(bn.Prefix); err != nil {
			gone = append(gone, Unban{bn, fmt.Sprintf("dropped from the state file: %v", err)})
			continue
		}
		if !bn.Expires.IsZero() && !now.Before(bn.Expires) {
			gone = append(gone, Unban{bn, "expired while tierwall was not running"})
			continue
		}
		s.put(&bn)
	}
	return gone, nil
}
