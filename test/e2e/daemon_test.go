// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/testbed/harness"
	"github.com/tierwall/tierwall/internal/testutil"
)

// writeFile writes a file the daemon reads.
func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// startDaemon runs `tierwall run` in the host namespace of the lab and
// waits for its API; the daemon's output is logged if the test fails.
func startDaemon(t *testing.T, cfgPath, sock string) *harness.Daemon {
	t.Helper()
	return startWith(t, "daemon", harness.Options{Tierwall: bin, Netns: nsNHost, Config: cfgPath, Socket: sock})
}

// startWith starts a daemon with o, stops it when the test ends and logs
// its output, named name, if the test failed.
func startWith(t *testing.T, name string, o harness.Options) *harness.Daemon {
	t.Helper()
	if o.Timeout == 0 {
		o.Timeout = testutil.Scaled(15 * time.Second)
	}
	d, err := harness.StartDaemon(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !d.Exited() {
			d.Stop()
		}
		if t.Failed() {
			t.Logf("%s log:\n%s", name, d.Output())
		}
	})
	return d
}

// apiClient talks to the daemon's unix socket.
func apiClient(sock string) *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}}}
}

func call(t *testing.T, c *http.Client, method, path string, body string, hdr ...string) (int, []byte) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, "http://tierwall"+path, r)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

type apiBan struct {
	Prefix   string `json:"prefix"`
	Tier     string `json:"tier"`
	Detector string `json:"detector"`
}

func bans(t *testing.T, c *http.Client) map[string]apiBan {
	t.Helper()
	code, b := call(t, c, "GET", "/v1/rules", "")
	if code != 200 {
		t.Fatalf("GET /v1/rules: %d %s", code, b) // never read a failure as "no bans"
	}
	var bs []apiBan
	if err := json.Unmarshal(b, &bs); err != nil {
		t.Fatalf("decoding /v1/rules: %v: %s", err, b)
	}
	out := map[string]apiBan{}
	for _, x := range bs {
		out[x.Prefix] = x
	}
	return out
}

