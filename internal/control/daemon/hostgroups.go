// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"net/netip"
)

// wireHostGroups hands the configured host groups to the detectors that
// use them (the rate and per-victim detectors), after they are built and
// after every reload: groups are not part of the detectors' own
// configuration, so a change to them alone rebuilds nothing.
func (d *Daemon) wireHostGroups() {
	h, err := d.cfg.DetectHostGroups() // validated with the configuration
	if err != nil {
		d.log.Error("host groups", "err", err)
		h = nil
	}
	d.hostgroups = h
	if d.det.rate != nil {
		d.det.rate.Groups = h
	}
	if d.flow.victims != nil {
		d.flow.victims.Groups = h
	}
}

// hostgroupOf names the host group of an event's prefix, for the event's
// hostgroup field: a victim's (mitigation, withdraw) or a banned
// prefix's own.
func (d *Daemon) hostgroupOf(p netip.Prefix) string {
	if !p.IsValid() {
		return ""
	}
	if g := d.hostgroups.Lookup(p.Addr()); g != nil {
		return g.Name
	}
	return ""
}
