// SPDX-License-Identifier: Apache-2.0

package flows

import (
	"strings"
	"testing"
)

func flowRows() []Row {
	c := func(active int, offload bool, xdp, host float64, sent, born uint64) Row {
		return Row{FlowCell: FlowCell{Mode: "passive", Size: 64, Active: active, Offload: offload, DPI: true},
			Sent: sent, Born: born, Collected: sent, Steady: CPUShare{XDP: xdp, Host: host, Mpps: float64(sent) / 20e6}}
	}
	return []Row{
		c(10000, false, 0.2, 0.3, 16e6, 30000), c(10000, true, 0.01, 0.14, 18e6, 30000),
		c(1000000, false, 0.3, 1.3, 12e6, 2.5e6), c(1000000, true, 0.2, 1.18, 8e6, 2e6),
	}
}

// The discussion's numbers and verdicts come from the rows: the text once
// carried "about 0.05×", "two thirds" and "No loss anywhere" whatever the
// run measured.
func TestFlowsFindingsFollowRows(t *testing.T) {
	got := flowsFindings(flowRows())
	for _, want := range []string{
		"offered load was 0.40–0.90 Mpps",
		"With 1000000 active flows each flow got 4.0–4.8 packets (sent ÷ flows born, per cell), fewer than DPI's 10",
		"XDP with offload ÷ without: 0.05×–0.05×",
		"was 67%–67% of the host's load",
		"Host CPU above 100%** in 2 of 4 cells (2 of 2 at 1000000 flows)",
		"No loss in any of the 4 cells",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("want %q in:\n%s", want, got)
		}
	}
	rows := flowRows()
	rows[3].Collected = rows[3].Sent - 1000 // a lossy cell
	rows[2].Born, rows[3].Born = 100000, 100000
	got = flowsFindings(rows)
	if strings.Contains(got, "No loss") || !strings.Contains(got, "Loss in 1 of 4 cells") {
		t.Errorf("one lossy cell, yet:\n%s", got)
	}
	if strings.Contains(got, "fewer than DPI's 10") {
		t.Errorf("80–120 packets per flow, yet DPI said to outlive flows:\n%s", got)
	}
	if got := flowsFindings(nil); got != "Not measured in this run: no cells.\n" {
		t.Errorf("no rows: %q", got)
	}
}
