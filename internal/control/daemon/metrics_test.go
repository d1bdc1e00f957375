// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/tierwall/tierwall/internal/control/apiv1"
)

// series is one scraped sample: its labels and value.
type series struct {
	labels map[string]string
	value  float64
}

// scrape gathers the daemon's registry: family name → series.
func scrape(t *testing.T, d *Daemon) map[string][]series {
	t.Helper()
	mfs, err := d.Metrics.Registry.Gather()
	if err != nil {
		t.Fatalf("gathering: %v", err)
	}
	out := map[string][]series{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			s := series{labels: map[string]string{}}
			for _, l := range m.GetLabel() {
				s.labels[l.GetName()] = l.GetValue()
			}
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				s.value = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				s.value = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				s.value = float64(m.GetHistogram().GetSampleCount())
			case dto.MetricType_SUMMARY:
				s.value = float64(m.GetSummary().GetSampleCount())
			default:
				s.value = m.GetUntyped().GetValue()
			}
			out[mf.GetName()] = append(out[mf.GetName()], s)
		}
	}
	return out
}

// value is the value of the series of name with exactly these labels
// (given as name, value pairs); ok false when there is none.
func value(ms map[string][]series, name string, kv ...string) (float64, bool) {
	for _, s := range ms[name] {
		if len(s.labels) != len(kv)/2 {
			continue
		}
		match := true
		for i := 0; i < len(kv); i += 2 {
			if s.labels[kv[i]] != kv[i+1] {
				match = false
			}
		}
		if match {
			return s.value, true
		}
	}
	return 0, false
}

