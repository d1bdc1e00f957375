// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/control/config"
)

// startFake makes New start over fake data planes in a temporary run
// directory; it returns how many data planes were attached.
func startFake(t *testing.T) (runDir string, attached *int) {
	t.Helper()
	oldDir, oldAttach := ownerDir, attachDataPlane
	t.Cleanup(func() { ownerDir, attachDataPlane = oldDir, oldAttach })
	ownerDir = t.TempDir()
	n := 0
	attachDataPlane = func(cfg *config.Config, log *slog.Logger) (DataPlane, error) {
		n++
		return newFakeDP(time.Now()), nil
	}
	return ownerDir, &n
}

// A second daemon on the same data plane is refused before it touches
// anything: no second attach (which swapped the XDP program), no rewrite
// of the state file; the error names the daemon that holds it. It is
// refused also when the API socket is off (the old check was the socket).
func TestSecondDaemonRefusedBeforeTouching(t *testing.T) {
	runDir, attached := startFake(t)
	cfg := testConfig(t) // api.socket off
	first, err := New(cfg, "/etc/tierwall/a.yaml", quietLog())
	if err != nil {
		t.Fatal(err)
	}
	o, ok := OwnerOf(runDir, OwnerKey("", cfg.Interface))
	if !ok || o.PID != os.Getpid() || o.Interface != cfg.Interface || o.Config != "/etc/tierwall/a.yaml" {
		t.Fatalf("owner record %+v (live %v)", o, ok)
	}
	state, err := os.ReadFile(cfg.StateFile)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(cfg.StateFile)

	second := *cfg
	second.API.Socket = filepath.Join(t.TempDir(), "other.sock")
	_, err = New(&second, "/etc/tierwall/b.yaml", quietLog())
	if !errors.Is(err, ErrOwned) || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) {
		t.Fatalf("second daemon: %v, want ErrOwned naming pid %d", err, os.Getpid())
	}
	if *attached != 1 {
		t.Fatalf("the refused daemon attached a data plane (%d attaches)", *attached)
	}
	now, _ := os.ReadFile(cfg.StateFile)
	st2, _ := os.Stat(cfg.StateFile)
	if !bytes.Equal(now, state) || !st2.ModTime().Equal(st.ModTime()) {
		t.Fatal("the refused daemon rewrote the state file")
	}
	if o2, _ := OwnerOf(runDir, OwnerKey("", cfg.Interface)); o2 != o {
		t.Fatalf("the refused daemon changed the owner record: %+v", o2)
	}

	// A clean exit leaves no owner behind, and no files.
	if err := first.shutdown(); err != nil {
		t.Fatal(err)
	}
	if _, ok := OwnerOf(runDir, OwnerKey("", cfg.Interface)); ok {
		t.Fatal("owner record survives a clean exit")
	}
	if ents, _ := os.ReadDir(runDir); len(ents) != 0 {
		t.Fatalf("left behind in the run directory: %v", ents)
	}
	again, err := New(&second, "/etc/tierwall/b.yaml", quietLog())
	if err != nil {
		t.Fatalf("after the first stopped: %v", err)
	}
	if err := again.shutdown(); err != nil {
		t.Fatal(err)
	}
}

// Another interface (or the same name in another namespace: another pin
// directory) is another data plane.
func TestOwnersArePerDataPlane(t *testing.T) {
	_, attached := startFake(t)
	a := testConfig(t)
	a.API.Socket = filepath.Join(t.TempDir(), "api.sock")
	b := testConfig(t)
	b.Interface = "fake1"
	da, err := New(a, "", quietLog())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = da.shutdown() }()
	// ... but not with the first one's socket or state file: the second
	// would attach, then fail on the socket or rewrite the first's state.
	for _, share := range []func(c *config.Config){
		func(c *config.Config) { c.API.Socket = a.API.Socket },
		func(c *config.Config) { c.StateFile = a.StateFile },
	} {
		c := *b
		share(&c)
		if _, err := New(&c, "", quietLog()); !errors.Is(err, ErrOwned) {
			t.Errorf("sharing with the first: %v", err)
		}
	}
	if *attached != 1 {
		t.Fatalf("%d data planes attached, want 1", *attached)
	}
	db, err := New(b, "", quietLog())
	if err != nil {
		t.Fatalf("a daemon on another interface: %v", err)
	}
	if err := db.shutdown(); err != nil {
		t.Fatal(err)
	}
}

// A record whose process is gone (a daemon killed with SIGKILL) names no
// owner, and the next daemon takes over.
func TestStaleOwnerRecord(t *testing.T) {
	runDir, _ := startFake(t)
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skip("no true(1):", err)
	}
	key := OwnerKey("", "fake0")
	_, rp := ownerPaths(runDir, key)
	if err := writeOwner(rp, Owner{PID: cmd.Process.Pid, Interface: "fake0", Socket: "/run/x.sock"}); err != nil {
		t.Fatal(err)
	}
	if o, ok := OwnerOf(runDir, key); ok {
		t.Fatalf("dead pid %d taken for an owner: %+v", o.PID, o)
	}
	// Our own pid with another start time: a reused pid.
	if err := writeOwner(rp, Owner{PID: os.Getpid(), Start: procStart(os.Getpid()) + 1, Interface: "fake0"}); err != nil {
		t.Fatal(err)
	}
	if _, ok := OwnerOf(runDir, key); ok {
		t.Fatal("a reused pid taken for the owner")
	}
	d, err := New(testConfig(t), "", quietLog())
	if err != nil {
		t.Fatalf("over a stale record: %v", err)
	}
	if o, ok := OwnerOf(runDir, key); !ok || o.PID != os.Getpid() {
		t.Fatalf("record not replaced: %+v", o)
	}
	if err := d.shutdown(); err != nil {
		t.Fatal(err)
	}
}