func waitFor(t *testing.T, what string, d time.Duration, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(testutil.Scaled(d))
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestDaemonBansUnbansAndSurvivesKill(t *testing.T) {
	setupNIC(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "api.sock")
	tokenFile := filepath.Join(dir, "token")
	writeFile(t, tokenFile, []byte("0123456789abcdef-secret\n"))
	feed := filepath.Join(dir, "feed.txt")
	writeFile(t, feed, []byte("# threat feed\n"))
	cfgPath := filepath.Join(dir, "tierwall.yaml")
	cfg := fmt.Sprintf(`interface: %s
interval: 200ms
state_file: %s
log: {level: debug}
capacity: {exact4: 4096, exact6: 1024, prefix: 256, allow: 64, features: 8192}
hardware:
  backend: emulated
  capacity: 8
  max_rate_pps: 1000
  emulated: {netns: %s, wire: %s, host: %s}
detectors:
  rate: {enabled: true, pps: %d, learn_intervals: 0}
  entropy: {enabled: false}
  lists: {enabled: true, paths: [%s]}
bans: {ttl: 1h, hold: 1s, unban_pps: %d}
rails:
  protected: [10.66.9.0/24]
api:
  socket: %s
  tcp: 127.0.0.1:9487
  token_file: %s
  max_body: 1024
`, ifHost, filepath.Join(dir, "state.json"), nsNic, ifWire, ifHPort,
		testutil.ScaledRate(400), feed, testutil.ScaledRate(50), sock, tokenFile)
	writeFile(t, cfgPath, []byte(cfg))

	d := startDaemon(t, cfgPath, sock)
	c := apiClient(sock) // the harness waited for the API

	hc := countHost(t, false)

	var attackers []netip.Addr
	for i := 1; i <= 20; i++ {
		attackers = append(attackers, netip.AddrFrom4([4]byte{10, 66, 0, byte(i)}))
	}
	protected := netip.MustParseAddr("10.66.9.9") // also floods, must never be banned
	clean := netip.MustParseAddr("10.66.1.1")
	b := newBlaster(t)
	attack := func(stop <-chan struct{}) {
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, a := range attackers {
				b.send(t, a, 60)
			}
			b.send(t, protected, 60)
			b.send(t, clean, 2)
			time.Sleep(50 * time.Millisecond)
		}
	}

	stop := make(chan struct{})
	attacking := make(chan struct{})
	go func() { defer close(attacking); attack(stop) }()
	// A failure before the attack is stopped below ends the test: the
	// attacker must not outlive it (its t.Errorf would panic).
	var once sync.Once
	stopAttack := func() { once.Do(func() { close(stop); <-attacking }) }
	t.Cleanup(stopAttack)
	waitFor(t, "20 bans", 10*time.Second, func() bool { return len(bans(t, c)) == 20 })
	bs := bans(t, c)
	inHW := 0
	for _, a := range attackers {
		if x, ok := bs[a.String()+"/32"]; !ok || x.Detector != "rate" {
			t.Errorf("attacker %s not banned by the rate detector: %+v", a, x)
		} else if x.Tier == "hw" {
			inHW++
		}
	}
	if _, ok := bs[protected.String()+"/32"]; ok {
		t.Error("protected source banned")
	}
	if _, ok := bs[clean.String()+"/32"]; ok {
		t.Error("clean source banned")
	}
	waitFor(t, "placement to fill the NIC table", 5*time.Second, func() bool {
		n := 0
		for _, x := range bans(t, c) {
			if x.Tier == "hw" {
				n++
			}
		}
		return n == 8
	})
	// From now on no attacker packet may reach the socket.
	time.Sleep(300 * time.Millisecond)
	hc.mu.Lock()
	hc.on = true
	hc.mu.Unlock()
	time.Sleep(time.Second)

	// kill -9 mid-attack: the data plane keeps dropping.
	d.Kill()
	time.Sleep(time.Second)
	hc.mu.Lock()
	for _, a := range attackers {
		if hc.delivered[a] != 0 {
			t.Errorf("banned %s reached the socket %d times (with or without the daemon)", a, hc.delivered[a])
		}
	}
	if hc.delivered[protected] == 0 || hc.delivered[clean] == 0 {
		t.Errorf("protected %d / clean %d packets delivered, want both > 0", hc.delivered[protected], hc.delivered[clean])
	}
	hc.mu.Unlock()

	// Restart: the state file and the pinned state are reconciled at once
	// (the wait is for loading: the emulated CPU of the kernel-VM run takes
	// 17-29 s to verify the programs again).
	start := time.Now()
	d = startDaemon(t, cfgPath, sock)
	waitFor(t, "reconciled bans after restart", 10*time.Second, func() bool { return len(bans(t, c)) == 20 })
	t.Logf("bans back in the API %v after restart", time.Since(start).Round(time.Millisecond))
	if strings.Contains(d.Output(), "restore") {
		t.Errorf("bans had to be restored although the data plane kept them:\n%s", d.Output())
	}

	// API: bad input, limits, auth.
	for _, tc := range []struct {
		method, path, body string
		want               int
	}{
		{"POST", "/v1/rules", `{"prefix":"not-an-ip"}`, 400},
		{"POST", "/v1/rules", `{"prefix":"10.66.9.0/24"}`, 400}, // protected
		{"POST", "/v1/rules", `{"prefix":"198.51.100.0/24","colour":"red"}`, 400},
		{"POST", "/v1/rules", `{"prefix":"198.51.100.0/24","ttl":"-1h"}`, 400},
		{"POST", "/v1/rules", `{"prefix":"198.51.100.0/24","reason":"` + strings.Repeat("x", 2000) + `"}`, 413},
		{"DELETE", "/v1/rules/192.0.2.0_24", "", 404},
		{"GET", "/v1/nothing", "", 404},
		{"POST", "/v1/rules", `{"prefix":"198.51.100.0/24","reason":"abuse"}`, 201},
		{"DELETE", "/v1/rules/198.51.100.0_24", "", 204},
	} {
		if code, body := call(t, c, tc.method, tc.path, tc.body); code != tc.want {
			t.Errorf("%s %s %.60s: %d %s, want %d", tc.method, tc.path, tc.body, code, body, tc.want)
		}
	}
	var tcpC *http.Client
	inNS(t, nsNHost, func() {
		conn, err := net.Dial("tcp", "127.0.0.1:9487")
		if err != nil {
			t.Fatal(err)
		}
		tcpC = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
			DialContext: func(context.Context, string, string) (net.Conn, error) { return conn, nil }, MaxConnsPerHost: 1}}
	})
	if code, _ := call(t, tcpC, "GET", "/v1/status", "", "Authorization", "Bearer wrong-token-wrong-token"); code != 401 {
		t.Errorf("wrong token: %d, want 401", code)
	}
	if code, _ := call(t, tcpC, "GET", "/v1/status", "", "Authorization", "Bearer 0123456789abcdef-secret"); code != 200 {
		t.Errorf("right token: %d, want 200", code)
	}
	if code, body := call(t, c, "GET", "/metrics", ""); code != 200 || !bytes.Contains(body, []byte(`tierwall_active_bans{tier="nic"} 8`)) ||
		!bytes.Contains(body, []byte(`tierwall_packets_total{tier="nic",verdict="hit_drop"}`)) {
		var lines []string
		for _, l := range strings.Split(string(body), "\n") {
			if strings.HasPrefix(l, "tierwall_") {
				lines = append(lines, l)
			}
		}
		t.Errorf("metrics: %d\n%s", code, strings.Join(lines, "\n"))
	}

	// Threat lists: a prefix added to the feed is banned, and lifted when
	// it leaves the feed.
	writeFile(t, feed, []byte("# threat feed\n203.0.113.128/25\n"))
	waitFor(t, "the listed prefix banned", 5*time.Second, func() bool { return bans(t, c)["203.0.113.128/25"].Detector == "list" })
	writeFile(t, feed, []byte("# threat feed, emptied\n"))
	waitFor(t, "the delisted prefix unbanned", 5*time.Second, func() bool { _, ok := bans(t, c)["203.0.113.128/25"]; return !ok })

	// The CLI goes through the running daemon: its bans, its rails.
	cli := func(args ...string) (string, int) {
		out, err := exec.Command(bin, append([]string{"-n", nsNHost, "--socket", sock}, args...)...).CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return string(out), ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), 0
	}
	if out, code := cli("block", "add", "203.0.113.50", "198.51.100.0/24"); code != 0 || !strings.Contains(out, "through the daemon") {
		t.Errorf("block add via daemon: %d %s", code, out)
	}
	if x, ok := bans(t, c)["203.0.113.50/32"]; !ok || x.Detector != "operator" {
		t.Errorf("CLI ban not in the daemon: %+v", x)
	}
	// One protected prefix in the batch: exit 2, and the others are undone.
	if out, code := cli("block", "add", "203.0.113.51", "10.66.9.1"); code != 2 {
		t.Errorf("protected via CLI: %d %s", code, out)
	}
	if _, ok := bans(t, c)["203.0.113.51/32"]; ok {
		t.Error("half-applied CLI batch left 203.0.113.51 banned")
	}
	if out, code := cli("block", "del", "203.0.113.50", "198.51.100.0/24"); code != 0 {
		t.Errorf("block del via daemon: %d %s", code, out)
	}
	if out, code := cli("block", "list"); code != 0 || !strings.Contains(out, "TIER") || !strings.Contains(out, "10.66.0.1/32") {
		t.Errorf("block list via daemon: %d %s", code, out)
	}

	// SIGHUP: a broken file is refused and the running configuration kept;
	// a good one takes effect.
	writeFile(t, cfgPath, []byte(cfg+"interval: 5ms\n"))
	d.Cmd.Process.Signal(syscall.SIGHUP)
	waitFor(t, "the refused reload in the log", 5*time.Second, func() bool {
		return strings.Contains(d.Output(), "reload refused")
	})
	if code, _ := call(t, c, "GET", "/v1/status", ""); code != 200 {
		t.Fatalf("daemon gone after a bad reload: %d", code)
	}
	writeFile(t, cfgPath, []byte(strings.Replace(cfg, "rails:\n", "rails:\n  monitor_only: true\n", 1)))
	d.Cmd.Process.Signal(syscall.SIGHUP)
	waitFor(t, "monitor-only after reload", 5*time.Second, func() bool {
		_, b := call(t, c, "GET", "/v1/status", "")
		return bytes.Contains(b, []byte(`"monitor_only": true`))
	})

	// The attack stops: bans are lifted after the hold time, hardware first.
	stopAttack()
	waitFor(t, "unbans after the attack stopped", 10*time.Second, func() bool { return len(bans(t, c)) == 0 })
	var tiers struct {
		Hardware struct{ Occupancy int } `json:"hardware"`
	}
	code, body := call(t, c, "GET", "/v1/tiers", "")
	if err := json.Unmarshal(body, &tiers); code != 200 || err != nil || !bytes.Contains(body, []byte(`"occupancy"`)) {
		t.Fatalf("GET /v1/tiers: %d %v %s", code, err, body)
	}
	if tiers.Hardware.Occupancy != 0 {
		t.Errorf("hardware still holds %d rules after every unban", tiers.Hardware.Occupancy)
	}
}
