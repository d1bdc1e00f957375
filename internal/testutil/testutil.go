// SPDX-License-Identifier: Apache-2.0

// Package testutil holds helpers shared by tests that need privileges.
package testutil

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
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

// RequireKernel skips a test whose kernel feature this kernel lacks (the
// VM-run kernels have it: scripts/vmtest.sh), with the reason, but fails
// it when TIERWALL_REQUIRE names the feature: on a kernel that must have
// it, a skip would hide a failure.
func RequireKernel(t testing.TB, feature string, have bool, why string) {
	t.Helper()
	if have {
		return
	}
	for _, f := range strings.Fields(os.Getenv("TIERWALL_REQUIRE")) {
		if f == feature {
			t.Fatalf("this kernel lacks %s (%s) and TIERWALL_REQUIRE names it", feature, why)
		}
	}
	t.Skipf("skipping: this kernel lacks %s (%s)", feature, why)
}

// Scaled stretches a test's patience by TIERWALL_TIME_SCALE (a whole
// number, default 1): the kernel-VM test runs the same end-to-end tests
// on an emulated CPU, where loading the data plane alone takes seconds.
// Only waits scale; what a test checks does not.
func Scaled(d time.Duration) time.Duration {
	return d * time.Duration(scale())
}

// ScaledRate slows a rate a test's traffic must exceed (a detector's
// threshold) by the same factor: on the emulated CPU the test's own
// sender reaches a sixth of its host rate or less, so a threshold made
// for the host would be one the VM's "attack" never crosses. What is
// checked (who is banned, who never is) stays the same.
func ScaledRate(pps int) int {
	return pps / scale()
}

func scale() int {
	if n, err := strconv.Atoi(os.Getenv("TIERWALL_TIME_SCALE")); err == nil && n > 1 {
		return n
	}
	return 1
}
