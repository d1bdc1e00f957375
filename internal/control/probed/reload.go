// SPDX-License-Identifier: Apache-2.0

package probed

import (
	"reflect"
	"strings"

	"github.com/tierwall/tierwall/internal/control/config"
)

// Reload re-reads the configuration at path on SIGHUP. Every part of a
// probe's configuration is fixed when it starts (the XDP tier's maps, the
// NIC's table, DPI, the exporter's sockets, the engine's timeouts), and
// rebuilding any of them would lose the flows in progress and their
// counts. So a reload never touches the running probe: a bad file is
// refused, and a good one that differs names the sections that take effect
// at the next restart. What matters is that the signal is handled: its
// default action killed the probe and left its socket behind.
func (p *Probed) Reload(path string) {
	c, err := config.Load(path)
	if err != nil {
		p.log.Error("reload refused, keeping the running configuration", "err", err)
		p.event("error", "reload refused, keeping the running configuration: %v", err)
		return
	}
	if changed := changedSections(p.cfg, c); len(changed) > 0 {
		p.log.Warn("reload: a probe applies configuration changes at its next restart; the running one is kept, with its flows",
			"changed", changed)
		p.event("reload", "configuration read: need a restart (running values kept until then, with the flows): %s", strings.Join(changed, ", "))
		return
	}
	p.log.Info("reload: configuration unchanged")
	p.event("reload", "configuration reloaded: nothing changed")
}

// changedSections names the top-level sections (by their YAML keys) that
// differ between a and b.
func changedSections(a, b *config.Config) []string {
	va, vb := reflect.ValueOf(a).Elem(), reflect.ValueOf(b).Elem()
	var out []string
	for i := 0; i < va.NumField(); i++ {
		if !reflect.DeepEqual(va.Field(i).Interface(), vb.Field(i).Interface()) {
			name := va.Type().Field(i).Tag.Get("yaml")
			if name == "" {
				name = va.Type().Field(i).Name
			}
			out = append(out, name)
		}
	}
	return out
}
