// SPDX-License-Identifier: Apache-2.0

package flows

import (
	"fmt"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/testbed/harness"
	"github.com/tierwall/tierwall/internal/testbed/lab"
)

// handWrittenFlowConfig is the probe's file as the experiment wrote it
// before its configuration was built from config.Config.
func handWrittenFlowConfig(dir string, c FlowCell, collectorAddr string, idle time.Duration) string {
	mode, egress, twin, ret := "passive", "", "", ""
	if c.Mode == "inline" {
		mode, egress, twin, ret = "inline", lab.PIfHost1, lab.PIfTwin, lab.PIfHRet
	}
	engine := "builtin"
	if !c.DPI {
		engine = "none"
	}
	policy := "offload"
	if !c.Offload {
		// The same NIC in the path, learning nothing: every packet a
		// miss for the host.
		policy = "software"
	}
	// Room for every flow alive at once: the window, and the births of
	// the time an ended flow is held (the NIC's idle timeout, its sweep,
	// the end grace, the probe's sweep), with a margin for a probe that
	// falls behind at a million flows.
	capacity := max(c.Active*4, 1<<16)
	return fmt.Sprintf(`role: probe
interface: %s
state_file: %s/state.json
log: {format: text, level: warn}
api:
  socket: %s/api.sock
probe:
  mode: %s
  egress: "%s"
  capacity: %d
  dpi: {engine: %s, packets: 10, timeout: 2s, max_flows: 65536, ring_bytes: 16777216}
  timeouts: {idle: %v, active: 120s, end_grace: 1s}
  policy: {default: %s}
  hardware:
    backend: emulated
    capacity: %d
    learn_rate: 1000000
    learn_latency: 50us
    tcp_auto_unlearn: true
    idle_timeout: %v
    emulated: {netns: %s, wire: %s, host: %s, twin: "%s", return: "%s"}
  export:
    biflow: true
    queue_len: 1048576
    collectors: [{address: "%s", format: ipfix}]
`, lab.PIfHost, dir, dir, mode, egress, capacity, engine, idle, policy, capacity, idle,
		lab.PNSNic, lab.PIfWire, lab.PIfHPort, twin, ret, collectorAddr)
}

// Every cell's probe is configured as the file it was once written as.
func TestFlowConfig(t *testing.T) {
	dir := t.TempDir()
	cells := Cells([]int{1000, 1000000}, []int{64, 1500}, []string{"passive", "inline"})
	if len(cells) == 0 {
		t.Fatal("no cells")
	}
	for _, c := range cells {
		for _, idle := range []time.Duration{2 * time.Second, 30 * time.Second} {
			want := handWrittenFlowConfig(dir, c, "10.80.0.2:4739", idle)
			if err := harness.SameConfig(t.TempDir(), flowConfig(dir, c, "10.80.0.2:4739", idle), want); err != nil {
				t.Fatalf("%v idle %v: %v", c, idle, err)
			}
		}
	}
}
