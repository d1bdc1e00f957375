// SPDX-License-Identifier: Apache-2.0

// Package testutil holds helpers shared by tests that need privileges.
package testutil

import (
	"os"
	"testing"
)

// RequireRoot skips a test that needs root (BPF, netns) when not root, with
// the reason, but fails it under CI=true: CI may never pass by skipping.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("test needs root (BPF, network namespaces) and CI=true forbids skipping")
	}
	t.Skip("skipping: needs root for BPF and network namespaces")
}
