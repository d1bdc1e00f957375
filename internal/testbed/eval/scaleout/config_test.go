// SPDX-License-Identifier: Apache-2.0

package scaleout

import (
	"testing"

	"github.com/tierwall/tierwall/internal/testbed/harness"
)

// The collectors are configured as the file they were once written as,
// with the network they protect since.
func TestCollectorsConfig(t *testing.T) {
	want := "interface: lo\nhostgroups:\n  - {name: none, prefixes: [198.18.63.0/24]}\n" +
		"telemetry:\n  enabled: true\n  mode: monitor\n  listen: [\"127.0.0.1:6343\"]\n  exporters:\n    - {address: 127.0.0.1, name: r}\n" +
		"  networks: [198.18.0.0/18]\n  thresholds:\n    all: {pps: 1e12}\n"
	if err := harness.SameConfig(t.TempDir(), collectorsConfig(), want); err != nil {
		t.Fatal(err)
	}
}
