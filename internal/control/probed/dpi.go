// SPDX-License-Identifier: Apache-2.0

package probed

import (
	"fmt"

	"github.com/tierwall/tierwall/internal/probe/dpi"
)

// Policy turns the configured per-application actions (dpi.ParsePolicy:
// the application, then the protocol carrying it, then "default") into
// the engine's policy.
func Policy(m map[string]string) (func(dpi.Verdict) dpi.Decision, error) {
	pol, err := dpi.ParsePolicy(m)
	if err != nil {
		return nil, fmt.Errorf("probe.policy: %w", err)
	}
	return pol.Decide, nil
}
