// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/tierwall/tierwall/internal/control/apiv1"
	"github.com/tierwall/tierwall/internal/control/config"
	"github.com/tierwall/tierwall/internal/datapath"
	"github.com/tierwall/tierwall/internal/tier"
	"github.com/tierwall/tierwall/internal/tier/tiertest"
)

// fakeDP is the XDP filter in memory: rules with counters, a queue of
// feature snapshots, and injectable failures.
type fakeDP struct {
	blocked  map[netip.Prefix]*datapath.Counter
	allowed  map[netip.Prefix]bool
	flows    []datapath.Flow // what the next Snapshot returns
	at       time.Time       // end of the next snapshot interval
	BlockErr error
	Refuse   map[netip.Prefix]bool // entries the data plane refuses (the whole batch fails)
	CheckErr error
	overflow uint64 // cumulative packets the feature buffers could not hold
	blocks   int    // Block calls
}

func newFakeDP(t0 time.Time) *fakeDP {
	return &fakeDP{blocked: map[netip.Prefix]*datapath.Counter{}, allowed: map[netip.Prefix]bool{}, at: t0}
}

func (f *fakeDP) Drain(sink datapath.FlowSink) (*datapath.Snapshot, error) {
	s := &datapath.Snapshot{Start: f.at.Add(-time.Second), End: f.at, Flows: f.flows, Overflow: f.overflow}
	f.flows = nil
	return s.Emit(sink), nil
}

func (f *fakeDP) Block(ps ...netip.Prefix) error {
	f.blocks++
	if f.BlockErr != nil {
		return f.BlockErr
	}
	for _, p := range ps {
		if f.Refuse[p] {
			return fmt.Errorf("blocking %s: %w", p, datapath.ErrTableFull)
		}
	}
	for _, p := range ps {
		if _, ok := f.blocked[p]; !ok {
			f.blocked[p] = &datapath.Counter{}
		}
	}
	return nil
}

func (f *fakeDP) Unblock(ps ...netip.Prefix) error {
	for _, p := range ps {
		if _, ok := f.blocked[p]; !ok {
			return fmt.Errorf("unblocking %s: %w", p, datapath.ErrNoRule)
		}
		delete(f.blocked, p)
	}
	return nil
}

func (f *fakeDP) Allow(ps ...netip.Prefix) error {
	for _, p := range ps {
		f.allowed[p] = true
	}
	return nil
}

func (f *fakeDP) Disallow(ps ...netip.Prefix) error {
	for _, p := range ps {
		delete(f.allowed, p)
	}
	return nil
}

func (f *fakeDP) Blocked() ([]datapath.Rule, error) {
	var out []datapath.Rule
	for p, c := range f.blocked {
		out = append(out, datapath.Rule{Prefix: p, Kind: datapath.KindExact, Packets: c.Packets, Bytes: c.Bytes})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Prefix.String() < out[j].Prefix.String() })
	return out, nil
}

func (f *fakeDP) Allowed() ([]datapath.Rule, error) { return nil, nil }

func (f *fakeDP) RuleCountersInto(ps []netip.Prefix, out []datapath.Reading) error {
	for i, p := range ps {
		out[i] = datapath.Reading{}
		if c, ok := f.blocked[p]; ok {
			out[i] = datapath.Reading{Counter: *c, Found: true}
		}
	}
	return nil
}

func (f *fakeDP) Stats() (*datapath.Stats, error) { return &datapath.Stats{}, nil }
func (f *fakeDP) Check() error                    { return f.CheckErr }
func (f *fakeDP) Close() error                    { return nil }

// hit counts packets XDP dropped for a blocked prefix.
func (f *fakeDP) hit(p netip.Prefix, n uint64) { f.blocked[p].Packets += n }

// send queues one interval of passed traffic: pps packets from each source.
func (f *fakeDP) send(pps uint64, srcs ...netip.Addr) {
	for _, s := range srcs {
		f.flows = append(f.flows, datapath.Flow{Src: s, Dst: netip.MustParseAddr("192.0.2.1"), Proto: 17, Packets: pps, Bytes: 64 * pps})
	}
}

var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

