// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tierwall/tierwall/internal/datapath"
)

// fakeHeavy is the data plane's heavy-hitter detector: reports waiting in
// its ring, and what the daemon told it.
type fakeHeavy struct {
	cfg       datapath.HeavyHitter
	protected []netip.Prefix
	reports   []datapath.HeavyEvent
	entries   []datapath.Provisional
	removed   []netip.Prefix
	revoked   map[netip.Prefix]time.Duration
}

func (f *fakeHeavy) SetHeavyHitter(h datapath.HeavyHitter) error { f.cfg = h; return nil }
func (f *fakeHeavy) SetProtected(ps []netip.Prefix, _ int) error {
	f.protected = slices.Clone(ps)
	return nil
}
func (f *fakeHeavy) HeavyHitterReports(max int) ([]datapath.HeavyEvent, error) {
	n := min(max, len(f.reports))
	out := f.reports[:n]
	f.reports = f.reports[n:]
	return out, nil
}
func (f *fakeHeavy) RemoveProvisional(p netip.Prefix) error {
	f.removed = append(f.removed, p)
	return nil
}
func (f *fakeHeavy) RevokeProvisional(p netip.Prefix, exempt time.Duration) error {
	if f.revoked == nil {
		f.revoked = map[netip.Prefix]time.Duration{}
	}
	f.revoked[p] = exempt
	return nil
}
func (f *fakeHeavy) Provisionals() ([]datapath.Provisional, error) { return f.entries, nil }
func (f *fakeHeavy) ExpireProvisionals() (int, error)              { return 0, nil }
func (f *fakeHeavy) HeavyHitterStats() (datapath.HeavyStats, error) {
	return datapath.HeavyStats{}, nil
}

// catch reports p caught at, and its entry counting dropped packets since
// (the daemon's next step is a second later).
func (f *fakeHeavy) catch(p netip.Prefix, at time.Time, dropped uint64, monitor bool) {
	f.reports = append(f.reports, datapath.HeavyEvent{Prefix: p, Kind: "packets", Count: 5000, At: at, Monitor: monitor})
	f.entries = append(f.entries, datapath.Provisional{Prefix: p, Kind: "packets", Count: 5000, Added: at, Packets: dropped, Monitor: monitor})
}

func heavyHarness(t *testing.T, mutate func(*harness)) (*harness, *fakeHeavy) {
	t.Helper()
	cfg := testConfig(t)
	h := newHarness(t, cfg, false)
	if mutate != nil {
		mutate(h)
	}
	fh := &fakeHeavy{}
	h.d.heavy.hp = fh
	if err := h.d.heavy.open(h.d.dp, h.d.protected()); err != nil {
		t.Fatal(err)
	}
	return h, fh
}

// A catch the rails admit becomes a ban of the "heavy" detector, and the
// provisional entry gives way to it.
func TestHeavyCatchConfirmed(t *testing.T) {
	h, fh := heavyHarness(t, nil)
	if fh.cfg.Window != 10*time.Millisecond || fh.cfg.PacketsPerSec != 100000 || fh.cfg.Monitor {
		t.Fatalf("detector configured %+v, want the defaults", fh.cfg)
	}
	atk := pfx(netip.MustParseAddr("198.51.100.9"))
	fh.catch(atk, h.now, 500000, false)
	h.step(t)
	b, ok := h.d.store.Get(atk)
	if !ok {
		t.Fatalf("no ban for %v after the data plane caught it; events %+v", atk, h.d.events)
	}
	if b.Detector != "heavy" {
		t.Errorf("ban by %q, want heavy", b.Detector)
	}
	if !slices.Contains(fh.removed, atk) || len(fh.revoked) != 0 {
		t.Errorf("removed %v revoked %v: want the provisional entry removed for the ban", fh.removed, fh.revoked)
	}
	if !hasEvent(h.d, "provisional", "confirmed") {
		t.Error("no confirmed event")
	}
	// The next interval has nothing to settle.
	fh.removed = nil
	h.step(t)
	if len(fh.removed) != 0 || len(fh.revoked) != 0 {
		t.Errorf("settled again: removed %v revoked %v", fh.removed, fh.revoked)
	}
}

