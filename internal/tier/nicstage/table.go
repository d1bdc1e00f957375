// SPDX-License-Identifier: Apache-2.0

package nicstage

import (
	"context"
	"time"

	"github.com/tierwall/tierwall/internal/tier"
)

// Table adapts a Stage to tier.Table.
type Table struct {
	nic *Stage
}

var _ tier.Table = (*Table)(nil)

// NewTable wraps an attached (or detached, for tests) emulated NIC.
func NewTable(n *Stage) *Table { return &Table{nic: n} }

// AttachTable attaches (or re-adopts) the emulated NIC on wire, forwarding to
// host; both interfaces must be in the calling thread's network namespace.
func AttachTable(wire, host string, o Options) (*Table, error) {
	n, err := Attach(wire, host, o)
	if err != nil {
		return nil, err
	}
	return NewTable(n), nil
}

// Stage is the underlying stage (counters, program for tests).
func (t *Table) Stage() *Stage { return t.nic }

func (t *Table) Caps() tier.Caps {
	return tier.Caps{Backend: "emulated", Iface: t.nic.Iface, Capacity: t.nic.Capacity(),
		Counters: true, Flows: true, Forward: true}
}

func (t *Table) Install(ctx context.Context, r tier.Rule) (time.Duration, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return t.nic.Insert(r)
}

func (t *Table) Remove(ctx context.Context, m tier.Match) (tier.Counters, time.Duration, error) {
	if err := ctx.Err(); err != nil {
		return tier.Counters{}, 0, err
	}
	return t.nic.Delete(m)
}

func (t *Table) List(ctx context.Context) ([]tier.Entry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return t.nic.Rules()
}

func (t *Table) Close() error { return t.nic.Close() }

// Verdicts are the stage's per-verdict counters (hit, miss, unhandled …).
func (t *Table) Verdicts() (map[string]tier.Counters, error) { return stageStats[tier.Counters](t.nic) }
