// SPDX-License-Identifier: Apache-2.0

// Package eval holds the testbed's experiments, one package each over
// the shared harness in evalkit (plots, report helpers, processes, CPU
// pinning, loopback UDP):
//
//   - modes: the paper's evaluation (§V), drop rate, CPU and HTTP for
//     every baseline and every tierwall mode (`make eval`);
//   - spoof: floods whose sources cannot be listed (`make eval-spoof`);
//   - flows: the flow probe against Deri et al. (`make eval-flows`);
//   - network: network mode against FastNetMon (`make eval-network`);
//   - scaleout: collectors and detectors over NATS (`make eval-scaleout`).
//
// This package keeps the names callers used before the split, as aliases.
package eval

import (
	"github.com/tierwall/tierwall/internal/testbed/eval/flows"
	"github.com/tierwall/tierwall/internal/testbed/eval/scaleout"
	"github.com/tierwall/tierwall/internal/testbed/eval/spoof"
)

// Deprecated: import the experiment's package.
type (
	CollectorStats = scaleout.CollectorStats
	ScaleoutParams = scaleout.Params
	ScaleoutResult = scaleout.Result
	FlowCell       = flows.FlowCell
	FlowRow        = flows.Row
	FlowsParams    = flows.Params
	SpoofParams    = spoof.Params
	SpoofRow       = spoof.Row
)

// Deprecated: call the experiment's package.
var (
	Scaleout       = scaleout.Run
	ScaleoutReport = scaleout.Report
	Flows          = flows.Run
	FlowsSmoke     = flows.Smoke
	Spoof          = spoof.Run
)
