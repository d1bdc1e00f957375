// SPDX-License-Identifier: Apache-2.0

package probed

import (
	"fmt"

	"github.com/tierwall/tierwall/internal/probe/dpi"
	"github.com/tierwall/tierwall/internal/probe/flow"
	"github.com/tierwall/tierwall/internal/probe/flowprobe"
	"github.com/tierwall/tierwall/internal/tier"
)

// classifier adapts a dpi.Classifier to the engine, which knows nothing of
// DPI's sources and categories.
type classifier struct{ c dpi.Classifier }

type dpiFlow struct{ f dpi.Flow }

func (c classifier) NewFlow(k tier.FlowKey, initDir uint8) flowprobe.DPIFlow {
	return dpiFlow{c.c.NewFlow(k, initDir)}
}

func verdict(v dpi.Verdict) flowprobe.Verdict {
	return flowprobe.Verdict{Done: v.Done, App: v.App, Proto: v.Proto, Host: v.Host}
}

func (f dpiFlow) Add(s *flow.Sample) flowprobe.Verdict { return verdict(f.f.Add(s)) }
func (f dpiFlow) Giveup() flowprobe.Verdict            { return verdict(f.f.Giveup()) }
func (f dpiFlow) Close()                               { f.f.Close() }

// Policy turns the configured per-application actions (dpi.ParsePolicy:
// the application, then the protocol carrying it, then "default") into
// the engine's policy.
func Policy(m map[string]string) (func(flowprobe.Verdict) dpi.Action, error) {
	pol, err := dpi.ParsePolicy(m)
	if err != nil {
		return nil, fmt.Errorf("probe.policy: %w", err)
	}
	return func(v flowprobe.Verdict) dpi.Action {
		return pol.Action(dpi.Verdict{App: v.App, Proto: v.Proto})
	}, nil
}
