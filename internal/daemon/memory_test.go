// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"

	"github.com/tierwall/tierwall/internal/config"
)

func TestHeapLimit(t *testing.T) {
	if got, err := heapLimit(256<<20, 128<<20); err != nil || got != 80<<20 {
		t.Fatalf("256 MiB budget, 128 MiB mapped: %d MiB, %v; want 80 MiB", got>>20, err)
	}
	// The tables alone, or the tables with too little left for a heap:
	// a configuration error.
	for _, mapped := range []uint64{256 << 20, 170 << 20, 300 << 20} {
		if _, err := heapLimit(256<<20, mapped); !errors.Is(err, config.ErrInvalid) {
			t.Errorf("%d MiB mapped in a 256 MiB budget: %v, want a configuration error", mapped>>20, err)
		}
	}
}

// A budget the data plane's tables alone exceed is refused before
// anything is attached, and leaves the Go runtime's limit as it was; one
// with room sets the heap's limit to what the tables leave.
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

	// A budget with 256 MiB over the tables (their size depends on the
	// machine's CPUs).
	cfg = testConfig(t)
	mapped, err := dataPlaneOptions(cfg).MappedBytes()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Capacity.MemoryMiB = int(mapped>>20) + 256
	d, err := New(cfg, "", quietLog())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = d.shutdown() }()
	if got, want := debug.SetMemoryLimit(-1), int64(uint64(cfg.Capacity.MemoryMiB)<<20-mapped-memoryReserve); got != want {
		t.Fatalf("heap limit %d, want %d (%d MiB less %d mapped, less the reserve)", got, want, cfg.Capacity.MemoryMiB, mapped)
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
	mapped, err := dataPlaneOptions(cfg).MappedBytes()
	if err != nil {
		t.Fatal(err)
	}
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

	roomy := int(mapped>>20) + 256 // their size depends on the machine's CPUs
	want := int64(uint64(roomy)<<20 - mapped - memoryReserve)
	reload(roomy)
	if got := debug.SetMemoryLimit(-1); got != want || h.d.cfg.Capacity.MemoryMiB != roomy {
		t.Fatalf("after a reload to %d MiB: limit %d, want %d; memory_mib %d", roomy, got, want, h.d.cfg.Capacity.MemoryMiB)
	}
	// Too little for the running tables (64 MiB at least, as validation
	// allows; the default feature buffers alone take more).
	reload(64)
	if got := debug.SetMemoryLimit(-1); got != want || h.d.cfg.Capacity.MemoryMiB != roomy {
		t.Fatalf("a budget the tables exceed: limit %d, memory_mib %d; want the old ones", got, h.d.cfg.Capacity.MemoryMiB)
	}
	if !hasEvent(h.d, "error", fmt.Sprintf("keeping capacity.memory_mib %d", roomy)) {
		t.Errorf("no event for the refused budget; events %+v", h.d.events)
	}
	reload(0)
	if got := debug.SetMemoryLimit(-1); got != startLimit {
		t.Fatalf("no budget: limit %d, want the start's %d", got, startLimit)
	}
}
