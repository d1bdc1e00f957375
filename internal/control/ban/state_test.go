// SPDX-License-Identifier: Apache-2.0

package ban

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/control/detect"
)

func addN(t testing.TB, s *Store, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{100, byte(i >> 16), byte(i >> 8), byte(i)}), 32)
		if _, err := s.Add(t0, p, "feed", 0); err != nil {
			t.Fatal(err)
		}
	}
}

// loadAll loads path into a fresh store.
func loadAll(t *testing.T, path string) *Store {
	t.Helper()
	r := NewStore(Rails{}, time.Hour)
	if _, err := r.Load(path, t0); err != nil {
		t.Fatal(err)
	}
	return r
}

// Persisting one change writes one record, whatever the size of the state:
// the cost is counted in bytes written, not time.
func TestSaveCostsTheChangeNotTheState(t *testing.T) {
	cost := map[int]int64{}
	for _, n := range []int{0, 100, 10_000} {
		path := filepath.Join(t.TempDir(), "state.json")
		s := NewStore(Rails{}, time.Hour)
		addN(t, s, n)
		if err := s.Save(path, t0); err != nil { // the first save is a snapshot
			t.Fatal(err)
		}
		before := s.Written()
		if _, err := s.Add(t0, netip.MustParsePrefix("203.0.113.0/24"), "one more", 0); err != nil {
			t.Fatal(err)
		}
		if err := s.Save(path, t0.Add(time.Second)); err != nil {
			t.Fatal(err)
		}
		cost[n] = s.Written() - before
		s.Remove(netip.MustParsePrefix("203.0.113.0/24"))
		before = s.Written()
		if err := s.Save(path, t0.Add(2*time.Second)); err != nil {
			t.Fatal(err)
		}
		if del := s.Written() - before; del <= 0 || del > 100 {
			t.Errorf("%d bans: removing one wrote %d bytes", n, del)
		}
		if r := loadAll(t, path); r.Len() != n {
			t.Fatalf("%d bans: reloaded %d", n, r.Len())
		}
	}
	if cost[0] <= 0 || cost[100] != cost[0] || cost[10_000] != cost[0] {
		t.Fatalf("bytes written for one added ban at 0/100/10K bans: %v, want the same", cost)
	}
}

