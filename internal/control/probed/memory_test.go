// SPDX-License-Identifier: Apache-2.0

package probed

import (
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"strings"
	"testing"

	"github.com/tierwall/tierwall/internal/control/config"
	"github.com/tierwall/tierwall/internal/probe/flow/flowtest"
	"github.com/tierwall/tierwall/internal/probe/flowprobe"
)

func probeConfig(t *testing.T, y string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte("role: probe\ninterface: twno-such0\n" + y))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// A budget sizes the flows the engine tracks to what the capacities leave
// of it; one they leave too little of is refused, naming the numbers,
// before anything is attached.
func TestProbeMemoryBudget(t *testing.T) {
	s, err := Size(probeConfig(t, "").Probe)
	if err != nil || s.MaxFlows != 1<<20 || s.HeapLimit != 0 {
		t.Fatalf("no budget: %+v, %v; want the software table's capacity, no limit", s, err)
	}
	cfg := probeConfig(t, "probe: {memory_mib: 1024}\n")
	s, err = Size(cfg.Probe)
	if err != nil {
		t.Fatal(err)
	}
	if s.MaxFlows < 1024 || s.MaxFlows >= 1<<20 {
		t.Fatalf("1 GiB with the default capacities: %d tracked flows", s.MaxFlows)
	}
	if total := s.Fixed + uint64(s.MaxFlows)*flowprobe.TrackedFlowBytes; total > 1024<<20 {
		t.Fatalf("%d MiB fixed + %d flows x %d B = %d MiB, over the budget", s.Fixed>>20, s.MaxFlows, flowprobe.TrackedFlowBytes, total>>20)
	}
	// A small table in a small budget: every flow it holds is tracked.
	s, err = Size(probeConfig(t, "probe: {memory_mib: 192, capacity: 65536, dpi: {max_flows: 4096}}\n").Probe)
	if err != nil || s.MaxFlows != 65536 {
		t.Fatalf("192 MiB, 64K flows: %+v, %v", s, err)
	}

	cfg = probeConfig(t, "probe: {memory_mib: 256}\n")
	_, err = New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), "probe.memory_mib 256") ||
		!strings.Contains(err.Error(), "probe.capacity 1048576") {
		t.Fatalf("New with a budget the capacities exceed: %v; want a configuration error naming them (and no attach to twno-such0)", err)
	}
}

// What the software table refused and what the engine left untracked are
// the probe's loss, for the collectors.
func TestProbeLossCounts(t *testing.T) {
	cfg := probeConfig(t, "")
	sw := flowtest.New(1, 10)
	p, err := Assemble(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), Parts{SW: sw})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		src := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}), 1000)
		sw.Packet(flowtest.Pkt{Proto: 6, Src: src, Dst: netip.MustParseAddrPort("192.0.2.1:80"), Flags: 2, Size: 60})
	}
	if l := p.Loss(); l.RefusedFlows != 2 || l.IgnoredPackets != 2 {
		t.Fatalf("loss %+v: want the 2 flows (2 packets) the 1-flow table refused", l)
	}
}
