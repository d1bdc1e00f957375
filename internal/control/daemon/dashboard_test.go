// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/tierwall/tierwall/internal/datapath"
	"github.com/tierwall/tierwall/internal/tier"
	"github.com/tierwall/tierwall/internal/tier/nicstage"
	"github.com/tierwall/tierwall/internal/tier/tiertest"
)

// statsDP is the fake data plane with the real one's verdict reasons and
// tables, so the scrape holds every series production exports.
type statsDP struct{ *fakeDP }

func (s statsDP) Stats() (*datapath.Stats, error) {
	st := &datapath.Stats{Verdicts: map[string]datapath.Counter{}, Tables: map[string]datapath.Occupancy{}}
	for _, r := range datapath.Reasons() {
		st.Verdicts[r] = datapath.Counter{Packets: 1, Bytes: 64}
	}
	for _, t := range []string{"exact4", "exact6", "prefix", "allow", "feature", "flow"} {
		st.Tables[t] = datapath.Occupancy{Entries: 1, Capacity: 10}
	}
	return st, nil
}

// verdictTable is the in-memory hardware table with the emulated NIC
// stage's verdict counters.
type verdictTable struct{ *tiertest.Table }

func (verdictTable) Verdicts() (map[string]tier.Counters, error) {
	out := map[string]tier.Counters{}
	for _, v := range nicstage.Verdicts {
		out[v] = tier.Counters{Packets: 1, Bytes: 60}
	}
	return out, nil
}

// dashboard is the part of a Grafana dashboard this test reads.
type dashboard struct {
	Panels []struct {
		Title       string `json:"title"`
		FieldConfig struct {
			Defaults struct {
				Unit string `json:"unit"`
			} `json:"defaults"`
		} `json:"fieldConfig"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

// A PromQL selector and what it matches, extracted with regular
// expressions rather than github.com/prometheus/prometheus/promql/parser:
// that module drags in most of Prometheus (storage, TSDB, discovery) for
// one test, and the dashboard's expressions are simple: metric names all
// start with tierwall_, matchers are label op "value", and grouping is
// by/on/without/ignoring (labels).
var (
	reSelector = regexp.MustCompile(`\b(tierwall_[a-zA-Z0-9_:]*)\s*(\{([^}]*)\})?`)
	reMatcher  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"`)
	reGrouping = regexp.MustCompile(`\b(by|without|on|ignoring)\s*\(([^)]*)\)`)
)

// family is the scraped family a selector's name reads: a histogram's
// _bucket, _sum and _count series belong to the histogram.
func family(ms map[string][]series, name string) (string, bool) {
	if _, ok := ms[name]; ok {
		return name, true
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if base, cut := strings.CutSuffix(name, suf); cut {
			if _, ok := ms[base]; ok {
				return base, true
			}
		}
	}
	return "", false
}

// alternatives splits a regular expression at its top-level '|': each
// alternative must match on its own, so a stale name inside an
// alternation ("pass|allow") cannot hide behind the others.
func alternatives(re string) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(re); i++ {
		switch re[i] {
		case '\\':
			i++
		case '(', '[':
			depth++
		case ')', ']':
			depth--
		case '|':
			if depth == 0 {
				out = append(out, re[start:i])
				start = i + 1
			}
		}
	}
	return append(out, re[start:])
}

// checkExpr reports every metric, label or label value expr names that
// the scrape does not hold.
func checkExpr(ms map[string][]series, expr string) []string {
	var bad []string
	sels := reSelector.FindAllStringSubmatch(expr, -1)
	if len(sels) == 0 {
		return []string{"names no tierwall_ metric"}
	}
	labels := map[string]bool{}
	for _, sel := range sels {
		fam, ok := family(ms, sel[1])
		if !ok {
			bad = append(bad, "no metric "+sel[1])
			continue
		}
		have := map[string]map[string]bool{}
		for _, s := range ms[fam] {
			for k, v := range s.labels {
				if have[k] == nil {
					have[k] = map[string]bool{}
				}
				have[k][v] = true
				labels[k] = true
			}
		}
		if strings.HasSuffix(sel[1], "_bucket") {
			labels["le"] = true
		}
		for _, m := range reMatcher.FindAllStringSubmatch(sel[3], -1) {
			lbl, op, val := m[1], m[2], m[3]
			if have[lbl] == nil {
				bad = append(bad, sel[1]+" has no label "+lbl)
				continue
			}
			switch op {
			case "=":
				if !have[lbl][val] {
					bad = append(bad, sel[1]+" has no series with "+lbl+"="+val)
				}
			case "=~":
				for _, alt := range alternatives(val) {
					re, err := regexp.Compile("^(?:" + alt + ")$")
					if err != nil {
						bad = append(bad, sel[1]+": "+err.Error())
						continue
					}
					hit := false
					for v := range have[lbl] {
						hit = hit || re.MatchString(v)
					}
					if !hit {
						bad = append(bad, sel[1]+": no "+lbl+" matches "+alt)
					}
				}
			}
		}
	}
	for _, g := range reGrouping.FindAllStringSubmatch(expr, -1) {
		for _, l := range strings.Split(g[2], ",") {
			if l = strings.TrimSpace(l); l != "" && !labels[l] {
				bad = append(bad, g[1]+" ("+l+"): no such label on the metrics")
			}
		}
	}
	return bad
}

