// Package emunic is the hwtable backend for tierwall's emulated SmartNIC:
// the XDP stage of internal/datapath (bpf/xdp_nic.c) on the wire-facing
// port of a "nic" network namespace. Tests, benchmarks and the demo use it
// because these machines have no SmartNIC.
package emunic

import (
	"context"
	"time"

	"github.com/tierwall/tierwall/internal/datapath"
	"github.com/tierwall/tierwall/internal/hwtable"
)

// Table adapts a datapath.NIC to hwtable.Table.
type Table struct {
	nic *datapath.NIC
}

var _ hwtable.Table = (*Table)(nil)

// New wraps an attached (or detached, for tests) emulated NIC.
func New(n *datapath.NIC) *Table { return &Table{nic: n} }

// Attach attaches (or re-adopts) the emulated NIC on wire, forwarding to
// host; both interfaces must be in the calling thread's network namespace.
func Attach(wire, host string, o datapath.NICOptions) (*Table, error) {
	n, err := datapath.AttachNIC(wire, host, o)
	if err != nil {
		return nil, err
	}
	return New(n), nil
}

// NIC is the underlying stage (counters, program for tests).
func (t *Table) NIC() *datapath.NIC { return t.nic }

func (t *Table) Caps() hwtable.Caps {
	return hwtable.Caps{Backend: "emulated", Iface: t.nic.Iface, Capacity: t.nic.Capacity(),
		Counters: true, Flows: true, Forward: true}
}

func (t *Table) Install(ctx context.Context, r hwtable.Rule) (time.Duration, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return t.nic.Insert(r)
}

func (t *Table) Remove(ctx context.Context, m hwtable.Match) (hwtable.Counters, time.Duration, error) {
	if err := ctx.Err(); err != nil {
		return hwtable.Counters{}, 0, err
	}
	return t.nic.Delete(m)
}

func (t *Table) List(ctx context.Context) ([]hwtable.Entry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return t.nic.Rules()
}

func (t *Table) Close() error { return t.nic.Close() }
