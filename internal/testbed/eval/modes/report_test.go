// SPDX-License-Identifier: Apache-2.0

package modes

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/testbed/trafgen"
)

// base is a small run in which every comparison the report makes has its
// rows: tierwall beats xdp-filter at every size, holds its rate at 128K,
// and the hybrid keeps its HTTP rate under attack.
func base() []Row {
	d := func(m string, n int, drop, sent float64) Row {
		return Row{Figure: "drop-rate", Mechanism: m, Dist: "uniform", Sources: n, SentMpps: sent, DropMpps: drop, CPUPct: 70}
	}
	h := func(m string, n int, sent, rps float64) Row {
		return Row{Figure: "http", Mechanism: m, Sources: n, SentMpps: sent, Extra: rps}
	}
	return []Row{
		d("tierwall-host", 1000, 6, 7), d("tierwall-host", 4000, 6, 7), d("tierwall-host", 16000, 6, 7), d("tierwall-host", 128000, 5.8, 7),
		d("xdp-filter", 1000, 5, 7), d("xdp-filter", 4000, 5, 7),
		d("nft-netdev", 1000, 1.5, 7), d("nft-netdev", 4000, 1.4, 7), d("nft-netdev", 16000, 1.2, 7), d("nft-netdev", 128000, 1, 7),
		d("iptables", 1000, 0.4, 7), d("iptables", 16000, 0.03, 7),
		d("lab-host", 1000, 1.5, 7),
		h("lab-hybrid", 1000, 0, 50000), h("lab-hybrid", 1000, 5, 45000),
	}
}

func set(rows []Row, fig, mech string, n int, f func(*Row)) []Row {
	out := append([]Row{}, rows...)
	for i := range out {
		if out[i].Figure == fig && out[i].Mechanism == mech && out[i].Sources == n {
			f(&out[i])
		}
	}
	return out
}

var sizes = []int{1000, 4000, 16000, 128000}

// The xdp-filter sentence follows the rows: the committed document once
// said "at least as much as xdp-filter wherever xdp-filter can hold the
// rules" under its own table's 0.90× at 4K.
func TestFindingsXDPFilterFollowsRows(t *testing.T) {
	got := findings(base(), sizes)
	if !strings.Contains(got, "tierwall drops at least as much at every size xdp-filter can hold (1K (1.20×), 4K (1.20×))") {
		t.Errorf("tierwall ahead everywhere, want 'at every size':\n%s", got)
	}
	slower := set(base(), "drop-rate", "xdp-filter", 4000, func(r *Row) { r.DropMpps = 6.6 })
	got = findings(slower, sizes)
	if strings.Contains(got, "at every size") || !strings.Contains(got, "at least as much at 1K (1.20×), and **less** at 4K (0.91×)") {
		t.Errorf("xdp-filter ahead at 4K, want the split stated:\n%s", got)
	}
	if got := targets(slower, sizes, []string{"uniform"}); !strings.Contains(got, "xdp-filter at 4000 | 0.91× | **missed**") {
		t.Errorf("target row not missed:\n%s", got)
	}
}

func TestFindingsLargeAttackVerdict(t *testing.T) {
	got := findings(base(), sizes)
	if !strings.Contains(got, "drops 0.97× its 1K rate (5.80 against 6.00 Mpps); the ≥ 0.9× target is met") || strings.Contains(got, "ARCHITECTURE.md") {
		t.Errorf("128K at 0.97×, want met and no explanation of a miss:\n%s", got)
	}
	fell := set(base(), "drop-rate", "tierwall-host", 128000, func(r *Row) { r.DropMpps, r.SentMpps = 3, 5 })
	got = findings(fell, sizes)
	if !strings.Contains(got, "drops 0.50× its 1K rate (3.00 against 6.00 Mpps); the ≥ 0.9× target is missed") ||
		!strings.Contains(got, "part of the fall is the sender's") {
		t.Errorf("128K at 0.50× with a slower sender, want missed:\n%s", got)
	}
	// Both cells' CPUs 70% busy: never idle, 128K would drop 3/0.7 =
	// 4.29 Mpps against the 1K cell's 7 (its sender's rate, below 6/0.7).
	if !strings.Contains(got, "would drop about 4.29 Mpps at 128K (drops ÷ busy share), 0.61× the 7.00 Mpps") || !strings.Contains(got, "would still miss the target") {
		t.Errorf("a receiver that never waits would still miss, want it said:\n%s", got)
	}
	if got := findings(base(), sizes); !strings.Contains(got, "8.29 Mpps at 128K") || !strings.Contains(got, "would meet the target") {
		t.Errorf("5.8/0.7 = 8.29 against 7, want 'would meet':\n%s", got)
	}
}

