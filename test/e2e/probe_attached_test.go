// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/testbed/harness"
	"github.com/tierwall/tierwall/internal/testutil"
)

// A probe on an interface whose XDP hook is taken failed with a bare
// "create link: file exists" and exit 1 (issue 34, item 8): it must name
// what holds the hook (the tierwall filter, or another program) and exit 2.
func TestProbeOnAnInterfaceWithXDPAttached(t *testing.T) {
	testutil.RequireRoot(t)
	const ns, ifn = "twe2e-pbusy", "twe2e-pb1"
	cleanup, err := harness.VethPair("twe2e-pbusyt", "twe2e-pb0", ns, ifn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	dir := t.TempDir()
	config := func(name string) string {
		p := filepath.Join(dir, name+".yaml")
		cfg := fmt.Sprintf("role: probe\ninterface: %s\nstate_file: %s\napi: {socket: %s}\nprobe: {capacity: 4096}\n",
			ifn, filepath.Join(dir, name+"-state.json"), filepath.Join(dir, name+".sock"))
		if err := os.WriteFile(p, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	probe := func(cfg string) (string, int) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, bin, "-n", ns, "run", "--config", cfg).CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("probe on %s: %v (want it refused)\n%s", ifn, err, out)
		}
		return string(out), ee.ExitCode()
	}

	if out, err := exec.Command(bin, "-n", ns, "attach", "-i", ifn).CombinedOutput(); err != nil {
		t.Fatalf("attach: %v\n%s", err, out)
	}
	out, code := probe(config("p1"))
	if code != 2 || !strings.Contains(out, ifn+" already has the tierwall filter") || !strings.Contains(out, "tierwall detach -i "+ifn) {
		t.Errorf("probe on the filter's interface: exit %d, want 2 naming the filter and the way out:\n%s", code, out)
	}
	if out, err := exec.Command(bin, "-n", ns, "detach", "-i", ifn).CombinedOutput(); err != nil {
		t.Fatalf("detach: %v\n%s", err, out)
	}

	// Another XDP program: a running probe holds the hook.
	first := startWith(t, "probe", harness.Options{Tierwall: bin, Netns: ns, Config: config("p2"), Socket: filepath.Join(dir, "p2.sock"), Timeout: 30 * time.Second})
	out, code = probe(config("p3"))
	if code != 2 || !strings.Contains(out, ifn+" already has another XDP program") {
		t.Errorf("probe beside a probe: exit %d, want 2 naming another XDP program:\n%s", code, out)
	}
	if first.Exited() {
		t.Errorf("the refused probe stopped the running one:\n%s", first.Output())
	}
}
