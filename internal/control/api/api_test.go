// SPDX-License-Identifier: Apache-2.0

package api

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/control/apiv1"
	"github.com/tierwall/tierwall/internal/control/config"
	"github.com/tierwall/tierwall/internal/control/daemon"
	"github.com/tierwall/tierwall/internal/datapath"
)

// memDP is a data plane in memory: enough for the daemon behind the API.
type memDP struct {
	mu      sync.Mutex
	blocked map[netip.Prefix]uint64
	flows   []datapath.Flow // what the next Snapshot returns
	at      time.Time
}

func (m *memDP) Drain(sink datapath.FlowSink) (*datapath.Snapshot, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	// 1.3 s: rates with long fractions, as real intervals give.
	m.at = m.at.Add(1300 * time.Millisecond)
	s := &datapath.Snapshot{Start: m.at.Add(-1300 * time.Millisecond), End: m.at, Flows: m.flows}
	m.flows = nil
	return s.Emit(sink), nil
}

func (m *memDP) Block(ps ...netip.Prefix) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range ps {
		m.blocked[p] += 0
	}
	return nil
}

func (m *memDP) Unblock(ps ...netip.Prefix) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range ps {
		if _, ok := m.blocked[p]; !ok {
			return datapath.ErrNoRule
		}
		delete(m.blocked, p)
	}
	return nil
}

func (m *memDP) Allow(...netip.Prefix) error    { return nil }
func (m *memDP) Disallow(...netip.Prefix) error { return nil }
func (m *memDP) Allowed() ([]datapath.Rule, error) {
	return nil, nil
}

func (m *memDP) Blocked() ([]datapath.Rule, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []datapath.Rule
	for p, n := range m.blocked {
		out = append(out, datapath.Rule{Prefix: p, Kind: datapath.KindExact, Packets: n})
	}
	return out, nil
}

func (m *memDP) RuleCountersInto(ps []netip.Prefix, out []datapath.Reading) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, p := range ps {
		n, ok := m.blocked[p]
		out[i] = datapath.Reading{Counter: datapath.Counter{Packets: n}, Found: ok}
	}
	return nil
}

func (m *memDP) Stats() (*datapath.Stats, error) {
	st := &datapath.Stats{Interface: "mem0", Mode: "generic", Verdicts: map[string]datapath.Counter{}, Tables: map[string]datapath.Occupancy{}}
	for _, r := range datapath.Reasons() {
		st.Verdicts[r] = datapath.Counter{Packets: 10, Bytes: 640}
	}
	st.Tables["exact4"] = datapath.Occupancy{Entries: 1, Capacity: 100}
	return st, nil
}

func (m *memDP) Check() error { return nil }
func (m *memDP) Close() error { return nil }

// testDaemon runs a daemon over memDP (its loop idle between the steps the
// test asks for) and serves its API; step runs one interval with a heavy
// source and a light one.
func testDaemon(t *testing.T) (d *daemon.Daemon, url string, step func()) {
	t.Helper()
	cfg := config.Default()
	cfg.Interface = "mem0"
	cfg.Interval = time.Hour // the test steps the loop itself
	cfg.StateFile = filepath.Join(t.TempDir(), "state.json")
	cfg.API.Socket = ""
	cfg.Detectors.Rate.PPS = 1000
	cfg.Detectors.Entropy.Enabled = false
	cfg.Detectors.Victim.Enabled = false
	dp := &memDP{blocked: map[netip.Prefix]uint64{}, at: time.Now()}
	d, err := daemon.NewOver(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), dp, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- d.Run(ctx, nil) }()
	srv := httptest.NewServer((&Server{D: d}).Handler())
	t.Cleanup(func() {
		srv.Close()
		cancel()
		if err := <-ran; err != nil {
			t.Errorf("daemon: %v", err)
		}
	})
	step = func() {
		t.Helper()
		dp.mu.Lock()
		dp.flows = append(dp.flows,
			datapath.Flow{Src: netip.MustParseAddr("198.51.100.7"), Dst: netip.MustParseAddr("192.0.2.1"), Proto: 17, Packets: 5000, Bytes: 64 * 5000},
			datapath.Flow{Src: netip.MustParseAddr("203.0.113.5"), Dst: netip.MustParseAddr("192.0.2.1"), Proto: 6, Packets: 7, Bytes: 7 * 1000})
		dp.mu.Unlock()
		var err error
		if derr := d.Do(context.Background(), func() { err = d.Step(time.Now()) }); derr != nil || err != nil {
			t.Fatalf("step: %v %v", derr, err)
		}
	}
	return d, srv.URL, step
}

