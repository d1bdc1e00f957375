// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"gopkg.in/yaml.v3"

	"github.com/tierwall/tierwall/internal/control/config"
)

// What a reload did, for an operator who sent SIGHUP and wants to know
// whether the edit took: the fields that changed, by their names in the
// file, and those of them that wait for a restart; a counter by result
// for alerting on refused reloads.

// Results of a reload, the values of tierwall_config_reloads_total's
// result label.
const (
	reloadApplied = "applied"        // every change in effect
	reloadRestart = "restart_needed" // applied, but some changes wait for a restart
	reloadRefused = "refused"        // the file is invalid: the running configuration stays
)

var reloadResults = []string{reloadApplied, reloadRestart, reloadRefused}

func newReloadMetric(r *prometheus.Registry) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tierwall_config_reloads_total",
		Help: "Configuration reloads (SIGHUP), by result: applied, restart_needed (applied, some changes wait for a restart), refused (invalid file, the running one kept)."},
		[]string{"result"})
	for _, res := range reloadResults {
		c.WithLabelValues(res) // 0, not absent, until the first reload
	}
	r.MustRegister(c)
	return c
}

// configChanges is every field that differs between a and b, by its path
// in the file (detectors.rate.pps), sorted.
func configChanges(a, b *config.Config) []string {
	ma, mb := yamlTree(a), yamlTree(b)
	var out []string
	diffTree("", ma, mb, &out)
	slices.Sort(out)
	return out
}

// yamlTree is c as the file's field names see it.
func yamlTree(c *config.Config) map[string]any {
	y, err := yaml.Marshal(c)
	if err != nil {
		return nil
	}
	var m map[string]any
	_ = yaml.Unmarshal(y, &m)
	return m
}

func diffTree(path string, a, b any, out *[]string) {
	ma, aok := a.(map[string]any)
	mb, bok := b.(map[string]any)
	if !aok || !bok {
		if !reflect.DeepEqual(a, b) {
			*out = append(*out, path)
		}
		return
	}
	keys := map[string]bool{}
	for k := range ma {
		keys[k] = true
	}
	for k := range mb {
		keys[k] = true
	}
	for k := range keys {
		p := k
		if path != "" {
			p = path + "." + k
		}
		diffTree(p, ma[k], mb[k], out)
	}
}

// needsRestart reports whether a change to the field at path takes effect
// only when the daemon restarts: what is attached, listened on or opened
// at start (the speaker's sessions; its announce policy is read every
// interval; network mode's sockets and bounds, not its thresholds and
// policy: reloadTelemetry).
func needsRestart(path string) bool {
	under := func(p string) bool { return path == p || strings.HasPrefix(path, p+".") }
	switch {
	case under("interface"), under("hardware"), under("api"), under("state_file"):
		return true
	case under("bgp"):
		return !under("bgp.announce")
	case under("telemetry"):
		return !slices.ContainsFunc(telemetryReloaded, func(f string) bool { return under("telemetry." + f) })
	}
	return false
}

// telemetryReloaded are the fields of telemetry: a reload applies
// (reloadTelemetry); the others (enabled, listen, exporters, networks, max_*, tick,
// window) open the collector's sockets or size it, or give its decayed
// sums their meaning.
var telemetryReloaded = []string{"mode", "thresholds", "groups", "flowspec", "min_samples", "withdraw_after"}

// reloadSummary is the reload event's text: what changed, and what of it
// waits for a restart (the running values kept).
func reloadSummary(changed []string) (string, bool) {
	if len(changed) == 0 {
		return "configuration reloaded: nothing changed", false
	}
	var now, later []string
	for _, p := range changed {
		if needsRestart(p) {
			later = append(later, p)
		} else {
			now = append(now, p)
		}
	}
	s := "configuration reloaded"
	if len(now) > 0 {
		s += fmt.Sprintf(": in effect: %s", listSome(now, 20))
	}
	if len(later) > 0 {
		s += fmt.Sprintf("; need a restart (running values kept until then): %s", listSome(later, 20))
	}
	return s, len(later) > 0
}