func testConfig(t *testing.T) *config.Config {
	c := config.Default()
	c.Interface = "fake0"
	c.StateFile = filepath.Join(t.TempDir(), "state.json")
	c.Detectors.Rate.PPS = 1000 // static: no learning window
	c.Detectors.Entropy.Enabled = false
	// The tests of the source detectors run without the per-victim one;
	// victim_test.go turns it on.
	c.Detectors.Victim.Enabled = false
	c.Bans.Hold = 3 * time.Second
	c.Hardware.Capacity = 2
	c.Hardware.MaxRate = 1
	c.API.Socket = ""
	return c
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

type harness struct {
	d   *Daemon
	dp  *fakeDP
	hw  *tiertest.Table
	now time.Time
}

// reloadWith writes the running configuration, changed by edit, to a
// file and reloads the daemon from it.
func (h *harness) reloadWith(t *testing.T, edit func(*config.Config)) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "tierwall.yaml")
	h.d.cfgPath = file
	c := *h.d.cfg
	edit(&c)
	y, err := yaml.Marshal(&c)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, y, 0o600); err != nil {
		t.Fatal(err)
	}
	h.d.reload(h.now)
}

func newHarness(t *testing.T, cfg *config.Config, withHW bool) *harness {
	t.Helper()
	h := &harness{dp: newFakeDP(t0), now: t0}
	var hw tier.Table
	if withHW {
		h.hw = tiertest.New(cfg.Hardware.Capacity)
		hw = h.hw
	}
	d, err := newDaemon(cfg, "", quietLog(), h.dp, hw, t0)
	if err != nil {
		t.Fatal(err)
	}
	h.d = d
	return h
}

// step runs one interval one second after the last.
func (h *harness) step(t *testing.T) {
	t.Helper()
	h.now = h.now.Add(time.Second)
	h.dp.at = h.now
	if err := h.d.Step(h.now); err != nil {
		t.Fatalf("step at %v: %v", h.now.Sub(t0), err)
	}
}

func pfx(a netip.Addr) netip.Prefix { return netip.PrefixFrom(a, a.BitLen()) }

func hasEvent(d *Daemon, kind, substr string) bool {
	for _, e := range d.events {
		if e.Kind == kind && (substr == "" || contains(e.Detail, substr)) {
			return true
		}
	}
	return false
}

func contains(s, sub string) bool {
	return len(sub) == 0 || (len(s) >= len(sub) && indexOf(s, sub) >= 0)
}

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

// The whole pipeline of an interval: a heavy source is detected, banned
// in XDP, rated from its counters, placed in hardware, and saved.
func TestIntervalDetectsBansPlacesAndSaves(t *testing.T) {
	h := newHarness(t, testConfig(t), true)
	atk, client := netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("203.0.113.5")
	h.dp.send(5000, atk)
	h.dp.send(10, client)
	h.step(t)
	if _, ok := h.dp.blocked[pfx(atk)]; !ok {
		t.Fatalf("attacker not blocked in XDP: %v", h.dp.blocked)
	}
	if _, ok := h.dp.blocked[pfx(client)]; ok {
		t.Fatal("client blocked")
	}
	if b, ok := h.d.store.Get(pfx(atk)); !ok || b.Detector != "rate" || h.d.card.tierOf(b.Prefix) != "xdp" {
		t.Fatalf("ban %+v %v in %s", b, ok, h.d.card.tierOf(b.Prefix))
	}
	// Two more intervals of drops in XDP: rated, then placed in hardware.
	for i := 0; i < 2; i++ {
		h.dp.hit(pfx(atk), 5000)
		h.step(t)
	}
	if !h.hw.Has(atk) {
		t.Fatalf("attacker not placed in hardware: %v", h.hw.Rules)
	}
	if b, _ := h.d.store.Get(pfx(atk)); h.d.card.tierOf(b.Prefix) != "hw" || b.Rate != 5000 {
		t.Fatalf("ban after placement %+v in %s", b, h.d.card.tierOf(b.Prefix))
	}
	raw, err := stateText(h.d.cfg.StateFile)
	if err != nil || !contains(string(raw), "198.51.100.7/32") {
		t.Fatalf("state file %q: %v", raw, err)
	}
	// From now on the NIC drops it: the rate comes from hardware counters.
	h.hw.Hit(atk, 4000)
	h.step(t)
	if b, _ := h.d.store.Get(pfx(atk)); b.Rate != 4000 {
		t.Fatalf("rate with hardware counters %v, want 4000", b.Rate)
	}
}

