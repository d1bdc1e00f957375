// SPDX-License-Identifier: Apache-2.0

package probed

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/tierwall/tierwall/internal/control/config"
	"github.com/tierwall/tierwall/internal/datapath"
	"github.com/tierwall/tierwall/internal/netnsx"
	"github.com/tierwall/tierwall/internal/probe/dpi"
	"github.com/tierwall/tierwall/internal/probe/export"
	probexdp "github.com/tierwall/tierwall/internal/probe/xdp"
	"github.com/tierwall/tierwall/internal/rule"
	"github.com/tierwall/tierwall/internal/tier"
	"github.com/tierwall/tierwall/internal/tier/flower"
	"github.com/tierwall/tierwall/internal/tier/nicstage"
)

// New opens the probe's tiers as configured: the software flow tier on
// cfg.Interface, the NIC's flow table, DPI and the exporter. On error
// nothing stays attached.
func New(cfg *config.Config, log *slog.Logger) (_ *Probed, err error) {
	pc := cfg.Probe
	// The budget is checked before anything is attached: one the
	// capacities alone exceed is a configuration error that changes
	// nothing.
	if _, err := applyBudget(pc, log); err != nil {
		return nil, err
	}
	var closers []func() error
	closeAll := func() error {
		var errs []error
		for i := len(closers) - 1; i >= 0; i-- {
			errs = append(errs, closers[i]())
		}
		return errors.Join(errs...)
	}
	defer func() {
		if err != nil {
			_ = closeAll()
		}
	}()

	var cls dpi.Classifier
	switch pc.DPI.Engine {
	case "builtin":
		cls = dpi.NewBuiltin()
	case "ndpi":
		if cls, err = newNDPI(); err != nil {
			return nil, err
		}
	}
	if cls != nil {
		closers = append(closers, cls.Close)
	}

	var hw tier.FlowTable
	if h := pc.Hardware; h.Backend == "emulated" {
		var ft *nicstage.FlowTable
		opts := nicstage.FlowOptions{Capacity: h.Capacity, LearnRate: h.LearnRate, LearnLatency: h.LearnLatency,
			IdleTimeout: h.IdleTimeout, Lifetime: h.Lifetime, Inline: pc.Mode == "inline", Return: h.Emulated.Return}
		if opts.IdleTimeout == 0 {
			opts.IdleTimeout = -1 // configured 0: never, where the table's 0 means its default
		}
		err := netnsx.Do(h.Emulated.Netns, -1, func() error {
			var err error
			ft, err = nicstage.AttachFlow(h.Emulated.Wire, h.Emulated.Host, h.Emulated.Twin, opts)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("emulated NIC flow table on %s in netns %q: %w", h.Emulated.Wire, h.Emulated.Netns, err)
		}
		hw = ft
		closers = append(closers, ft.Close)
	}
	if h := pc.Hardware; h.Backend == "flower" {
		iface := h.Flower.Iface
		if iface == "" {
			iface = cfg.Interface
		}
		opts := flower.FlowOptions{Capacity: h.Flower.Capacity, Poll: h.Flower.Poll, IdleTimeout: h.IdleTimeout, Lifetime: h.Lifetime}
		if opts.IdleTimeout == 0 {
			opts.IdleTimeout = -1 // configured 0: never, where the table's 0 means its default
		}
		ft, err := flower.OpenFlowTable(iface, opts)
		if err != nil {
			return nil, fmt.Errorf("flower flow table on %s: %w", iface, err)
		}
		hw = ft
		closers = append(closers, ft.Close)
		st := ft.Stats()
		log.Info("flower flow table open", "iface", iface, "capacity", opts.Capacity, "poll", h.Flower.Poll,
			"leftover_filters_removed", st.Leftovers, "foreign_filters", st.Foreign)
		if h.TCPAutoUnlearn {
			log.Info("flower cannot see FIN or RST: tcp_auto_unlearn is ignored, TCP flows end idle", "idle_timeout", h.IdleTimeout)
		}
	}

	sw, err := probexdp.Load(probexdp.Config{Capacity: pc.Capacity, DPIPackets: pc.DPI.Packets, SnapLen: pc.DPI.SnapLen,
		RingBytes: pc.DPI.Ring, Inline: pc.Mode == "inline",
		// The engine polls on its own clock (flowprobe.Probe.Run).
		Polled: true})
	if err != nil {
		return nil, fmt.Errorf("loading the software flow tier: %w", err)
	}
	closers = append(closers, sw.Close)
	if pc.Mode == "inline" {
		eg, err := net.InterfaceByName(pc.Egress)
		if err != nil {
			return nil, fmt.Errorf("%w: probe.egress %q: %v", config.ErrInvalid, pc.Egress, err)
		}
		if err := sw.SetEgress(eg.Index); err != nil {
			return nil, fmt.Errorf("setting the egress port %s: %w", pc.Egress, err)
		}
	}
	if err := sw.Attach(cfg.Interface); err != nil {
		return nil, attachError(cfg.Interface, err)
	}

	parts := Parts{SW: sw, HW: hw, DPI: cls}
	var x *export.Exporter
	if len(pc.Export.Collectors) > 0 {
		x, err = export.New(pc.Export)
		if err != nil {
			return nil, fmt.Errorf("%w: probe.export: %v", config.ErrInvalid, err)
		}
		// Closed after the engine's last records, before the tiers.
		closers = append(closers, x.Close)
		parts.Sink = x.Export
		parts.Collectors = append(parts.Collectors, x.Collector())
	}
	parts.Closer = closeAll
	p, err := Assemble(cfg, log, parts)
	if err != nil {
		return nil, err
	}
	if x != nil {
		x.SetLoss(p.Loss)
	}
	return p, nil
}

// attachError is the error of attaching the software flow tier to ifname.
// The kernel refuses a second XDP program on an interface with EEXIST,
// which reached the operator as a bare "create link: file exists" (exit
// 1): say what holds the hook, the tierwall filter when its pins are here,
// and what to do, as a usage error (exit 2).
func attachError(ifname string, err error) error {
	if !errors.Is(err, unix.EEXIST) && !errors.Is(err, unix.EBUSY) {
		return fmt.Errorf("attaching the software flow tier to %s: %w", ifname, err)
	}
	holder, fix := "another XDP program", "remove it (ip link set dev "+ifname+" xdp off)"
	if names, lerr := datapath.Attached(""); lerr == nil && slices.Contains(names, ifname) {
		holder, fix = "the tierwall filter (tierwall attach, or a tierwall run daemon)", "detach it first (tierwall detach -i "+ifname+")"
	}
	return fmt.Errorf("%w: %s already has %s attached, and the probe needs the interface's XDP hook to itself: "+
		"give the probe another interface (a mirror port) or %s (%w)", rule.ErrInvalid, ifname, holder, fix, err)
}