// get answers a request: status, body.
func call(t *testing.T, method, url string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

// jsonError is the message of a JSON error body, or a failure.
func jsonError(t *testing.T, what string, b []byte) string {
	t.Helper()
	var e apiv1.ErrorBody
	if err := json.Unmarshal(b, &e); err != nil || e.Error == "" {
		t.Errorf("%s: body %q is not a JSON error", what, b)
	}
	return e.Error
}

// A known path with another method is 405 with Allow, an unknown path
// 404, a DELETE without its prefix 400: each a JSON error.
func TestAPIStatusCodes(t *testing.T) {
	_, url, _ := testDaemon(t)
	code, h, b := call(t, "POST", url+"/v1/status")
	if code != http.StatusMethodNotAllowed || !strings.Contains(h.Get("Allow"), "GET") {
		t.Errorf("POST /v1/status: %d, Allow %q, want 405 with Allow: GET", code, h.Get("Allow"))
	}
	if msg := jsonError(t, "405", b); !strings.Contains(msg, "allowed") {
		t.Errorf("405 message %q", msg)
	}
	code, _, b = call(t, "GET", url+"/v1/nope")
	if code != http.StatusNotFound {
		t.Errorf("GET /v1/nope: %d, want 404", code)
	}
	jsonError(t, "404", b)
	for _, p := range []string{"/v1/rules", "/v1/allowlist", "/v1/rules/"} {
		code, _, b = call(t, "DELETE", url+p)
		if code != http.StatusBadRequest {
			t.Errorf("DELETE %s: %d %q, want 400", p, code, b)
		}
		jsonError(t, "DELETE "+p, b)
	}
}

// Lists take since and limit, refuse what they do not know, and an
// unknown event kind is a 400 that lists the kinds.
func TestAPIListQueries(t *testing.T) {
	_, url, step := testDaemon(t)
	step()
	post(t, url+"/v1/rules", `{"prefix":"192.0.2.0/24"}`)
	if code, _, b := call(t, "DELETE", url+"/v1/rules/192.0.2.0_24"); code != http.StatusNoContent {
		t.Fatalf("DELETE: %d %s", code, b)
	}
	var es []apiv1.Event
	if code, _, b := call(t, "GET", url+"/v1/events"); code != 200 || json.Unmarshal(b, &es) != nil || len(es) < 2 {
		t.Fatalf("events: %d %s", code, b)
	}
	var one []apiv1.Event
	if _, _, b := call(t, "GET", url+"/v1/events?limit=1"); json.Unmarshal(b, &one) != nil || len(one) != 1 || one[0] != es[len(es)-1] {
		t.Errorf("limit=1: %s, want the newest of %v", b, es)
	}
	since := es[0].Time.Format(time.RFC3339Nano)
	var after []apiv1.Event
	if _, _, b := call(t, "GET", url+"/v1/events?since="+since); json.Unmarshal(b, &after) != nil || len(after) >= len(es) {
		t.Errorf("since=%s: %s", since, b)
	}
	if _, _, b := call(t, "GET", url+"/v1/events?kind=ban&since=1h"); !strings.HasPrefix(strings.TrimSpace(string(b)), "[") {
		t.Errorf("kind=ban&since=1h: %s", b)
	}
	code, _, b := call(t, "GET", url+"/v1/events?kind=bans")
	if msg := jsonError(t, "unknown kind", b); code != 400 || !strings.Contains(msg, "unban") {
		t.Errorf("kind=bans: %d %q, want 400 listing the kinds", code, msg)
	}
	for _, q := range []string{"/v1/events?limit=0", "/v1/rules?limit=x", "/v1/detections?since=yesterday", "/v1/rules?knd=ban"} {
		if code, _, b := call(t, "GET", url+q); code != 400 {
			t.Errorf("%s: %d %s, want 400", q, code, b)
		}
	}
	var rs []json.RawMessage
	if _, _, b := call(t, "GET", url+"/v1/rules?limit=1"); json.Unmarshal(b, &rs) != nil || len(rs) != 1 {
		t.Errorf("rules?limit=1: %s", b)
	}
	if _, _, b := call(t, "GET", url+"/v1/rules?since="+time.Now().Add(time.Hour).Format(time.RFC3339)); strings.TrimSpace(string(b)) != "[]" {
		t.Errorf("rules since the future: %s, want []", b)
	}
}

// post sends body and wants 201.
func post(t *testing.T, url, body string) []byte {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST %s: %d %s", url, resp.StatusCode, b)
	}
	return b
}

// Detections are listed, not only the bans they led to.
func TestAPIDetections(t *testing.T) {
	_, url, step := testDaemon(t)
	step()
	var ds []apiv1.Detection
	code, _, b := call(t, "GET", url+"/v1/detections")
	if code != 200 || json.Unmarshal(b, &ds) != nil || len(ds) == 0 {
		t.Fatalf("detections: %d %s", code, b)
	}
	if ds[0].Prefix != netip.MustParsePrefix("198.51.100.7/32") || ds[0].Detector != "rate" || ds[0].Rate != 3846.2 {
		t.Errorf("detection %+v", ds[0])
	}
}

// GET and POST of a rule answer one schema, and rates are rounded. The
// POST adds only result: what the request did (added, exists, updated).
func TestAPIRuleOneSchema(t *testing.T) {
	_, url, _ := testDaemon(t)
	posted := post(t, url+"/v1/rules", `{"prefix":"192.0.2.0/24","ttl":"1h"}`)
	_, _, got := call(t, "GET", url+"/v1/rules")
	var p map[string]any
	var g []map[string]any
	if json.Unmarshal(posted, &p) != nil || json.Unmarshal(got, &g) != nil || len(g) != 1 {
		t.Fatalf("POST %s, GET %s", posted, got)
	}
	if p["result"] != "added" {
		t.Errorf("POST result %v, want added", p["result"])
	}
	delete(p, "result")
	if pk, gk := keys(p), keys(g[0]); !slices.Equal(pk, gk) {
		t.Errorf("POST fields %v, GET fields %v", pk, gk)
	}
}

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func TestRoundRate(t *testing.T) {
	for in, want := range map[float64]float64{4999.999999999999: 5000, 0.04: 0, 12.3456: 12.3} {
		if got := apiv1.RoundRate(in); got != want {
			t.Errorf("apiv1.RoundRate(%v) = %v, want %v", in, got, want)
		}
	}
	if b, _ := json.Marshal(apiv1.RuleView{}); strings.Contains(string(b), "e-") || !strings.Contains(string(b), `"expires":null`) {
		t.Errorf("empty rule view %s", b)
	}
}
