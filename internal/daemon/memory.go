// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"fmt"
	"log/slog"
	"runtime/debug"

	"github.com/tierwall/tierwall/internal/config"
	"github.com/tierwall/tierwall/internal/datapath"
)

// memoryReserve is what a budget keeps for the process besides its heap
// and the mapped tables: the binary's pages (about 20 MiB), stacks, and
// what the Go runtime's resident memory may exceed its soft limit by (a
// 32 MiB reserve measured 257 MiB resident in a 256 MiB budget).
const memoryReserve = 48 << 20

// startLimit is the Go memory limit the process started with.
var startLimit = debug.SetMemoryLimit(-1)

// dataPlaneOptions sizes the data plane from the configuration.
func dataPlaneOptions(cfg *config.Config) datapath.Options {
	return datapath.Options{ExactCapacity4: cfg.Capacity.Exact4, ExactCapacity6: cfg.Capacity.Exact6,
		PrefixCapacity: cfg.Capacity.Prefix, AllowCapacity: cfg.Capacity.Allow, FeatureCapacity: cfg.Capacity.Features,
		KnownGoodCapacity: cfg.Capacity.KnownGood}
}

// applyMemoryBudget holds the Go heap under capacity.memory_mib less the
// data plane's tables this process maps (fixed by the capacities): the
// daemon's resident memory then stays within the budget whatever the
// number of sources, the GC working harder near the limit instead of the
// heap growing to twice its live size. A budget the tables leave too
// little of is refused before anything is attached.
func applyMemoryBudget(cfg *config.Config, log *slog.Logger) error {
	if cfg.Capacity.MemoryMiB == 0 {
		// No budget (again, after a reload): the limit the process
		// started with (GOMEMLIMIT, or none).
		debug.SetMemoryLimit(startLimit)
		return nil
	}
	mapped, err := dataPlaneOptions(cfg).MappedBytes()
	if err != nil {
		return fmt.Errorf("sizing the data plane for capacity.memory_mib: %w", err)
	}
	heap, err := heapLimit(uint64(cfg.Capacity.MemoryMiB)<<20, mapped)
	if err != nil {
		return err
	}
	debug.SetMemoryLimit(int64(heap))
	log.Info("memory budget", "budget_mib", cfg.Capacity.MemoryMiB, "mapped_tables_mib", mapped>>20, "heap_limit_mib", heap>>20)
	return nil
}

// heapLimit is what a budget leaves the Go heap: the budget less the
// mapped tables and the reserve, at least as much again as the reserve.
func heapLimit(budget, mapped uint64) (uint64, error) {
	if budget < mapped+2*memoryReserve {
		return 0, fmt.Errorf("%w: capacity.memory_mib %d leaves less than %d MiB for the heap after %d MiB of mapped data-plane tables (capacity.features, exact4, exact6 and the number of CPUs size them): raise it or lower the capacities",
			config.ErrInvalid, budget>>20, memoryReserve>>20, mapped>>20)
	}
	return budget - mapped - memoryReserve, nil
}
