// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/tierwall/tierwall/internal/control/config"
	"github.com/tierwall/tierwall/internal/datapath"
)

// The tests run with no memory cgroup limit and no pinned data plane
// unless they say otherwise: the machine's own must not size them.
func init() {
	cgroupLimit = func() uint64 { return 0 }
	pinnedState = func(string) bool { return false }
}

func withCgroup(t *testing.T, limit uint64, pinned bool) {
	oldL, oldP := cgroupLimit, pinnedState
	t.Cleanup(func() { cgroupLimit, pinnedState = oldL, oldP })
	cgroupLimit = func() uint64 { return limit }
	pinnedState = func(string) bool { return pinned }
}

// mib is a budget with room mb MiB beyond what cfg needs.
func roomy(t *testing.T, cfg *config.Config, mb int) int {
	t.Helper()
	p, err := planMemory(cfg, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	return int(p.need()>>20) + mb
}

// A budget the configured capacities exceed is refused before anything is
// attached, naming the parts, and leaves the Go runtime's limit as it was;
// one with room sets the heap's limit to what the tables leave.
func TestMemoryBudgetRefusedBeforeAttach(t *testing.T) {
	_, attached := startFake(t)
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	cfg := testConfig(t)
	cfg.Capacity.Features = 1 << 24 // 2 buffers x CPUs x 2^25 slots x 64 B: GiBs
	cfg.Capacity.MemoryMiB = 256
	if _, err := New(cfg, "", quietLog()); !errors.Is(err, config.ErrInvalid) {
		t.Fatalf("New with a budget the tables exceed: %v, want a configuration error", err)
	}
	if *attached != 0 {
		t.Fatalf("the refused daemon attached a data plane (%d attaches)", *attached)
	}
	if got := debug.SetMemoryLimit(-1); got != before {
		t.Fatalf("the refused daemon changed the memory limit to %d", got)
	}

	cfg = testConfig(t)
	cfg.Capacity.MemoryMiB = roomy(t, cfg, 64)
	d, err := New(cfg, "", quietLog())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = d.shutdown() }()
	p, _ := planMemory(cfg, uint64(cfg.Capacity.MemoryMiB)<<20, "")
	if got, want := debug.SetMemoryLimit(-1), int64(p.heapLimit()); got != want {
		t.Fatalf("heap limit %d, want %d (%d MiB less %d mapped, %d other maps, the reserve)", got, want, cfg.Capacity.MemoryMiB, p.mapped, p.kernel)
	}
}

// The bans the rails allow are in the budget: 500,000 of them (~1.4 KB of
// heap each) in a 512 MiB unit was a restart OOM-killed into a loop; now
// it is refused at start, saying why.
func TestMemoryBudgetCountsTheBans(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	cfg := testConfig(t)
	cfg.Capacity.Features = 1 << 12
	cfg.Capacity.MemoryMiB = 512
	cfg.Rails.MaxTotal = 500_000
	err := applyMemoryBudget(cfg, quietLog())
	if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), "rails.max_total 500000 bans") {
		t.Fatalf("500K bans in 512 MiB: %v, want refused naming rails.max_total", err)
	}
	cfg.Rails.MaxTotal = 50_000
	if err := applyMemoryBudget(cfg, quietLog()); err != nil {
		t.Fatalf("50K bans in 512 MiB: %v", err)
	}
}

// Without capacity.memory_mib the unit's MemoryMax (the memory cgroup's
// limit) is the budget; a fresh data plane's feature buffers are sized to
// fit it, a pinned one's are left as pinned (and checked).
func TestMemoryBudgetFromTheCgroup(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	cfg := testConfig(t)
	full := roomy(t, cfg, 1)
	small := testConfig(t)
	small.Capacity.Features = datapath.DefaultFeatureCapacity / 4
	tight := roomy(t, small, 1)

	withCgroup(t, uint64(tight)<<20, false)
	if err := applyMemoryBudget(cfg, quietLog()); err != nil {
		t.Fatalf("a fresh data plane in a %d MiB cgroup: %v", tight, err)
	}
	if cfg.Capacity.Features != datapath.DefaultFeatureCapacity/4 {
		t.Fatalf("features per CPU %d in %d MiB, want %d (the default needs %d MiB)", cfg.Capacity.Features, tight, datapath.DefaultFeatureCapacity/4, full)
	}
	p, _ := planMemory(cfg, uint64(tight)<<20, "")
	if got := debug.SetMemoryLimit(-1); got != int64(p.heapLimit()) {
		t.Fatalf("heap limit %d, want %d", got, p.heapLimit())
	}

	cfg = testConfig(t)
	withCgroup(t, uint64(tight)<<20, true)
	if err := applyMemoryBudget(cfg, quietLog()); err != nil || cfg.Capacity.Features != 0 {
		t.Fatalf("pinned tables in a %d MiB cgroup: %v (features %d); want them adopted as pinned", tight, err, cfg.Capacity.Features)
	}
	// A cgroup too small for the least feature buffers and the bans.
	cfg = testConfig(t)
	withCgroup(t, 256<<20, false)
	err := applyMemoryBudget(cfg, quietLog())
	if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), "the unit's MemoryMax") || cfg.Capacity.Features != 0 {
		t.Fatalf("a 256 MiB cgroup: %v (features %d); want refused, naming the unit", err, cfg.Capacity.Features)
	}
	// capacity.memory_mib above the cgroup's: the cgroup's wins.
	cfg = testConfig(t)
	cfg.Capacity.MemoryMiB = full * 2
	withCgroup(t, uint64(full)<<20, true)
	if err := applyMemoryBudget(cfg, quietLog()); err != nil {
		t.Fatal(err)
	}
	p, _ = planMemory(cfg, uint64(full)<<20, "")
	if got := debug.SetMemoryLimit(-1); got != int64(p.heapLimit()) {
		t.Fatalf("heap limit %d, want the cgroup's budget's %d", got, p.heapLimit())
	}
}

