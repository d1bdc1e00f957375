// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/testbed/harness"
	"github.com/tierwall/tierwall/internal/testutil"
)

const (
	owNsTx = "tw14a-tx"
	owNsRx = "tw14a-rx"
	owIfTx = "tw14a-a"
	owIfRx = "tw14a-b"
)

// owCLI runs the CLI in the daemon's namespace with the default --socket:
// the daemon's socket is elsewhere, as in the report.
func owCLI(t *testing.T, args ...string) (string, int) {
	t.Helper()
	out, err := exec.Command(bin, append([]string{"-n", owNsRx}, args...)...).CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), 0
}

// xdpProg is the id of the XDP program on the receiver's interface.
func xdpProg(t *testing.T) string {
	t.Helper()
	m := regexp.MustCompile(`prog/xdp id (\d+)`).FindStringSubmatch(sh(t, "ip", "-n", owNsRx, "-d", "link", "show", "dev", owIfRx))
	if m == nil {
		t.Fatal("no XDP program on " + owIfRx)
	}
	return m[1]
}

// leftovers lists what of the namespace's filter remains under /run and
// in bpffs.
func leftovers() []string {
	var out []string
	ents, _ := os.ReadDir("/run/tierwall")
	for _, e := range ents {
		if strings.Contains(e.Name(), owNsRx) {
			out = append(out, "/run/tierwall/"+e.Name())
		}
	}
	for _, d := range []string{"/sys/fs/bpf/tierwall/ns:" + owNsRx, "/sys/fs/bpf/tierwall-nic/ns:" + owNsRx} {
		if _, err := os.Stat(d); err == nil {
			out = append(out, d)
		}
	}
	return out
}

// lockedBuffer is a daemon's output, read while it writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func owConfig(t *testing.T, dir, name, socket string) string {
	t.Helper()
	p := filepath.Join(dir, name+".yaml")
	writeFile(t, p, fmt.Appendf(nil, "interface: %s\ninterval: 200ms\nstate_file: %s\napi:\n  socket: %q\n",
		owIfRx, filepath.Join(dir, name+".state.json"), socket))
	return p
}

