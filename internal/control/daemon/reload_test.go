// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"gopkg.in/yaml.v3"

	"github.com/tierwall/tierwall/internal/control/config"
	"github.com/tierwall/tierwall/internal/control/telemetry"
	tt "github.com/tierwall/tierwall/internal/control/telemetry/telemetrytest"
)

// A reload says what changed and what of it waits for a restart, and
// counts by result: the event said "detectors rebuilt: false" and, for
// any field that needs a restart, the same fixed list of five, never
// which one the operator had edited.
func TestReloadSaysWhatChanged(t *testing.T) {
	cfg := testConfig(t)
	h := newHarness(t, cfg, false)
	file := filepath.Join(t.TempDir(), "tierwall.yaml")
	h.d.cfgPath = file
	write := func(edit func(m map[string]any)) {
		t.Helper()
		y, err := yaml.Marshal(h.d.cfg)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(y, &m); err != nil {
			t.Fatal(err)
		}
		edit(m)
		if y, err = yaml.Marshal(m); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, y, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	last := func() string {
		t.Helper()
		es := h.d.events
		if len(es) == 0 || es[len(es)-1].Kind != "reload" {
			t.Fatalf("no reload event last: %+v", es)
		}
		return es[len(es)-1].Detail
	}
	count := func(result string) float64 { return promtest.ToFloat64(h.d.Metrics.reloads.WithLabelValues(result)) }

	oldSocket := h.d.cfg.API.Socket
	write(func(m map[string]any) {
		m["bans"].(map[string]any)["ttl"] = (90 * time.Minute).String()
		m["api"].(map[string]any)["socket"] = "/run/tierwall/other.sock"
	})
	h.d.reload(h.now)
	got := last()
	if !strings.Contains(got, "in effect: bans.ttl") || !strings.Contains(got, "need a restart (running values kept until then): api.socket") ||
		strings.Contains(got, "interface") {
		t.Errorf("reload event %q, want bans.ttl in effect and api.socket waiting for a restart, nothing else", got)
	}
	if h.d.cfg.Bans.TTL != 90*time.Minute || h.d.cfg.API.Socket != oldSocket {
		t.Errorf("after the reload: bans.ttl %v, api.socket %q", h.d.cfg.Bans.TTL, h.d.cfg.API.Socket)
	}
	if count(reloadRestart) != 1 || count(reloadApplied) != 0 {
		t.Errorf("reloads: restart_needed %v, applied %v", count(reloadRestart), count(reloadApplied))
	}

	write(func(m map[string]any) {})
	h.d.reload(h.now)
	if got := last(); got != "configuration reloaded: nothing changed" || count(reloadApplied) != 1 {
		t.Errorf("an unchanged file: %q, applied %v", got, count(reloadApplied))
	}
	if err := os.WriteFile(file, []byte("interval: [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	h.d.reload(h.now)
	if count(reloadRefused) != 1 || !hasEvent(h.d, "error", "reload refused") {
		t.Errorf("an invalid file: refused %v", count(reloadRefused))
	}
}

// A SIGHUP reaches network mode: a lowered threshold names a flood it let
// pass before and announces it, and a mode changed to dry-run withdraws
// what it announced, both at the next interval; a changed listen address
// is reported as needing a restart and the collector stays where it was.
// Any change under telemetry: needed a restart.
func TestReloadTelemetry(t *testing.T) {
	cfg := bgpConfig(t)
	cfg.HostGroups = []config.HostGroup{{Name: "customers", Prefixes: []string{"198.51.100.0/24"}}}
	cfg.Telemetry = config.Telemetry{Enabled: true, Listen: []string{"127.0.0.1:0"},
		Exporters:  []config.TelemetryExporter{{Address: "127.0.0.1"}},
		Thresholds: map[string]config.TelemetryLimits{"all": {PPS: 5e6}}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	h, fs := bgpHarness(t, cfg)
	t.Cleanup(h.d.closeTelemetry)
	file := filepath.Join(t.TempDir(), "tierwall.yaml")
	h.d.cfgPath = file
	write := func(edit func(tele map[string]any)) {
		t.Helper()
		y, err := yaml.Marshal(h.d.cfg)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(y, &m); err != nil {
			t.Fatal(err)
		}
		edit(m["telemetry"].(map[string]any))
		if y, err = yaml.Marshal(m); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, y, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	last := func() string {
		t.Helper()
		h.d.mu.Lock()
		defer h.d.mu.Unlock()
		for i := len(h.d.events) - 1; i >= 0; i-- {
			if h.d.events[i].Kind == "reload" {
				return h.d.events[i].Detail
			}
		}
		t.Fatal("no reload event")
		return ""
	}
	addr := h.d.tele.svc.Addrs()[0]
	conn, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// 2 samples at 1:10000 every 50 ms, the agent's uptime and sequence
	// going on with the clock: a flood of 400 kpps on one address, under
	// the 5 Mpps threshold it starts with.
	stop := make(chan struct{})
	flooding := make(chan struct{})
	go func() {
		defer close(flooding)
		began := time.Now()
		for seq := uint32(1); ; seq++ {
			sf := tt.SFlow{Agent: netip.MustParseAddr("127.0.0.1"), Sequence: seq, Uptime: 1000 + uint32(time.Since(began).Milliseconds())}
			for range 2 {
				sf.Flow(10000, tt.Packet{Src: netip.MustParseAddr("203.0.113.9"), Dst: netip.MustParseAddr("198.51.100.7"), Proto: 17, SrcPort: 123, DstPort: 80, Length: 468})
			}
			_, _ = conn.Write(sf.Bytes())
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	defer func() { close(stop); <-flooding }()
	time.Sleep(500 * time.Millisecond)
	if st := h.d.Telemetry(5); len(st.Attacks) != 0 || len(st.Top) == 0 {
		t.Fatalf("before the reload: attacks %+v, top %+v; want the flood seen and under the threshold", st.Attacks, st.Top)
	}

	write(func(tele map[string]any) {
		tele["thresholds"].(map[string]any)["all"].(map[string]any)["pps"] = 50000
		tele["listen"] = []any{"127.0.0.1:9"}
	})
	h.d.reload(h.now)
	got := last()
	if !strings.Contains(got, "in effect: telemetry.thresholds.all.pps") || !strings.Contains(got, "need a restart (running values kept until then): telemetry.listen") {
		t.Errorf("reload event %q, want telemetry.thresholds.all.pps in effect and telemetry.listen waiting for a restart", got)
	}
	h.step(t)
	want := "flowspec dst 198.51.100.7/32 proto udp dport 80 sport 123 length 468-468 drop"
	waitAnnounced(t, h.d, fs, func(g []string) bool { return slices.Equal(g, []string{want}) })
	if st := h.d.Telemetry(0); len(st.Listen) != 1 || st.Listen[0] != addr || st.Mode != telemetry.Enforce {
		t.Errorf("after the reload: listening on %v in mode %s, want %v still, enforce", st.Listen, st.Mode, addr)
	}

	write(func(tele map[string]any) { tele["mode"] = "dry-run" })
	h.d.reload(h.now)
	if got := last(); !strings.Contains(got, "in effect: telemetry.mode") || strings.Contains(got, "restart") {
		t.Errorf("reload event %q, want telemetry.mode in effect", got)
	}
	h.step(t)
	waitAnnounced(t, h.d, fs, func(g []string) bool { return len(g) == 0 })
	if st := h.d.Telemetry(0); st.Mode != telemetry.DryRun || len(st.Attacks) != 1 || len(st.Plan) != 1 {
		t.Errorf("after the reload to dry-run: mode %s, attacks %d, plan %+v; want the attack on and planned, not announced", st.Mode, len(st.Attacks), st.Plan)
	}
}

// What a reload of telemetry: applies and what waits for a restart.
func TestTelemetryNeedsRestart(t *testing.T) {
	for path, want := range map[string]bool{
		"telemetry.listen": true, "telemetry.exporters": true, "telemetry.enabled": true, "telemetry.tick": true,
		"telemetry.window": true, "telemetry.max_templates": true, "telemetry.max_destinations": true,
		"telemetry.thresholds.all.pps": false, "telemetry.groups.customers.uplink_bps": false,
		"telemetry.groups.customers.communities": false, "telemetry.mode": false, "telemetry.flowspec.action": false,
		"telemetry.withdraw_after": false, "telemetry.min_samples": false, "telemetry.modes": true,
	} {
		if got := needsRestart(path); got != want {
			t.Errorf("needsRestart(%q) = %v, want %v", path, got, want)
		}
	}
}
