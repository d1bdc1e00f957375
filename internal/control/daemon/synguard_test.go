// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"slices"
	"testing"

	"github.com/tierwall/tierwall/internal/control/config"
)

// The SYN guard is on from the daemon's start, before its first interval
// (a flood may be running already), at detectors.victim.syn_guard_pps; a
// reload to another rate or to monitor-only reaches the data plane at
// the next interval, and the daemon sets nothing while nothing changed.
func TestDaemonSynGuard(t *testing.T) {
	h, fdp := newFlowHarness(t, false)
	if want := []uint32{config.DefaultSYNGuardPPS}; !slices.Equal(fdp.guard, want) {
		t.Fatalf("guard at start %v, want %v", fdp.guard, want)
	}
	for i := 0; i < 3; i++ {
		h.step(t)
	}
	if len(fdp.guard) != 1 {
		t.Fatalf("guard set again with nothing changed: %v", fdp.guard)
	}
	reload := func(edit func(*config.Config)) {
		t.Helper()
		h.reloadWith(t, edit)
		h.step(t)
	}
	reload(func(c *config.Config) { c.Detectors.Victim.SYNGuardPPS = 20000 })
	reload(func(c *config.Config) { c.Rails.MonitorOnly = true })
	reload(func(c *config.Config) { c.Rails.MonitorOnly, c.Detectors.Victim.SYNGuardPPS = false, 0 })
	if want := []uint32{config.DefaultSYNGuardPPS, 20000, 0}; !slices.Equal(fdp.guard, want) {
		t.Fatalf("guard over the reloads %v, want %v (monitor-only and 0 both off, set once)", fdp.guard, want)
	}

	// A monitor-only daemon drops nothing of its own: its guard is off
	// from the start.
	h2, fdp2 := newFlowHarness(t, true)
	h2.step(t)
	if want := []uint32{0}; !slices.Equal(fdp2.guard, want) {
		t.Fatalf("monitor-only daemon's guard %v, want %v", fdp2.guard, want)
	}
}
