// SPDX-License-Identifier: Apache-2.0

// Package lab builds tierwall's testbed on one machine: network
// namespaces joined by veth, with the emulated NIC between "the internet"
// and the host.
//
//	twl-inet (attackers: live-frames generator; clients: HTTP load)
//	   twl-inet0 ──veth── twl-wire   [twl-nic: emulated NIC stage on twl-wire,
//	                                  bridge twl-br joins twl-wire and twl-hport
//	                                  for what the NIC passes up and for replies]
//	                      twl-hport ──veth── twl-host0   [twl-host: tierwall, nginx]
//
// Every name starts with "twl-", so Down removes exactly the lab's objects,
// also after a crash; Up is idempotent.
package lab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tierwall/tierwall/internal/bpffs"
)

const (
	Prefix = "twl-"
	NSInet = Prefix + "inet"
	NSNic  = Prefix + "nic"
	NSHost = Prefix + "host"

	IfInet  = Prefix + "inet0" // in NSInet
	IfWire  = Prefix + "wire"  // in NSNic, facing NSInet
	IfHPort = Prefix + "hport" // in NSNic, facing NSHost
	IfHost  = Prefix + "host0" // in NSHost
	Bridge  = Prefix + "br"    // in NSNic

	// StateDir holds nginx's files and pid.
	StateDir = "/run/tierwall-lab" // readable by nginx's unprivileged workers
)

// Addresses of the lab.
var (
	Host4   = netip.MustParseAddr("10.70.0.1")
	Client4 = netip.MustParseAddr("10.70.0.10")
	Host6   = netip.MustParseAddr("fd70::1")
	Client6 = netip.MustParseAddr("fd70::10")
	// The lab's own networks: the host and the legitimate clients.
	Net4 = netip.MustParsePrefix("10.70.0.0/16")
	Net6 = netip.MustParsePrefix("fd70::/16")
	// Attackers live here (the generator's default 10.128.0.0/9 and
	// fd00:100::/32); the host routes them back to the internet side.
	AttackNet4 = netip.MustParsePrefix("10.128.0.0/9")
	AttackNet6 = netip.MustParsePrefix("fd00:100::/32")
)

func run(args ...string) error {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Namespaces lists the lab's namespaces that exist.
func Namespaces() []string {
	ents, _ := os.ReadDir("/run/netns")
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), Prefix) {
			out = append(out, e.Name())
		}
	}
	return out
}