// A crash in the middle of an append leaves a torn last record: everything
// before it loads, and the loss is reported.
func TestTornJournalTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	s := NewStore(Rails{}, time.Hour)
	addN(t, s, 3)
	if err := s.Save(path, t0); err != nil {
		t.Fatal(err)
	}
	for i, p := range []string{"203.0.113.1/32", "203.0.113.2/32", "203.0.113.3/32"} {
		if _, err := s.Add(t0, netip.MustParsePrefix(p), "later", 0); err != nil {
			t.Fatal(err)
		}
		if err := s.Save(path, t0.Add(time.Duration(i+1)*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	jp := journalPath(path)
	whole, err := os.ReadFile(jp)
	if err != nil {
		t.Fatal(err)
	}
	lastLine := strings.LastIndexByte(string(whole[:len(whole)-1]), '\n') + 1
	for _, cut := range []int{1, 10, len(whole) - lastLine - 1} {
		if err := os.WriteFile(jp, whole[:len(whole)-cut], 0o600); err != nil {
			t.Fatal(err)
		}
		r := loadAll(t, path)
		if r.Len() != 5 || len(r.Warnings) != 1 {
			t.Fatalf("cut %d bytes: %d bans, warnings %v; want the 5 before the torn record", cut, r.Len(), r.Warnings)
		}
		if _, ok := r.Get(netip.MustParsePrefix("203.0.113.2/32")); !ok {
			t.Fatalf("cut %d bytes: a whole record before the tail was lost", cut)
		}
	}
	// A flipped bit in the last record: its CRC no longer checks.
	bad := append([]byte(nil), whole...)
	bad[len(bad)-5] ^= 0x20
	if err := os.WriteFile(jp, bad, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := loadAll(t, path); r.Len() != 5 || len(r.Warnings) != 1 {
		t.Fatalf("corrupt last record: %d bans, warnings %v", r.Len(), r.Warnings)
	}
	// The store that loaded a torn journal starts over with a snapshot.
	r := loadAll(t, path)
	if err := r.Save(path, t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if r2 := loadAll(t, path); r2.Len() != 5 || len(r2.Warnings) != 0 {
		t.Fatalf("after the snapshot: %d bans, warnings %v", r2.Len(), r2.Warnings)
	}
}

// Compaction keeps the content; a crash after the new snapshot and before
// the new journal leaves the old journal, which must not be replayed on
// top of the snapshot that already holds it (it would resurrect bans
// removed since).
func TestCompactionKeepsContent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	s := NewStore(Rails{}, time.Hour)
	addN(t, s, 50)
	s.Baselines = map[string]float64{"rate_pps": 300}
	if err := s.Save(path, t0); err != nil {
		t.Fatal(err)
	}
	// Churn until the journal passes the compaction threshold.
	now := t0
	for i := 0; s.j.gen == 1; i++ {
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}), 32)
		if _, err := s.Add(now, p, strings.Repeat("churn ", 20), 0); err != nil {
			t.Fatal(err)
		}
		now = now.Add(time.Second)
		if err := s.Save(path, now); err != nil {
			t.Fatal(err)
		}
		s.Remove(p)
		if err := s.Save(path, now); err != nil {
			t.Fatal(err)
		}
		if i > 100_000 {
			t.Fatal("the journal never compacted")
		}
	}
	if fi, err := os.Stat(journalPath(path)); err != nil || fi.Size() > 100 {
		t.Fatalf("journal after compaction: %v, %d bytes", err, fi.Size())
	}
	want := s.All()
	r := loadAll(t, path)
	if !reflect.DeepEqual(r.All(), want) || r.Baselines["rate_pps"] != 300 {
		t.Fatalf("after compaction: %d bans, baselines %v; want %d", r.Len(), r.Baselines, len(want))
	}

	// A stale journal (the previous generation, as a crash between a new
	// snapshot and its fresh journal leaves it) next to the snapshot. The
	// churn may have ended with a change in the new journal: a snapshot
	// now holds everything, as one does after such a crash.
	if err := s.compact(path, now); err != nil {
		t.Fatal(err)
	}
	prev := s.j.gen - 1
	gone := Ban{Prefix: netip.MustParsePrefix("192.0.2.0/24"), Detector: "operator", Reason: "gone since", FirstSeen: t0, LastSeen: t0, Manual: true}
	var stale bytes.Buffer
	appendRecord(&stale, record{Gen: &prev})
	appendRecord(&stale, record{Put: &gone})
	if err := os.WriteFile(journalPath(path), stale.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := loadAll(t, path); !reflect.DeepEqual(r.All(), want) {
		t.Fatalf("a journal of another generation was replayed: %d bans, want %d", r.Len(), len(want))
	}
}

// Rates, expiries and quiet times reach the disk at most every
// RefreshEvery, and only for the bans whose values changed.
func TestRefreshWritesOnlyTouchedBans(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	s := NewStore(Rails{}, time.Hour)
	s.RefreshEvery = 30 * time.Second
	addN(t, s, 1000)
	for i := 0; i < 10; i++ {
		d := det(fmt.Sprintf("198.51.100.%d/32", i), 5000)
		if added, _, _ := s.Propose(t0, []detect.Detection{d}, nil); len(added) != 1 {
			t.Fatal("not banned")
		}
	}
	if err := s.Save(path, t0); err != nil {
		t.Fatal(err)
	}
	// The 10 automatic bans keep attacking: the monitor extends them.
	for i := range s.Meters() {
		if !s.list[i].Manual {
			s.meters[i].Rate, s.meters[i].Measured = 5000, true
		}
	}
	s.MonitorMeters(t0.Add(time.Second), 100, time.Minute)
	before := s.Written()
	if err := s.Save(path, t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if s.Written() != before {
		t.Fatalf("refresh written before RefreshEvery: %d bytes", s.Written()-before)
	}
	if err := s.Save(path, t0.Add(31*time.Second)); err != nil {
		t.Fatal(err)
	}
	n := s.Written() - before
	if n <= 0 || n > 10*400 {
		t.Fatalf("refresh of 10 touched bans among 1010 wrote %d bytes", n)
	}
	r := loadAll(t, path)
	b, _ := r.Get(netip.MustParsePrefix("198.51.100.3/32"))
	if !b.Expires.Equal(t0.Add(time.Second + time.Hour)) {
		t.Fatalf("extended expiry not persisted: %v", b.Expires)
	}
}

// A ban's peak decides what BGP announces and when a prefix ban lifts: a
// peak that grew by more than a quarter is written by the next Save, not
// left to the refresh. A restart within RefreshEvery of the peak brought
// back an older one (10,140 pps came back as 3,092). A smaller rise
// waits for the refresh, or for Flush at a clean stop.
func TestPeakReachesTheDiskWithoutWaitingForTheRefresh(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	s := NewStore(Rails{}, time.Hour)
	s.RefreshEvery = 30 * time.Second
	p := netip.MustParsePrefix("198.51.100.7/32")
	if added, _, _ := s.Propose(t0, []detect.Detection{det(p.String(), 3092)}, nil); len(added) != 1 {
		t.Fatal("not banned")
	}
	if err := s.Save(path, t0); err != nil {
		t.Fatal(err)
	}
	peak := func(path string) float64 {
		t.Helper()
		b, ok := loadAll(t, path).Get(p)
		if !ok {
			t.Fatal("ban lost")
		}
		return b.PeakRate
	}
	monitor := func(at time.Duration, rate float64) {
		t.Helper()
		i := s.IndexOf(p)
		s.meters[i].Rate, s.meters[i].Measured = rate, true
		s.MonitorMeters(t0.Add(at), 100, time.Minute)
		if err := s.Save(path, t0.Add(at)); err != nil {
			t.Fatal(err)
		}
	}
	monitor(time.Second, 10140)
	monitor(2*time.Second, 3092)
	if got := peak(path); got != 10140 {
		t.Fatalf("peak on disk %v within the refresh period, want 10140", got)
	}
	// 11,000 is within a quarter of 10,140: written by the refresh.
	monitor(3*time.Second, 11000)
	if got := peak(path); got != 10140 {
		t.Fatalf("a rise within a quarter written before the refresh: %v on disk", got)
	}
	if err := s.Flush(path, t0.Add(4*time.Second)); err != nil {
		t.Fatal(err)
	}
	if got := peak(path); got != 11000 {
		t.Fatalf("peak after Flush %v, want 11000", got)
	}
}

// The snapshot is read one ban at a time: what an earlier tierwall wrote
// (json.Marshal of the whole state, no count), fields in any order or
// case, unknown fields, a duplicate ban (the later wins) and no bans all
// load as json.Unmarshal loaded them; a truncated file or trailing data
// is corrupt.
func TestStreamedSnapshotReadsWhatUnmarshalRead(t *testing.T) {
	dir := t.TempDir()
	load := func(raw string) (*Store, error) {
		path := filepath.Join(dir, "state.json")
		if err := os.WriteFile(path, []byte(raw), 0o600); err != nil {
			t.Fatal(err)
		}
		s := NewStore(Rails{}, time.Hour)
		_, err := s.Load(path, t0)
		return s, err
	}
	s, err := load(`{"Bans": [{"prefix": "198.51.100.1/32", "tier": "xdp", "reason": "first"}, {"prefix": "198.51.100.2/32", "tier": "hw"},
		{"prefix": "198.51.100.1/32", "tier": "xdp", "reason": "second"}], "future": {"a": [1, 2]}, "generation": 3, "VERSION": 2}`)
	if err != nil {
		t.Fatal(err)
	}
	// Files from before the tier left the store still load: "tier" is
	// ignored (placement reads the hardware table again).
	if b, _ := s.Get(netip.MustParsePrefix("198.51.100.1/32")); s.Len() != 2 || b.Reason != "second" {
		t.Fatalf("%d bans, %+v", s.Len(), b)
	}
	if s, err := load(`{"version": 1, "bans": null}`); err != nil || s.Len() != 0 {
		t.Fatalf("no bans: %v, %d", err, s.Len())
	}
	for _, raw := range []string{`{"version": 2, "bans": [{"prefix": "198.51.100.1/32"}`, `{"version": 2, "bans": []} {}`,
		`{"version": 2, "bans": {}}`, `[]`, ``} {
		if s, err := load(raw); err == nil || !strings.Contains(err.Error(), "corrupt") || s.Len() != 0 {
			t.Errorf("%q: %v, %d bans", raw, err, s.Len())
		}
	}
	if _, err := load(`{"bans": [], "version": 3}`); err == nil || !strings.Contains(err.Error(), "version 3") {
		t.Errorf("version 3: %v", err)
	}

	// A snapshot of the earlier writer, large enough that "prefix" keys
	// straddle the counting pass's chunks, loads whole.
	old := NewStore(Rails{}, time.Hour)
	addN(t, old, 3000)
	b, err := json.Marshal(stateFile{Version: stateVersion, Saved: t0, Generation: 1, Bans: old.All()})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "old.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	f, _ := os.Open(path)
	defer f.Close()
	if n := countBans(f, int64(len(b))); n != 3000 {
		t.Errorf("counted %d bans, want 3000", n)
	}
	r := loadAll(t, path)
	if !reflect.DeepEqual(r.All(), old.All()) {
		t.Fatal("an earlier snapshot did not load as written")
	}
	// What this version writes says how many bans follow, and reads back.
	if err := r.Save(path, t0); err != nil {
		t.Fatal(err)
	}
	var st stateFile
	if b, err = os.ReadFile(path); err != nil || json.Unmarshal(b, &st) != nil || st.Count != 3000 || len(st.Bans) != 3000 {
		t.Fatalf("snapshot: %v, count %d, %d bans", err, st.Count, len(st.Bans))
	}
	if r2 := loadAll(t, path); !reflect.DeepEqual(r2.All(), old.All()) {
		t.Fatal("a snapshot did not load as written")
	}
}

// SnapshotBans reads the count a snapshot names, counts an earlier
// snapshot's bans, and says 0 for no file.
func TestSnapshotBans(t *testing.T) {
	dir := t.TempDir()
	s := NewStore(Rails{}, time.Hour)
	addN(t, s, 1234)
	path := filepath.Join(dir, "state.json")
	if err := s.Save(path, t0); err != nil {
		t.Fatal(err)
	}
	if n, err := SnapshotBans(path); err != nil || n != 1234 {
		t.Errorf("snapshot: %d, %v", n, err)
	}
	b, _ := json.Marshal(stateFile{Version: 1, Bans: s.All()})
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if n, err := SnapshotBans(path); err != nil || n != 1234 {
		t.Errorf("earlier snapshot: %d, %v", n, err)
	}
	if n, err := SnapshotBans(filepath.Join(dir, "none")); err != nil || n != 0 {
		t.Errorf("no file: %d, %v", n, err)
	}
}
