// SPDX-License-Identifier: Apache-2.0

package datapath

import (
	"fmt"
	"time"
)

// The SYN guard (bpf/lib/synguard.h): SYNs that no list or rule decided,
// from sources that are not known good, reach the host's stack at most at
// a rate per CPU, counted per jiffy; the rest are dropped in XDP (verdict
// drop_syn_guard) after the feature buffers counted them. It holds the
// interval before the victim detector's rule for a SYN flood, in which
// the kernel alone would answer every spoofed SYN and its receive ring
// overflow with the clients' packets in it. The daemon sets the rate
// (detectors.victim.syn_guard_pps); new state has the guard off.

// MaxSynGuardPPS bounds the rate: above it the guard would never hold.
const MaxSynGuardPPS = 100_000_000

// SetSynGuard sets the guard's rate in SYNs per second per CPU; 0 turns it
// off. The data plane counts per jiffy: the rate is rounded to whole SYNs
// a jiffy, at least one.
func (d *Datapath) SetSynGuard(pps uint32) error {
	if pps > MaxSynGuardPPS {
		return fmt.Errorf("%w: SYN guard %d SYN/s per CPU: above %d", ErrInvalid, pps, MaxSynGuardPPS)
	}
	var budget uint32
	if pps > 0 {
		t, err := kernelTick()
		if err != nil {
			return err
		}
		budget = max(1, uint32((uint64(pps)*uint64(t)+uint64(time.Second)/2)/uint64(time.Second)))
	}
	lk, err := d.lock()
	if err != nil {
		return err
	}
	defer lk.Unlock()
	return d.updateConfig(func(c *filterTwConfig) { c.SynGuard = budget })
}

// SynGuard is the guard's rate in SYNs per second per CPU as the data
// plane holds it (its budget a jiffy times the jiffies a second); 0 when
// off.
func (d *Datapath) SynGuard() (uint32, error) {
	cfg, err := d.config()
	if err != nil {
		return 0, err
	}
	if cfg.SynGuard == 0 {
		return 0, nil
	}
	t, err := kernelTick()
	if err != nil {
		return 0, err
	}
	return cfg.SynGuard * uint32(time.Second/t), nil
}