func TestFindingsNetfilterAndHTTPFollowRows(t *testing.T) {
	got := findings(base(), sizes)
	if !strings.Contains(got, "drops more than the best of nftables and ipset on the same core at each of 4 sizes: from 4.0× (1K sources) to 5.8× (128K)") {
		t.Errorf("netfilter sentence:\n%s", got)
	}
	if !strings.Contains(got, "every mode kept at least 80% of its no-attack request rate (lab-hybrid 1K 90%)") {
		t.Errorf("HTTP at 90%%, want kept:\n%s", got)
	}
	worse := set(base(), "drop-rate", "nft-netdev", 4000, func(r *Row) { r.DropMpps = 7 })
	worse = set(worse, "http", "lab-hybrid", 1000, func(r *Row) {
		if r.SentMpps > 0 {
			r.Extra = 10000
		}
	})
	got = findings(worse, sizes)
	if !strings.Contains(got, "does **not** always drop more than") || !strings.Contains(got, "no mode kept 80% of its no-attack request rate (lab-hybrid 1K 20%)") {
		t.Errorf("netfilter ahead at 4K and HTTP at 20%%:\n%s", got)
	}
}

// Without the rows a sentence needs, it is left out rather than stated.
func TestFindingsWithoutRows(t *testing.T) {
	if got := findings(nil, sizes); got != "Not measured in this run: the rows needed for a comparison are absent.\n" {
		t.Errorf("no rows: %q", got)
	}
	only := []Row{{Figure: "drop-rate", Mechanism: "tierwall-host", Dist: "uniform", Sources: 1000, DropMpps: 5}}
	got := findings(only, sizes)
	for _, no := range []string{"xdp-filter", "netfilter", "128K", "HTTP"} {
		if strings.Contains(got, no) {
			t.Errorf("no rows for %s, yet:\n%s", no, got)
		}
	}
	if got := hybridVsNIC(nil, sizes); got != "not measured in this run" {
		t.Errorf("hybrid vs NIC without rows: %q", got)
	}
}

// A run's results.csv and run.json are enough to write the document and
// the figures again, and the same rows give the same document.
func TestRerenderFromCSV(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "eval")
	rows := set(base(), "drop-rate", "xdp-filter", 4000, func(r *Row) { r.DropMpps = 6.6 })
	o := Options{Sizes: sizes, Dists: []trafgen.Dist{trafgen.Uniform}, Repeat: 3}
	if err := Report(out, filepath.Join(dir, "EVALUATION.md"), rows, o, time.Now()); err != nil {
		t.Fatal(err)
	}
	first, _ := os.ReadFile(filepath.Join(dir, "EVALUATION.md"))
	back, err := ReadCSV(filepath.Join(out, "results.csv"))
	if err != nil {
		t.Fatal(err)
	}
	var measured []Row
	for _, r := range back {
		if r.Figure != "model" {
			measured = append(measured, r)
		}
	}
	if !reflect.DeepEqual(measured, rows) {
		t.Errorf("rows do not survive the CSV:\n got %+v\nwant %+v", measured, rows)
	}
	md2 := filepath.Join(dir, "again.md")
	if err := Rerender(out, md2, filepath.Join(out, "results.csv")); err != nil {
		t.Fatal(err)
	}
	second, _ := os.ReadFile(md2)
	if string(first) != string(second) {
		t.Errorf("re-rendered document differs:\n%s\n---\n%s", first, second)
	}
	if !strings.Contains(string(second), "**less** at 4K (0.91×)") {
		t.Errorf("re-rendered document lost the computed verdict:\n%s", second)
	}
	for _, f := range []string{"fig2-uniform.png", "fig2-uniform.svg", "fig3-cpu.png", "fig4-1000.png", "model-uniform.png", "run.json"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Errorf("%s not written: %v", f, err)
		}
	}
	if err := Rerender(out, md2, filepath.Join(dir, "EVALUATION.md")); err == nil {
		t.Error("a Markdown file read as results.csv")
	}
}
