// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/control/bgp"
	"github.com/tierwall/tierwall/internal/control/bgp/community"
	"github.com/tierwall/tierwall/internal/control/config"
	"github.com/tierwall/tierwall/internal/control/scaleout/natstest"
	"github.com/tierwall/tierwall/internal/control/telemetry"
	tt "github.com/tierwall/tierwall/internal/control/telemetry/telemetrytest"
	"github.com/tierwall/tierwall/internal/errdefs"
)

// networkOnly makes New start role network daemons in a temporary run
// directory, and fails the test if any of them attaches a data plane.
func networkOnly(t *testing.T) {
	t.Helper()
	oldDir, oldAttach := ownerDir, attachDataPlane
	t.Cleanup(func() { ownerDir, attachDataPlane = oldDir, oldAttach })
	ownerDir = t.TempDir()
	attachDataPlane = func(cfg *config.Config, _ *slog.Logger) (DataPlane, error) {
		t.Errorf("role %s attached a data plane on %q", cfg.Role, cfg.Interface)
		return nil, errors.New("no data plane here")
	}
}

// networkYAML is a role network daemon's file: network mode, no
// interface; extra is appended to its telemetry section.
func networkYAML(t *testing.T, extra string) string {
	return "role: network\ninterval: 100ms\nstate_file: " + filepath.Join(t.TempDir(), "state.json") + `
api: {socket: ""}
hostgroups:
  - name: customers
    prefixes: [198.51.100.0/24]
telemetry:
  enabled: true
  withdraw_after: 300ms
` + extra
}

func loadYAML(t *testing.T, y string) (*config.Config, string) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tierwall.yaml")
	if err := os.WriteFile(p, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	return c, p
}

// floodSFlow is one sFlow datagram from 127.0.0.1: 40 samples at 1:10000
// of 1400-byte memcached answers to victim, 400k packets.
func floodSFlow(victim netip.Addr) []byte {
	sf := tt.SFlow{Agent: netip.MustParseAddr("127.0.0.1")}
	for range 40 {
		sf.Flow(10000, tt.Packet{Src: netip.MustParseAddr("203.0.113.9"), Dst: victim, Proto: 17, SrcPort: 11211, DstPort: 80, Length: 1400})
	}
	return sf.Bytes()
}

func sendTo(t *testing.T, to netip.AddrPort, b []byte) {
	t.Helper()
	conn, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(to))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write(b); err != nil {
		t.Fatal(err)
	}
}

func eventsLike(d *Daemon, sub string) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for _, e := range d.events {
		if strings.Contains(e.Detail, sub) {
			out = append(out, e.Detail)
		}
	}
	return out
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Role network runs network mode with no interface: New attaches no data
// plane and checks no kernel, the loop runs over none, the routers'
// flood is detected, a ban (nothing here could enforce it) is refused,
// a reload that names another role keeps the running one, and the daemon
// stops cleanly.
func TestNetworkRoleRunsWithoutInterface(t *testing.T) {
	networkOnly(t)
	cfg, path := loadYAML(t, networkYAML(t, `  listen: ["127.0.0.1:0"]
  mode: dry-run
  exporters: [{address: 127.0.0.1}]
  thresholds: {all: {pps: 50000}}
`))
	if cfg.Interface != "" {
		t.Fatalf("interface %q", cfg.Interface)
	}
	d, err := New(cfg, path, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := d.dp.(noDataPlane); !ok || d.kernelFeatures != nil {
		t.Fatalf("data plane %T, kernel checked: %v", d.dp, d.kernelFeatures != nil)
	}
	ctx, cancel := context.WithCancel(context.Background())
	reload := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx, reload) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	st := d.Telemetry(5)
	if !st.Enabled || len(st.Listen) != 1 {
		t.Fatalf("status %+v", st)
	}
	victim := netip.MustParseAddr("198.51.100.7")
	sendTo(t, st.Listen[0], floodSFlow(victim))
	waitFor(t, "the attack", func() bool { return len(d.Telemetry(5).Attacks) == 1 })
	waitFor(t, "the dry run's plan in the events", func() bool { return len(eventsLike(d, "would announce")) > 0 })
	if err := d.dp.Block(netip.MustParsePrefix("203.0.113.9/32")); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("a ban on no data plane: %v", err)
	}
	// A reload naming another role keeps this one (the data plane, or
	// its absence, was chosen at start).
	if err := os.WriteFile(path, []byte(strings.Replace(networkYAML(t, `  listen: ["127.0.0.1:0"]
  exporters: [{address: 127.0.0.1}]
  thresholds: {all: {pps: 50000}}
`), "role: network\n", "interface: eth0\n", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	reload <- struct{}{}
	waitFor(t, "the reload", func() bool { return len(eventsLike(d, "role mitigation needs a restart")) > 0 })
	if err := d.Do(ctx, func() {
		if d.cfg.Role != config.RoleNetwork || d.cfg.Interface != "" {
			t.Errorf("after the reload: role %q interface %q", d.cfg.Role, d.cfg.Interface)
		}
	}); err != nil {
		t.Fatal(err)
	}
}

// scaleoutBGP is a detector daemon's speaker section: one route
// reflector taking RTBH and FlowSpec.
const scaleoutBGP = `
bgp:
  asn: 65001
  router_id: 10.0.0.1
  listen_port: -1
  neighbors: [{address: 198.51.100.1, asn: 65001, send: [rtbh, flowspec]}]
  announce: {next_hop4: 192.0.2.254}
`

// startScaleout starts a daemon of daemonYAML's role for the test's
// life (stopped cleanly at its end).
func startScaleout(t *testing.T, daemonYAML string) *Daemon {
	t.Helper()
	cfg, _ := loadYAML(t, daemonYAML)
	d, err := New(cfg, "", quietLog())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.shutdown(); err != nil {
			t.Error(err)
		}
	})
	return d
}

