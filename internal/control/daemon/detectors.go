// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/tierwall/tierwall/internal/control/config"
	"github.com/tierwall/tierwall/internal/control/detect"
)

// detectorSet is the per-source detectors the configuration enables
// (nil: disabled) and their learned baselines. The victim detector is the
// flow stage's: it drives the ladder, not bans alone.
type detectorSet struct {
	rate    *detect.Rate
	entropy *detect.Entropy
	lists   *detect.List
}

// newDetectorSet builds the detectors of c, with nothing learned.
func newDetectorSet(cfg *config.Config) detectorSet {
	c := cfg.Detectors
	var s detectorSet
	if c.Rate.Enabled {
		s.rate = &detect.Rate{Static: detect.Thresholds{PPS: c.Rate.PPS, BPS: c.Rate.BPS, SYNPPS: c.Rate.SYNPPS, PerProto: c.Rate.PerProto},
			LearnIntervals: c.Rate.LearnIntervals, Margin: c.Rate.Margin, MinPPS: c.Rate.MinPPS,
			Ceiling: c.Rate.CeilingPPS, Quantile: c.Rate.Quantile}
	}
	if c.Entropy.Enabled {
		s.entropy = &detect.Entropy{History: c.Entropy.History, K: c.Entropy.K, MinPPS: c.Entropy.MinPPS,
			Prefix4: c.Entropy.Prefix4, Prefix6: c.Entropy.Prefix6, SourceMinPPS: cfg.EntropySourceFloor()}
	}
	if c.Lists.Enabled {
		s.lists = &detect.List{Paths: c.Lists.Paths}
	}
	return s
}

// all is the enabled detectors, in a fixed order.
func (s *detectorSet) all() []detect.Detector {
	var out []detect.Detector
	if s.rate != nil {
		out = append(out, s.rate)
	}
	if s.entropy != nil {
		out = append(out, s.entropy)
	}
	if s.lists != nil {
		out = append(out, s.lists)
	}
	return out
}

// learnedPPS is the rate detector's learned per-source threshold.
func (s *detectorSet) learnedPPS() (float64, bool) {
	if s.rate == nil {
		return 0, false
	}
	return s.rate.Learned()
}

// baselineRate is the state file's key for the rate detector's learned
// threshold; baselineEntropy prefixes the entropy detector's numbers.
const (
	baselineRate    = "rate_pps"
	baselineEntropy = "entropy_"
)

// restore gives the detectors what they learned before this start or
// reload (the state file's baselines), so an attack running now cannot
// teach them.
func (s *detectorSet) restore(baselines map[string]float64) {
	if v, ok := baselines[baselineRate]; ok && s.rate != nil {
		s.rate.Restore(v)
	}
	if s.entropy != nil {
		st := map[string]float64{}
		for k, v := range baselines {
			if name, ok := strings.CutPrefix(k, baselineEntropy); ok {
				st[name] = v
			}
		}
		s.entropy.Restore(st)
	}
}

// keep records newly learned values in baselines and says whether the
// state file must be saved now. The entropy detector's change every
// interval it learns: they reach the disk with the next periodic save
// (refreshEvery), the one it becomes ready in at once.
func (s *detectorSet) keep(baselines map[string]float64) (dirty bool) {
	if s.rate != nil {
		if l, ok := s.rate.Learned(); ok && baselines[baselineRate] != l {
			baselines[baselineRate] = l
			dirty = true
		}
	}
	if s.entropy != nil {
		_, _, _, ready := s.entropy.Baseline()
		n, had := baselines[baselineEntropy+"n"]
		wasReady := had && n >= float64(s.entropy.History)
		for k, v := range s.entropy.State() {
			baselines[baselineEntropy+k] = v
		}
		if ready && !wasReady {
			dirty = true
		}
	}
	return dirty
}

// delisted is the list bans whose prefix no detection of the threat
// lists names any more.
func delisted(listBans []netip.Prefix, ds []detect.Detection) []netip.Prefix {
	listed := map[netip.Prefix]bool{}
	for _, x := range ds {
		if x.Detector == "list" {
			listed[x.Prefix] = true
		}
	}
	var out []netip.Prefix
	for _, p := range listBans {
		if !listed[p] {
			out = append(out, p)
		}
	}
	return out
}

// spareKnownGood takes out every automatic detection of a known-good
// client, or of a prefix holding one. Known-good is the kernel's word
// that the source completed a handshake with this host, and its address
// is what a spoofer aiming a ban at it sends from: spoofed at 10× its
// rate, a verified client was banned (issue 32). The per-source
// detectors' thresholds are learned from those same clients, too: in the
// lab's spoofed-flood run the rate detector banned 64 of 64 HTTP clients
// whose rate rose from ~100 to ~120 pps once the flood was dropped. A
// member that really floods passes (the data plane's flow rules match no
// source, so its flood's signature cannot be dropped alone); every spared
// detection is counted (tierwall_bans_refused_total{rail="known_good"})
// and logged by the caller. Threat lists are the operator's word and are
// not filtered.
func spareKnownGood(good *detect.KnownGood, ds []detect.Detection) (out []detect.Detection, spared int, example string) {
	if good.Len() == 0 {
		return ds, 0, ""
	}
	out = ds[:0]
	for _, x := range ds {
		if x.Detector != "list" {
			hit := false
			if x.Prefix.IsSingleIP() {
				hit = good.Contains(x.Prefix.Addr())
			} else {
				free, _ := good.PrefixFree(x.Prefix)
				hit = !free
			}
			if hit {
				if spared == 0 {
					example = fmt.Sprintf("%s (%s: %s)", x.Prefix, x.Detector, x.Reason)
				}
				spared++
				continue
			}
		}
		out = append(out, x)
	}
	return out, spared, example
}
