// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// repoRoot is the repository, two levels up from this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// make deb DEB_VERSION=1.0.0 shipped a binary that said "(devel)", and no
// copyright file. Builds the package (a minute; skipped with -short or
// without make and dpkg-deb) into a temporary BIN and looks inside.
func TestDebPackage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the package: not with -short")
	}
	for _, tool := range []string{"make", "dpkg-deb", "dpkg"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s", tool)
		}
	}
	bin := t.TempDir()
	const version = "9.9.9~test1"
	mk := exec.Command("make", "--no-print-directory", "-C", repoRoot(t), "deb", "DEB_VERSION="+version, "BIN="+bin)
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make deb: %v\n%s", err, out)
	}
	debs, _ := filepath.Glob(filepath.Join(bin, "tierwall_"+version+"_*.deb"))
	if len(debs) != 1 {
		t.Fatalf("make deb made %v", debs)
	}
	dir := t.TempDir()
	if out, err := exec.Command("dpkg-deb", "-x", debs[0], dir).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb -x: %v\n%s", err, out)
	}
	out, err := exec.Command(filepath.Join(dir, "usr/bin/tierwall"), "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "tierwall "+version+" ") {
		t.Errorf("the packaged tierwall version: %v, %q; want %s", err, out, version)
	}
	got, err := os.ReadFile(filepath.Join(dir, "usr/share/doc/tierwall/copyright"))
	want, _ := os.ReadFile(filepath.Join(repoRoot(t), "deploy/debian/copyright"))
	if err != nil || string(got) != string(want) {
		t.Errorf("/usr/share/doc/tierwall/copyright: %v (%d bytes, want deploy/debian/copyright's %d)", err, len(got), len(want))
	}
}
