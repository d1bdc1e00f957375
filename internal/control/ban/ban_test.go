// SPDX-License-Identifier: Apache-2.0

package ban

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/control/detect"
)

var t0 = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

func det(p string, rate float64) detect.Detection {
	return detect.Detection{Prefix: netip.MustParsePrefix(p), Detector: "rate", Reason: "test", Rate: rate}
}

func TestRailsRefuseAllowedAndProtected(t *testing.T) {
	s := NewStore(Rails{Allow: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
		Protected: []netip.Prefix{netip.MustParsePrefix("192.0.2.53/32")}}, time.Hour)
	// The heaviest senders are our own: still never banned.
	added, refused, _ := s.Propose(t0, []detect.Detection{det("10.1.2.3/32", 1e6), det("192.0.2.53/32", 5e5), det("198.51.100.1/32", 10)}, nil)
	if len(added) != 1 || added[0].Prefix.String() != "198.51.100.1/32" || len(refused) != 2 {
		t.Fatalf("added %+v refused %+v", added, refused)
	}
	if !strings.Contains(refused[1].Why, "protected") {
		t.Errorf("refusal reason %q", refused[1].Why)
	}
	if _, err := s.Add(t0, netip.MustParsePrefix("10.9.0.0/16"), "op", 0); !errors.Is(err, ErrRefused) {
		t.Errorf("operator ban of allowlisted space: %v", err)
	}
}

// A prefix that only overlaps allowed or protected space is banned (the
// data plane's allowlist keeps the allowed addresses passing): spoofing
// from a /24 that holds one allowed address must not make it unbannable.
func TestOverlapIsBannedWithExemptions(t *testing.T) {
	allowed, protected := netip.MustParsePrefix("198.51.100.7/32"), netip.MustParsePrefix("192.0.2.53/32")
	s := NewStore(Rails{Allow: []netip.Prefix{allowed}, Protected: []netip.Prefix{protected}}, time.Hour)
	added, refused, _ := s.Propose(t0, []detect.Detection{det("198.51.100.0/24", 1e5), det("192.0.2.0/24", 1e5)}, nil)
	if len(added) != 2 || len(refused) != 0 {
		t.Fatalf("added %+v refused %+v", added, refused)
	}
	if ex := s.Exempt(netip.MustParsePrefix("198.51.100.0/24")); len(ex) != 1 || ex[0] != allowed {
		t.Fatalf("exemptions of the /24: %v, want %v", ex, allowed)
	}
	if ex := s.Exempt(netip.MustParsePrefix("192.0.2.0/24")); len(ex) != 1 || ex[0] != protected {
		t.Fatalf("exemptions of the protected /24: %v", ex)
	}
	if ex := s.Exempt(netip.MustParsePrefix("203.0.113.0/24")); len(ex) != 0 {
		t.Fatalf("exemptions of unrelated space: %v", ex)
	}
}

func TestLimitsMonitorOnlyAndBreaker(t *testing.T) {
	ds := []detect.Detection{det("198.51.100.1/32", 10), det("198.51.100.2/32", 30), det("198.51.100.3/32", 20)}
	s := NewStore(Rails{MaxNewPerInterval: 2}, 0)
	added, refused, _ := s.Propose(t0, ds, nil)
	if len(added) != 2 || added[0].Rate != 30 || added[1].Rate != 20 || len(refused) != 1 {
		t.Fatalf("per-interval limit: added %+v refused %+v", added, refused)
	}
	s = NewStore(Rails{MaxTotal: 1}, 0)
	// The one ban the limit leaves room for is the heaviest source's.
	if added, refused, _ := s.Propose(t0, ds, nil); len(added) != 1 || added[0].Rate != 30 || len(refused) != 2 || s.Len() != 1 {
		t.Fatalf("total limit: added %+v refused %+v", added, refused)
	}
	s = NewStore(Rails{MonitorOnly: true}, 0)
	if added, refused, _ := s.Propose(t0, ds, nil); len(added) != 0 || len(refused) != 3 || s.Len() != 0 {
		t.Fatalf("monitor-only banned: %+v", added)
	}
}

