// SPDX-License-Identifier: Apache-2.0

package spoof

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tierwall/tierwall/internal/control/api"
	"github.com/tierwall/tierwall/internal/control/apiv1"
	"github.com/tierwall/tierwall/internal/control/config"
	"github.com/tierwall/tierwall/internal/datapath"
	"github.com/tierwall/tierwall/internal/rule"
	"github.com/tierwall/tierwall/internal/testbed/harness"
	"github.com/tierwall/tierwall/internal/testbed/lab"
	"github.com/tierwall/tierwall/internal/testbed/trafgen"
	"github.com/tierwall/tierwall/internal/tier/nicstage"
)

// firstEntropy sends on out the time of the entropy detector's first
// detection after the flood began (start, read once begun is closed), or
// the zero time when ctx ends first; it polls the daemon every poll.
func firstEntropy(ctx context.Context, c *api.Client, begun <-chan struct{}, start func() time.Time, poll time.Duration, out chan<- time.Time) {
	var at time.Time
	defer func() { out <- at }()
	select {
	case <-begun:
	case <-ctx.Done():
		return
	}
	from := start()
	for ctx.Err() == nil {
		var ds []apiv1.Detection
		if err := c.Do(ctx, "GET", "/v1/detections", nil, &ds); err == nil {
			for _, d := range ds {
				if d.Detector == "entropy" && !d.Time.Before(from) {
					at = d.Time
					return
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(poll):
		}
	}
}

// xdpCounts are the host's XDP counts: drop, its drops by a rule (bans,
// prefixes, flow rules) and the packets a syn-cookie rule handed to the
// SYN proxy, which answers or drops them in XDP (their verdict is the
// proxy's, not the filter's); total, every packet XDP saw; passed, what
// XDP passed to the stack from sources not known good (verdict pass).
// Zero when unreadable.
func xdpCounts(host *datapath.Datapath) (drop, total, passed uint64) {
	st, err := host.Stats()
	if err != nil {
		return 0, 0, 0
	}
	for v, c := range st.Verdicts {
		total += c.Packets
		if strings.HasPrefix(v, "drop_") && !strings.Contains(v, "malformed") {
			drop += c.Packets
		}
	}
	passed = st.Verdicts["pass"].Packets
	frs, err := host.FlowRuleCounters()
	if err != nil {
		return 0, 0, 0
	}
	for _, fr := range frs {
		if fr.Rule.Action == rule.FlowSYNCookie {
			proxied := fr.Matched.Packets - fr.PassedKnownGood
			drop += proxied
			total += proxied
		}
	}
	return drop, total, passed
}

// daemonConfig is the scenarios' daemon: the defaults (every detector,
// the victim ladder) at the run's interval, with tables for the spoofed
// sources and a memory budget.
func daemonConfig(p Params, dir string) *config.Config {
	c := harness.DaemonConfig(lab.IfHost, dir)
	c.Interval = p.Interval
	c.Capacity = config.Capacity{Exact4: 65536, Exact6: 4096, Prefix: 4096, Allow: 256, Features: 262144, MemoryMiB: 1024}
	if p.Card {
		c.Hardware.Backend = "emulated"
		c.Hardware.Capacity = nicstage.DefaultCapacity
		c.Hardware.Emulated = config.EmulatedNIC{Netns: lab.NSNic, Wire: lab.IfWire, Host: lab.IfHPort}
	}
	return c
}

// startSpoofDaemon writes the scenario's daemon configuration into dir
// and starts the daemon on the lab's host.
func startSpoofDaemon(p Params, sc Scenario, dir string) (*harness.Daemon, error) {
	sock := filepath.Join(dir, "api.sock")
	cfgPath := filepath.Join(dir, "tierwall.yaml")
	c := daemonConfig(p, dir)
	c.Detectors.Victim.SYNSizeDrop = sc.SYNSizeDrop
	if err := harness.WriteConfig(cfgPath, c); err != nil {
		return nil, err
	}
	harness.RemovePins(lab.NSHost)
	// The daemon may run on either CPU. The host's NAPI thread on CPU 1
	// runs at SCHED_FIFO, as a softirq preempts user space, but it never
	// yields as a softirq does (one that runs too long hands over to
	// ksoftirqd, a normal thread): under a flood that saturates it, the
	// real-time throttle's 5% was all a daemon held to CPU 1 got, and the
	// interval that decides the flood's rule took 1-2.5 s of 500 ms. On a
	// real host the NIC's interrupts take some cores and the control
	// plane runs beside them; nginx and the host's NAPI stay on CPU 1.
	dmn, err := harness.StartDaemon(harness.Options{Tierwall: p.Tierwall, Netns: lab.NSHost, Config: cfgPath, Socket: sock, Timeout: 30 * time.Second})
	if err != nil {
		return nil, err
	}
	return dmn, nil
}

// nicDrops is what the card dropped (its table's and its policers'
// drops), 0 without a card or when unreadable.
func nicDrops(n *nicstage.Stage) uint64 {
	if n == nil {
		return 0
	}
	st, err := n.Stats()
	if err != nil {
		return 0
	}
	return st["hit_drop"].Packets
}

// xdpSample is the host's XDP counts (xdpCounts) at one moment.
type xdpSample struct {
	at                   time.Time
	drops, total, passed uint64
}

// xdpSampler samples the host's XDP counts every 100 ms, and notes when
// it first saw a flow rule in XDP.
type xdpSampler struct {
	host    *datapath.Datapath
	nic     *nicstage.Stage // with the card: its drops count as the defence's
	mu      sync.Mutex
	samples []xdpSample
	ruleAt  time.Time
}

func (x *xdpSampler) run(ctx context.Context) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		d, tot, pass := xdpCounts(x.host)
		if d != 0 || tot != 0 {
			cd := nicDrops(x.nic)
			d, tot = d+cd, tot+cd
		}
		x.mu.Lock()
		x.samples = append(x.samples, xdpSample{time.Now(), d, tot, pass})
		if x.ruleAt.IsZero() {
			if frs, err := x.host.FlowRuleCounters(); err == nil && len(frs) > 0 {
				x.ruleAt = time.Now()
			}
		}
		x.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// at returns the last sample no later than t, the last sample, and when
// a flow rule was first seen (zero: never).
func (x *xdpSampler) at(t time.Time) (before, last xdpSample, ruleAt time.Time) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, s := range x.samples {
		if !s.at.After(t) {
			before = s
		}
		last = s
	}
	return before, last, x.ruleAt
}

// knownGoodOf counts sc's Sources on XDP's known-good list.
func knownGoodOf(host *datapath.Datapath, sc Scenario) (int, error) {
	addrs, err := trafgen.Addresses(sc.Spoof, sc.Sources)
	if err != nil {
		return 0, err
	}
	good, err := host.KnownGood()
	if err != nil {
		return 0, fmt.Errorf("reading the known-good list: %w", err)
	}
	set := make(map[netip.Addr]bool, len(good))
	for _, a := range good {
		set[a] = true
	}
	n := 0
	for _, a := range addrs {
		if set[a] {
			n++
		}
	}
	return n, nil
}

// entropyDetections counts the entropy detector's detections since from,
// as the daemon lists them.
func entropyDetections(ctx context.Context, c *api.Client, from time.Time) (int, error) {
	var ds []apiv1.Detection
	if err := c.Do(ctx, "GET", "/v1/detections", nil, &ds); err != nil {
		return 0, fmt.Errorf("daemon detections: %w", err)
	}
	n := 0
	for _, d := range ds {
		if d.Detector == "entropy" && !d.Time.Before(from) {
			n++
		}
	}
	return n, nil
}

// gauge is the value of the unlabelled metric name in Prometheus text
// (0 when absent).
func gauge(text, name string) float64 {
	for _, l := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return 0
}