// collectorYAML is a scale-out collector's file hearing 127.0.0.1, on
// the bus common names.
func collectorYAML(t *testing.T, common string) string {
	return networkYAML(t, `  listen: ["127.0.0.1:0"]
  exporters: [{address: 127.0.0.1}]
  scaleout:
    role: collector
    name: col-a
`+common)
}

// fakeSpeakerUp makes New's speakers fs, whose route reflector is up.
func fakeSpeakerUp(t *testing.T) *fakeSpeaker {
	fs := &fakeSpeaker{changed: make(chan struct{}, 1),
		neighbors: []bgp.Neighbor{{Address: peerRR, ASN: 65001, State: "established", Since: time.Now().Add(-time.Hour)}}}
	old := newSpeaker
	newSpeaker = func(config.BGP, *slog.Logger) (Speaker, error) { return fs, nil }
	t.Cleanup(func() { newSpeaker = old })
	return fs
}

// The scale-out roles under `tierwall run`: a collector daemon (role
// network, no interface) publishes its router's flood to a real NATS
// server and judges nothing; a detector daemon owning the victim's
// partition detects it and announces it through its BGP speaker, as
// network mode in one process does (withdrawn when over); under
// rails.monitor_only the detector detects and announces nothing.
func TestScaleoutRolesDetectAndAnnounce(t *testing.T) {
	url := natstest.Start(t)
	for _, monitorOnly := range []bool{false, true} {
		t.Run("monitor_only="+strconv.FormatBool(monitorOnly), func(t *testing.T) {
			networkOnly(t)
			stream := "T" + strconv.FormatBool(monitorOnly)
			common := "    nats: " + url + "\n    partitions: 4\n    stream: " + stream + "\n    subject: t." + stream + "\n"
			col := startScaleout(t, collectorYAML(t, common))
			if col.tele.merged != nil || col.tele.so == nil || col.tele.so.col == nil {
				t.Fatalf("collector: merged %v, role %+v", col.tele.merged, col.tele.so)
			}

			dy := networkYAML(t, `  mode: enforce
  thresholds: {all: {pps: 50000}}
  scaleout:
    role: detector
    name: det-a
`+common) + scaleoutBGP
			if monitorOnly {
				dy += "rails: {monitor_only: true}\n"
			}
			fs := fakeSpeakerUp(t)
			det := startScaleout(t, dy)
			if det.tele.merged == nil || det.tele.so == nil || det.tele.so.judge == nil {
				t.Fatalf("detector: merged %v, role %+v", det.tele.merged, det.tele.so)
			}

			victim := netip.MustParseAddr("198.51.100.7")
			sendTo(t, col.Telemetry(0).Listen[0], floodSFlow(victim))
			waitFor(t, "the detector's attack", func() bool {
				as := det.Telemetry(5).Attacks
				return len(as) == 1 && slices.Contains(as[0].Dst, netip.PrefixFrom(victim, 32))
			})
			want := []string{"flowspec dst 198.51.100.7/32 proto udp dport 80 sport 11211 length 1400-1400 drop"}
			if !monitorOnly {
				waitAnnounced(t, det, fs, func(g []string) bool { return slices.Equal(g, want) })
			}
			// The collector publishes and judges nothing.
			cst := col.Telemetry(5)
			if len(cst.Attacks) != 0 || len(cst.Plan) != 0 || cst.Exporters[0].Records != 40 {
				t.Errorf("collector status %+v", cst)
			}
			if st := col.tele.so.col.Publisher().Stats(); st.Aggregates == 0 || st.Errors != 0 {
				t.Errorf("publisher %+v", st)
			}
			// The collector role serves its exporters' series, as network
			// mode does.
			ms := scrape(t, col)
			if v, ok := value(ms, "tierwall_telemetry_records_total", "exporter", "127.0.0.1"); !ok || v != 40 {
				t.Errorf("collector's per-exporter records: %v %v", v, ok)
			}
			if v, ok := value(ms, "tierwall_telemetry_sampling_rate", "exporter", "127.0.0.1"); !ok || v == 0 {
				t.Errorf("collector's per-exporter sampling rate: %v %v", v, ok)
			}
			if monitorOnly {
				// Judged for a while: still nothing announced.
				time.Sleep(300 * time.Millisecond)
				if g := announcedNow(det, fs); len(g) != 0 {
					t.Fatalf("monitor_only announced %q", g)
				}
				// A SIGHUP that turns monitor_only off announces at the
				// detector's next tick (no loop runs here: the reload is
				// applied as the loop would, from this goroutine).
				c := *det.cfg
				c.Rails.MonitorOnly = false
				det.cfg = &c
				det.reloadTelemetry(time.Now())
				sendTo(t, col.Telemetry(0).Listen[0], floodSFlow(victim))
				waitAnnounced(t, det, fs, func(g []string) bool { return slices.Equal(g, want) })
				return
			}
			// No more samples: over after withdraw_after, and withdrawn.
			waitAnnounced(t, det, fs, func(g []string) bool { return len(g) == 0 })
		})
	}
}

