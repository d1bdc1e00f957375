// SPDX-License-Identifier: Apache-2.0

package network

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/testbed/fastnetmon"
)

// A run in which tierwall meets every target, FastNetMon beside it.
func networkRun() Result {
	res := Result{Threshold: 50000, Flood: 2 * time.Second, Gap: time.Second, Repeat: 2, BenignPPS: 300000, BenignDests: 200, BenignSecs: 170,
		FastNetMonVer: "1.2.4", Datagrams: 1000}
	for r := range 2 {
		for _, c := range Cells() {
			c.Rep = r
			c.Victim = "198.18.0.10/32"
			if c.Kind == "carpet" {
				c.Victim = "198.18.2.0/24"
			}
			c.FirstDatagram, c.Tierwall, c.FastNetMon = 0.01, 0.2+0.1*float64(r), 1.0
			if c.Kind == "carpet" {
				c.FastNetMon = -1
			}
			res.Cells = append(res.Cells, c)
		}
	}
	res.Ingest = []Ingest{
		{Tool: "tierwall", Steps: []IngestStep{{Offered: 1e5, Sent: 200000, Secs: 2}, {Offered: 2e5, Sent: 400000, Secs: 2, Dropped: 1000, CPU: 1.5}}},
		{Tool: "FastNetMon", Steps: []IngestStep{{Offered: 4e4, Sent: 80000, Secs: 2}, {Offered: 1e5, Sent: 200000, Secs: 2, Dropped: 100000, CPU: 2}}},
		{Tool: FNMEqualBuffer, Steps: []IngestStep{{Offered: 1e5, Sent: 200000, Secs: 2}, {Offered: 2e5, Sent: 400000, Secs: 2, Dropped: 40000, CPU: 2}}},
	}
	res.Memory = []Memory{
		{Tool: "tierwall", Before: 30720, LiveHeap: 4096, HWM: 61440, Steps: []MemoryStep{{100, 33792, 10000, 0, 6144}, {2000, 46080, 51200, 1500, 12288}, {5000, 53248, 51200, 4500, 12800}}},
		{Tool: "FastNetMon", Before: 51200, HWM: 102400, Steps: []MemoryStep{{PerExporter: 100, RSS: 52224}, {PerExporter: 2000, RSS: 81920}, {PerExporter: 5000, RSS: 102400}}},
	}
	return res
}

func netTargets(res Result) map[string]Target {
	out := map[string]Target{}
	for _, t := range Targets(res) {
		out[t.Target] = t
	}
	return out
}

func TestNetworkTargetsFollowTheRun(t *testing.T) {
	res := networkRun()
	for name, tg := range netTargets(res) {
		if !tg.Met {
			t.Errorf("all met, yet %q: %s", name, tg.Measured)
		}
	}
	if got := res.Ingest[0].NoLoss(); got != 100000 {
		t.Errorf("tierwall's no-loss rate %v, want 100000", got)
	}
	lucky := Ingest{Steps: []IngestStep{{Offered: 1e4, Sent: 20000, Secs: 2}, {Offered: 3e4, Sent: 60000, Secs: 2}, {Offered: 2e4, Sent: 40000, Secs: 2, Dropped: 1}}}
	if got := lucky.NoLoss(); got != 10000 {
		t.Errorf("no loss at 30K after a loss at 20K: %v, want 10000", got)
	}
	if got, _ := res.Ingest[1].Top(); got != 50000 {
		t.Errorf("FastNetMon's rate under overload %v, want 50000", got)
	}

	// One repetition of an sFlow cell slower than FastNetMon's, one
	// NetFlow cell over 0.3 s after its first record, a false positive, a
	// carpet missed, memory that grows past the cap.
	res.Cells[0].Tierwall = 1.1
	for i, c := range res.Cells {
		if c.Feed == "ipfix" {
			res.Cells[i].Tierwall = 0.4
			break
		}
	}
	for i, c := range res.Cells {
		if c.Kind == "carpet" {
			res.Cells[i].Tierwall = -1
			break
		}
	}
	res.TierwallFP = []string{"198.18.1.1/32"}
	res.Ingest[0].Steps[0].Sent = 100000 // 50K/s → 1.25×
	res.Memory[0].Steps[2].LiveHeap = 20480
	got := netTargets(res)
	for _, want := range []string{
		"sFlow 1:100 and 1:1000, 0.1–1 Mpps UDP, SYN and reflection: detected ≤ 0.5 s after the flood's start",
		"… and before FastNetMon in every cell",
		"carpet bombing over a /24 (no address over its threshold): detected",
		"NetFlow v9 / IPFIX: detected ≤ 0.3 s after the flood's first record",
		"false positives on the benign mix: 0",
		"datagrams one core ingests with no loss: ≥ 2× FastNetMon's",
		"memory with 100 exporters and 10K templates: bounded, reported",
	} {
		tg, ok := got[want]
		if !ok {
			t.Fatalf("no target %q", want)
		}
		if tg.Met {
			t.Errorf("%q met, yet: %s", want, tg.Measured)
		}
	}
	if m := got["sFlow 1:100 and 1:1000, 0.1–1 Mpps UDP, SYN and reflection: detected ≤ 0.5 s after the flood's start"].Measured; !strings.Contains(m, "sflow-1:100-udp-0.1M (repetition 1: 1.10 s)") {
		t.Errorf("the slow cell is not named: %s", m)
	}

	// Nothing measured: nothing met.
	for name, tg := range netTargets(Result{}) {
		if tg.Met {
			t.Errorf("empty run, yet %q met", name)
		}
	}
}

