// SPDX-License-Identifier: Apache-2.0

package config

import (
	"fmt"
	"time"
)

// HeavyDetector is the heavy-hitter detector in XDP (bpf/lib/heavy.h): a
// source that no rule decided and that sends more than PPS packets (or
// SYNPPS SYNs) per second, measured over Window, is dropped from its next
// packet, provisionally, until the daemon confirms it as a ban or revokes
// it at its next interval. It reacts in milliseconds where the other
// detectors take an interval; its thresholds are static and high on
// purpose: only a source far above anything a client sends.
type HeavyDetector struct {
	Enabled bool          `yaml:"enabled"`
	Window  time.Duration `yaml:"window"`  // 1ms..1s (default 10ms); counted over its power of two in kernel ticks, at least one (8ms at HZ=250)
	TTL     time.Duration `yaml:"ttl"`     // a provisional drop's life if the daemon says nothing (default 10s)
	PPS     uint64        `yaml:"pps"`     // packets per second per source (0: no packet threshold)
	SYNPPS  uint64        `yaml:"syn_pps"` // SYNs per second per source (0: none)
	// Prefix6: IPv6 sources are counted per prefix of this length (an
	// attacker holds a whole /64).
	Prefix6 int `yaml:"prefix6"`
	// Exempt is how long a revoked source (a burst, or a rail refused its
	// ban) is left alone by the detector (default 10 minutes); one that
	// kept sending after its catch gets two intervals the first time
	// (internal/control/daemon/heavy.go, revokeHeavy).
	Exempt time.Duration `yaml:"exempt"`
	// LearnedFactor > 0: once the rate detector has learned its
	// per-source threshold, the packet threshold is that times this
	// (PPS applies until then); 0: PPS always.
	LearnedFactor float64 `yaml:"learned_factor"`
}

func defaultHeavy() HeavyDetector {
	return HeavyDetector{Enabled: true, Window: 10 * time.Millisecond, TTL: 10 * time.Second,
		PPS: 100000, SYNPPS: 20000, Prefix6: 64, Exempt: 10 * time.Minute}
}

func (h *HeavyDetector) validate() error {
	if !h.Enabled {
		return nil
	}
	switch {
	case h.Window < time.Millisecond || h.Window > time.Second:
		return bad("detectors.heavy.window", h.Window, "outside 1ms..1s")
	case h.TTL < h.Window || h.TTL > 10*time.Minute:
		return bad("detectors.heavy.ttl", h.TTL, "outside the window..10m")
	case h.Prefix6 < 32 || h.Prefix6 > 128:
		return bad("detectors.heavy.prefix6", h.Prefix6, "outside 32..128")
	case h.PPS == 0 && h.SYNPPS == 0:
		return bad("detectors.heavy", "pps: 0, syn_pps: 0", "set a threshold or disable the detector")
	case h.Exempt < 0 || h.Exempt > 24*time.Hour:
		return bad("detectors.heavy.exempt", h.Exempt, "outside 0..24h")
	case h.LearnedFactor != 0 && (h.LearnedFactor < 1 || h.LearnedFactor > 1000):
		// Under 1 the detector would catch what the rate detector
		// calls normal.
		return bad("detectors.heavy.learned_factor", h.LearnedFactor, "outside 1..1000 (0: the static pps)")
	}
	for f, r := range map[string]uint64{"detectors.heavy.pps": h.PPS, "detectors.heavy.syn_pps": h.SYNPPS} {
		if r != 0 && r*uint64(h.Window)/uint64(time.Second) < 2 {
			return bad(f, r, fmt.Sprintf("is under two packets per %v window: raise it or the window", h.Window))
		}
	}
	return nil
}
