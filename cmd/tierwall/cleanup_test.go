// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tierwall/tierwall/internal/bpffs"
	"github.com/tierwall/tierwall/internal/control/daemon"
	"github.com/tierwall/tierwall/internal/rule"
	"github.com/tierwall/tierwall/internal/synproxy"
	"github.com/tierwall/tierwall/internal/testbed/harness"
	"github.com/tierwall/tierwall/internal/testutil"
)

// buildTierwall builds this command into a temporary directory.
func buildTierwall(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "tierwall")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building tierwall: %v\n%s", err, out)
	}
	return bin
}

// tierwall cleanup takes away what tierwall left on a host (issue 34):
// the pinned filter, whose XDP program goes with it, the SYN proxy's table
// with the sysctls put back, and the lock files and records under /run;
// --dry-run only lists them, and a running daemon makes it refuse. On a
// private pin tree and run directory, in a namespace of its own, so that
// nothing of other tests is touched.
func TestCleanup(t *testing.T) {
	testutil.RequireRoot(t)
	bin := buildTierwall(t)
	const ns, ifn = "twcl-ns", "twcl-b"
	cleanup, err := harness.VethPair("twcl-t", "twcl-a", ns, ifn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	pins := t.TempDir()
	if err := harness.Run("mount", "-t", "bpf", "bpf", pins); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = exec.Command("umount", "-l", pins).Run()
		// attach's lock file is in the one run directory every tierwall
		// shares (named after the private tree's path).
		removeLocks(t, "*_ns_"+ns+"_"+ifn+".lock")
	})
	run := filepath.Join(t.TempDir(), "run")
	if err := os.MkdirAll(filepath.Join(run, "bpffs"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"bpffs_tierwall_x.lock", ".lock"} {
		if err := os.WriteFile(filepath.Join(run, f), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tw := func(args ...string) (string, int) {
		out, err := exec.Command(bin, append([]string{"--bpffs", pins, "-n", ns}, args...)...).CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return string(out), ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), 0
	}
	sysctl := func() string {
		out, err := exec.Command("ip", "netns", "exec", ns, "sysctl", "-n", "net.ipv4.tcp_timestamps").Output()
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(out))
	}
	xdp := func() bool {
		out, _ := exec.Command("ip", "-n", ns, "link", "show", "dev", ifn).Output()
		return strings.Contains(string(out), "xdp")
	}

	if out, code := tw("attach", "-i", ifn); code != 0 {
		t.Fatalf("attach: exit %d\n%s", code, out)
	}
	if err := harness.Run("ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.tcp_timestamps=0"); err != nil {
		t.Fatal(err)
	}
	cfg := synproxy.Config{Netns: ns, MSS: 1460, WScale: 7, Targets: []synproxy.Target{
		{Dst: netip.MustParsePrefix("10.201.0.2/32"), Ports: rule.PortRange{Lo: 80, Hi: 80}}}}
	if err := synproxy.Apply(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = synproxy.Remove(context.Background(), ns) })
	if !xdp() || sysctl() != "1" {
		t.Fatalf("set-up: xdp %v, tcp_timestamps %s", xdp(), sysctl())
	}

	// A running daemon: refused, nothing removed (a dry run still lists).
	own, err := json.Marshal(daemon.Owner{PID: os.Getpid(), Interface: ifn, Config: "test.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(run, "k.owner"), own, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, code := tw("cleanup", "--run-dir", run); code != 2 || !strings.Contains(out, "daemon(s) running") || !xdp() {
		t.Errorf("cleanup beside a running daemon: exit %d, xdp %v, want 2 and nothing removed:\n%s", code, xdp(), out)
	}
	out, code := tw("cleanup", "--run-dir", run, "--dry-run")
	for _, want := range []string{
		"would remove the SYN proxy's table inet " + synproxy.Table + " in this network namespace",
		"would remove every pinned filter of network namespace " + ns,
		"would remove the bind mount of bpffs at " + filepath.Join(run, "bpffs"),
		"would remove " + filepath.Join(run, "bpffs_tierwall_x.lock"),
		"would remove the directory " + run,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("cleanup --dry-run: no %q:\n%s", want, out)
		}
	}
	if code != 0 || !xdp() || sysctl() != "1" || !exists(filepath.Join(run, ".lock")) {
		t.Errorf("cleanup --dry-run: exit %d, and it removed something (xdp %v, tcp_timestamps %s)", code, xdp(), sysctl())
	}

	// The daemon gone: everything goes.
	if err := os.Remove(filepath.Join(run, "k.owner")); err != nil {
		t.Fatal(err)
	}
	if out, code := tw("cleanup", "--run-dir", run); code != 0 {
		t.Fatalf("cleanup: exit %d\n%s", code, out)
	}
	if ok, err := synproxy.Installed(context.Background(), ns); ok || err != nil {
		t.Errorf("the SYN proxy's table is still there (%v)", err)
	}
	if xdp() || sysctl() != "0" || exists(filepath.Join(pins, "tierwall")) || exists(run) {
		t.Errorf("after cleanup: xdp %v, tcp_timestamps %s (want 0, as before), pin tree left %v, run dir left %v",
			xdp(), sysctl(), exists(filepath.Join(pins, "tierwall")), exists(run))
	}
	if out, code := tw("cleanup", "--run-dir", run); code != 0 || !strings.Contains(out, "nothing of tierwall's left") {
		t.Errorf("cleanup again: exit %d\n%s", code, out)
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// removeLocks removes the lock files a test's commands left in the shared
// run directory (bpffs.RunDir), matching glob.
func removeLocks(t *testing.T, glob string) {
	t.Helper()
	ls, _ := filepath.Glob(filepath.Join(bpffs.RunDir, glob))
	for _, l := range ls {
		_ = os.Remove(l)
	}
}
