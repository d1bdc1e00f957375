// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"gopkg.in/yaml.v3"
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
