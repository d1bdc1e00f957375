// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"os"
	"strings"
)

// CPUModel is the host's CPU model from /proc/cpuinfo, for the headers of
// the measured documents: the VMs of one class run on different hardware
// from day to day, and per-packet costs differ several-fold between them.
func CPUModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "model unknown"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "model unknown"
}
