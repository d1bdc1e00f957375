// SPDX-License-Identifier: Apache-2.0

package datapath

import (
	"errors"
	"os/exec"
	"testing"

	"github.com/tierwall/tierwall/internal/netnsx"
	"github.com/tierwall/tierwall/internal/testutil"
)

// A handle whose state was detached, re-attached or whose interface was
// re-created reports ErrOrphaned: a daemon must not keep writing to maps
// no filter reads.
func TestCheckFindsOrphanedHandles(t *testing.T) {
	testutil.RequireRoot(t)
	const ns = "twt-check"
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v %s", args, err, out)
		}
	}
	_ = exec.Command("ip", "netns", "del", ns).Run() // leftover of a crashed run
	run("ip", "netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	mkVeth := func() {
		run("ip", "-n", ns, "link", "add", "twc0", "type", "veth", "peer", "name", "twc1")
		run("ip", "-n", ns, "link", "set", "twc0", "up")
		run("ip", "-n", ns, "link", "set", "twc1", "up")
	}
	mkVeth()
	opts := Options{ExactCapacity4: 64, ExactCapacity6: 64, PrefixCapacity: 64, AllowCapacity: 64, FeatureCapacity: 64}
	err := netnsx.Do(ns, -1, func() error {
		d, err := Attach("twc0", opts)
		if err != nil {
			return err
		}
		defer d.Close()
		if err := d.Check(); err != nil {
			t.Errorf("fresh handle: %v", err)
		}
		// Detach and attach again: the old handle's maps are not the filter's.
		if err := Detach("twc0", ""); err != nil {
			return err
		}
		if err := d.Check(); !errors.Is(err, ErrOrphaned) {
			t.Errorf("after detach: %v", err)
		}
		d2, err := Attach("twc0", opts)
		if err != nil {
			return err
		}
		defer d2.Close()
		if err := d.Check(); !errors.Is(err, ErrOrphaned) {
			t.Errorf("after re-attach, old handle: %v", err)
		}
		if err := d2.Check(); err != nil {
			t.Errorf("after re-attach, new handle: %v", err)
		}
		// The interface goes away and comes back with another index.
		run("ip", "-n", ns, "link", "del", "twc0")
		mkVeth()
		if err := d2.Check(); !errors.Is(err, ErrOrphaned) {
			t.Errorf("after the interface was re-created: %v", err)
		}
		return Detach("twc0", "")
	})
	if err != nil {
		t.Fatal(err)
	}
}
