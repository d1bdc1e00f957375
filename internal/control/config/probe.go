// SPDX-License-Identifier: Apache-2.0

package config

import (
	"fmt"
	"time"

	"github.com/tierwall/tierwall/internal/probe/dpi"
	"github.com/tierwall/tierwall/internal/probe/export"
)

// Roles: a mitigation box (detect and drop, the default) or a flow probe
// (count, classify and export flows, Deri et al. 2024).
const (
	RoleMitigation = "mitigation"
	RoleProbe      = "probe"
)

// Probe configures the flow probe role.
type Probe struct {
	// Mode: passive (a mirror: every packet is consumed after counting)
	// or inline (an IPS bridge: packets leave by Egress).
	Mode     string `yaml:"mode"`
	Egress   string `yaml:"egress"`   // inline: the port forwarded packets leave by
	Capacity int    `yaml:"capacity"` // software flow table entries (default 1M)
	// MemoryMiB is the probe's memory budget (0: none): the software
	// table, the sample ring, DPI, the records and the flows the engine
	// tracks all fit in it, or the probe refuses to start; past the
	// flows it can track, new flows are counted by the software tier
	// alone and reported to the collectors.
	MemoryMiB int           `yaml:"memory_mib"`
	DPI       ProbeDPI      `yaml:"dpi"`
	Timeouts  ProbeTimeouts `yaml:"timeouts"`
	// Policy maps an application (DPI's lower-case name) to offload,
	// discard or software; "default" covers the rest (default offload).
	Policy   map[string]string `yaml:"policy"`
	Hardware ProbeHardware     `yaml:"hardware"`
	// Export sends flow records to IPFIX / NetFlow v9 collectors
	// (docs/FLOW-EXPORT.md); no collectors: no export.
	Export export.Config `yaml:"export"`
}

type ProbeDPI struct {
	Engine   string        `yaml:"engine"`     // builtin, ndpi (needs a build with -tags ndpi) or none
	Packets  int           `yaml:"packets"`    // samples per flow, 1..32 (default 10)
	SnapLen  int           `yaml:"snaplen"`    // bytes of each sample, 64..1024 (default 512)
	Timeout  time.Duration `yaml:"timeout"`    // give up on flows that stop short (default 2s)
	MaxFlows int           `yaml:"max_flows"`  // flows in DPI at once (default 65536)
	Ring     int           `yaml:"ring_bytes"` // sample ring buffer, a power of two (default 8 MiB)
}

type ProbeTimeouts struct {
	Idle     time.Duration `yaml:"idle"`      // default 30s
	Active   time.Duration `yaml:"active"`    // default 120s
	EndGrace time.Duration `yaml:"end_grace"` // default 1s
}

// ProbeHardware is the NIC's flow table.
type ProbeHardware struct {
	// Backend: none, emulated (the lab's NIC stage) or flower (a NIC
	// with tc flower offload: mlx5, ice, nfp, ...).
	Backend string `yaml:"backend"`
	// Capacity, LearnRate and LearnLatency are the emulated NIC's; the
	// flower backend's capacity is Flower.Capacity.
	Capacity     int           `yaml:"capacity"`
	LearnRate    int           `yaml:"learn_rate"`    // learns per second the firmware serves
	LearnLatency time.Duration `yaml:"learn_latency"` // firmware time per update
	// TCPAutoUnlearn: flower cannot see a FIN, so there TCP flows end
	// idle whatever this says.
	TCPAutoUnlearn bool `yaml:"tcp_auto_unlearn"`
	// PassiveAction is what the NIC does with a passive probe's
	// offloaded flows: discard (default: counted and consumed there, the
	// host sees only misses) or forward (counted, and still delivered to
	// the host marked hit, for an application beside the probe that
	// wants the packets; the probe's XDP leaves them to the NIC's
	// counters). Needs a NIC that marks packets (not flower).
	PassiveAction string          `yaml:"passive_action"`
	IdleTimeout   time.Duration   `yaml:"idle_timeout"`
	Lifetime      time.Duration   `yaml:"lifetime"`
	Emulated      EmulatedFlowNIC `yaml:"emulated"`
	Flower        FlowerFlowNIC   `yaml:"flower"`
}

// FlowerFlowNIC is the flow table in tc flower filters of a NIC port.
type FlowerFlowNIC struct {
	Iface string `yaml:"iface"` // default: the probe's interface
	// Capacity is the flows the NIC holds, two filters each (flower
	// cannot say how many it takes); 1..1048576, default 65536.
	Capacity int `yaml:"capacity"`
	// Poll is how often the filters' counters are read, the resolution
	// of ageing: 10ms..1m, default 1s.
	Poll time.Duration `yaml:"poll"`
}

// EmulatedFlowNIC locates the emulated NIC's flow stage.
type EmulatedFlowNIC struct {
	Netns string `yaml:"netns"`
	Wire  string `yaml:"wire"` // wire-facing port, the stage's interface
	Host  string `yaml:"host"` // host-facing port
	Twin  string `yaml:"twin"` // inline: the other wire port
	// Return: inline, the port the host forwards through (default
	// host: the host sends packets back the way they came).
	Return string `yaml:"return"`
}

