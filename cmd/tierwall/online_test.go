// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tierwall/tierwall/internal/cli"
)

// run --check --online checks what only this host can say, and connects
// to nothing: a file naming an interface this host does not have passed
// --check and failed at start.
func TestRunCheckOnline(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.yaml", "interface: lo\nbgp:\n  asn: 65001\n  router_id: 10.0.0.2\n  neighbors: [{address: 127.0.0.2, asn: 65002}]\n")
	probe := write("probe.yaml", "role: probe\ninterface: lo\nprobe:\n  export:\n    collectors:\n      - {address: \"localhost:4739\"}\n")
	bad := write("bad.yaml", "interface: tw-nosuch0\nbgp:\n  asn: 65001\n  router_id: 10.0.0.2\n  neighbors:\n    - {address: 127.0.0.2, asn: 65002, local_address: 192.0.2.200}\n")
	// Role network attaches nothing: no interface to look for.
	network := write("network.yaml", "role: network\nhardware: {backend: none}\ntelemetry:\n  enabled: true\n  listen: [\"0.0.0.0:6343\", \":2055\"]\n  exporters: [{address: 127.0.0.1}]\n  networks: [198.51.100.0/24]\n  thresholds: {all: {pps: 50000}}\n")
	badNetwork := write("badnetwork.yaml", "role: network\nhardware: {backend: none}\ntelemetry:\n  enabled: true\n  listen: [\"192.0.2.201:6343\"]\n  exporters: [{address: 127.0.0.1}]\n  networks: [198.51.100.0/24]\n  thresholds: {all: {pps: 50000}}\n")
	badProbe := write("badprobe.yaml", "role: probe\ninterface: lo\nprobe:\n  export:\n    collectors:\n      - {address: \"collector.invalid:4739\"}\n")
	for _, tc := range []struct {
		path      string
		code      int
		out, errs []string
	}{
		{good, 0, []string{"online: interface lo exists", "online: BGP peer 127.0.0.2 has a route"}, nil},
		{probe, 0, []string{"online: collector localhost resolves to", "port 4739"}, nil},
		{network, 0, []string{"ok (role network, no interface)", "online: telemetry listens on 0.0.0.0:6343 (UDP)", "online: telemetry listens on :2055 (UDP)"}, nil},
		{badNetwork, 2, nil, []string{badNetwork + ":5: telemetry.listen[0]: 192.0.2.201 is not an address of this host"}},
		{bad, 2, nil, []string{bad + ":1: interface: tw-nosuch0: no such interface",
			bad + ":6: bgp.neighbors[0].local_address: 192.0.2.200 is not an address of this host"}},
		{badProbe, 2, nil, []string{badProbe + ":6: probe.export.collectors[0].address: collector.invalid does not resolve"}},
	} {
		var out, stderr bytes.Buffer
		root := newRoot()
		root.SetOut(&out)
		root.SetErr(&stderr)
		root.SetArgs([]string{"run", "--check", "--online", "--config", tc.path})
		err := root.Execute()
		if code := cli.ExitCode(err); err != nil && code != tc.code || err == nil && tc.code != 0 {
			t.Errorf("%s: exit %d (%v), want %d; stdout %q stderr %q", tc.path, code, err, tc.code, out.String(), stderr.String())
		}
		for _, w := range tc.out {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%s: stdout %q, want %q", tc.path, out.String(), w)
			}
		}
		for _, w := range tc.errs {
			if !strings.Contains(stderr.String(), w) {
				t.Errorf("%s: stderr %q, want %q", tc.path, stderr.String(), w)
			}
		}
	}
	// Offline, the bad file passes: the interface is this host's business.
	root := newRoot()
	root.SetOut(&bytes.Buffer{})
	root.SetErr(&bytes.Buffer{})
	root.SetArgs([]string{"run", "--check", "--config", bad})
	if err := root.Execute(); err != nil {
		t.Errorf("offline check of %s: %v", bad, err)
	}
	root = newRoot()
	root.SetOut(&bytes.Buffer{})
	root.SetErr(&bytes.Buffer{})
	root.SetArgs([]string{"run", "--online", "--config", good})
	if err := root.Execute(); cli.ExitCode(err) != cli.ExitUsage || !strings.Contains(err.Error(), "--online goes with --check") {
		t.Errorf("--online without --check: %v", err)
	}
}
