// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/tierwall/tierwall/internal/bpffs"
	"github.com/tierwall/tierwall/internal/control/ban"
	"github.com/tierwall/tierwall/internal/control/config"
	"github.com/tierwall/tierwall/internal/datapath"
)

// One memory budget holds the whole daemon: the unit's memory cgroup is
// charged for the BPF maps the daemon creates (kernel >= 5.11) as for its
// own pages, so the tables, the heap and the process's own pages must fit
// in MemoryMax together. With the default capacities attach failed with
// ENOMEM under 200 MiB, and a restart with 499K bans in a 512 MiB cgroup
// was OOM-killed, which systemd turned into a restart loop.
const (
	// memoryReserve is what a budget keeps for the process besides its
	// heap and the tables: the binary's pages (about 20 MiB), stacks, and
	// what the Go runtime's resident memory may exceed its soft limit by
	// (a 32 MiB reserve measured 257 MiB resident in a 256 MiB budget).
	memoryReserve = 48 << 20
	// banHeapBytes is a ban's share of the heap: the store's entry and
	// meter (~450 B, TestMemoryBudgetPerItemCosts), the rule counters
	// read every interval, placement's and the state file's copies (the
	// daemon measured ~1.35 KB per ban with 499K). Loading the state file
	// at start allocates ~630 B a ban in all, read one ban at a time into
	// a store sized once (TestStateLoadWithinBanBudget); it allocated
	// ~3.8 KB when the whole file was decoded at once, which took a
	// restart with 500K bans to the unit's limit.
	banHeapBytes = 1400
	// trafficKeyBytes is one (source, destination, protocol) key of an
	// interval: the detectors' tables and the drain's index (~165 B
	// measured when the drain also kept an 80-byte flow a key, which it
	// no longer does), with slack.
	trafficKeyBytes = 256
	// kernelBase and kernelPerCPU are the BPF maps MappedBytes leaves
	// out: prefix tries, allow and known-good lists, the per-CPU rule
	// counters and heavy-hitter sketches.
	kernelBase   = 16 << 20
	kernelPerCPU = 1 << 20
	// minFeatures is the least a budget may shrink capacity.features to.
	minFeatures = 1 << 12
)

// startLimit is the Go memory limit the process started with.
var startLimit = debug.SetMemoryLimit(-1)

// cgroupLimit is the memory cgroup's limit (memory.max) of this process,
// 0 when it has none; pinnedState whether the data plane on iface is
// pinned already (its capacities are then the pinned ones). Tests replace
// them.
var (
	cgroupLimit = readCgroupLimit
	pinnedState = func(iface string) bool {
		root, err := bpffs.Root()
		return err == nil && bpffs.Exists(bpffs.FilterDir(root, iface))
	}
)

// stateBans counts the bans of the state file the daemon will load.
// Tests replace it.
var stateBans = ban.SnapshotBans

// readCgroupLimit reads the memory limit of this process's cgroup:
// memory.max (v2), else memory.limit_in_bytes (v1's memory controller).
func readCgroupLimit() uint64 {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return 0
	}
	read := func(path string) uint64 {
		v, err := os.ReadFile(path)
		if err != nil {
			return 0
		}
		n, err := strconv.ParseUint(strings.TrimSpace(string(v)), 10, 64)
		if err != nil || n >= 1<<62 {
			return 0 // "max", or v1's page-rounded "unlimited"
		}
		return n
	}
	for _, l := range strings.Split(string(b), "\n") {
		if path, ok := strings.CutPrefix(l, "0::"); ok {
			if n := read(filepath.Join("/sys/fs/cgroup", path, "memory.max")); n > 0 {
				return n
			}
		}
		if f := strings.SplitN(l, ":", 3); len(f) == 3 && f[1] == "memory" {
			if n := read(filepath.Join("/sys/fs/cgroup/memory", f[2], "memory.limit_in_bytes")); n > 0 {
				return n
			}
		}
	}
	return 0
}

// dataPlaneOptions sizes the data plane from the configuration.
func dataPlaneOptions(cfg *config.Config) datapath.Options {
	return datapath.Options{ExactCapacity4: cfg.Capacity.Exact4, ExactCapacity6: cfg.Capacity.Exact6,
		PrefixCapacity: cfg.Capacity.Prefix, AllowCapacity: cfg.Capacity.Allow, FeatureCapacity: cfg.Capacity.Features,
		KnownGoodCapacity: cfg.Capacity.KnownGood}
}

// memoryPlan is what a budget holds, part by part.
type memoryPlan struct {
	budget   uint64
	source   string // where the budget comes from
	cpus     int
	features int // per CPU, as sized
	mapped   uint64
	kernel   uint64 // the other BPF maps
	bans     uint64
	maxBans  int
	// stateBans is what the state file holds when that is more than
	// maxBans (written under a larger rails.max_total): all of it is
	// loaded at start.
	stateBans int
	traffic   uint64
}

func (p memoryPlan) need() uint64 {
	return p.mapped + p.kernel + p.bans + p.traffic + memoryReserve
}

// heapLimit is what the budget leaves the Go heap: all of it but the
// kernel's tables and the reserve.
func (p memoryPlan) heapLimit() uint64 { return p.budget - p.mapped - p.kernel - memoryReserve }