func TestBreakerTripsAboveItsShare(t *testing.T) {
	ds := []detect.Detection{det("198.51.100.1/32", 10), det("198.51.100.2/32", 30), det("198.51.100.3/32", 20)}
	// 3 x 0.2 = 60% of the established sources > 50%: nothing is banned.
	s := NewStore(Rails{MaxEstablishedShare: 0.5}, 0)
	added, refused, breaker := s.Propose(t0, ds, func(netip.Prefix) float64 { return 0.2 })
	if !breaker || len(added) != 0 || len(refused) != 3 || s.Len() != 0 {
		t.Fatalf("breaker %v, added %+v, refused %+v, %d bans", breaker, added, refused, s.Len())
	}
	if !strings.Contains(refused[0].Why, "circuit breaker") {
		t.Errorf("refusal reason %q", refused[0].Why)
	}
}

func TestBreakerStaysClosedBelowItsShare(t *testing.T) {
	ds := []detect.Detection{det("198.51.100.1/32", 10), det("198.51.100.2/32", 30), det("198.51.100.3/32", 20)}
	each := func(v float64) func(netip.Prefix) float64 { return func(netip.Prefix) float64 { return v } }
	// Binary-exact shares summing to exactly the limit: the breaker trips
	// on "more than" the limit, so the limit itself still bans.
	exact := map[string]float64{"198.51.100.1/32": 0.125, "198.51.100.2/32": 0.25, "198.51.100.3/32": 0.125}
	for _, c := range []struct {
		name  string
		share func(netip.Prefix) float64
	}{
		{"well-below", each(0.1)}, // 30% of a 50% limit
		{"at-the-limit", func(p netip.Prefix) float64 { return exact[p.String()] }},
		{"not-established", each(0)}, // sources no regular client shares
	} {
		t.Run(c.name, func(t *testing.T) {
			s := NewStore(Rails{MaxEstablishedShare: 0.5}, 0)
			added, refused, breaker := s.Propose(t0, ds, c.share)
			if breaker || len(added) != 3 || len(refused) != 0 || s.Len() != 3 {
				t.Fatalf("breaker %v, added %+v, refused %+v, %d bans", breaker, added, refused, s.Len())
			}
		})
	}
}

func TestRateMonitorAndExpiry(t *testing.T) {
	s := NewStore(Rails{}, 10*time.Minute)
	s.Propose(t0, []detect.Detection{det("198.51.100.1/32", 1000), det("198.51.100.2/32", 1000)}, nil)
	p1, p2 := netip.MustParsePrefix("198.51.100.1/32"), netip.MustParsePrefix("198.51.100.2/32")
	// p1 goes quiet, p2 keeps sending.
	rates := map[netip.Prefix]float64{p1: 5, p2: 900}
	if un := s.Monitor(t0.Add(time.Second), rates, 50, 30*time.Second); len(un) != 0 {
		t.Fatalf("unbanned before the hold time: %+v", un)
	}
	// A burst resets the quiet clock.
	rates[p1] = 500
	s.Monitor(t0.Add(10*time.Second), rates, 50, 30*time.Second)
	rates[p1] = 5
	// Quiet again from 35 s. Without the burst, quiet since 1 s would
	// have ended the ban here (34 s >= 30 s).
	if un := s.Monitor(t0.Add(35*time.Second), rates, 50, 30*time.Second); len(un) != 0 {
		t.Fatalf("hold not restarted by the burst: %+v", un)
	}
	if un := s.Monitor(t0.Add(64*time.Second), rates, 50, 30*time.Second); len(un) != 0 {
		t.Fatalf("unbanned before the restarted hold time: %+v", un)
	}
	un := s.Monitor(t0.Add(65*time.Second), rates, 50, 30*time.Second)
	if len(un) != 1 || un[0].Ban.Prefix != p1 {
		t.Fatalf("unbans %+v, want p1", un)
	}
	// p2 still sends at its TTL (10 min after its detection): banned
	// traffic never reaches the detectors again, so its counters extend
	// the ban instead of letting the attack back in.
	if un := s.Monitor(t0.Add(10*time.Minute), rates, 50, time.Hour); len(un) != 0 {
		t.Fatalf("a ban still attacking expired: %+v", un)
	}
	if b, _ := s.Get(p2); !b.Expires.Equal(t0.Add(20 * time.Minute)) {
		t.Fatalf("expiry not extended from the last interval over the threshold: %v", b.Expires)
	}
	// It goes quiet at 10 min: the ban ends one TTL after the last
	// interval it was seen attacking.
	rates[p2] = 5
	if un := s.Monitor(t0.Add(19*time.Minute), rates, 50, time.Hour); len(un) != 0 {
		t.Fatalf("expired early: %+v", un)
	}
	if un := s.Monitor(t0.Add(20*time.Minute), rates, 50, time.Hour); len(un) != 1 || un[0].Why != "expired" {
		t.Fatalf("expiry: %+v", un)
	}
}