func TestNetworkReportWritesBothTools(t *testing.T) {
	dir := t.TempDir()
	md := filepath.Join(dir, "EVALUATION-NETWORK.md")
	if err := Report(filepath.Join(dir, "eval"), md, networkRun(), time.Minute, time.Date(2026, 11, 28, 14, 0, 0, 0, time.UTC)); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	for _, want := range []string{
		"on 2026-11-28 14:00 UTC in 1m0s",
		"| 1:100 | UDP | 100K | 0.01 (0.01–0.01) | 0.25 (0.20–0.30) | 1.00 (1.00–1.00) | 2 of 2 |",
		"| 1:1000 | carpet bombing over 198.18.2.0/24 | 1000K | 0.01 (0.01–0.01) | 0.25 (0.20–0.30) | never | 2 of 2 |",
		"| IPFIX | UDP | 1000K | 0.01 (0.01–0.01) | 0.24 (0.19–0.29) | 0.99 (0.99–0.99) | 0.25 (0.20–0.30) | 1.00 (1.00–1.00) |",
		"| tierwall | 0 B | 100000 | 600000 | 199500 (1000) | 1.50 | 266000 |",
		"| FastNetMon, tierwall's buffer | 0 B | 100000 | 600000 | 180000 (40000) | 2.00 | 180000 |",
		"as each ships: tierwall 100000/s, FastNetMon 40000/s (2.5×); FastNetMon with tierwall's buffer 100000/s (1.0×); datagrams per CPU-second 266000 and 50000 (5.32×), 180000 with its buffer (1.48×)",
		"| tool | at rest | 10K templates offered | 200K templates offered | 500K templates offered | peak (VmHWM) |",
		"| tierwall | 30.0 MiB (live heap 4.0 MiB) | 33.0 MiB (live heap 6.0 MiB; 10000 held, 0 refused) | 45.0 MiB (live heap 12.0 MiB; 51200 held, 1500 refused) | 52.0 MiB (live heap 12.5 MiB; 51200 held, 4500 refused) | 60.0 MiB |",
		"| FastNetMon | 50.0 MiB | 51.0 MiB | 80.0 MiB | 100.0 MiB | 100.0 MiB |",
		"| tierwall RSS 33.0 MiB with 10K templates; 45.0 MiB (live heap 12.0 MiB) and 51200 held with 200K offered, 52.0 MiB (live heap 12.5 MiB) with 500K: past the cap, the live heap stops growing | yes |",
		"FastNetMon did not detect: sflow-1:100-carpet-0.1M (2 of 2), sflow-1:100-carpet-0.5M (2 of 2)",
		"tierwall named none; FastNetMon named none",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("no %q in:\n%s", want, doc)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "eval", "network.json")); err != nil {
		t.Error(err)
	}
}

// A detection before the flood's start, or of another victim, is not
// the cell's; the earliest after it is.
func TestJudgeCell(t *testing.T) {
	start := time.Unix(1000, 0)
	c := Cell{Victim: "198.18.2.0/24", Kind: "carpet", Start: start, First: start.Add(10 * time.Millisecond)}
	tw := []twAttack{
		{Dst: []netip.Prefix{netip.MustParsePrefix("198.18.2.0/24")}, Reported: start.Add(-time.Second)},
		{Dst: []netip.Prefix{netip.MustParsePrefix("198.18.3.0/24")}, Reported: start.Add(100 * time.Millisecond)},
		{Dst: []netip.Prefix{netip.MustParsePrefix("198.18.2.0/24")}, Carpet: true, Kinds: []string{"all"}, PPS: 60000, Reported: start.Add(300 * time.Millisecond)},
		{Dst: []netip.Prefix{netip.MustParsePrefix("198.18.2.7/32")}, Kinds: []string{"all"}, Reported: start.Add(200 * time.Millisecond)},
	}
	fnm := []fastnetmon.Ban{{At: start.Add(2 * time.Second), IP: netip.MustParseAddr("198.18.2.9"), PPS: "51000"}}
	judgeCell(&c, tw, fnm)
	if got := dist([]float64{0.3, -1, 0.1, 0.2}); got != "0.20 (0.10–0.30), never in 1 of 4" {
		t.Errorf("dist: %q", got)
	}
	if c.Tierwall != 0.2 || c.FastNetMon != 2 || c.FirstDatagram != 0.01 {
		t.Errorf("tierwall %v, FastNetMon %v, first datagram %v; want 0.2, 2, 0.01", c.Tierwall, c.FastNetMon, c.FirstDatagram)
	}
	if c.FastNetMonHow != "one host: 198.18.2.9 at 51000 pps" {
		t.Errorf("FastNetMon saw %q", c.FastNetMonHow)
	}
}
