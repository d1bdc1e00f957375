// SPDX-License-Identifier: Apache-2.0

package main

import (
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/cli"
	"github.com/tierwall/tierwall/internal/control/apiv1"
	"github.com/tierwall/tierwall/internal/datapath"
)

// block list --detector, --tier, --prefix, --older-than (issue 34): each
// keeps only what it names, together they all apply, and what needs the
// daemon's bans is refused on rows read from the data plane alone.
func TestBlockListFilters(t *testing.T) {
	now := time.Now()
	ago := func(d time.Duration) *time.Time { x := now.Add(-d); return &x }
	ban := func(p, det, tier string, age time.Duration) ruleRow {
		return ruleRow{Prefix: netip.MustParsePrefix(p), Detector: det, Tier: tier, FirstSeen: ago(age)}
	}
	rows := []ruleRow{
		ban("198.51.100.7/32", "rate", "hw", 2*time.Hour),
		ban("198.51.100.0/24", "entropy", "xdp", 10*time.Minute),
		ban("203.0.113.9/32", "operator", "xdp", 48*time.Hour),
		ban("2001:db8::/48", "entropy", "hw", time.Minute),
	}
	for _, c := range []struct {
		f    ruleFilter
		want string
	}{
		{ruleFilter{}, "198.51.100.7/32 198.51.100.0/24 203.0.113.9/32 2001:db8::/48"},
		{ruleFilter{detectors: []string{"entropy"}}, "198.51.100.0/24 2001:db8::/48"},
		{ruleFilter{detectors: []string{"rate", "operator"}}, "198.51.100.7/32 203.0.113.9/32"},
		{ruleFilter{tier: "hw"}, "198.51.100.7/32 2001:db8::/48"},
		// Inside the prefix, and covering the address.
		{ruleFilter{prefixText: "198.51.0.0/16"}, "198.51.100.7/32 198.51.100.0/24"},
		{ruleFilter{prefixText: "198.51.100.7"}, "198.51.100.7/32 198.51.100.0/24"},
		{ruleFilter{olderThan: time.Hour}, "198.51.100.7/32 203.0.113.9/32"},
		{ruleFilter{tier: "xdp", olderThan: time.Hour, prefixText: "203.0.113.0/24"}, "203.0.113.9/32"},
		{ruleFilter{detectors: []string{"heavy"}}, ""},
	} {
		f := c.f
		if err := f.parse(); err != nil {
			t.Fatalf("%+v: %v", c.f, err)
		}
		got, err := f.apply(append([]ruleRow(nil), rows...))
		if err != nil {
			t.Fatalf("%+v: %v", c.f, err)
		}
		var names []string
		for _, r := range got {
			names = append(names, r.Prefix.String())
		}
		if strings.Join(names, " ") != c.want {
			t.Errorf("%+v: %v, want %s", c.f, names, c.want)
		}
	}

	// A daemon's ban brings its age along.
	var b apiv1.RuleView
	b.Prefix, b.Detector, b.FirstSeen = netip.MustParsePrefix("192.0.2.9/32"), "rate", now.Add(-time.Hour)
	if r := rowFromBan("block", b, datapath.Rule{}, false); r.FirstSeen == nil || !r.FirstSeen.Equal(b.FirstSeen) {
		t.Errorf("rowFromBan: first seen %v, want %v", r.FirstSeen, b.FirstSeen)
	}

	// Rows of the data plane alone carry no detector or age.
	dp := []ruleRow{{Prefix: netip.MustParsePrefix("192.0.2.1/32"), Tier: "xdp"}}
	for _, f := range []ruleFilter{{detectors: []string{"rate"}}, {olderThan: time.Hour}} {
		if _, err := f.apply(dp); err == nil || cli.ExitCode(err) != cli.ExitUsage || !strings.Contains(err.Error(), "need the daemon's bans") {
			t.Errorf("%+v on data-plane rows: %v, want a usage error", f, err)
		}
	}
	if got, err := (&ruleFilter{tier: "xdp"}).apply(dp); err != nil || len(got) != 1 {
		t.Errorf("--tier xdp on data-plane rows: %v %v", got, err)
	}

	// Bad filters: exit 2 before anything is read.
	none := filepath.Join(t.TempDir(), "none.sock")
	for _, args := range [][]string{
		{"block", "list", "--tier", "nic"}, {"block", "list", "--prefix", "10.0.0.1/8"},
		{"block", "list", "--prefix", "nonsense"}, {"block", "list", "--older-than", "-1h"},
	} {
		_, err := execute(append([]string{"--bpffs", emptyBPFFS(t), "--socket", none}, args...)...)
		if err == nil || cli.ExitCode(err) != cli.ExitUsage || !strings.Contains(err.Error(), "invalid argument") {
			t.Errorf("%v: %v (exit %d), want exit 2", args, err, cli.ExitCode(err))
		}
	}
}
