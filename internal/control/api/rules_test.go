// SPDX-License-Identifier: Apache-2.0

package api

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/control/config"
	"github.com/tierwall/tierwall/internal/control/daemon"
	"github.com/tierwall/tierwall/internal/datapath"
)

// ruleDP is a data plane in memory, enough for the rule endpoints.
type ruleDP struct {
	mu       sync.Mutex
	blocked  map[netip.Prefix]bool
	allowed  map[netip.Prefix]bool
	unblocks int // Unblock calls
}

func (m *ruleDP) Drain(sink datapath.FlowSink) (*datapath.Snapshot, error) {
	now := time.Now()
	return (&datapath.Snapshot{Start: now.Add(-time.Second), End: now}).Emit(sink), nil
}
func (m *ruleDP) change(set map[netip.Prefix]bool, on bool, ps []netip.Prefix) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range ps {
		if on {
			set[p] = true
		} else {
			delete(set, p)
		}
	}
	return nil
}
func (m *ruleDP) Block(ps ...netip.Prefix) error { return m.change(m.blocked, true, ps) }
func (m *ruleDP) Unblock(ps ...netip.Prefix) error {
	m.mu.Lock()
	m.unblocks++
	m.mu.Unlock()
	return m.change(m.blocked, false, ps)
}
func (m *ruleDP) Allow(ps ...netip.Prefix) error    { return m.change(m.allowed, true, ps) }
func (m *ruleDP) Disallow(ps ...netip.Prefix) error { return m.change(m.allowed, false, ps) }
func (m *ruleDP) Blocked() ([]datapath.Rule, error) { return nil, nil }
func (m *ruleDP) Allowed() ([]datapath.Rule, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []datapath.Rule
	for p := range m.allowed {
		out = append(out, datapath.Rule{Prefix: p, Kind: datapath.KindAllow})
	}
	return out, nil
}
func (m *ruleDP) RuleCountersInto(ps []netip.Prefix, out []datapath.Reading) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, p := range ps {
		out[i] = datapath.Reading{Found: m.blocked[p]}
	}
	return nil
}
func (m *ruleDP) Stats() (*datapath.Stats, error) { return &datapath.Stats{}, nil }
func (m *ruleDP) Check() error                    { return nil }
func (m *ruleDP) Close() error                    { return nil }

// daemonServer runs a daemon over ruleDP and serves its API on a socket.
func daemonServer(t *testing.T) (*Client, *ruleDP) {
	t.Helper()
	cfg := config.Default()
	cfg.Interface = "mem0"
	cfg.StateFile = filepath.Join(t.TempDir(), "state.json")
	cfg.API.Socket = ""
	dp := &ruleDP{blocked: map[netip.Prefix]bool{}, allowed: map[netip.Prefix]bool{}}
	d, err := daemon.NewOver(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), dp, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = d.Run(ctx, nil) }()
	t.Cleanup(func() { cancel(); <-done })
	return NewClient(unixServer(t, (&Server{D: d}).Handler())), dp
}

// post sends body and returns the status and the decoded answer.
func postRule(t *testing.T, c *Client, path, body string) (int, map[string]any) {
	t.Helper()
	resp, err := c.hc.Post("http://tierwall"+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	b, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(b, &out)
	return resp.StatusCode, out
}

// A re-added ban is left as it is and the answer says so (it was
// replaced by a permanent "operator" ban, with 201); update is explicit.
func TestPostRuleAddedExistsUpdated(t *testing.T) {
	c, _ := daemonServer(t)
	code, b := postRule(t, c, "/v1/rules", `{"prefix":"198.51.100.50","reason":"abuse","ttl":"10m"}`)
	if code != http.StatusCreated || b["result"] != "added" || b["expires"] == nil {
		t.Fatalf("add: %d %v", code, b)
	}
	code, b = postRule(t, c, "/v1/rules", `{"prefix":"198.51.100.50"}`)
	if code != http.StatusOK || b["result"] != "exists" || b["reason"] != "abuse" || b["expires"] == nil {
		t.Fatalf("re-add: %d %v", code, b)
	}
	code, b = postRule(t, c, "/v1/rules", `{"prefix":"198.51.100.50","ttl":"0s","update":true}`)
	if code != http.StatusOK || b["result"] != "updated" || b["reason"] != "abuse" || b["expires"] != nil {
		t.Fatalf("update: %d %v", code, b)
	}
}

// Catastrophic rules need force (and a ban over the host's own addresses
// is refused even with it); one bad entry of a batch is refused alone.
func TestPostRuleRails(t *testing.T) {
	c, dp := daemonServer(t)
	for _, tc := range []struct {
		path, body string
		want       int
	}{
		{"/v1/rules", `{"prefix":"0.0.0.0/0"}`, 400},
		{"/v1/rules", `{"prefix":"3fff::/20"}`, 400},
		{"/v1/rules", `{"prefix":"3fff::/20","force":true}`, 201},
		{"/v1/allowlist", `{"prefix":"::/0"}`, 400},
		{"/v1/allowlist", `{"prefix":"2001:db8::/32"}`, 201},
	} {
		if code, b := postRule(t, c, tc.path, tc.body); code != tc.want {
			t.Errorf("%s %s: %d %v, want %d", tc.path, tc.body, code, b, tc.want)
		}
	}
	if dp.blocked[netip.MustParsePrefix("0.0.0.0/0")] || dp.allowed[netip.MustParsePrefix("::/0")] {
		t.Fatal("a refused rule reached the data plane")
	}
	code, b := postRule(t, c, "/v1/rules/batch", `{"prefixes":["203.0.113.7","0.0.0.0/1","203.0.113.8"]}`)
	refused, _ := b["refused"].([]any)
	if code != http.StatusCreated || b["new"] != 2.0 || len(refused) != 1 || !strings.Contains(refused[0].(map[string]any)["reason"].(string), "wider") {
		t.Fatalf("batch: %d %v", code, b)
	}
	code, b = postRule(t, c, "/v1/rules/batch", `{"prefixes":["203.0.113.9","0.0.0.0/1"],"all_or_nothing":true}`)
	if code != http.StatusBadRequest || dp.blocked[netip.MustParsePrefix("203.0.113.9/32")] {
		t.Fatalf("all or nothing: %d %v", code, b)
	}
	code, b = postRule(t, c, "/v1/rules/batch", `{"prefixes":["203.0.113.7","203.0.113.8"]}`)
	if code != http.StatusOK || b["exists"] != 2.0 {
		t.Fatalf("batch re-sent: %d %v", code, b)
	}
}
