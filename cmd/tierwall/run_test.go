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

// run --check validates offline: no root, no BPF; 0 for a good file, 2
// (an invalid configuration, as the man page says) with every error
// located for a bad one: every value wrong, not only the first, and what
// this binary cannot run (nDPI in a build without it), which run refuses
// too.
func TestRunCheck(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	badf := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(good, []byte("interface: eth0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(badf, []byte("interface: eth0\nintreval: 1s\nbans:\n  ttl: 1hour\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	values := filepath.Join(dir, "values.yaml")
	if err := os.WriteFile(values, []byte("interface: eth0\ninterval: 5m\nlog:\n  level: loud\nrails:\n  allow:\n    - 10.0.0.0/8\n    - 0.0.0.0/0\nsynproxy:\n  mss: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ndpi := filepath.Join(dir, "ndpi.yaml")
	if err := os.WriteFile(ndpi, []byte("role: probe\ninterface: eth0\nprobe:\n  dpi:\n    engine: ndpi\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path     string
		code     int
		out, err string
	}{
		{good, 0, good + ": ok (role mitigation, interface eth0)\n", ""},
		{badf, 2, "", badf + `:2: intreval: unknown field; did you mean "interval"?` + "\n" +
			badf + `:4: bans.ttl: cannot parse "1hour" as a duration (e.g. 500ms, 30s, 5m, 1h)` + "\n"},
		{values, 2, "", values + ":2: interval: 5m0s outside 100ms..1m\n" +
			values + ":4: log.level: loud is not debug, info, warn or error\n" +
			values + ":10: synproxy.mss: 1 outside 536..9000\n" +
			values + ":8: rails.allow[1]: 0.0.0.0/0 is wider than /8 (rails.max_allow_prefix_v4/v6): it would let that traffic past every ban\n"},
		{filepath.Join(dir, "missing.yaml"), 2, "", "no such file"},
	} {
		var out, stderr bytes.Buffer
		root := newRoot()
		root.SetOut(&out)
		root.SetErr(&stderr)
		root.SetArgs([]string{"run", "--check", "--config", tc.path})
		err := root.Execute()
		code := 0
		if err != nil {
			code = cli.ExitCode(err)
		}
		if code != tc.code || out.String() != tc.out || !strings.Contains(stderr.String(), tc.err) {
			t.Errorf("%s: exit %d (%v), stdout %q, stderr %q; want exit %d, stdout %q, stderr with %q",
				tc.path, code, err, out.String(), stderr.String(), tc.code, tc.out, tc.err)
		}
	}
	// nDPI: --check and run refuse it alike in a build without it, and
	// say how to build one (there is no make build-ndpi).
	for _, args := range [][]string{{"run", "--check", "--config", ndpi}, {"run", "--config", ndpi}} {
		var stderr bytes.Buffer
		root := newRoot()
		root.SetOut(&bytes.Buffer{})
		root.SetErr(&stderr)
		root.SetArgs(args)
		err := root.Execute()
		msg := stderr.String()
		if err != nil {
			msg += err.Error()
		}
		want := ndpi + ":5: probe.dpi.engine: ndpi: this tierwall was built without nDPI (build it with `go build -tags ndpi ./cmd/tierwall`"
		if ndpiBuiltIn {
			continue
		}
		if err == nil || cli.ExitCode(err) != cli.ExitUsage || !strings.Contains(msg, want) || strings.Contains(msg, "make build-ndpi") {
			t.Errorf("%v: %v (exit %d), said %q; want exit 2 with %q", args, err, cli.ExitCode(err), msg, want)
		}
	}
}
