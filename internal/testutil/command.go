// SPDX-License-Identifier: Apache-2.0

package testutil

import (
	"os"
	"os/exec"
	"testing"
)

// RequireCommand skips a test that runs programs not installed here (the
// project's scripts/deps.sh installs them), but fails it under CI=true.
func RequireCommand(t testing.TB, names ...string) {
	t.Helper()
	for _, n := range names {
		if _, err := exec.LookPath(n); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("test needs %s (scripts/deps.sh installs it) and CI=true forbids skipping", n)
			}
			t.Skipf("skipping: %s not installed (scripts/deps.sh installs it)", n)
		}
	}
}
