// SPDX-License-Identifier: Apache-2.0

package bpffs

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The same pinned directory reached through /sys/fs/bpf (the daemon) and
// through /run/tierwall/bpffs (a CLI under `ip netns exec`) takes one lock;
// different directories take different ones.
func TestLockNameIgnoresTheMount(t *testing.T) {
	a := lockName(DefaultBPFFS + "/tierwall/ns:lab/eth0")
	b := lockName(runBPFFS + "/tierwall/ns:lab/eth0")
	if a != b {
		t.Fatalf("one directory, two locks: %q vs %q", a, b)
	}
	if c := lockName(DefaultBPFFS + "/tierwall/ns:lab/eth1"); c == a {
		t.Fatalf("two directories share lock %q", c)
	}
	if c := lockName(DefaultBPFFS + "/tierwall-nic/ns:lab/eth0"); c == a {
		t.Fatalf("the NIC stage and the filter share lock %q", c)
	}
}

// A lock file removed by its holder (detach, a daemon's clean exit) while
// another process waits on it: the waiter must end up holding the file the
// path names, not the unlinked one, or two processes would both "hold" the
// lock.
func TestRemovedLockIsTakenAgain(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	a, err := lockFile(path, unix.LOCK_EX)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *FileLock)
	go func() {
		b, err := lockFile(path, unix.LOCK_EX)
		if err != nil {
			t.Error(err)
		}
		got <- b
	}()
	time.Sleep(50 * time.Millisecond) // b opened the file and waits on it
	a.Remove()
	b := <-got
	defer b.Unlock()
	held, _ := b.f.Stat()
	named, err := os.Stat(path)
	if err != nil || !os.SameFile(held, named) {
		t.Fatalf("the waiter holds an unlinked file (%v)", err)
	}
	if _, err := TryLockFile(path); !errors.Is(err, ErrBusy) {
		t.Fatalf("a third process took the lock the waiter holds: %v", err)
	}
}

func TestRemoveNetnsTakesOnlyThatNamespace(t *testing.T) {
	root := t.TempDir()
	dirs := map[string]bool{ // path → survives RemoveNetns(root, "a.b")
		"tierwall/ns:a:b/eth0":     false,
		"tierwall-nic/ns:a:b/eth0": false,
		"tierwall/ns:a:bc/eth0":    true, // a name that extends it
		"tierwall/ns:a/eth0":       true,
		"tierwall/eth0":            true, // the host's namespace
	}
	for d := range dirs {
		if err := os.MkdirAll(filepath.Join(root, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := RemoveNetns(root, "a.b"); err != nil {
		t.Fatal(err)
	}
	for d, keep := range dirs {
		if Exists(filepath.Join(root, d)) != keep {
			t.Errorf("%s: exists %v, want %v", d, !keep, keep)
		}
	}
	if err := RemoveNetns(root, "gone"); err != nil { // nothing there: not an error
		t.Error(err)
	}
	// Names that are not one path element are refused, and remove nothing.
	for _, bad := range []string{"", "a:b/../..", "/", "x/y"} {
		if err := RemoveNetns(root, bad); err == nil {
			t.Errorf("RemoveNetns(%q) accepted", bad)
		}
	}
	if !Exists(filepath.Join(root, "tierwall/eth0")) {
		t.Error("a refused name removed the host's pins")
	}
}
