// SPDX-License-Identifier: Apache-2.0

package demo

import (
	"fmt"
	"testing"

	"github.com/tierwall/tierwall/internal/testbed/harness"
	"github.com/tierwall/tierwall/internal/testbed/lab"
)

// The demo's daemon is configured as the file it was once written as.
func TestDaemonConfig(t *testing.T) {
	dir := t.TempDir()
	sock := dir + "/api.sock"
	want := fmt.Sprintf(`interface: %s
interval: 500ms
state_file: %s/state.json
log: {format: text, level: info}
capacity: {exact4: 65536, exact6: 4096, prefix: 4096, allow: 256, features: 65536}
hardware:
  backend: emulated
  capacity: 512
  max_rate_pps: 2000000
  emulated: {netns: %s, wire: %s, host: %s}
detectors:
  rate: {enabled: true, learn_intervals: 10, margin: 1.5, min_pps: 100}
  entropy: {enabled: false}
  heavy: {enabled: true, window: 20ms, learned_factor: 3}
bans: {ttl: 10m, hold: 5s, unban_pps: 100}
rails:
  protected: [%s/32]
api: {socket: %s}
`, lab.IfHost, dir, lab.NSNic, lab.IfWire, lab.IfHPort, lab.Host4, sock)
	if err := harness.SameConfig(t.TempDir(), daemonConfig(dir), want); err != nil {
		t.Fatal(err)
	}
}