// Every expression of deploy/grafana-dashboard.json selects series the
// daemon exports: the scrape of a daemon over the fake data plane, after
// detections, bans, refusals, placement and hardware drops.
func TestDashboardMatchesMetrics(t *testing.T) {
	raw, err := os.ReadFile("../../../deploy/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var db dashboard
	if err := json.Unmarshal(raw, &db); err != nil {
		t.Fatalf("parsing the dashboard: %v", err)
	}

	cfg := testConfig(t)
	cfg.Rails.ProtectedPrefixes = []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}
	hw := verdictTable{tiertest.New(cfg.Hardware.Capacity)}
	fdp := newFakeDP(t0)
	d, err := newDaemon(cfg, "", quietLog(), statsDP{fdp}, hw, t0)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{d: d, dp: fdp, hw: hw.Table, now: t0}
	atk := netip.MustParseAddr("198.51.100.7")
	h.dp.send(5000, atk, netip.MustParseAddr("203.0.113.5")) // the second is protected: refused
	h.step(t)
	for i := 0; i < 3; i++ {
		h.dp.hit(pfx(atk), 5000)
		h.step(t)
	}
	if !h.hw.Has(atk) {
		t.Fatal("attacker not placed in hardware: the scrape would miss placement's series")
	}
	serve(d)
	if err := d.DeleteRule(context.Background(), pfx(atk)); err != nil {
		t.Fatal(err)
	}
	h.step(t)
	ms := scrape(t, d)

	var bps bool
	for _, p := range db.Panels {
		unit := p.FieldConfig.Defaults.Unit
		for _, tg := range p.Targets {
			for _, b := range checkExpr(ms, tg.Expr) {
				t.Errorf("panel %q: %s\n\texpr: %s", p.Title, b, tg.Expr)
			}
			// A seconds axis draws durations only: a rate there reads as
			// a latency.
			if unit == "s" && !strings.Contains(tg.Expr, "_seconds") {
				t.Errorf("panel %q is drawn in seconds but plots %s", p.Title, tg.Expr)
			}
			if unit == "bps" && strings.Contains(tg.Expr, "tierwall_bytes_total") && strings.Contains(tg.Expr, "* 8") {
				bps = true
			}
		}
	}
	if !bps {
		t.Error("no bits/s panel (unit bps over tierwall_bytes_total * 8)")
	}
}

// The checker itself: each kind of mistake it exists for is caught.
func TestDashboardCheckerCatches(t *testing.T) {
	ms := map[string][]series{
		"tierwall_packets_total": {{labels: map[string]string{"tier": "xdp", "verdict": "allowlisted"}}},
		"tierwall_x_seconds":     {{labels: map[string]string{}}},
	}
	for expr, want := range map[string]string{
		`rate(tierwall_nope_total[1m])`:                                "no metric",
		`tierwall_packets_total{tier="hw"}`:                            "no series with tier=hw",
		`tierwall_packets_total{verdict=~"pass|allow"}`:                "no verdict matches",
		`tierwall_packets_total{rail="x"}`:                             "no label rail",
		`sum by (rail) (tierwall_packets_total)`:                       "no such label",
		`histogram_quantile(0.9, rate(tierwall_x_seconds_bucket[5m]))`: "",
		`tierwall_packets_total{tier="xdp",verdict=~"allow.*"}`:        "",
		`time() - tierwall_x_seconds`:                                  "",
		`sum(rate(node_network_receive_bytes_total[1m]))`:              "names no tierwall_ metric",
	} {
		got := strings.Join(checkExpr(ms, expr), "; ")
		if want == "" && got != "" || want != "" && !strings.Contains(got, want) {
			t.Errorf("%s: %q, want %q", expr, got, want)
		}
	}
}
