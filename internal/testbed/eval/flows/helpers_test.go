// SPDX-License-Identifier: Apache-2.0

package flows

import (
	"encoding/csv"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCellsMatrix(t *testing.T) {
	cs := Cells([]int{1000, 10000}, []int{64}, []string{"passive", "inline"})
	// passive: 2 actives × 2 offload × 2 DPI; inline: 2 × 2, DPI on.
	if len(cs) != 12 {
		t.Fatalf("%d cells: %v", len(cs), cs)
	}
	seen := map[FlowCell]bool{}
	for _, c := range cs {
		if seen[c] {
			t.Errorf("%v twice", c)
		}
		seen[c] = true
		if c.Mode == "inline" && !c.DPI {
			t.Errorf("inline without DPI: %v", c)
		}
	}
	c := FlowCell{Mode: "passive", Size: 64, Active: 1000, Offload: true}
	if got := c.String(); got != "passive 64B 1000 flows, offload, no DPI" {
		t.Errorf("String = %q", got)
	}
	if got := label(Row{FlowCell: c}); got != "passive 64B offload no DPI" {
		t.Errorf("label = %q", got)
	}
}

func TestRowLoss(t *testing.T) {
	r := Row{Sent: 1000, Collected: 990, NICSeen: 995, ToHost: 500, HostSeen: 498}
	if r.Loss() != 10 || r.LossPct() != 1 || r.Lossless() || r.WireLoss() != 5 || r.HostRingLoss() != 2 {
		t.Errorf("loss %d %.2f%% lossless %v wire %d ring %d", r.Loss(), r.LossPct(), r.Lossless(), r.WireLoss(), r.HostRingLoss())
	}
	// More collected than sent (a duplicate) is no loss, never an underflow.
	r = Row{Sent: 10, Collected: 11}
	if r.Loss() != 0 || sub(1, 2) != 0 || (Row{}).LossPct() != 0 {
		t.Errorf("underflow: %d %d", r.Loss(), sub(1, 2))
	}
	if !(Row{Sent: 5, Collected: 5}).Lossless() {
		t.Error("a complete row is lossless")
	}
}

func TestSmoke(t *testing.T) {
	c := FlowCell{Mode: "passive", Size: 64, Active: 1000, DPI: true}
	if err := Smoke([]Row{{FlowCell: c, Sent: 7, Collected: 7}}, nil); err != nil {
		t.Error(err)
	}
	err := Smoke([]Row{{FlowCell: c, Sent: 7, Collected: 6}}, nil)
	if err == nil || !strings.Contains(err.Error(), "sent 7 packets, the collector counted 6") {
		t.Errorf("a lossy cell: %v", err)
	}
	if err := Smoke([]Row{{FlowCell: c}}, nil); err == nil {
		t.Error("a cell that sent nothing passed")
	}
	run := errors.New("lab down")
	if err := Smoke(nil, run); !errors.Is(err, run) {
		t.Errorf("the run's error: %v", err)
	}
}

func TestParsingHelpers(t *testing.T) {
	text := "# HELP x\nprobe_packets_total{cpu=\"0\"} 5\nprobe_packets_total{cpu=\"1\"} 7\nprobe_packets_totalx 100\nprobe_packets_total 3\n"
	if got := metric(text, "probe_packets_total"); got != 15 {
		t.Errorf("metric = %d, want 15 (the labelled series and the bare one, not a longer name)", got)
	}
	if got := tail("a\nb\nc\n", 2); got != "b\nc" {
		t.Errorf("tail = %q", got)
	}
	if got := tail("a", 5); got != "a" {
		t.Errorf("tail = %q", got)
	}
	for v, want := range map[float64]string{0: "0", 0.001: "<0.01", 0.5: "0.50", 12.34: "12.3"} {
		if got := pct(v); got != want {
			t.Errorf("pct(%v) = %q, want %q", v, got, want)
		}
	}
}

func TestWriteCSV(t *testing.T) {
	path := filepath.Join(t.TempDir(), "flows.csv")
	if err := WriteCSV(path, flowRows()); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1+len(flowRows()) || recs[0][0] != "mode" {
		t.Fatalf("%d records, header %v", len(recs), recs[0])
	}
	for _, r := range recs[1:] {
		if len(r) != len(recs[0]) || r[0] != "passive" {
			t.Errorf("row %v", r)
		}
	}
}
