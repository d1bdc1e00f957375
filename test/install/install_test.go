// SPDX-License-Identifier: Apache-2.0

// Package install tests what an operator installs: make install into a
// staged DESTDIR, the generated systemd unit (verified and scored by
// systemd-analyze, offline: no systemd as PID 1 needed), the man page, and
// the Debian package make deb builds. Nothing here needs root: DESTDIR
// installs and dpkg-deb --root-owner-group work unprivileged.
package install

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// root is the repository, where the Makefile is.
const root = "../.."

// need skips a test without tool, with the reason. Unlike root, a tool
// may be missing in CI too (the VM may lack systemd): skipping is the
// honest answer there, and CI=true changes nothing.
func need(t *testing.T, tool string) string {
	t.Helper()
	p, err := exec.LookPath(tool)
	if err != nil {
		t.Skipf("skipping: %s is not installed", tool)
	}
	return p
}

func run(t *testing.T, env []string, name string, args ...string) (string, string) {
	t.Helper()
	c := exec.Command(name, args...)
	c.Dir = root
	c.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	if err := c.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String(), errb.String()
}

// install runs make install into a fresh DESTDIR, building into a
// temporary bin/ so that the tree's stays as it was.
func install(t *testing.T, args ...string) string {
	t.Helper()
	need(t, "make")
	dest := t.TempDir()
	run(t, nil, "make", append([]string{"-s", "install", "DESTDIR=" + dest, "BIN=" + t.TempDir()}, args...)...)
	return dest
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func execStart(t *testing.T, unit string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^ExecStart=(\S+)`).FindStringSubmatch(unit)
	if m == nil {
		t.Fatalf("no ExecStart in the unit:\n%s", unit)
	}
	return m[1]
}

func TestMakeInstallStagesEverything(t *testing.T) {
	dest := install(t)
	for path, mode := range map[string]os.FileMode{
		"usr/local/bin/tierwall":                               0o755,
		"usr/local/lib/systemd/system/tierwall.service":        0o644,
		"usr/local/share/man/man8/tierwall.8":                  0o644,
		"usr/local/share/bash-completion/completions/tierwall": 0o644,
		"usr/local/share/zsh/site-functions/_tierwall":         0o644,
		"usr/local/share/tierwall/grafana-dashboard.json":      0o644,
		"usr/local/share/tierwall/tierwall.yaml":               0o644,
		"usr/local/share/tierwall/network.yaml":                0o644,
		"usr/local/share/tierwall/scaleout-collector.yaml":     0o644,
		"usr/local/share/tierwall/scaleout-detector.yaml":      0o644,
		"etc/tierwall/tierwall.yaml":                           0o644,
	} {
		st, err := os.Stat(filepath.Join(dest, path))
		if err != nil {
			t.Errorf("not installed: %v", err)
			continue
		}
		if st.Mode().Perm() != mode || st.Size() == 0 {
			t.Errorf("%s: mode %v, %d bytes; want %v, not empty", path, st.Mode().Perm(), st.Size(), mode)
		}
	}
	unit := read(t, filepath.Join(dest, "usr/local/lib/systemd/system/tierwall.service"))
	if got := execStart(t, unit); got != "/usr/local/bin/tierwall" {
		t.Errorf("ExecStart runs %s, want /usr/local/bin/tierwall (the install's BINDIR)", got)
	}
	if strings.Contains(unit, "@BINDIR@") {
		t.Errorf("template placeholder left in the unit")
	}
	if !strings.Contains(read(t, filepath.Join(dest, "usr/local/share/zsh/site-functions/_tierwall")), "#compdef tierwall") {
		t.Errorf("zsh completion is not tierwall's")
	}

	// A second install keeps the operator's configuration.
	conf := filepath.Join(dest, "etc/tierwall/tierwall.yaml")
	if err := os.WriteFile(conf, []byte("interface: ens1f0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, nil, "make", "-s", "install", "DESTDIR="+dest, "BIN="+t.TempDir())
	if got := read(t, conf); got != "interface: ens1f0\n" {
		t.Errorf("make install overwrote the configuration: %q", got)
	}
}

// The unit's ExecStart follows PREFIX: a package installs under /usr.
func TestMakeInstallPrefix(t *testing.T) {
	dest := install(t, "PREFIX=/usr")
	unit := read(t, filepath.Join(dest, "usr/lib/systemd/system/tierwall.service"))
	if got := execStart(t, unit); got != "/usr/bin/tierwall" {
		t.Errorf("ExecStart runs %s, want /usr/bin/tierwall", got)
	}
	if _, err := os.Stat(filepath.Join(dest, "usr/bin/tierwall")); err != nil {
		t.Errorf("the binary the unit runs is not installed: %v", err)
	}
}

func TestManPageRenders(t *testing.T) {
	need(t, "man")
	out, errs := run(t, []string{"MANWIDTH=80", "LC_ALL=C.UTF-8"}, "man", "--warnings", "-l", "deploy/tierwall.8")
	if errs != "" {
		t.Errorf("man warns:\n%s", errs)
	}
	for _, want := range []string{"TIERWALL(8)", "SYNOPSIS", "/etc/tierwall/tierwall.yaml", "EXIT STATUS"} {
		if !strings.Contains(out, want) {
			t.Errorf("rendered man page lacks %q", want)
		}
	}
}

// systemd-analyze verify the installed unit: every directive known and
// valid for this systemd, the binary it runs there and executable, the
// man page it documents found. Only the DESTDIR staging is undone: the
// ExecStart path is looked up inside DESTDIR (--root would also need the
// whole OS inside it: /bin/kill, sysinit.target).
func TestInstalledUnitVerifies(t *testing.T) {
	need(t, "systemd-analyze")
	dest := install(t)
	unit := read(t, filepath.Join(dest, "usr/local/lib/systemd/system/tierwall.service"))
	staged := strings.Replace(unit, "ExecStart=/usr/local/bin/", "ExecStart="+dest+"/usr/local/bin/", 1)
	dir := t.TempDir()
	path := filepath.Join(dir, "tierwall.service")
	if err := os.WriteFile(path, []byte(staged), 0o644); err != nil {
		t.Fatal(err)
	}
	c := exec.Command("systemd-analyze", "verify", path)
	c.Env = append(os.Environ(), "MANPATH="+filepath.Join(dest, "usr/local/share/man"))
	out, err := c.CombinedOutput()
	if err != nil || len(out) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// The hardening holds: systemd-analyze security rates the unit OK or
// better (the unit before issue 14 was 7.2 MEDIUM).
func TestUnitExposure(t *testing.T) {
	need(t, "systemd-analyze")
	dest := install(t)
	dir := t.TempDir()
	unit := read(t, filepath.Join(dest, "usr/local/lib/systemd/system/tierwall.service"))
	path := filepath.Join(dir, "tierwall.service")
	if err := os.WriteFile(path, []byte(unit), 0o644); err != nil {
		t.Fatal(err)
	}
	c := exec.Command("systemd-analyze", "security", "--offline=true", "--no-pager", path)
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze security: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`Overall exposure level for tierwall.service: ([0-9.]+) (\S+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no overall exposure level in:\n%s", out)
	}
	level, _ := strconv.ParseFloat(string(m[1]), 64)
	if level >= 5 || !regexp.MustCompile(`^(OK|SAFE|PERFECT)$`).Match(m[2]) {
		t.Errorf("exposure %s %s, want OK or better:\n%s", m[1], m[2], out)
	}
	for _, want := range []string{"Type=notify", "WatchdogSec=", "ProtectSystem=strict", "PrivateTmp=yes",
		"RestrictAddressFamilies=AF_UNIX AF_NETLINK AF_INET AF_INET6", "SystemCallFilter=@system-service bpf"} {
		if !strings.Contains(unit, want) {
			t.Errorf("unit lacks %s", want)
		}
	}
}

func TestMakeDeb(t *testing.T) {
	need(t, "make")
	need(t, "dpkg-deb")
	bin := t.TempDir()
	run(t, nil, "make", "-s", "deb", "BIN="+bin, "DEB_VERSION=1.2.3")
	debs, _ := filepath.Glob(filepath.Join(bin, "tierwall_1.2.3_*.deb"))
	if len(debs) != 1 {
		t.Fatalf("make deb built %v, want one tierwall_1.2.3_ARCH.deb", debs)
	}
	deb := debs[0]
	info, _ := run(t, nil, "dpkg-deb", "--info", deb)
	for _, want := range []string{"Package: tierwall", "Version: 1.2.3", "Depends: systemd, nftables, iproute2", "conffiles", "postinst"} {
		if !strings.Contains(info, want) {
			t.Errorf("package info lacks %q:\n%s", want, info)
		}
	}
	x := t.TempDir()
	run(t, nil, "dpkg-deb", "--control", deb, filepath.Join(x, "DEBIAN"))
	if got := read(t, filepath.Join(x, "DEBIAN/conffiles")); got != "/etc/tierwall/tierwall.yaml\n" {
		t.Errorf("conffiles %q", got)
	}
	contents, _ := run(t, nil, "dpkg-deb", "--contents", deb)
	for _, want := range []string{"root/root", "./usr/bin/tierwall", "./usr/lib/systemd/system/tierwall.service",
		"./etc/tierwall/tierwall.yaml", "./usr/share/man/man8/tierwall.8.gz", "./usr/share/tierwall/grafana-dashboard.json", "./usr/share/tierwall/network.yaml",
		"./usr/share/tierwall/scaleout-collector.yaml", "./usr/share/tierwall/scaleout-detector.yaml",
		"./usr/share/bash-completion/completions/tierwall", "./usr/share/zsh/vendor-completions/_tierwall"} {
		if !strings.Contains(contents, want) {
			t.Errorf("package lacks %s:\n%s", want, contents)
		}
	}
	run(t, nil, "dpkg-deb", "--extract", deb, x)
	if got := execStart(t, read(t, filepath.Join(x, "usr/lib/systemd/system/tierwall.service"))); got != "/usr/bin/tierwall" {
		t.Errorf("the package's unit runs %s, want /usr/bin/tierwall", got)
	}
}

// postinst reloads systemd only where systemd runs: a package installed in
// a chroot or container build must not fail on systemctl.
func TestPostinstReloadsOnlyUnderSystemd(t *testing.T) {
	fake := t.TempDir()
	log := filepath.Join(fake, "calls")
	script := "#!/bin/sh\necho \"$@\" >> " + log + "\n[ \"$1\" != is-active ]\n"
	if err := os.WriteFile(filepath.Join(fake, "systemctl"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, []string{"PATH=" + fake + ":" + os.Getenv("PATH")}, "sh", "deploy/debian/postinst", "configure")
	calls, _ := os.ReadFile(log)
	_, err := os.Stat("/run/systemd/system")
	switch underSystemd := err == nil; {
	case underSystemd && !strings.Contains(string(calls), "daemon-reload"):
		t.Errorf("systemd runs here but postinst did not reload it: %q", calls)
	case !underSystemd && len(calls) > 0:
		t.Errorf("no systemd here but postinst called systemctl: %q", calls)
	}
}
