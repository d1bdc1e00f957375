// Package probe picks the hardware-table backend that really works on an
// interface: tc flower first (per-rule counters, flows, IPv6), then
// ethtool n-tuple (no counters). When neither does, tierwall runs XDP-only
// and the returned error says why for each backend.
package probe

import (
	"errors"
	"fmt"

	"github.com/tierwall/tierwall/internal/hwtable"
	"github.com/tierwall/tierwall/internal/hwtable/flower"
	"github.com/tierwall/tierwall/internal/hwtable/ntuple"
)

// Options carry what the operator knows about the NIC.
type Options struct {
	Capacity   int    // rules the NIC holds; 0: flower 1024, n-tuple as reported
	NtupleBase uint32 // first n-tuple location tierwall owns
}

// Backend opens the first backend that works on iface. The error wraps
// hwtable.ErrUnsupported when none does, listing each backend's reason.
func Backend(iface string, o Options) (hwtable.Table, error) {
	t, ferr := flower.Open(iface, o.Capacity)
	if ferr == nil {
		return t, nil
	}
	n, nerr := ntuple.Open(iface, o.NtupleBase, o.Capacity)
	if nerr == nil {
		return n, nil
	}
	if !errors.Is(ferr, hwtable.ErrUnsupported) {
		return nil, ferr
	}
	if !errors.Is(nerr, hwtable.ErrUnsupported) {
		return nil, nerr
	}
	return nil, fmt.Errorf("%w on %s: running XDP-only (tc flower: %v; ethtool n-tuple: %v)", hwtable.ErrUnsupported, iface, ferr, nerr)
}
