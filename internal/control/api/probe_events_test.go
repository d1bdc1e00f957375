// SPDX-License-Identifier: Apache-2.0

package api

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tierwall/tierwall/internal/control/config"
	"github.com/tierwall/tierwall/internal/control/probed"
	"github.com/tierwall/tierwall/internal/probe/flow/flowtest"
)

// A probe answers GET /v1/events with what its reloads did, and its
// status names its build: the probe had no /v1/events (404) and no
// version anywhere in its API.
func TestProbeEventsAndBuild(t *testing.T) {
	cfg := config.Default()
	cfg.Role = config.RoleProbe
	cfg.Probe.Policy = map[string]string{"default": "software"}
	p, err := probed.Assemble(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), probed.Parts{SW: flowtest.New(100, 10)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer((&Server{P: p}).Handler())
	defer srv.Close()
	get := func(path string, v any) int {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if v != nil {
			_ = json.NewDecoder(resp.Body).Decode(v)
		}
		return resp.StatusCode
	}
	var st struct {
		Build struct {
			Version   string `json:"version"`
			GoVersion string `json:"go_version"`
		} `json:"build"`
	}
	if code := get("/v1/status", &st); code != 200 || st.Build.Version == "" || !strings.HasPrefix(st.Build.GoVersion, "go") {
		t.Errorf("status: %d, build %+v", code, st.Build)
	}
	var es []probed.Event
	if code := get("/v1/events", &es); code != 200 || es == nil || len(es) != 0 {
		t.Fatalf("fresh events: %d %v", code, es)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("interval: [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p.Reload(bad)
	changed := filepath.Join(t.TempDir(), "probe.yaml")
	if err := os.WriteFile(changed, []byte("role: probe\ninterface: eth7\nprobe:\n  policy: {default: software}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p.Reload(changed)
	if code := get("/v1/events", &es); code != 200 || len(es) != 2 || es[0].Kind != "error" || !strings.Contains(es[0].Detail, "reload refused") ||
		es[1].Kind != "reload" || !strings.Contains(es[1].Detail, "need a restart") || !strings.Contains(es[1].Detail, "interface") {
		t.Errorf("events after two reloads: %d %+v", code, es)
	}
	if code := get("/v1/events?kind=reload&limit=1", &es); code != 200 || len(es) != 1 || es[0].Kind != "reload" {
		t.Errorf("kind=reload: %d %+v", code, es)
	}
	if code := get("/v1/events?kind=ban", nil); code != http.StatusBadRequest {
		t.Errorf("a kind a probe never records: %d, want 400", code)
	}
}