// A catch of a protected source (a spoofed flood "from" a resolver the
// operator depends on) is refused by the rails and revoked: the source
// passes again and the detector leaves it alone for the exemption.
func TestHeavyCatchRefusedIsRevoked(t *testing.T) {
	protected := netip.MustParsePrefix("203.0.113.0/24")
	cfg := testConfig(t)
	cfg.Rails.ProtectedPrefixes = []netip.Prefix{protected}
	h := newHarness(t, cfg, false)
	fh := &fakeHeavy{}
	h.d.heavy.hp = fh
	if err := h.d.heavy.open(h.d.dp, h.d.protected()); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(fh.protected, protected) {
		t.Fatalf("the data plane's protected set %v lacks %v", fh.protected, protected)
	}
	victim := pfx(netip.MustParseAddr("203.0.113.53"))
	fh.catch(victim, h.now, 500000, false)
	h.step(t)
	if _, ok := h.d.store.Get(victim); ok {
		t.Fatal("a protected source was banned")
	}
	if got, ok := fh.revoked[victim]; !ok || got != cfg.Detectors.Heavy.Exempt {
		t.Errorf("revoked %v, want %v exempt for %v", fh.revoked, victim, cfg.Detectors.Heavy.Exempt)
	}
	if !hasEvent(h.d, "provisional", "revoked") {
		t.Error("no revoked event")
	}
}

// Monitor-only: the data plane counts instead of dropping; the daemon
// neither bans nor revokes, and the entries expire by themselves.
func TestHeavyMonitorOnly(t *testing.T) {
	cfg := testConfig(t)
	cfg.Rails.MonitorOnly = true
	h := newHarness(t, cfg, false)
	fh := &fakeHeavy{}
	h.d.heavy.hp = fh
	if err := h.d.heavy.open(h.d.dp, h.d.protected()); err != nil {
		t.Fatal(err)
	}
	if !fh.cfg.Monitor {
		t.Fatal("monitor-only not given to the data plane")
	}
	atk := pfx(netip.MustParseAddr("198.51.100.10"))
	fh.catch(atk, h.now, 500000, true)
	h.step(t)
	if len(fh.removed) != 0 || len(fh.revoked) != 0 {
		t.Errorf("removed %v revoked %v in monitor-only", fh.removed, fh.revoked)
	}
	if v := testutil.ToFloat64(h.d.Metrics.heavy.outcomes.WithLabelValues("monitored")); v != 1 {
		t.Errorf("monitored %v, want 1", v)
	}
}

// Disabled in the configuration: the data plane is told to stop, and a
// reload turns it back on.
func TestHeavyDisabledAndReloaded(t *testing.T) {
	cfg := testConfig(t)
	cfg.Detectors.Heavy.Enabled = false
	h := newHarness(t, cfg, false)
	fh := &fakeHeavy{cfg: datapath.HeavyHitter{Window: time.Second}}
	h.d.heavy.hp = fh
	if err := h.d.heavy.open(h.d.dp, h.d.protected()); err != nil {
		t.Fatal(err)
	}
	if fh.cfg.Window != 0 {
		t.Fatalf("disabled detector configured %+v", fh.cfg)
	}
	h.d.cfg.Detectors.Heavy.Enabled = true
	h.d.cfg.Rails.AllowPrefixes = []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}
	if err := h.d.heavy.open(h.d.dp, h.d.protected()); err != nil {
		t.Fatal(err)
	}
	if fh.cfg.Window == 0 || !slices.Contains(fh.protected, netip.MustParsePrefix("192.0.2.0/24")) {
		t.Errorf("after enabling: %+v protected %v", fh.cfg, fh.protected)
	}
}

