// SPDX-License-Identifier: Apache-2.0

package config

import (
	"errors"
	"strings"
	"testing"
)

// The width rails: defaults that refuse a ban of everything, limits in
// range, and an allowlist in the file that would turn filtering off.
func TestRailsWidthLimits(t *testing.T) {
	c, err := Parse([]byte("interface: eth0\n"))
	if err != nil {
		t.Fatal(err)
	}
	if r := c.Rails; r.MaxBanPrefixV4 != 8 || r.MaxBanPrefixV6 != 32 || r.MaxAllowPrefixV4 != 8 || r.MaxAllowPrefixV6 != 32 {
		t.Fatalf("defaults %+v", r)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"interface: eth0\nrails:\n  max_ban_prefix_v4: 33\n", "rails.max_ban_prefix_v4: 33"},
		{"interface: eth0\nrails:\n  max_allow_prefix_v6: -1\n", "rails.max_allow_prefix_v6: -1"},
		{"interface: eth0\nrails:\n  allow: ['::/0']\n", "rails.allow[0]: ::/0 is wider than /32"},
	} {
		if _, err := Parse([]byte(tc.yaml)); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.yaml, err, tc.want)
		}
	}
	if _, err := Parse([]byte("interface: eth0\nrails:\n  allow: ['::/0']\n  max_allow_prefix_v6: 0\n")); err != nil {
		t.Errorf("limit lifted: %v", err)
	}
}