// killInside kills the processes inside namespace ns, never this one:
// a thread of ours that visited ns can make ip netns pids list us.
func killInside(ns string) {
	out, err := exec.Command("ip", "netns", "pids", ns).Output()
	if err != nil {
		return
	}
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil && pid != os.Getpid() {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// Up builds the lab, or completes a partial one. Safe to run again.
func Up() error {
	release, err := Hold(context.Background(), "building the lab", os.Stderr)
	if err != nil {
		return err
	}
	defer release()
	if len(Namespaces()) == 3 && Ready() == nil {
		return nil
	}
	// A partial lab (a crash half-way) is rebuilt from scratch.
	if err := Down(); err != nil {
		return err
	}
	steps := [][]string{
		{"ip", "netns", "add", NSInet}, {"ip", "netns", "add", NSNic}, {"ip", "netns", "add", NSHost},
		{"ip", "link", "add", IfInet, "netns", NSInet, "type", "veth", "peer", "name", IfWire, "netns", NSNic},
		{"ip", "link", "add", IfHPort, "netns", NSNic, "type", "veth", "peer", "name", IfHost, "netns", NSHost},
		{"ip", "-n", NSNic, "link", "add", Bridge, "type", "bridge"},
		{"ip", "-n", NSNic, "link", "set", IfWire, "master", Bridge},
		{"ip", "-n", NSNic, "link", "set", IfHPort, "master", Bridge},
		{"ip", "-n", NSInet, "addr", "add", Client4.String() + "/16", "dev", IfInet},
		{"ip", "-n", NSInet, "addr", "add", Client6.String() + "/64", "dev", IfInet, "nodad"},
		{"ip", "-n", NSHost, "addr", "add", Host4.String() + "/16", "dev", IfHost},
		{"ip", "-n", NSHost, "addr", "add", Host6.String() + "/64", "dev", IfHost, "nodad"},
	}
	for _, ns := range []string{NSInet, NSNic, NSHost} {
		steps = append(steps, []string{"ip", "-n", ns, "link", "set", "lo", "up"})
	}
	for _, l := range [][2]string{{NSInet, IfInet}, {NSNic, IfWire}, {NSNic, IfHPort}, {NSNic, Bridge}, {NSHost, IfHost}} {
		steps = append(steps, []string{"ip", "-n", l[0], "link", "set", l[1], "up"})
	}
	steps = append(steps,
		// Replies to (spoofed) attackers go back out; they never answer.
		[]string{"ip", "-n", NSHost, "route", "add", AttackNet4.String(), "dev", IfHost},
		[]string{"ip", "-n", NSHost, "route", "add", AttackNet6.String(), "dev", IfHost},
		[]string{"ip", "netns", "exec", NSHost, "sysctl", "-qw", "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf." + IfHost + ".rp_filter=0"},
		// No autoconfiguration chatter on the internet side.
		[]string{"ip", "netns", "exec", NSInet, "sysctl", "-qw", "net.ipv6.conf.all.accept_ra=0"},
		// Frames leave the internet side with complete checksums, as on a
		// real wire: veth's checksum offload state would be lost when the
		// NIC stage redirects them as xdp_frames, and TCP would drop them.
		[]string{"ip", "netns", "exec", NSInet, "ethtool", "-K", IfInet, "tx", "off"},
	)
	for _, s := range steps {
		if err := run(s...); err != nil {
			_ = Down() // the step's error is the one to report; the next Up clears what is left
			return fmt.Errorf("lab up: %w", err)
		}
	}
	return Ready()
}

// Ready checks that every interface is there and up.
func Ready() error {
	for _, l := range [][2]string{{NSInet, IfInet}, {NSNic, IfWire}, {NSNic, IfHPort}, {NSNic, Bridge}, {NSHost, IfHost}} {
		out, err := exec.Command("ip", "-n", l[0], "-br", "link", "show", l[1]).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "UP") {
			return fmt.Errorf("lab: %s in %s is missing or down", l[1], l[0])
		}
	}
	return nil
}

// Down removes everything the lab made: nginx, the namespaces (and so
// every veth and bridge), the pinned state of tierwall inside them.
// Idempotent; works after a crash.
func Down() error {
	release, err := Hold(context.Background(), "taking the lab down", os.Stderr)
	if err != nil {
		return err
	}
	defer release()
	StopNginx()
	var errs []error
	for _, ns := range Namespaces() {
		// Processes still inside (a generator, a daemon from a killed
		// demo) would keep the namespace's interfaces alive.
		killInside(ns)
		if err := run("ip", "netns", "del", ns); err != nil {
			errs = append(errs, err)
		}
	}
	for _, ns := range []string{NSInet, NSNic, NSHost} {
		_ = bpffs.RemoveNetns(bpffs.DefaultBPFFS, ns)
	}
	os.RemoveAll(StateDir)
	return errors.Join(errs...)
}

// Status describes what exists.
func Status() string {
	var b strings.Builder
	ns := Namespaces()
	if len(ns) == 0 {
		return "lab: down\n"
	}
	fmt.Fprintf(&b, "lab: namespaces %s\n", strings.Join(ns, ", "))
	if err := Ready(); err != nil {
		fmt.Fprintf(&b, "lab: incomplete: %v (run lab down, then lab up)\n", err)
	} else {
		fmt.Fprintf(&b, "lab: links up; host %s / %s, client %s / %s\n", Host4, Host6, Client4, Client6)
	}
	if pid := nginxPid(); pid > 0 {
		fmt.Fprintf(&b, "lab: nginx running (pid %d) on http://%s/ and http://[%s]/\n", pid, Host4, Host6)
	}
	return b.String()
}

const nginxConf = `worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log;
daemon on;
events { worker_connections 4096; }
http {
	access_log off;
	client_body_temp_path %[1]s/body;
	proxy_temp_path %[1]s/proxy;
	fastcgi_temp_path %[1]s/fastcgi;
	uwsgi_temp_path %[1]s/uwsgi;
	scgi_temp_path %[1]s/scgi;
	keepalive_requests 1000000;
	server {
		listen %[2]s:80;
		listen [%[3]s]:80;
		root %[1]s/www;
		location / { index index.html; }
	}
}
`

// StartNginx serves a small page on the host's addresses (port 80).
func StartNginx() error {
	if nginxPid() > 0 {
		return nil
	}
	if _, err := exec.LookPath("nginx"); err != nil {
		return fmt.Errorf("nginx is not installed (make deps installs nginx-light): %w", err)
	}
	if err := os.MkdirAll(filepath.Join(StateDir, "www"), 0o755); err != nil {
		return err
	}
	page := strings.Repeat("tierwall lab page\n", 32)
	if err := os.WriteFile(filepath.Join(StateDir, "www", "index.html"), []byte(page), 0o644); err != nil {
		return err
	}
	conf := filepath.Join(StateDir, "nginx.conf")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(nginxConf, StateDir, Host4, Host6)), 0o644); err != nil {
		return err
	}
	if err := run("ip", "netns", "exec", NSHost, "nginx", "-c", conf); err != nil {
		return err
	}
	deadline := time.Now().Add(5 * time.Second)
	for nginxPid() == 0 {
		if time.Now().After(deadline) {
			return errors.New("nginx did not start (see " + StateDir + "/error.log)")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

func nginxPid() int {
	b, err := os.ReadFile(filepath.Join(StateDir, "nginx.pid"))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || syscall.Kill(pid, 0) != nil {
		return 0
	}
	return pid
}

// StopNginx stops the lab's nginx, if any.
func StopNginx() {
	if pid := nginxPid(); pid > 0 {
		syscall.Kill(pid, syscall.SIGQUIT)
		for i := 0; i < 50 && syscall.Kill(pid, 0) == nil; i++ {
			time.Sleep(20 * time.Millisecond)
		}
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

// MAC returns the hardware address of ifname in namespace ns.
func MAC(ns, ifname string) (net.HardwareAddr, error) {
	out, err := exec.Command("ip", "-n", ns, "-br", "link", "show", ifname).Output()
	if err != nil {
		return nil, fmt.Errorf("%s in %s: %w", ifname, ns, err)
	}
	f := strings.Fields(string(out))
	if len(f) < 3 {
		return nil, fmt.Errorf("%s in %s: unexpected %q", ifname, ns, out)
	}
	return net.ParseMAC(f[2])
}