// Bans and unbans through the API count like the detectors' own.
func TestMetricsCountOperatorBans(t *testing.T) {
	h := newHarness(t, testConfig(t), false)
	serve(h.d)
	ctx := context.Background()
	p := netip.MustParsePrefix("198.51.100.0/24")
	if _, err := h.d.AddRule(ctx, p, "test", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := h.d.AddRules(ctx, []netip.Prefix{netip.MustParsePrefix("203.0.113.9/32"), netip.MustParsePrefix("203.0.113.10/32")}, "feed", 0); err != nil {
		t.Fatal(err)
	}
	if err := h.d.DeleteRule(ctx, p); err != nil {
		t.Fatal(err)
	}
	ms := scrape(t, h.d)
	if v, _ := value(ms, "tierwall_bans_total"); v != 3 {
		t.Errorf("tierwall_bans_total %v after three operator bans, want 3", v)
	}
	if v, _ := value(ms, "tierwall_unbans_total"); v != 1 {
		t.Errorf("tierwall_unbans_total %v after one operator unban, want 1", v)
	}
}

// A refusal says which rail refused it, and every rail is a series from
// the start.
func TestMetricsRefusalsByRail(t *testing.T) {
	cfg := testConfig(t)
	cfg.Rails.MonitorOnly = true
	h := newHarness(t, cfg, false)
	if _, ok := value(scrape(t, h.d), "tierwall_bans_refused_total", "rail", "circuit_breaker"); !ok {
		t.Error("no circuit_breaker series before any refusal")
	}
	h.dp.send(5000, netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("198.51.100.8"))
	h.step(t)
	ms := scrape(t, h.d)
	if v, _ := value(ms, "tierwall_bans_refused_total", "rail", "monitor_only"); v != 2 {
		t.Errorf("refused{rail=monitor_only} %v, want 2: %v", v, ms["tierwall_bans_refused_total"])
	}
	for _, why := range []string{"allowlisted (10.0.0.0/8)", "inside protected 192.0.2.0/24", "monitor-only",
		"circuit breaker: new bans would cover 40% of the established sources (limit 20%)",
		"more than 5 new bans this interval", "ban limit 10 reached"} {
		if r := railOf(why); r == "other" {
			t.Errorf("rail of %q not recognised", why)
		}
	}
}

// The hardware tier is "nic" in every metric, with entries beside its
// capacity and packet counters from a backend with per-rule counters only.
func TestMetricsHardwareTier(t *testing.T) {
	h := newHarness(t, testConfig(t), true)
	atk := netip.MustParseAddr("198.51.100.7")
	h.dp.send(5000, atk)
	h.step(t)
	for i := 0; i < 2; i++ {
		h.dp.hit(pfx(atk), 5000)
		h.step(t)
	}
	if !h.hw.Has(atk) {
		t.Fatal("attacker not placed in hardware")
	}
	h.hw.Hit(atk, 4000)
	h.step(t)
	h.hw.Hit(atk, 1000)
	h.step(t)
	ms := scrape(t, h.d)
	for name, ss := range ms {
		for _, s := range ss {
			if s.labels["tier"] == "hw" || s.labels["table"] == "hw" {
				t.Errorf("%s %v: the hardware tier is \"nic\" in metrics", name, s.labels)
			}
		}
	}
	if v, _ := value(ms, "tierwall_active_bans", "tier", "nic"); v != 1 {
		t.Errorf("active_bans{tier=nic} %v, want 1", v)
	}
	if v, ok := value(ms, "tierwall_map_entries", "table", "nic"); !ok || v != 1 {
		t.Errorf("map_entries{table=nic} %v (present %v), want 1", v, ok)
	}
	if v, _ := value(ms, "tierwall_map_capacity", "table", "nic"); v != 2 {
		t.Errorf("map_capacity{table=nic} %v, want 2", v)
	}
	if v, _ := value(ms, "tierwall_packets_total", "tier", "nic", "verdict", "hit_drop"); v != 5000 {
		t.Errorf("packets_total{tier=nic,verdict=hit_drop} %v, want 5000", v)
	}
	// Lifted: the rule leaves the table, its packets stay counted.
	if err := func() error { serve(h.d); return h.d.DeleteRule(context.Background(), pfx(atk)) }(); err != nil {
		t.Fatal(err)
	}
	h.step(t)
	ms = scrape(t, h.d)
	if v, _ := value(ms, "tierwall_packets_total", "tier", "nic", "verdict", "hit_drop"); v != 5000 {
		t.Errorf("packets_total{tier=nic,verdict=hit_drop} %v after the rule left, want 5000 (a counter never goes back)", v)
	}
	if v, _ := value(ms, "tierwall_map_entries", "table", "nic"); v != 0 {
		t.Errorf("map_entries{table=nic} %v after the rule left, want 0", v)
	}
}

// Alerting needs the time of the last good interval and how long one
// takes; inventories need the build.
func TestMetricsLoopAndBuild(t *testing.T) {
	h := newHarness(t, testConfig(t), false)
	h.step(t)
	h.step(t)
	ms := scrape(t, h.d)
	if v, _ := value(ms, "tierwall_last_interval_timestamp_seconds"); v != float64(h.now.Unix()) {
		t.Errorf("last interval %v, want %v", v, h.now.Unix())
	}
	if v, _ := value(ms, "tierwall_interval_duration_seconds"); v != 2 {
		t.Errorf("interval duration observations %v, want 2", v)
	}
	h.dp.CheckErr = errFake
	h.now = h.now.Add(1e9)
	_ = h.d.Step(h.now)
	ms = scrape(t, h.d)
	if v, _ := value(ms, "tierwall_last_interval_timestamp_seconds"); v == float64(h.now.Unix()) {
		t.Error("a failed interval moved the last-interval timestamp")
	}
	bi := ms["tierwall_build_info"]
	if len(bi) != 1 || bi[0].value != 1 || bi[0].labels["goversion"] != runtime.Version() || bi[0].labels["commit"] == "" ||
		bi[0].labels["version"] == "" {
		t.Errorf("build info %v", bi)
	}
}

var errFake = errors.New("injected failure")

// EventKinds, which the API checks ?kind= against, names every kind the
// daemon records: a kind missing from it could never be asked for.
func TestEventKindsComplete(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`\bd\.event\([^,]+,\s*"([a-z_]+)"`)
	seen := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllStringSubmatch(string(src), -1) {
			seen++
			if !slices.Contains(apiv1.EventKinds, m[1]) {
				t.Errorf("%s records events of kind %q, not in EventKinds", f, m[1])
			}
		}
	}
	if seen < 10 {
		t.Errorf("found only %d d.event calls: the pattern no longer matches the code", seen)
	}
}
