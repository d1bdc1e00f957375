package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tierwall/tierwall/internal/cli"
)

// run --check validates offline: no root, no BPF; 0 for a good file, 1
// with every error located for a bad one.
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
	for _, tc := range []struct {
		path     string
		code     int
		out, err string
	}{
		{good, 0, good + ": ok (role mitigation, interface eth0)\n", ""},
		{badf, 1, "", badf + `:2: intreval: unknown field; did you mean "interval"?` + "\n" +
			badf + `:4: bans.ttl: cannot parse "1hour" as a duration (e.g. 500ms, 30s, 5m, 1h)` + "\n"},
		{filepath.Join(dir, "missing.yaml"), 1, "", "no such file"},
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
}
