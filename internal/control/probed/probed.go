// SPDX-License-Identifier: Apache-2.0

// Package probed runs tierwall in the probe role: the software flow tier
// in XDP, the NIC's flow table, DPI and the flowprobe engine, with the
// probe's metrics and the status the API serves. It is to the probe what
// internal/control/daemon is to the mitigation role.
package probed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/tierwall/tierwall/internal/cli"
	"github.com/tierwall/tierwall/internal/control/config"
	"github.com/tierwall/tierwall/internal/probe/dpi"
	"github.com/tierwall/tierwall/internal/probe/flow"
	"github.com/tierwall/tierwall/internal/probe/flowprobe"
	"github.com/tierwall/tierwall/internal/tier"
)

// Probed is a running probe.
type Probed struct {
	Engine  *flowprobe.Probe
	SW      flow.SoftwareTier
	HW      tier.FlowTable // nil: software only
	Metrics *prometheus.Registry

	cfg    *config.Config
	log    *slog.Logger
	closer func() error
	events eventLog
}

// Parts are the tiers a probe runs over; New builds them from the
// configuration, tests pass fakes to Assemble.
type Parts struct {
	SW     flow.SoftwareTier
	HW     tier.FlowTable
	DPI    dpi.Classifier // nil: no DPI, every flow is "unknown"
	Sink   func(flowprobe.Record)
	Closer func() error // releases what the parts hold (links, maps)
	// Collectors are more metrics to serve (the exporter's).
	Collectors []prometheus.Collector
}

// Assemble builds a probe over parts.
func Assemble(cfg *config.Config, log *slog.Logger, parts Parts) (*Probed, error) {
	pol, err := Policy(cfg.Probe.Policy)
	if err != nil {
		return nil, err
	}
	size, err := Size(cfg.Probe)
	if err != nil {
		return nil, err
	}
	h := cfg.Probe.Hardware
	ecfg := flowprobe.Config{
		MaxFlows:       size.MaxFlows,
		Inline:         cfg.Probe.Mode == "inline",
		PassiveForward: cfg.Probe.Hardware.PassiveAction == "forward",
		DPIPackets:     cfg.Probe.DPI.Packets,
		DPITimeout:     cfg.Probe.DPI.Timeout,
		MaxDPI:         cfg.Probe.DPI.MaxFlows,
		IdleTimeout:    cfg.Probe.Timeouts.Idle,
		ActiveTimeout:  cfg.Probe.Timeouts.Active,
		EndGrace:       cfg.Probe.Timeouts.EndGrace,
		Learn:          tier.LearnOptions{TCPAutoUnlearn: h.TCPAutoUnlearn, IdleTimeout: h.IdleTimeout, Lifetime: h.Lifetime},
		Policy:         pol,
	}
	p := &Probed{SW: parts.SW, HW: parts.HW, cfg: cfg, log: log, closer: parts.Closer}
	p.Engine = flowprobe.New(ecfg, parts.SW, parts.HW, parts.DPI, parts.Sink)
	p.Metrics = prometheus.NewRegistry()
	p.Metrics.MustRegister(&collector{p}, collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	p.Metrics.MustRegister(parts.Collectors...)
	return p, nil
}

// Run serves the probe until ctx ends; then every flow gets its last
// record and the tiers are released.
func (p *Probed) Run(ctx context.Context) error {
	caps := tier.FlowCaps{Name: "none"}
	if p.HW != nil {
		caps = p.HW.Caps()
	}
	p.log.Info("probe running", "mode", p.cfg.Probe.Mode, "interface", p.cfg.Interface,
		"nic", caps.Name, "nic_capacity", caps.Capacity, "dpi", p.cfg.Probe.DPI.Engine)
	// The engine runs on a goroutine of its own, not the caller's: the
	// caller is locked to its OS thread (cmd/tierwall locks main, which
	// entered the network namespace), and a locked goroutine that blocks
	// hands its P to another thread, and takes it back on every wake-up:
	// on a probe polling tens of times a second that hand-off was about a
	// sixth of its CPU (eval-flows, perf). Nothing the engine calls
	// depends on the thread's namespace: it works on descriptors opened
	// before (the BPF maps and rings, the flow table's, the exporter's
	// sockets); a flow-table backend that talks netlink must open its
	// socket when it is made, as a socket stays in the namespace it was
	// opened in.
	done := make(chan error, 1)
	go func() { done <- p.Engine.Run(ctx) }()
	err := <-done
	if p.closer != nil {
		err = errors.Join(err, p.closer())
	}
	return err
}

// Close releases the tiers without running: for a probe that never ran.
func (p *Probed) Close() error {
	if p.closer == nil {
		return nil
	}
	return p.closer()
}

// Status is what GET /v1/flows/status answers.
type Status struct {
	// Build is the probe's version, commit and Go version: which build
	// answers, without a shell on its host.
	Build    cli.Build       `json:"build"`
	Mode     string          `json:"mode"`
	Engine   flowprobe.Stats `json:"engine"`
	Software flow.TierStats  `json:"software"`
	NIC      *NICStatus      `json:"nic,omitempty"`
}

// NICStatus is the flow table's side.
type NICStatus struct {
	Caps      tier.FlowCaps `json:"caps"`
	Occupancy int           `json:"occupancy"`
	// Verdicts are the NIC's own packet counters, where it keeps them
	// (the emulated NIC: hits, misses, unhandled by kind).
	Verdicts map[string]tier.Counters `json:"verdicts,omitempty"`
}

// Status reads the tiers' counters now.
func (p *Probed) Status() (Status, error) {
	sw, err := p.SW.Stats()
	if err != nil {
		return Status{}, fmt.Errorf("reading the software flow tier: %w", err)
	}
	st := Status{Build: cli.BuildInfo(), Mode: p.cfg.Probe.Mode, Engine: p.Engine.Stats(), Software: sw}
	if p.HW != nil {
		st.NIC = &NICStatus{Caps: p.HW.Caps(), Occupancy: st.Engine.Offloaded}
		if v, ok := p.HW.(tier.Verdicts); ok {
			if st.NIC.Verdicts, err = v.Verdicts(); err != nil {
				return Status{}, fmt.Errorf("reading the NIC's verdicts: %w", err)
			}
		}
	}
	return st, nil
}
