// SPDX-License-Identifier: Apache-2.0

// Package autodetect picks the hardware-table backend that really works on an
// interface: tc flower first (per-rule counters, flows, IPv6), then
// ethtool n-tuple (no counters). When neither does, tierwall runs XDP-only
// and the returned error says why for each backend.
package autodetect

import (
	"errors"
	"fmt"

	"github.com/tierwall/tierwall/internal/tier"
	"github.com/tierwall/tierwall/internal/tier/flower"
	"github.com/tierwall/tierwall/internal/tier/ntuple"
)

// Options carry what the operator knows about the NIC.
type Options struct {
	Capacity   int    // rules the NIC holds; 0: flower 1024, n-tuple as reported
	NtupleBase uint32 // first n-tuple location tierwall owns
}

// Backend opens the first backend that works on iface. The error wraps
// tier.ErrUnsupported when none does, listing each backend's reason.
func Backend(iface string, o Options) (tier.Table, error) {
	t, ferr := flower.Open(iface, o.Capacity)
	if ferr == nil {
		return t, nil
	}
	n, nerr := ntuple.Open(iface, o.NtupleBase, o.Capacity)
	if nerr == nil {
		return n, nil
	}
	if !errors.Is(ferr, tier.ErrUnsupported) {
		return nil, ferr
	}
	if !errors.Is(nerr, tier.ErrUnsupported) {
		return nil, nerr
	}
	return nil, fmt.Errorf("%w on %s: running XDP-only (tc flower: %v; ethtool n-tuple: %v)", tier.ErrUnsupported, iface, ferr, nerr)
}