// A reload applies a new budget against the running tables; one they
// leave too little of is refused with an event and the old one kept;
// none brings back the limit the process started with.
func TestMemoryBudgetReloaded(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	cfg := testConfig(t)
	h := newHarness(t, cfg, false)
	file := filepath.Join(t.TempDir(), "tierwall.yaml")
	h.d.cfgPath = file
	reload := func(mib int) {
		t.Helper()
		y := fmt.Sprintf("interface: %s\nstate_file: %s\ncapacity: {memory_mib: %d}\n", cfg.Interface, cfg.StateFile, mib)
		if err := os.WriteFile(file, []byte(y), 0o600); err != nil {
			t.Fatal(err)
		}
		h.d.reload(h.now)
	}

	room := roomy(t, cfg, 256) // its size depends on the machine's CPUs
	p, _ := planMemory(cfg, uint64(room)<<20, "")
	want := int64(p.heapLimit())
	reload(room)
	if got := debug.SetMemoryLimit(-1); got != want || h.d.cfg.Capacity.MemoryMiB != room {
		t.Fatalf("after a reload to %d MiB: limit %d, want %d; memory_mib %d", room, got, want, h.d.cfg.Capacity.MemoryMiB)
	}
	// Too little for the running tables (64 MiB at least, as validation
	// allows; the default feature buffers alone take more).
	reload(64)
	if got := debug.SetMemoryLimit(-1); got != want || h.d.cfg.Capacity.MemoryMiB != room {
		t.Fatalf("a budget the tables exceed: limit %d, memory_mib %d; want the old ones", got, h.d.cfg.Capacity.MemoryMiB)
	}
	if !hasEvent(h.d, "error", fmt.Sprintf("keeping capacity.memory_mib %d", room)) {
		t.Errorf("no event for the refused budget; events %+v", h.d.events)
	}
	reload(0)
	if got := debug.SetMemoryLimit(-1); got != startLimit {
		t.Fatalf("no budget: limit %d, want the start's %d", got, startLimit)
	}
}

// A state file with more bans than rails.max_total (written under a
// larger one) is loaded whole at start: the budget counts what it holds,
// and a budget that cannot is refused naming it, before anything is
// loaded or attached.
func TestMemoryBudgetCountsTheStateFile(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	old := stateBans
	t.Cleanup(func() { stateBans = old })
	cfg := testConfig(t)
	cfg.Capacity.Features = 1 << 12
	cfg.Capacity.MemoryMiB = 1536
	cfg.Rails.MaxTotal = 500_000
	stateBans = func(string) (int, error) { return 400_000, nil }
	if err := applyMemoryBudget(cfg, quietLog()); err != nil {
		t.Fatalf("400K bans in the state file, 500K allowed: %v", err)
	}
	stateBans = func(string) (int, error) { return 2_000_000, nil }
	err := applyMemoryBudget(cfg, quietLog())
	if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), "2000000 bans of the state file") {
		t.Fatalf("2M bans in the state file: %v, want refused naming the state file", err)
	}
}

func TestFloodTablesReleasedOnce(t *testing.T) {
	// When a flood ends, the interval's tables sized for it go, and the
	// memory goes back at once: once per flood, not every interval, and
	// never while it lasts.
	var released int
	defer func(f func()) { releaseMemory = f }(releaseMemory)
	releaseMemory = func() { released++ }
	h := newHarness(t, testConfig(t), false)
	flood := make([]netip.Addr, 1<<17)
	for i := range flood {
		flood[i] = netip.AddrFrom4([4]byte{10, 128 + byte(i>>16), byte(i >> 8), byte(i)})
	}
	client := netip.MustParseAddr("192.0.2.77")
	for wave := 1; wave <= 2; wave++ {
		for range 3 {
			h.dp.send(1, flood...)
			h.dp.send(10, client)
			h.step(t)
		}
		if released != wave-1 {
			t.Fatalf("wave %d: memory released %d times during the flood, want %d", wave, released, wave-1)
		}
		for range 3 {
			h.dp.send(10, client)
			h.step(t)
		}
		if released != wave {
			t.Fatalf("wave %d: memory released %d times after the flood, want %d (once as its tables went)", wave, released, wave)
		}
	}
}