// A failed XDP batch leaves no ban behind: the store and the data plane
// agree, and the loop goes on.
func TestIntervalBlockFailureRollsBack(t *testing.T) {
	h := newHarness(t, testConfig(t), false)
	h.dp.BlockErr = fmt.Errorf("injected: %w", datapath.ErrTableFull)
	atk := netip.MustParseAddr("198.51.100.7")
	h.dp.send(5000, atk)
	h.step(t)
	if h.dp.blocks != 1 || h.d.store.Len() != 0 || len(h.dp.blocked) != 0 {
		t.Fatalf("blocks %d, store %d, data plane %v", h.dp.blocks, h.d.store.Len(), h.dp.blocked)
	}
	if !hasEvent(h.d, "error", "blocking") {
		t.Fatalf("no error event: %+v", h.d.events)
	}
	// Once the data plane accepts again, the next detection bans.
	h.dp.BlockErr = nil
	h.dp.send(5000, atk)
	h.step(t)
	if _, ok := h.d.store.Get(pfx(atk)); !ok || h.dp.blocked[pfx(atk)] == nil {
		t.Fatal("not banned after recovery")
	}
}

// Hardware that refuses a rule leaves the source in XDP (still dropped),
// reports the error, and never records it as offloaded.
func TestIntervalHardwareRefusal(t *testing.T) {
	h := newHarness(t, testConfig(t), true)
	h.hw.InstallErr = fmt.Errorf("injected: %w", tier.ErrNotInHardware)
	atk := netip.MustParseAddr("198.51.100.7")
	h.dp.send(5000, atk)
	h.step(t)
	for i := 0; i < 2; i++ {
		h.dp.hit(pfx(atk), 5000)
		h.step(t)
	}
	if h.hw.Has(atk) {
		t.Fatal("rule in hardware despite the refusal")
	}
	if b, _ := h.d.store.Get(pfx(atk)); h.d.card.tierOf(b.Prefix) != "xdp" || h.dp.blocked[pfx(atk)] == nil {
		t.Fatalf("ban %+v, in XDP %v", b, h.dp.blocked[pfx(atk)] != nil)
	}
	if !hasEvent(h.d, "error", "hardware update") {
		t.Fatalf("refusal not reported: %+v", h.d.events)
	}
}

// An unwritable state file fails the interval (so Run logs it) but the
// ban is enforced all the same.
func TestIntervalStateFileUnwritable(t *testing.T) {
	cfg := testConfig(t)
	h := newHarness(t, cfg, false)
	blocker := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	h.d.cfg.StateFile = filepath.Join(blocker, "state.json") // parent is a file
	atk := netip.MustParseAddr("198.51.100.7")
	h.dp.send(5000, atk)
	h.now = h.now.Add(time.Second)
	h.dp.at = h.now
	if err := h.d.Step(h.now); err == nil {
		t.Fatal("Step succeeded with an unwritable state file")
	}
	if h.dp.blocked[pfx(atk)] == nil {
		t.Fatal("ban not enforced when the state file cannot be written")
	}
}

// The rate monitor lifts a ban gone quiet from both tiers, hardware first,
// and the hardware counters of the lifted rule are not lost on the way.
func TestIntervalMonitorLiftsFromBothTiers(t *testing.T) {
	h := newHarness(t, testConfig(t), true)
	atk := netip.MustParseAddr("198.51.100.7")
	h.dp.send(5000, atk)
	h.step(t)
	for i := 0; i < 2; i++ {
		h.dp.hit(pfx(atk), 5000)
		h.step(t)
	}
	if !h.hw.Has(atk) {
		t.Fatal("setup: not in hardware")
	}
	h.hw.Hit(atk, 5000)
	h.step(t)
	// Quiet from now on: after the 3 s hold it is lifted.
	for i := 0; i < 6 && h.d.store.Len() > 0; i++ {
		h.step(t)
	}
	if h.d.store.Len() != 0 || h.hw.Has(atk) || h.dp.blocked[pfx(atk)] != nil {
		t.Fatalf("not lifted: store %d, hw %v, xdp %v", h.d.store.Len(), h.hw.Has(atk), h.dp.blocked[pfx(atk)] != nil)
	}
	if h.hw.Removes != 1 || !hasEvent(h.d, "unban", "") {
		t.Fatalf("removes %d, events %+v", h.hw.Removes, h.d.events)
	}
}