// One daemon per data plane, and the CLI goes through it: the report's
// daemon in a namespace with its socket elsewhere, a second `run` that
// swapped the program and rewrote the state file before failing on the
// socket, a re-add that replaced a TTL'd ban, a ban of everything, and the
// lock file and empty directory detach left behind.
func TestOwnerOneDaemonPerDataPlane(t *testing.T) {
	testutil.RequireRoot(t)
	cleanup, err := harness.VethPair(owNsTx, owIfTx, owNsRx, owIfRx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	sh(t, "ip", "-n", owNsRx, "addr", "add", "10.214.0.1/24", "dev", owIfRx)
	dir := t.TempDir()
	sock := filepath.Join(dir, "api.sock")
	d := startWith(t, "daemon", harness.Options{Tierwall: bin, Netns: owNsRx, Config: owConfig(t, dir, "first", sock), Socket: sock})
	c := apiClient(sock)
	type apiRule struct {
		Reason  string     `json:"reason"`
		Expires *time.Time `json:"expires"`
	}
	rule := func(p string) (apiRule, bool) {
		code, b := call(t, c, "GET", "/v1/rules", "")
		var rs []struct {
			Prefix string `json:"prefix"`
			apiRule
		}
		if code != 200 || json.Unmarshal(b, &rs) != nil {
			t.Fatalf("GET /v1/rules: %d %s", code, b)
		}
		for _, r := range rs {
			if r.Prefix == p {
				return r.apiRule, true
			}
		}
		return apiRule{}, false
	}

	// The CLI finds the daemon although --socket names another socket.
	if out, code := owCLI(t, "block", "add", "198.51.100.50", "--ttl", "10m", "--reason", "abuse"); code != 0 || !strings.Contains(out, "through the daemon at "+sock) {
		t.Fatalf("block add: %d %s", code, out)
	}
	if r, ok := rule("198.51.100.50/32"); !ok || r.Reason != "abuse" || r.Expires == nil {
		t.Fatalf("the CLI's ban is not the daemon's: %+v %v", r, ok)
	}
	// Re-adding leaves it as it is, and says so.
	if out, code := owCLI(t, "block", "add", "198.51.100.50"); code != 0 || !strings.Contains(out, "unchanged") {
		t.Fatalf("re-add: %d %s", code, out)
	}
	if r, _ := rule("198.51.100.50/32"); r.Reason != "abuse" || r.Expires == nil {
		t.Fatalf("re-add replaced the ban: %+v", r)
	}
	// Catastrophes: too wide without force, the host's own subnet never.
	for _, a := range [][]string{{"block", "add", "0.0.0.0/1"}, {"block", "add", "--force", "10.214.0.0/24"}, {"allow", "add", "::/0"}} {
		if out, code := owCLI(t, a...); code != 2 {
			t.Errorf("%v: %d %s, want exit 2", a, code, out)
		}
	}
	if _, ok := rule("0.0.0.0/1"); ok {
		t.Error("0.0.0.0/1 banned")
	}
	// top reads the daemon's interval instead of taking a snapshot.
	if out, code := owCLI(t, "top"); code != 0 || !strings.Contains(out, "the daemon's last interval") {
		t.Errorf("top: %d %s", code, out)
	}

	// A second daemon on the same data plane: refused, naming the first,
	// before it swaps the program or writes any file.
	prog := xdpProg(t)
	stateFile := filepath.Join(dir, "first.state.json")
	before, err := os.ReadFile(stateFile)
	if err != nil {
		t.Fatal(err)
	}
	sock2 := filepath.Join(dir, "api2.sock")
	out, err := exec.Command(bin, "-n", owNsRx, "run", "--config", owConfig(t, dir, "second", sock2)).CombinedOutput()
	if err == nil || !strings.Contains(string(out), fmt.Sprintf("pid %d", d.Cmd.Process.Pid)) {
		t.Fatalf("second daemon: %v %s", err, out)
	}
	if now := xdpProg(t); now != prog {
		t.Errorf("the refused daemon swapped the XDP program: %s -> %s", prog, now)
	}
	if after, _ := os.ReadFile(stateFile); !bytes.Equal(before, after) {
		t.Error("the refused daemon changed the first one's state file")
	}
	for _, f := range []string{sock2, filepath.Join(dir, "second.state.json")} {
		if _, err := os.Stat(f); err == nil {
			t.Errorf("the refused daemon created %s", f)
		}
	}
	// Detach under the daemon is refused too.
	if out, code := owCLI(t, "detach", "-i", owIfRx); code != 2 {
		t.Errorf("detach under the daemon: %d %s", code, out)
	}

	// A daemon without an API socket: the CLI refuses to go behind its
	// back unless --direct.
	d.Stop()
	d3 := exec.Command(bin, "-n", owNsRx, "run", "--config", owConfig(t, dir, "nosocket", ""))
	var log3 lockedBuffer
	d3.Stdout, d3.Stderr = &log3, &log3
	if err := d3.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d3.Process.Kill(); _ = d3.Wait() })
	waitFor(t, "the socketless daemon", 15*time.Second, func() bool { return strings.Contains(log3.String(), "tierwall running") })
	if out, code := owCLI(t, "block", "add", "198.51.100.60"); code != 2 || !strings.Contains(out, fmt.Sprintf("pid %d", d3.Process.Pid)) {
		t.Errorf("block add beside a socketless daemon: %d %s", code, out)
	}
	if out, code := owCLI(t, "block", "list", "--json"); code != 0 || strings.Contains(out, "198.51.100.60") {
		t.Errorf("the refused rule reached the data plane: %d %s", code, out)
	}
	if out, code := owCLI(t, "--direct", "block", "add", "198.51.100.60"); code != 0 || !strings.Contains(out, "warning") {
		t.Errorf("--direct: %d %s", code, out)
	}
	if err := d3.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	_ = d3.Wait()

	// Nothing is left behind once the daemon stopped and the filter is
	// detached.
	if out, code := owCLI(t, "detach", "-i", owIfRx); code != 0 {
		t.Fatalf("detach: %d %s", code, out)
	}
	if l := leftovers(); len(l) != 0 {
		t.Errorf("left behind after detach: %v", l)
	}
}