func TestOperatorBansOnlyExpire(t *testing.T) {
	s := NewStore(Rails{}, time.Minute)
	p := netip.MustParsePrefix("203.0.113.0/24")
	if _, err := s.Add(t0, p, "abuse report", 0); err != nil {
		t.Fatal(err)
	}
	// Silent for far longer than the hold: the first call starts the quiet
	// clock of any ban, the later ones are past the hold.
	for _, at := range []time.Duration{time.Hour, time.Hour + time.Second, 2 * time.Hour} {
		if un := s.Monitor(t0.Add(at), map[netip.Prefix]float64{p: 0}, 50, time.Second); len(un) != 0 {
			t.Fatalf("operator ban lifted by the rate monitor at +%v: %+v", at, un)
		}
	}
	if _, ok := s.Get(p); !ok {
		t.Fatal("operator ban gone")
	}
	// A detection inside it adds nothing: already covered.
	if added, _, _ := s.Propose(t0, []detect.Detection{det("203.0.113.7/32", 1e5)}, nil); len(added) != 0 {
		t.Fatalf("covered detection added: %+v", added)
	}
	// An operator ban with a TTL does end: by expiry, not by the monitor.
	q := netip.MustParsePrefix("203.0.114.0/24")
	if _, err := s.Add(t0, q, "for a day", 24*time.Hour); err != nil {
		t.Fatal(err)
	}
	if un := s.Monitor(t0.Add(23*time.Hour), nil, 50, time.Second); len(un) != 0 {
		t.Fatalf("operator ban lifted before its expiry: %+v", un)
	}
	if un := s.Monitor(t0.Add(24*time.Hour), nil, 50, time.Second); len(un) != 1 || un[0].Ban.Prefix != q || un[0].Why != "expired" {
		t.Fatalf("unbans %+v, want %s expired", un, q)
	}
}

func TestListBansOutliveQuiet(t *testing.T) {
	// A static list's ban stays while the list holds it, however quiet the
	// source, and a store TTL does not apply to it.
	s := NewStore(Rails{}, time.Minute)
	d := det("198.51.100.0/24", 0)
	d.Detector = "list"
	if added, _, _ := s.Propose(t0, []detect.Detection{d}, nil); len(added) != 1 || !added[0].Expires.IsZero() {
		t.Fatalf("list ban %+v, want one without expiry", added)
	}
	for _, at := range []time.Duration{time.Second, time.Hour, 2 * time.Hour} {
		if un := s.Monitor(t0.Add(at), nil, 50, time.Second); len(un) != 0 {
			t.Fatalf("list ban lifted at +%v: %+v", at, un)
		}
	}
}

func TestRedetectionExtendsExpiry(t *testing.T) {
	s := NewStore(Rails{}, 10*time.Minute)
	p := netip.MustParsePrefix("198.51.100.1/32")
	s.Propose(t0, []detect.Detection{det(p.String(), 1000)}, nil)
	// Detected again at +8 min: the ban now runs to +18 min.
	if added, _, _ := s.Propose(t0.Add(8*time.Minute), []detect.Detection{det(p.String(), 3000)}, nil); len(added) != 0 {
		t.Fatalf("existing ban added again: %+v", added)
	}
	if b, _ := s.Get(p); !b.Expires.Equal(t0.Add(18*time.Minute)) || b.PeakRate != 3000 {
		t.Fatalf("refreshed ban %+v, want expiry at +18m and peak 3000", b)
	}
	if un := s.Monitor(t0.Add(10*time.Minute), map[netip.Prefix]float64{p: 3000}, 50, time.Hour); len(un) != 0 {
		t.Fatalf("expired at the old deadline: %+v", un)
	}
}

func TestStateSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state", "bans.json")
	s := NewStore(Rails{}, time.Hour)
	s.Propose(t0, []detect.Detection{det("198.51.100.1/32", 1000)}, nil)
	op := netip.MustParsePrefix("2001:db8:bad::/48")
	if _, err := s.Add(t0, op, "feed", 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Save(path, t0); err != nil {
		t.Fatal(err)
	}
	r := NewStore(Rails{}, time.Hour)
	gone, err := r.Load(path, t0.Add(30*time.Minute))
	if err != nil || len(gone) != 0 || r.Len() != 2 {
		t.Fatalf("reload: %v gone %+v, %d bans", err, gone, r.Len())
	}
	b, _ := r.Get(netip.MustParsePrefix("198.51.100.1/32"))
	if b.Detector != "rate" || !b.FirstSeen.Equal(t0) || b.PeakRate != 1000 || !b.Expires.Equal(t0.Add(time.Hour)) {
		t.Errorf("metadata lost: %+v", b)
	}
	// The operator's ban is still one after a restart: the rate monitor
	// must keep leaving it alone.
	if b, _ := r.Get(op); !b.Manual || !b.Expires.IsZero() {
		t.Errorf("operator ban after reload: %+v", b)
	}
	// Two hours later the automatic ban expired while down; the operator's stays.
	if gone, err = r.Load(path, t0.Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if len(gone) != 1 || gone[0].Ban.Prefix.String() != "198.51.100.1/32" || r.Len() != 1 {
		t.Fatalf("expiry on load: gone %+v, %d left", gone, r.Len())
	}
	if _, ok := r.Get(op); !ok {
		t.Fatal("operator ban dropped on load")
	}

	// Expiry travels in the file: a ban saved by a store with a 1-minute
	// TTL is gone 30 minutes later, whatever the TTL of the store loading it.
	shortPath := filepath.Join(dir, "short", "bans.json")
	short := NewStore(Rails{}, time.Minute)
	short.Propose(t0, []detect.Detection{det("198.51.100.9/32", 1)}, nil)
	if err := short.Save(shortPath, t0); err != nil {
		t.Fatal(err)
	}
	long := NewStore(Rails{}, time.Hour)
	if _, err := long.Load(shortPath, t0.Add(30*time.Second)); err != nil {
		t.Fatal(err)
	}
	if b, ok := long.Get(netip.MustParsePrefix("198.51.100.9/32")); !ok || !b.Expires.Equal(t0.Add(time.Minute)) {
		t.Fatalf("short-TTL ban loaded by a 1-hour store: %+v, want expiry at +1m", b)
	}
	gone, err = long.Load(shortPath, t0.Add(30*time.Minute))
	if err != nil || len(gone) != 1 || gone[0].Ban.Prefix.String() != "198.51.100.9/32" || gone[0].Why != "expired while tierwall was not running" {
		t.Fatalf("short-TTL ban on load: %v gone %+v", err, gone)
	}

	// A corrupt file is an error, not an empty ban list.
	if err := writeFile(path, "{not json"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Load(path, t0); err == nil {
		t.Fatal("corrupt state accepted")
	}
	// So is a file from another layout version.
	if err := writeFile(path, `{"version": 99, "bans": []}`); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Load(path, t0); err == nil || !strings.Contains(err.Error(), "version 99") {
		t.Fatalf("state of another version: %v", err)
	}
	// A missing file is a first start: no bans, no error.
	first := NewStore(Rails{}, time.Hour)
	if gone, err := first.Load(filepath.Join(dir, "none.json"), t0); err != nil || len(gone) != 0 || first.Len() != 0 {
		t.Fatalf("missing state: %v gone %+v, %d bans", err, gone, first.Len())
	}
}

// TestSaveIsAtomic makes the write of a new state fail half-way, with
// RLIMIT_FSIZE below the new file's size (EFBIG after a partial write; Go
// ignores SIGXFSZ), and checks that the previous state is still there,
// whole, and that no temporary file is left behind. A Save that wrote in
// place would leave a truncated, unreadable file.
func TestSaveIsAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "bans.json")
	old := NewStore(Rails{}, 0)
	if _, err := old.Add(t0, netip.MustParsePrefix("198.51.100.0/24"), "old", 0); err != nil {
		t.Fatal(err)
	}
	if err := old.Save(path, t0); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}

	// The new state is much larger than the old file: the limit lets part
	// of it be written, then the write fails.
	big := NewStore(Rails{}, 0)
	for i := 0; i < 200; i++ {
		if _, err := big.Add(t0, netip.PrefixFrom(netip.AddrFrom4([4]byte{203, 0, byte(i), 0}), 24), "new", 0); err != nil {
			t.Fatal(err)
		}
	}
	limit := uint64(len(before)) + 64
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &lim); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &syscall.Rlimit{Cur: limit, Max: lim.Max}); err != nil {
		t.Fatal(err)
	}
	err = big.Save(path, t0.Add(time.Minute))
	if rerr := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &lim); rerr != nil {
		t.Fatalf("restoring RLIMIT_FSIZE: %v", rerr)
	}
	if err == nil {
		t.Fatal("Save succeeded past the file size limit: the test did not make the write fail")
	}
	t.Logf("Save failed as intended: %v", err)

	after, rerr := os.ReadFile(path)
	if rerr != nil || string(after) != string(before) {
		t.Fatalf("previous state changed by a failed save (%v): %d bytes, was %d", rerr, len(after), len(before))
	}
	r := NewStore(Rails{}, 0)
	if _, err := r.Load(path, t0); err != nil || r.Len() != 1 {
		t.Fatalf("previous state unreadable after a failed save: %v, %d bans", err, r.Len())
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "bans.json bans.json.journal" {
		t.Fatalf("files after a failed save: %v, want only bans.json and its journal", names)
	}
	// Without the limit the same save goes through.
	if err := big.Save(path, t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Load(path, t0); err != nil || r.Len() != 200 {
		t.Fatalf("new state: %v, %d bans", err, r.Len())
	}
}

func writeFile(p, s string) error { return os.WriteFile(p, []byte(s), 0o600) }

// One bad entry in the state file is dropped and reported; the rest load,
// and learned baselines come back.
func TestLoadDropsInvalidAndKeepsBaselines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	raw := `{"version": 1, "bans": [
 {"prefix": "198.51.100.1/32", "detector": "rate", "tier": "xdp"},
 {"prefix": "::ffff:198.51.100.2/128", "detector": "rate", "tier": "xdp"},
 {"prefix": "10.1.2.3/8", "detector": "rate", "tier": "xdp"}],
 "baselines": {"rate_pps": 420}}`
	if err := os.WriteFile(path, []byte(raw), 0o600); err != nil {
		t.Fatal(err)
	}
	s := NewStore(Rails{}, time.Hour)
	gone, err := s.Load(path, t0)
	if err != nil {
		t.Fatalf("one bad entry stopped the load: %v", err)
	}
	if s.Len() != 1 || len(gone) != 2 || !strings.Contains(gone[0].Why, "dropped") {
		t.Fatalf("loaded %d, dropped %+v", s.Len(), gone)
	}
	if s.Baselines["rate_pps"] != 420 {
		t.Fatalf("baselines %v", s.Baselines)
	}
	s.Baselines["rate_pps"] = 500
	if err := s.Save(path, t0); err != nil {
		t.Fatal(err)
	}
	s2 := NewStore(Rails{}, time.Hour)
	if _, err := s2.Load(path, t0); err != nil || s2.Baselines["rate_pps"] != 500 {
		t.Fatalf("baseline round trip: %v %v", s2.Baselines, err)
	}
}

// The breaker judges what this interval would ban, not every detection:
// 10 detections each covering 10% of the established sources, with at
// most 2 new bans per interval, cover 20% (< 50%) and are banned two by two.
func TestBreakerCountsOnlyAdmittedBans(t *testing.T) {
	s := NewStore(Rails{MaxNewPerInterval: 2, MaxEstablishedShare: 0.5}, 0)
	var ds []detect.Detection
	for i := 1; i <= 10; i++ {
		ds = append(ds, det(fmt.Sprintf("198.51.100.%d/32", i), float64(1000+i)))
	}
	added, _, breaker := s.Propose(t0, ds, func(netip.Prefix) float64 { return 0.1 })
	if breaker || len(added) != 2 {
		t.Fatalf("breaker %v, added %d", breaker, len(added))
	}
}
