// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/testbed/eval/flows"
	"github.com/tierwall/tierwall/internal/testutil"
)

// The flow-offload experiment's pipeline (make eval-flows) at a paced
// rate the host takes whole: in every cell the collector's file counts
// exactly the packets the generator sent, through both tiers and the
// IPFIX export, and the CPU split measured something.
func TestEvalFlowsSmoke(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireCommand(t, "nfcapd", "nfdump")
	cells := []flows.FlowCell{
		{Mode: "passive", Size: 64, Active: 1000, Offload: true, DPI: true},
		{Mode: "inline", Size: 970, Active: 1000, Offload: true, DPI: false},
		{Mode: "passive", Size: 64, Active: 1000, Offload: false, DPI: true},
	}
	rows, err := flows.Run(context.Background(), flows.Params{Tierwall: bin, Cells: cells,
		Duration: 4 * time.Second, Rate: 50_000, Idle: 2 * time.Second, Log: io.Discard})
	if err := flows.Smoke(rows, err); err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(cells) {
		t.Fatalf("%d rows for %d cells", len(rows), len(cells))
	}
	for _, r := range rows {
		if r.Steady.XDP <= 0 || r.Steady.Probe <= 0 || r.Records == 0 {
			t.Errorf("%s: nothing measured: %+v", r.FlowCell, r)
		}
		if r.Offload && r.NICConsumed+r.NICTwin == 0 {
			t.Errorf("%s: the NIC handled no packet", r.FlowCell)
		}
		if !r.Offload && r.NICConsumed+r.NICTwin != 0 {
			t.Errorf("%s: the NIC handled %d packets with offload off", r.FlowCell, r.NICConsumed+r.NICTwin)
		}
	}
}
