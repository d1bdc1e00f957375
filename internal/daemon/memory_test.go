package daemon

import (
	"errors"
	"runtime/debug"
	"testing"

	"github.com/tierwall/tierwall/internal/config"
)

func TestHeapLimit(t *testing.T) {
	if got, err := heapLimit(256<<20, 128<<20); err != nil || got != 96<<20 {
		t.Fatalf("256 MiB budget, 128 MiB mapped: %d MiB, %v; want 96 MiB", got>>20, err)
	}
	// The tables alone, or the tables with too little left for a heap:
	// a configuration error.
	for _, mapped := range []uint64{256 << 20, 200 << 20, 300 << 20} {
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

	cfg = testConfig(t)
	cfg.Capacity.MemoryMiB = 1024
	d, err := New(cfg, "", quietLog())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = d.shutdown() }()
	mapped, err := dataPlaneOptions(cfg).MappedBytes()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := debug.SetMemoryLimit(-1), int64(1024<<20-mapped-memoryReserve); got != want {
		t.Fatalf("heap limit %d, want %d (1 GiB less %d mapped, less the reserve)", got, want, mapped)
	}
}