// Operator bans stay whatever the rate.
func TestIntervalKeepsOperatorBans(t *testing.T) {
	h := newHarness(t, testConfig(t), false)
	p := netip.MustParsePrefix("192.0.2.0/24")
	if _, err := h.d.store.Add(h.now, p, "operator", 0); err != nil {
		t.Fatal(err)
	}
	if err := h.dp.Block(p); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 8; i++ {
		h.step(t)
	}
	if _, ok := h.d.store.Get(p); !ok || h.dp.blocked[p] == nil {
		t.Fatal("operator ban lifted by the rate monitor")
	}
}

// A request the loop has taken is answered with its outcome even when the
// caller's deadline passes meanwhile; one the loop never took changed
// nothing and says so.
func TestDoAnswersWhatHappened(t *testing.T) {
	h := newHarness(t, testConfig(t), false)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		f := <-h.d.reqs
		cancel() // the deadline passes while the change runs
		f()
	}()
	applied := false
	if err := h.d.Do(ctx, func() { applied = true }); err != nil || !applied {
		t.Fatalf("Do: %v, applied %v", err, applied)
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	cancel2()
	err := h.d.Do(ctx2, func() { t.Error("ran after the caller gave up before the loop took it") })
	if err == nil || !strings.Contains(err.Error(), "nothing was done") {
		t.Fatalf("Do on a busy loop: %v", err)
	}
}

// An orphaned data plane (detached under the daemon) ends Run with an
// error, so systemd restarts a daemon that re-adopts, instead of writing
// to maps nothing reads.
func TestRunExitsWhenOrphaned(t *testing.T) {
	cfg := testConfig(t)
	cfg.Interval = 10 * time.Millisecond
	h := newHarness(t, cfg, false)
	h.dp.CheckErr = fmt.Errorf("test: %w", datapath.ErrOrphaned)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := h.d.Run(ctx, nil)
	if !errors.Is(err, datapath.ErrOrphaned) {
		t.Fatalf("Run returned %v, want ErrOrphaned", err)
	}
}

// A 100K-line feed through the API is one data-plane batch, all or
// nothing: one refused prefix changes nothing.
func TestAddRulesIsOneBatch(t *testing.T) {
	cfg := testConfig(t)
	cfg.Rails.AllowPrefixes = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	h := newHarness(t, cfg, false)
	go func() {
		for f := range h.d.reqs {
			f()
		}
	}()
	ps := make([]netip.Prefix, 0, 100_000)
	for i := 0; i < 100_000; i++ {
		ps = append(ps, netip.PrefixFrom(netip.AddrFrom4([4]byte{100, byte(i >> 16), byte(i >> 8), byte(i)}), 32))
	}
	before := h.dp.blocks
	n, err := h.d.AddRules(context.Background(), ps, "feed", 0)
	if err != nil || n != len(ps) || h.dp.blocks != before+1 || len(h.dp.blocked) != len(ps) || h.d.store.Len() != len(ps) {
		t.Fatalf("added %d (%v), %d Block calls, %d in the data plane, %d in the store", n, err, h.dp.blocks-before, len(h.dp.blocked), h.d.store.Len())
	}
	bad := append([]netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}, netip.MustParsePrefix("10.1.0.0/16"))
	if _, err := h.d.AddRules(context.Background(), bad, "feed", 0); !errors.Is(err, apiv1.ErrBadRequest) {
		t.Fatalf("refused prefix: %v", err)
	}
	if _, ok := h.d.store.Get(bad[0]); ok || h.dp.blocked[bad[0]] != nil {
		t.Fatal("a refused batch left part of itself behind")
	}
}

// stateText is what the state holds on disk: the snapshot and its journal
// of changes since.
func stateText(path string) ([]byte, error) {
	snap, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	j, err := os.ReadFile(path + ".journal")
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	return append(snap, j...), nil
}
