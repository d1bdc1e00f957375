// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"bytes"
	"strings"
	"testing"
)

// `tierwall --version` was an unknown flag (exit 2) and there was no
// version subcommand; the link-time version wins over the build info's.
func TestVersionFlagAndCommand(t *testing.T) {
	old := version
	t.Cleanup(func() { version = old })
	version = "v9.9.9"
	var netns string
	for _, args := range [][]string{{"--version"}, {"version"}} {
		var jsonOut bool
		root := NewRoot("tierwall", "test", &netns)
		AddVersion(root, &jsonOut)
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetArgs(args)
		if err := root.Execute(); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if !strings.HasPrefix(out.String(), "tierwall v9.9.9") || !strings.Contains(out.String(), "go1") {
			t.Errorf("%v printed %q", args, out.String())
		}
	}
	if b := BuildInfo(); b.Version != "v9.9.9" || b.GoVersion == "" {
		t.Errorf("build info %+v", b)
	}
}
