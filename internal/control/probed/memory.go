// SPDX-License-Identifier: Apache-2.0

package probed

import (
	"fmt"
	"log/slog"
	"runtime/debug"
	"unsafe"

	"github.com/tierwall/tierwall/internal/control/config"
	"github.com/tierwall/tierwall/internal/probe/export"
	"github.com/tierwall/tierwall/internal/probe/flowprobe"
)

// What a probe's memory holds besides the flows its engine tracks. The
// kernel's parts (the software table, the sample ring) are charged to the
// unit's memory cgroup like the process's own pages.
const (
	// swEntryBytes is one software-table entry in the kernel: the hash
	// element, the flow key and struct tw_flow, preallocated.
	swEntryBytes = 256
	// dpiFlowBytes is one flow's DPI state at most (builtin: the
	// classifier's state and a ClientHello's reassembly; nDPI's flow
	// struct is about as large, outside the Go heap).
	dpiFlowBytes = 2048
	// reserve is the binary's pages, stacks, and what the runtime's
	// resident memory exceeds its soft limit by (as the daemon's).
	reserve = 48 << 20
	// minTracked is the least a budget must leave the engine: below it,
	// a budget that starts and tracks next to nothing is a mistake.
	minTracked = 1024
)

// Sizing is what a memory budget gives a probe.
type Sizing struct {
	MaxFlows  int    // flows the engine tracks
	HeapLimit uint64 // the Go runtime's memory limit; 0: none set
	Fixed     uint64 // what the capacities take, whatever the traffic
}

// Size fits the probe's configuration in its budget (probe.memory_mib):
// the fixed parts (software table, sample ring, DPI, the records kept for
// the API and the exporter's queue, the reserve) first, the tracked flows
// in what is left, up to the software table's capacity. Without a budget
// the engine tracks as many flows as the software table holds. A budget
// the fixed parts leave less than minTracked flows of is a configuration
// error naming the numbers, reported before anything is attached.
func Size(pc config.Probe) (Sizing, error) {
	recordBytes := uint64(unsafe.Sizeof(flowprobe.Record{}))
	queue := uint64(0)
	if len(pc.Export.Collectors) > 0 {
		q := pc.Export.QueueLen
		if q <= 0 {
			q = export.DefaultQueueLen
		}
		queue = uint64(q) * recordBytes
	}
	kernel := uint64(pc.Capacity)*swEntryBytes + uint64(pc.DPI.Ring)
	heapFixed := uint64(pc.DPI.MaxFlows)*dpiFlowBytes + flowprobe.RecentRecords*recordBytes + queue
	fixed := kernel + heapFixed + reserve
	if pc.MemoryMiB == 0 {
		return Sizing{MaxFlows: pc.Capacity, Fixed: fixed}, nil
	}
	budget := uint64(pc.MemoryMiB) << 20
	need := fixed + minTracked*flowprobe.TrackedFlowBytes
	if budget < need {
		return Sizing{}, fmt.Errorf("%w: probe.memory_mib %d is less than the %d MiB the capacities take: %d MiB of software table (probe.capacity %d x %d B), %d MiB of sample ring (probe.dpi.ring_bytes), %d MiB of DPI state (probe.dpi.max_flows %d x %d B), %d MiB of records and export queue, %d MiB of reserve, and %d MiB for the least %d tracked flows (%d B each): raise it or lower the capacities",
			config.ErrInvalid, pc.MemoryMiB, (need+(1<<20)-1)>>20, pc.Capacity*swEntryBytes>>20, pc.Capacity, swEntryBytes,
			pc.DPI.Ring>>20, uint64(pc.DPI.MaxFlows)*dpiFlowBytes>>20, pc.DPI.MaxFlows, dpiFlowBytes,
			(flowprobe.RecentRecords*recordBytes+queue)>>20, reserve>>20,
			minTracked*flowprobe.TrackedFlowBytes>>20, minTracked, flowprobe.TrackedFlowBytes)
	}
	n := min((budget-fixed)/flowprobe.TrackedFlowBytes, uint64(pc.Capacity))
	return Sizing{MaxFlows: int(n), HeapLimit: budget - kernel - reserve, Fixed: fixed}, nil
}

// applyBudget sizes the probe and holds the Go heap to its share of the
// budget (the GC works harder near it instead of the heap doubling).
func applyBudget(pc config.Probe, log *slog.Logger) (Sizing, error) {
	s, err := Size(pc)
	if err != nil {
		return s, err
	}
	if s.HeapLimit > 0 {
		debug.SetMemoryLimit(int64(s.HeapLimit))
		log.Info("memory budget", "budget_mib", pc.MemoryMiB, "fixed_mib", s.Fixed>>20,
			"heap_limit_mib", s.HeapLimit>>20, "tracked_flows", s.MaxFlows)
	}
	return s, nil
}