// A scale-out detector blackholes on its uplinks' capacity as network
// mode in one process does: the collector hears the router's counter
// samples and reports the interfaces over the bus, and the detector,
// which hears no router, derives the group's capacity from its uplink's
// ifSpeed (1 Gbit/s) and puts a 4.5 Gbit/s flood's victim in RTBH with
// the group's community beside the FlowSpec rule. When the uplink goes
// down, the group has no capacity and the RTBH goes.
func TestScaleoutDetectorBlackholesOverItsUplinks(t *testing.T) {
	url := natstest.Start(t)
	networkOnly(t)
	common := "    nats: " + url + "\n    partitions: 2\n    stream: UP\n    subject: t.up\n"
	col := startScaleout(t, collectorYAML(t, common))
	fs := fakeSpeakerUp(t)
	det := startScaleout(t, networkYAML(t, `  mode: enforce
  thresholds: {all: {pps: 50000}}
  groups:
    customers:
      uplinks: [{exporter: 127.0.0.1, if_index: 3}]
      communities: ["64500:666"]
  scaleout:
    role: detector
    name: det-a
`+common)+scaleoutBGP)
	capacity := func() telemetry.GroupUplinks {
		cs := det.Telemetry(5).Capacities
		if len(cs) != 1 {
			t.Fatalf("capacities %+v", cs)
		}
		return cs[0]
	}
	if c := capacity(); c.Source != "unknown" || c.CapacityBPS != 0 {
		t.Fatalf("before any report: %+v", c)
	}
	counters := func(status uint32) []byte {
		sf := tt.SFlow{Agent: netip.MustParseAddr("127.0.0.1")}
		sf.Interface(tt.IfCounters{Index: 3, Speed: 1e9, Status: status}, nil)
		return sf.Bytes()
	}
	lo := col.Telemetry(0).Listen[0]
	sendTo(t, lo, counters(3))
	waitFor(t, "the uplink's speed at the detector", func() bool { c := capacity(); return c.Source == "ifspeed" && c.CapacityBPS == 1e9 })

	victim := netip.MustParseAddr("198.51.100.7")
	want := []string{"flowspec dst 198.51.100.7/32 proto udp dport 80 sport 11211 length 1400-1400 drop", "rtbh 198.51.100.7/32"}
	stop := make(chan struct{})
	flooding := make(chan struct{})
	conn, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(lo))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	go func() {
		// The flood goes on while the test watches.
		defer close(flooding)
		for {
			_, _ = conn.Write(floodSFlow(victim))
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	defer func() { close(stop); <-flooding }()
	waitAnnounced(t, det, fs, func(g []string) bool { return slices.Equal(g, want) })
	det.tele.merged.mu.Lock()
	for _, r := range fs.announced {
		if strings.HasPrefix(r.String(), "rtbh") && (len(r.Communities) == 0 || !slices.ContainsFunc(r.Communities, func(c community.Standard) bool { return c.String() == "64500:666" })) {
			t.Errorf("RTBH without the group's community: %+v", r)
		}
	}
	det.tele.merged.mu.Unlock()
	if v, ok := value(scrape(t, det), "tierwall_telemetry_uplink_capacity_bps", "group", "customers"); !ok || v != 1e9 {
		t.Errorf("detector's capacity metric: %v %v", v, ok)
	}
	// The uplink goes down: the group has no capacity (0, never
	// blackholed), and the RTBH is withdrawn; the FlowSpec rule stays.
	sendTo(t, lo, counters(1))
	waitAnnounced(t, det, fs, func(g []string) bool { return slices.Equal(g, want[:1]) })
}
