// SPDX-License-Identifier: Apache-2.0

package main

import (
	"strings"
	"testing"
)

// Every subcommand the Makefile and the docs name is there, and each
// evaluation writes where --out says.
func TestEverySubcommand(t *testing.T) {
	root := newRoot()
	have := map[string]bool{}
	for _, c := range root.Commands() {
		have[c.Name()] = true
	}
	for _, want := range []string{"gen", "lab", "demo", "eval", "eval-flows", "eval-spoof", "eval-network", "netcollect"} {
		if !have[want] {
			t.Errorf("no %s subcommand (have %v)", want, have)
		}
	}
	for _, name := range []string{"eval", "eval-flows", "eval-spoof", "eval-network"} {
		c, _, err := root.Find([]string{name})
		if err != nil {
			t.Fatal(err)
		}
		if c.Flags().Lookup("out") == nil {
			t.Errorf("%s has no --out", name)
		}
	}
}

func TestTierwallBinary(t *testing.T) {
	saved := g.tierwall
	defer func() { g.tierwall = saved }()
	g.tierwall = "/opt/tierwall"
	if got := tierwallBinary(); got != "/opt/tierwall" {
		t.Errorf("--tierwall: %q", got)
	}
	g.tierwall = ""
	if got := tierwallBinary(); !strings.HasSuffix(got, "tierwall") {
		t.Errorf("default %q", got)
	}
}

func TestLoadAverage(t *testing.T) {
	if f := strings.Fields(loadAverage()); len(f) != 3 {
		t.Errorf("loadAverage = %q, want three averages", loadAverage())
	}
}