// planMemory sizes cfg against a budget of budget bytes.
func planMemory(cfg *config.Config, budget uint64, source string) (memoryPlan, error) {
	p := memoryPlan{budget: budget, source: source, cpus: runtime.NumCPU(), features: cfg.Capacity.Features}
	if p.features == 0 {
		p.features = datapath.DefaultFeatureCapacity
	}
	mapped, err := dataPlaneOptions(cfg).MappedBytes()
	if err != nil {
		return p, fmt.Errorf("sizing the data plane: %w", err)
	}
	p.mapped = mapped
	p.kernel = kernelBase + uint64(p.cpus)*kernelPerCPU
	p.maxBans = cfg.Rails.MaxTotal
	if p.maxBans == 0 {
		// No rail: as many as the exact tables hold.
		p.maxBans = cfg.Capacity.Exact4 + cfg.Capacity.Exact6
		if p.maxBans == 0 {
			p.maxBans = 2 * datapath.DefaultExactCapacity
		}
	}
	p.bans = uint64(p.maxBans) * banHeapBytes
	p.traffic = uint64(p.features) * uint64(p.cpus) * trafficKeyBytes
	return p, nil
}

// applyMemoryBudget sizes the daemon against its budget: capacity.memory_mib,
// else the memory cgroup's limit (the unit's MemoryMax), the smaller when
// both are set. The budget must hold the data plane's tables and the other
// BPF maps, the heap the bans (rails.max_total) and an interval's traffic
// need, and the reserve; a budget that cannot is refused before anything
// is attached, naming each part. A fresh data plane with capacity.features
// unset gets the largest feature capacity (a power of two, at most the
// default) that fits: the feature buffers are per CPU, and the default
// alone is 64 MiB a CPU. The Go heap is then held under what the tables
// leave (the GC works harder near it instead of the heap doubling).
func applyMemoryBudget(cfg *config.Config, log *slog.Logger) error {
	budget, source := uint64(cfg.Capacity.MemoryMiB)<<20, "capacity.memory_mib"
	if cg := cgroupLimit(); cg > 0 && (budget == 0 || cg < budget) {
		budget, source = cg, "the memory cgroup's limit (the unit's MemoryMax)"
	}
	if budget == 0 {
		// No budget (again, after a reload): the limit the process
		// started with (GOMEMLIMIT, or none).
		debug.SetMemoryLimit(startLimit)
		return nil
	}
	inState, err := stateBans(cfg.StateFile)
	if err != nil {
		return fmt.Errorf("sizing the memory budget: %w", err)
	}
	plan := func(c *config.Config) (memoryPlan, error) {
		p, err := planMemory(c, budget, source)
		if inState > p.maxBans {
			p.stateBans, p.bans = inState, uint64(inState)*banHeapBytes
		}
		return p, err
	}
	p, err := plan(cfg)
	if err != nil {
		return err
	}
	if cfg.Capacity.Features == 0 {
		for f := datapath.DefaultFeatureCapacity / 2; p.need() > budget && f >= minFeatures; f /= 2 {
			c := *cfg
			c.Capacity.Features = f
			if p, err = plan(&c); err != nil {
				return err
			}
		}
		// A pinned data plane keeps the capacity it was made with
		// (asking for another is refused at attach); the same budget on
		// the same CPUs made it this size, which is what is counted.
		if p.features != datapath.DefaultFeatureCapacity && p.need() <= budget && !pinnedState(cfg.Interface) {
			cfg.Capacity.Features = p.features
			log.Info("capacity.features sized to the memory budget", "features_per_cpu", p.features, "cpus", p.cpus,
				"budget_mib", budget>>20)
		}
	}
	if p.need() > budget {
		bans := fmt.Sprintf("rails.max_total %d bans", p.maxBans)
		if p.stateBans > 0 {
			bans = fmt.Sprintf("the %d bans of the state file %s (more than rails.max_total %d; all are loaded at start)", p.stateBans, cfg.StateFile, p.maxBans)
		}
		return fmt.Errorf("%w: a memory budget of %d MiB (%s) cannot hold the configured capacities on %d CPUs: %d MiB of data-plane tables (capacity.exact4, exact6; features %d per CPU), %d MiB of other BPF maps, %d MiB of heap for %s (%d B each), %d MiB for an interval's traffic (%d keys per CPU, %d B each) and %d MiB of reserve: %d MiB in all; raise the budget or lower the capacities",
			config.ErrInvalid, budget>>20, source, p.cpus, p.mapped>>20, p.features, p.kernel>>20, p.bans>>20, bans, banHeapBytes,
			p.traffic>>20, p.features, trafficKeyBytes, memoryReserve>>20, (p.need()+(1<<20)-1)>>20)
	}
	debug.SetMemoryLimit(int64(p.heapLimit()))
	log.Info("memory budget", "budget_mib", budget>>20, "from", source, "mapped_tables_mib", p.mapped>>20,
		"other_maps_mib", p.kernel>>20, "heap_limit_mib", p.heapLimit()>>20, "bans", p.maxBans)
	return nil
}
