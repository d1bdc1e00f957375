// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"log/slog"
	"net/netip"
	"strings"

	"github.com/tierwall/tierwall/internal/control/config"
	"github.com/tierwall/tierwall/internal/datapath"
	"github.com/tierwall/tierwall/internal/errdefs"
)

// Role network (config.RoleNetwork): a daemon that runs network mode
// only, on a box with no XDP data plane (a collector of the routers'
// telemetry, or a scale-out detector). It keeps the loop, the API, the
// events, the alerts and the BGP speaker, over a data plane that holds
// nothing: the loop observes no traffic, so host mode never bans, and a
// ban asked of it is refused, since nothing here could enforce it.

// noDataPlane is role network's data plane: empty, and refusing rules.
type noDataPlane struct{}

// errNoDataPlane is a usage error (the API's 400), not a failure.
var errNoDataPlane = errdefs.Invalid("role network has no data plane: it acts upstream only (telemetry:, bgp:)")

func (noDataPlane) Drain(sink datapath.FlowSink) (*datapath.Snapshot, error) {
	return (&datapath.Snapshot{}).Emit(sink), nil
}
func (noDataPlane) Block(ps ...netip.Prefix) error {
	if len(ps) == 0 {
		return nil
	}
	return errNoDataPlane
}
func (noDataPlane) Unblock(...netip.Prefix) error { return nil }
func (noDataPlane) Allow(ps ...netip.Prefix) error {
	if len(ps) == 0 {
		return nil
	}
	return errNoDataPlane
}
func (noDataPlane) Disallow(...netip.Prefix) error    { return nil }
func (noDataPlane) Blocked() ([]datapath.Rule, error) { return nil, nil }
func (noDataPlane) Allowed() ([]datapath.Rule, error) { return nil, nil }
func (noDataPlane) Stats() (*datapath.Stats, error)   { return &datapath.Stats{Mode: "none"}, nil }
func (noDataPlane) Check() error                      { return nil }
func (noDataPlane) Close() error                      { return nil }
func (noDataPlane) RuleCountersInto(ps []netip.Prefix, out []datapath.Reading) error {
	clear(out[:min(len(ps), len(out))])
	return nil
}

// openDataPlane attaches the XDP filter, or, for role network, nothing.
func openDataPlane(cfg *config.Config, log *slog.Logger) (DataPlane, error) {
	if cfg.Role == config.RoleNetwork {
		return noDataPlane{}, nil
	}
	return attachDataPlane(cfg, log)
}

// ownerKey names the owner lock: the data plane's, or for role network
// (none) its state file's, so that two network daemons of one host (a
// collector and a detector) run side by side, and never share a state
// file.
func ownerKey(cfg *config.Config) string {
	if cfg.Role == config.RoleNetwork {
		return "network" + strings.NewReplacer("/", "_", ":", "_", ".", "_").Replace(cfg.StateFile)
	}
	return OwnerKey("", cfg.Interface)
}
