// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// hostVerdicts reads the filter's verdict counters on the NIC lab's host
// straight from the pinned maps (the daemon's view is an interval old).
func hostVerdicts(t *testing.T) map[string]uint64 {
	t.Helper()
	out, err := exec.Command(bin, "-n", nsNHost, "--direct", "stats", "--json").CombinedOutput()
	if err != nil {
		t.Fatalf("tierwall stats: %v\n%s", err, out)
	}
	return verdictsFrom(t, out)
}

// The heavy-hitter detector in XDP drops a flooding source long before
// the daemon's interval, the daemon then confirms the drop as a ban of
// the "heavy" detector, and a flood that spoofs a protected or an
// allowlisted source is never dropped provisionally.
func TestHeavyHitterDropsBeforeTheDaemon(t *testing.T) {
	setupNIC(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "api.sock")
	cfgPath := filepath.Join(dir, "tierwall.yaml")
	// The rate and entropy detectors off: a ban can only come from the
	// data plane's catch. A long interval: the floods below are over
	// long before the daemon's first look.
	writeFile(t, cfgPath, []byte(fmt.Sprintf(`interface: %s
interval: 3s
state_file: %s
capacity: {exact4: 1024, exact6: 1024, prefix: 64, allow: 64, features: 4096}
hardware:
  backend: emulated
  capacity: 8
  emulated: {netns: %s, wire: %s, host: %s}
detectors:
  rate: {enabled: false}
  entropy: {enabled: false}
  heavy: {enabled: true, window: 10ms, pps: 10000, syn_pps: 0, ttl: 30s}
bans: {ttl: 1h, hold: 1s}
rails:
  protected: [10.66.9.0/24]
  allow: [10.66.8.0/24]
api:
  socket: %s
`, ifHost, filepath.Join(dir, "state.json"), nsNic, ifWire, ifHPort, sock)))
	startDaemon(t, cfgPath, sock)
	c := apiClient(sock)
	b := newBlaster(t)

	// 100 packets per 10 ms window is the threshold; the blaster sends
	// tens of thousands in a few tens of milliseconds.
	const flood = 20000
	protected, allowed := netip.MustParseAddr("10.66.9.9"), netip.MustParseAddr("10.66.8.8")
	v0 := hostVerdicts(t)
	b.send(t, protected, flood)
	b.send(t, allowed, flood)
	v1 := hostVerdicts(t)
	if n := v1["drop_provisional"] - v0["drop_provisional"]; n != 0 {
		t.Errorf("%d packets of protected and allowlisted sources dropped provisionally", n)
	}
	// rails.allow is the daemon's "never ban", not the XDP allowlist: both
	// floods pass, unjudged by any rule, and nothing is dropped.
	moved := delta(v0, v1)
	if moved["pass"] == 0 || len(moved) != 1 {
		t.Errorf("the protected and allowlisted floods moved verdicts %v, want pass only", moved)
	}

	// A burst that stops: caught, then revoked by the daemon (it did not
	// go on at the threshold's rate), never banned.
	burster := netip.MustParseAddr("10.66.0.55")
	b.send(t, burster, flood)
	v2 := hostVerdicts(t)
	if n := v2["drop_provisional"] - v1["drop_provisional"]; n == 0 {
		t.Fatalf("the burst of %d: nothing dropped provisionally (verdicts moved %v)", flood, delta(v1, v2))
	}
	// A flood that goes on until the daemon has judged it.
	attacker := netip.MustParseAddr("10.66.0.77")
	b.send(t, attacker, flood)
	v3 := hostVerdicts(t)
	dropped := v3["drop_provisional"] - v2["drop_provisional"]
	if dropped == 0 || dropped > flood {
		t.Fatalf("the attacker's flood of %d: %d dropped provisionally, want most of it (verdicts moved %v)", flood, dropped, delta(v2, v3))
	}
	t.Logf("%d of %d flood packets dropped provisionally before the daemon looked", dropped, flood)
	// The operator's view of the detector: its counters and entries.
	code, body := call(t, c, "GET", "/v1/provisional", "")
	var hs struct {
		Enabled bool `json:"enabled"`
		Stats   struct {
			Caught uint64 `json:"caught"`
		} `json:"stats"`
		Entries []struct {
			Prefix  string `json:"prefix"`
			Packets uint64 `json:"packets"`
		} `json:"entries"`
	}
	if err := json.Unmarshal(body, &hs); code != 200 || err != nil || !hs.Enabled || hs.Stats.Caught < 2 {
		t.Errorf("GET /v1/provisional: %d %v %s", code, err, body)
	}
	for _, e := range hs.Entries {
		if e.Prefix == attacker.String()+"/32" && e.Packets == 0 {
			t.Errorf("the attacker's provisional entry counted nothing: %s", body)
		}
	}
	if out, err := exec.Command(bin, "--socket", sock, "provisional").CombinedOutput(); err != nil || !strings.Contains(string(out), "caught ") {
		t.Errorf("tierwall provisional: %v\n%s", err, out)
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				b.send(t, attacker, 1000)
			}
		}
	}()
	waitFor(t, "the heavy detector's ban", 10*time.Second, func() bool { return bans(t, c)[attacker.String()+"/32"].Detector == "heavy" })
	close(stop)
	<-done
	if x, ok := bans(t, c)[burster.String()+"/32"]; ok {
		t.Errorf("the burst's source was banned: %+v", x)
	}
	for _, p := range []netip.Addr{protected, allowed} {
		if x, ok := bans(t, c)[p.String()+"/32"]; ok {
			t.Errorf("%s banned: %+v", p, x)
		}
	}
	code, body = call(t, c, "GET", "/v1/events?kind=provisional", "")
	if code != 200 || !strings.Contains(string(body), "caught in XDP") || !strings.Contains(string(body), "confirmed") ||
		!strings.Contains(string(body), "a burst, not a flood") {
		t.Errorf("provisional events: %d %s", code, body)
	}
	// Confirmed: the ban drops the source now, not the provisional entry.
	v4 := hostVerdicts(t)
	b.send(t, attacker, 1000)
	v5 := hostVerdicts(t)
	if n := v5["drop_provisional"] - v4["drop_provisional"]; n != 0 {
		t.Errorf("after the ban, %d packets still dropped provisionally (verdicts moved %v)", n, delta(v4, v5))
	}
	code, body = call(t, c, "GET", "/metrics", "")
	if code != 200 || !strings.Contains(string(body), `tierwall_provisional_drops_total{outcome="confirmed"} 1`) {
		t.Errorf("metrics lack the confirmed provisional drop: %d", code)
	}
}

func delta(a, b map[string]uint64) map[string]uint64 {
	out := map[string]uint64{}
	for k, v := range b {
		if v != a[k] {
			out[k] = v - a[k]
		}
	}
	return out
}
