// SPDX-License-Identifier: Apache-2.0

package network

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tierwall/tierwall/internal/control/config"
	"github.com/tierwall/tierwall/internal/testbed/eval/evalkit"
	"github.com/tierwall/tierwall/internal/testbed/fastnetmon"
	"github.com/tierwall/tierwall/internal/testbed/harness"
)

type tierwallProc struct{ *evalkit.Proc }

// tierwallConfig is netcollect's configuration: 101 exporters
// (127.0.0.1 on, the run's and the memory steps'), the run's threshold
// per host, and a host group per carpet bombing's /24 with its total at
// the same threshold.
func tierwallConfig(p Params, addr netip.AddrPort, cells []Cell) *config.Config {
	exporters := make([]config.TelemetryExporter, 101)
	for i := range exporters {
		exporters[i] = config.TelemetryExporter{Address: fmt.Sprintf("127.0.0.%d", 1+i), Name: fmt.Sprintf("r%d", i)}
	}
	c := evalkit.CollectorConfig(addr.String(), exporters, p.Threshold)
	var groups []config.HostGroup
	for _, cell := range cells {
		if cell.Kind == "carpet" {
			name := "carpet-" + strings.NewReplacer(".", "-", "/", "-").Replace(cell.Victim)
			groups = append(groups, config.HostGroup{Name: name, Prefixes: []string{cell.Victim}})
		}
	}
	if len(groups) > 0 {
		c.HostGroups = groups
		c.Telemetry.Groups = map[string]config.TelemetryGroup{}
		for _, g := range groups {
			c.Telemetry.Groups[g.Name] = config.TelemetryGroup{Total: map[string]config.TelemetryLimits{"all": {PPS: p.Threshold}}}
		}
	}
	return c
}

// startTierwall writes a tierwall.yaml with the run's thresholds (a host
// group per carpet bombing's /24, its total at the same threshold) and
// runs netcollect on it.
func startTierwall(ctx context.Context, p Params, dir string, addr netip.AddrPort, cells []Cell) (*tierwallProc, error) {
	cfg := filepath.Join(dir, "tierwall.yaml")
	if err := harness.WriteConfig(cfg, tierwallConfig(p, addr, cells)); err != nil {
		return nil, fmt.Errorf("writing tierwall's configuration: %w", err)
	}
	pr, err := evalkit.Start(ctx, p.Self, []string{"netcollect", "--config", cfg}, p.Log)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(10 * time.Second)
	for evalkit.UDPDrops(addr.Port()) == math.MaxUint64 || !evalkit.Listening(addr.Port()) {
		if time.Now().After(deadline) {
			pr.Stop()
			return nil, fmt.Errorf("tierwall's collector did not listen on %v", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return &tierwallProc{pr}, nil
}

// NetcollectLine is what netcollect prints: an attack as it starts, or
// its counters when asked (SIGUSR1).
type NetcollectLine struct {
	Attack *json.RawMessage `json:"attack,omitempty"`
	// Reported is when netcollect printed the attack: the time it fired,
	// as FastNetMon's notify script records its own.
	Reported time.Time        `json:"reported,omitzero"`
	Stats    *NetcollectStats `json:"stats,omitempty"`
}

// NetcollectStats sum tierwall's exporter counters.
type NetcollectStats struct {
	Datagrams, Records, DecodeErrors, SequenceGaps, TemplatesRefused uint64
	Templates                                                        int
	// LiveHeap is the Go heap in use after a collection (bytes).
	LiveHeap uint64
}

func (t *tierwallProc) attacks() []twAttack {
	var out []twAttack
	for _, l := range t.Lines() {
		var x NetcollectLine
		if json.Unmarshal([]byte(l), &x) != nil || x.Attack == nil {
			continue
		}
		var a twAttack
		if json.Unmarshal(*x.Attack, &a) == nil {
			a.Reported = x.Reported
			out = append(out, a)
		}
	}
	return out
}

func (t *tierwallProc) stats() (NetcollectStats, error) {
	n := len(t.Lines())
	if err := t.Cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		return NetcollectStats{}, fmt.Errorf("asking tierwall for its counters: %w", err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		ls := t.Lines()
		for _, l := range ls[min(n, len(ls)):] {
			var x NetcollectLine
			if json.Unmarshal([]byte(l), &x) == nil && x.Stats != nil {
				return *x.Stats, nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return NetcollectStats{}, errors.New("tierwall did not print its counters")
}

type fnmProc struct {
	*evalkit.Proc
	cfg fastnetmon.Config
}

func startFastNetMon(ctx context.Context, p Params, dir string, sflow, nf netip.AddrPort) (*fnmProc, error) {
	// Its sFlow and NetFlow collectors on the addresses given, the
	// per-host pps threshold, its shortest averaging (1 s) and checks
	// every second, the notify script recording when it fires.
	cfg := fastnetmon.Config{Dir: filepath.Join(dir, "fastnetmon"), Networks: []netip.Prefix{netProtected},
		ThresholdPPS: int(p.Threshold), Average: 1, SFlow: sflow, NetFlow: nf}
	if err := cfg.Write(); err != nil {
		return nil, err
	}
	pr, err := evalkit.Start(ctx, p.FastNetMon, cfg.Args(filepath.Join(cfg.Dir, "fastnetmon.log")), p.Log)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(15 * time.Second)
	for !evalkit.Listening(sflow.Port()) || !evalkit.Listening(nf.Port()) {
		if time.Now().After(deadline) {
			pr.Stop()
			return nil, fmt.Errorf("FastNetMon did not listen on %v and %v", sflow, nf)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return &fnmProc{Proc: pr, cfg: cfg}, nil
}

// bans are the bans its notify script recorded.
func (f *fnmProc) bans() []fastnetmon.Ban { return f.cfg.Bans() }

// rss reads a Vm* field of /proc/PID/status in KiB.
func rss(pid int, field string) uint64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(raw), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && k == field {
			n, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}