func defaultProbe() Probe {
	return Probe{
		Mode:     "passive",
		Capacity: 1 << 20,
		DPI:      ProbeDPI{Engine: "builtin", Packets: 10, SnapLen: 512, Timeout: 2 * time.Second, MaxFlows: 65536, Ring: 8 << 20},
		Timeouts: ProbeTimeouts{Idle: 30 * time.Second, Active: 120 * time.Second, EndGrace: time.Second},
		Hardware: ProbeHardware{Backend: "none", Capacity: 1 << 20, LearnRate: 100000, LearnLatency: 50 * time.Microsecond,
			TCPAutoUnlearn: true, IdleTimeout: 30 * time.Second, Flower: FlowerFlowNIC{Capacity: 65536, Poll: time.Second}},
	}
}

func (p *Probe) validate() error {
	switch p.Mode {
	case "passive":
	case "inline":
		if p.Egress == "" {
			return bad("probe.egress", `""`, "is required inline")
		}
	default:
		return bad("probe.mode", p.Mode, "is not passive or inline")
	}
	if p.Capacity < 1 || p.Capacity > 1<<26 {
		return bad("probe.capacity", p.Capacity, "outside 1..67108864")
	}
	if p.MemoryMiB < 0 {
		return bad("probe.memory_mib", p.MemoryMiB, "must not be negative")
	}
	d := &p.DPI
	switch d.Engine {
	case "builtin", "ndpi", "none":
	default:
		return bad("probe.dpi.engine", d.Engine, "is not builtin, ndpi or none")
	}
	if d.Packets < 1 || d.Packets > 32 {
		return bad("probe.dpi.packets", d.Packets, "outside 1..32")
	}
	if d.SnapLen < 64 || d.SnapLen > 1024 {
		return bad("probe.dpi.snaplen", d.SnapLen, "outside 64..1024")
	}
	if d.Timeout <= 0 || d.MaxFlows < 1 {
		return bad("probe.dpi", fmt.Sprintf("timeout=%v max_flows=%d", d.Timeout, d.MaxFlows), "must be positive")
	}
	if d.Ring < 4096 || d.Ring > 1<<30 || d.Ring&(d.Ring-1) != 0 {
		return bad("probe.dpi.ring_bytes", d.Ring, "is not a power of two in 4096..1073741824")
	}
	t := p.Timeouts
	if t.Idle <= 0 || t.Active <= 0 || t.EndGrace <= 0 {
		return bad("probe.timeouts", fmt.Sprintf("idle=%v active=%v end_grace=%v", t.Idle, t.Active, t.EndGrace), "must be positive")
	}
	if _, err := dpi.ParsePolicy(p.Policy); err != nil {
		return fmt.Errorf("%w: probe.policy: %v", ErrInvalid, err)
	}
	for i, c := range p.Export.Collectors {
		if c.Address == "" {
			return bad(fmt.Sprintf("probe.export.collectors[%d].address", i), `""`, "is required")
		}
		switch c.Format {
		case "", "ipfix", "netflow9":
		default:
			return bad(fmt.Sprintf("probe.export.collectors[%d].format", i), c.Format, "is not ipfix or netflow9")
		}
	}
	h := &p.Hardware
	switch h.PassiveAction {
	case "", "discard":
	case "forward":
		if p.Mode == "inline" || h.Backend == "flower" {
			// Inline, forwarding is the twin port's; flower passes
			// forwarded packets up unmarked, counted twice.
			return bad("probe.hardware.passive_action", h.PassiveAction, "needs mode passive and a NIC that marks packets (emulated)")
		}
	default:
		return bad("probe.hardware.passive_action", h.PassiveAction, "is not discard or forward")
	}
	switch h.Backend {
	case "none":
	case "emulated":
		if h.Emulated.Wire == "" || h.Emulated.Host == "" || (p.Mode == "inline" && h.Emulated.Twin == "") {
			return bad("probe.hardware.emulated", fmt.Sprintf("wire=%q host=%q twin=%q", h.Emulated.Wire, h.Emulated.Host, h.Emulated.Twin),
				"needs wire and host ports, and twin inline")
		}
	case "flower":
		f := h.Flower
		if p.Mode == "inline" {
			// Flower's forward is a pass up to this host, unmarked:
			// the software tier would count the flow again, and
			// nothing leaves by the twin port without the host.
			return bad("probe.hardware.backend", h.Backend, "is passive only (inline needs a NIC that forwards learned flows itself)")
		}
		if f.Capacity < 1 || f.Capacity > 1<<20 {
			return bad("probe.hardware.flower.capacity", f.Capacity, "outside 1..1048576")
		}
		if f.Poll < 10*time.Millisecond || f.Poll > time.Minute {
			return bad("probe.hardware.flower.poll", f.Poll, "outside 10ms..1m")
		}
		// Flower flows age by polled counters: a timeout shorter than
		// the poll could not be honoured.
		if (h.IdleTimeout > 0 && h.IdleTimeout < f.Poll) || (h.Lifetime > 0 && h.Lifetime < f.Poll) {
			return bad("probe.hardware", fmt.Sprintf("idle_timeout=%v lifetime=%v", h.IdleTimeout, h.Lifetime),
				fmt.Sprintf("shorter than probe.hardware.flower.poll %v", f.Poll))
		}
	default:
		return bad("probe.hardware.backend", h.Backend, "is not none, emulated or flower")
	}
	if h.Capacity < 1 || h.Capacity > 1<<26 || h.LearnRate < 1 || h.LearnLatency < 0 || h.IdleTimeout < 0 || h.Lifetime < 0 {
		return bad("probe.hardware", fmt.Sprintf("capacity=%d learn_rate=%d learn_latency=%v idle=%v lifetime=%v",
			h.Capacity, h.LearnRate, h.LearnLatency, h.IdleTimeout, h.Lifetime), "out of range")
	}
	return nil
}
