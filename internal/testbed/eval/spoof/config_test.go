// SPDX-License-Identifier: Apache-2.0

package spoof

import (
	"fmt"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/testbed/harness"
	"github.com/tierwall/tierwall/internal/testbed/lab"
)

// The scenarios' daemon is configured as the file it was once written
// as, at each interval the runs use.
func TestDaemonConfig(t *testing.T) {
	dir := t.TempDir()
	for _, iv := range []time.Duration{500 * time.Millisecond, time.Second} {
		want := fmt.Sprintf(`interface: %s
interval: %v
state_file: %s/state.json
capacity: {exact4: 65536, exact6: 4096, prefix: 4096, allow: 256, features: 262144, memory_mib: 1024}
api: {socket: %s}
`, lab.IfHost, iv, dir, dir+"/api.sock")
		if err := harness.SameConfig(t.TempDir(), daemonConfig(Params{Interval: iv}, dir), want); err != nil {
			t.Fatalf("interval %v: %v", iv, err)
		}
	}
}