// A burst that crosses the window's threshold and stops (a client's, as
// often as an attacker's) is not banned: its entry counted far under the
// threshold since the catch, so the catch is revoked at the next
// interval, and no detection reaches the rails.
func TestHeavyBurstRevoked(t *testing.T) {
	h, fh := heavyHarness(t, nil)
	client := pfx(netip.MustParseAddr("198.51.100.11"))
	fh.catch(client, h.now, 300, false) // 300 packets in the second since
	h.step(t)
	if _, ok := h.d.store.Get(client); ok {
		t.Fatal("a burst was banned")
	}
	if _, ok := fh.revoked[client]; !ok {
		t.Errorf("revoked %v, want %v", fh.revoked, client)
	}
	if !hasEvent(h.d, "provisional", "a burst, not a flood") {
		t.Errorf("no revocation event; events %+v", h.d.events)
	}
	if v := testutil.ToFloat64(h.d.Metrics.detections.WithLabelValues("heavy")); v != 0 {
		t.Errorf("%v heavy detections, want 0", v)
	}
}

// learned_factor: the detector's threshold is the static one until the
// rate detector has learned, then the learned threshold times the factor.
func TestHeavyFollowsTheLearnedRate(t *testing.T) {
	cfg := testConfig(t)
	cfg.Detectors.Rate.PPS = 0
	cfg.Detectors.Rate.LearnIntervals = 10
	cfg.Detectors.Heavy.LearnedFactor = 3
	h := newHarness(t, cfg, false)
	fh := &fakeHeavy{}
	h.d.heavy.hp = fh
	if err := h.d.heavy.open(h.d.dp, h.d.protected()); err != nil {
		t.Fatal(err)
	}
	if fh.cfg.PacketsPerSec != cfg.Detectors.Heavy.PPS {
		t.Fatalf("before learning: %d pps, want the static %d", fh.cfg.PacketsPerSec, cfg.Detectors.Heavy.PPS)
	}
	h.d.det.rate.Restore(2000)
	h.step(t)
	if fh.cfg.PacketsPerSec != 6000 {
		t.Fatalf("after learning 2000 pps: %d pps, want 6000", fh.cfg.PacketsPerSec)
	}
	// A catch is judged against the threshold in force.
	atk := pfx(netip.MustParseAddr("198.51.100.12"))
	fh.catch(atk, h.now, 7000, false) // 7000 pps since: over 6000
	h.step(t)
	if b, ok := h.d.store.Get(atk); !ok || b.Detector != "heavy" {
		t.Errorf("ban %+v (present %v), want one by the heavy detector", b, ok)
	}
}

// A source that kept sending at a good share of the threshold after its
// catch (a flood still ramping up, or an attacker buying an exemption
// with a burst) is exempt only briefly the first time, so it is caught
// again; a second revocation gives the full exemption, so a client just
// under the threshold is not caught on every burst.
func TestHeavyRampingSourceExemptBriefly(t *testing.T) {
	h, fh := heavyHarness(t, nil)
	src := pfx(netip.MustParseAddr("203.0.113.44"))
	full := h.d.cfg.Detectors.Heavy.Exempt
	fh.catch(src, h.now, 40000, false) // 40% of the 100,000 pps threshold in the second since
	h.step(t)
	if got := fh.revoked[src]; got != 2*h.d.cfg.Interval {
		t.Fatalf("first revocation exempt for %v, want two intervals (%v)", got, 2*h.d.cfg.Interval)
	}
	delete(fh.revoked, src)
	fh.entries = nil
	fh.catch(src, h.now, 40000, false)
	h.step(t)
	if got := fh.revoked[src]; got != full {
		t.Fatalf("second revocation exempt for %v, want the full %v", got, full)
	}
	// A burst that stopped: the full exemption at once.
	quiet := pfx(netip.MustParseAddr("198.51.100.12"))
	fh.catch(quiet, h.now, 300, false)
	h.step(t)
	if got := fh.revoked[quiet]; got != full {
		t.Fatalf("a burst exempt for %v, want the full %v", got, full)
	}
}

func TestForgetOldestKeepsNewest(t *testing.T) {
	m := map[netip.Prefix]time.Time{}
	for i := range 10 {
		m[pfx(netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}))] = t0.Add(time.Duration(i) * time.Second)
	}
	forgetOldest(m, 4)
	if len(m) != 4 {
		t.Fatalf("%d left, want 4", len(m))
	}
	for p := range m {
		if p.Addr().As4()[3] < 6 {
			t.Fatalf("kept %v, one of the oldest", p)
		}
	}
}
