// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// FastNetMon CE, from Debian, as the reference the detect→drop section
// compares with: the benchmark installs it when missing (never `make test`
// nor scripts/deps.sh: it is only needed here), keeps its system service
// disabled, and runs its own instance in the benchmark's namespace.
const (
	fnmBin     = "/usr/sbin/fastnetmon"
	fnmPackage = "fastnetmon"
	// policyRCD, when present, tells invoke-rc.d not to start services:
	// the package's postinst would otherwise start fastnetmon on the
	// host's interfaces.
	policyRCD = "/usr/sbin/policy-rc.d"
)

// ensureFastNetMon installs the package when missing and leaves its
// system service disabled and stopped either way; it returns the
// package's version.
func ensureFastNetMon() (string, error) {
	if _, err := os.Stat(fnmBin); errors.Is(err, os.ErrNotExist) {
		fmt.Fprintf(os.Stderr, "bench: installing %s from Debian...\n", fnmPackage)
		if err := aptInstall(fnmPackage); err != nil {
			return "", err
		}
	}
	if _, err := exec.LookPath("systemctl"); err == nil {
		// Offline (no systemd as PID 1) disable still removes the
		// enablement symlink; stop fails there and has nothing to stop.
		if out, err := exec.Command("systemctl", "disable", fnmPackage).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "bench: systemctl disable %s: %v: %s\n", fnmPackage, err, out)
		}
		_ = exec.Command("systemctl", "stop", fnmPackage).Run() // may not be running, or no systemd
	}
	out, err := exec.Command("dpkg-query", "-W", "-f", "${Version}", fnmPackage).Output()
	if err != nil {
		return "", fmt.Errorf("reading %s's version: %w", fnmPackage, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// aptInstall installs pkgs with services kept from starting (a
// policy-rc.d of ours only while none exists), retrying once after
// apt-get update when the package lists are stale or missing.
func aptInstall(pkgs ...string) error {
	if _, err := os.Stat(policyRCD); errors.Is(err, os.ErrNotExist) {
		if err := os.WriteFile(policyRCD, []byte("#!/bin/sh\nexit 101\n"), 0o755); err != nil {
			return fmt.Errorf("writing %s: %w", policyRCD, err)
		}
		defer os.Remove(policyRCD)
	}
	install := func() ([]byte, error) {
		c := exec.Command("apt-get", append([]string{"install", "-y", "-q", "--no-install-recommends"}, pkgs...)...)
		c.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		return c.CombinedOutput()
	}
	if _, err := install(); err == nil {
		return nil
	}
	if out, err := exec.Command("apt-get", "update", "-q").CombinedOutput(); err != nil {
		return fmt.Errorf("apt-get update: %w: %s", err, out)
	}
	if out, err := install(); err != nil {
		return fmt.Errorf("apt-get install %s: %w: %s", strings.Join(pkgs, " "), err, out)
	}
	return nil
}

// fnmInstance is one FastNetMon process in a namespace, with its files.
type fnmInstance struct {
	dir    string
	notify string // the notify script's log: "<unix time> <ip> <action>" per call
	cmd    *exec.Cmd
	exited chan struct{}
}

// startFastNetMon runs FastNetMon in namespace ns, capturing iface with
// AF_PACKET, watching victims (the networks list) with a per-host packet
// threshold of pps and the given averaging time (seconds); every other
// ban trigger, the API, Prometheus and the usage report are off. It
// returns once the capture workers have started (bounded by 15 s).
func startFastNetMon(ns, iface string, victims netip.Prefix, pps, average int) (_ *fnmInstance, err error) {
	dir, err := os.MkdirTemp("", "tierwall-bench-fnm")
	if err != nil {
		return nil, fmt.Errorf("making FastNetMon's directory: %w", err)
	}
	f := &fnmInstance{dir: dir, notify: filepath.Join(dir, "notify.log"), exited: make(chan struct{})}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	// The timestamp first: the script is FastNetMon's only action, and
	// its start is the moment it acted. FastNetMon may write the attack's
	// details to the script's stdin; drain them so it never blocks.
	script := fmt.Sprintf("#!/bin/sh\n# FastNetMon calls: $1 victim, $2 direction, $3 pps, $4 action\necho \"$(date +%%s.%%N) $1 $4\" >> %s\ncat > /dev/null\n", f.notify)
	files := map[string]string{
		"notify.sh":  script,
		"networks":   victims.String() + "\n",
		"whitelist":  "",
		"fnm.conf":   fnmConfig(dir, iface, pps, average),
		"notify.log": "",
	}
	for name, body := range files {
		mode := os.FileMode(0o644)
		if strings.HasSuffix(name, ".sh") {
			mode = 0o755
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), mode); err != nil {
			return nil, fmt.Errorf("writing FastNetMon's %s: %w", name, err)
		}
	}
	logPath := filepath.Join(dir, "fnm.log")
	// ip netns exec execs FastNetMon itself; its own process group lets
	// Stop end the notify scripts it started too.
	f.cmd = exec.Command("ip", "netns", "exec", ns, fnmBin, "--configuration_file", filepath.Join(dir, "fnm.conf"),
		"--log_file", logPath, "--disable_pid_logic")
	f.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := os.Create(filepath.Join(dir, "stdout"))
	if err != nil {
		return nil, fmt.Errorf("creating FastNetMon's output file: %w", err)
	}
	defer out.Close()
	f.cmd.Stdout, f.cmd.Stderr = out, out
	if err := f.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting FastNetMon: %w", err)
	}
	go func() { f.cmd.Wait(); close(f.exited) }()
	defer func() {
		if err != nil {
			f.Stop()
		}
	}()
	for limit := time.Now().Add(15 * time.Second); ; {
		log, _ := os.ReadFile(logPath)
		if strings.Contains(string(log), "Start AF_PACKET worker process") {
			break
		}
		select {
		case <-f.exited:
			return nil, fmt.Errorf("FastNetMon exited at start:\n%s", f.Log())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(limit) {
			return nil, fmt.Errorf("FastNetMon's AF_PACKET capture did not start within 15 s:\n%s", f.Log())
		}
	}
	// One worker per CPU joins the fanout group, one after the other (20
	// ms apart here): let them all join before the first sample.
	time.Sleep(time.Second)
	// A capture that failed (no such interface, no socket) is only an
	// ERROR line in its log, the process runs on: fail now, not after
	// the samples' timeouts. The missing attack-details folder is
	// harmless: collecting details is off.
	log, _ := os.ReadFile(logPath)
	for _, l := range strings.Split(string(log), "\n") {
		if _, msg, ok := strings.Cut(l, "[ERROR] "); ok && !strings.HasPrefix(msg, "Folder for attack details") {
			return nil, fmt.Errorf("FastNetMon reported %q at start:\n%s", strings.TrimSpace(msg), f.Log())
		}
	}
	return f, nil
}

// fnmConfig is FastNetMon 1.2.4's configuration for the benchmark; option
// names as in the package's /etc/fastnetmon.conf.
func fnmConfig(dir, iface string, pps, average int) string {
	return fmt.Sprintf(`logging_level = info
logging_local_syslog_logging = off
logging_remote_syslog_logging = off
disable_usage_report = on
enable_ban = on
enable_ban_ipv6 = off
process_incoming_traffic = on
process_outgoing_traffic = off
ban_time = 1900
unban_only_if_attack_finished = on
networks_list_path = %[1]s/networks
white_list_path = %[1]s/whitelist
enable_connection_tracking = off
ban_for_pps = on
threshold_pps = %[2]d
ban_for_bandwidth = off
ban_for_flows = off
ban_for_tcp_bandwidth = off
ban_for_udp_bandwidth = off
ban_for_icmp_bandwidth = off
ban_for_tcp_pps = off
ban_for_udp_pps = off
ban_for_icmp_pps = off
mirror_afpacket = on
mirror_afxdp = off
mirror_netmap = off
pcap = off
netflow = off
sflow = off
interfaces = %[3]s
average_calculation_time = %[4]d
notify_script_path = %[1]s/notify.sh
collect_attack_pcap_dumps = off
redis_enabled = off
mongodb_enabled = off
exabgp = off
gobgp = off
influxdb = off
graphite = off
monitor_local_ip_addresses = off
monitor_openvz_vps_ip_addresses = off
my_hosts_enable_ban = off
cli_stats_file_path = %[1]s/cli.dat
cli_stats_ipv6_file_path = %[1]s/cli6.dat
enable_api = off
prometheus = off
`, dir, pps, iface, average)
}

// Log is FastNetMon's log and output so far.
func (f *fnmInstance) Log() string {
	log, _ := os.ReadFile(filepath.Join(f.dir, "fnm.log"))
	out, _ := os.ReadFile(filepath.Join(f.dir, "stdout"))
	return string(log) + string(out)
}

// Banned returns when the notify script was first called to ban victim.
func (f *fnmInstance) Banned(victim netip.Addr) (time.Time, bool) {
	file, err := os.Open(f.notify)
	if err != nil {
		return time.Time{}, false
	}
	defer file.Close()
	sc := bufio.NewScanner(file)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 3 || fs[1] != victim.String() || fs[2] != "ban" {
			continue
		}
		sec, frac, _ := strings.Cut(fs[0], ".")
		s, err1 := strconv.ParseInt(sec, 10, 64)
		ns, err2 := strconv.ParseInt((frac + "000000000")[:9], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		return time.Unix(s, ns), true
	}
	return time.Time{}, false
}

// Stop ends FastNetMon and whatever it started (SIGTERM, SIGKILL after
// 5 s) and removes its files.
func (f *fnmInstance) Stop() {
	pg := -f.cmd.Process.Pid
	_ = syscall.Kill(pg, syscall.SIGTERM)
	select {
	case <-f.exited:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(pg, syscall.SIGKILL)
		<-f.exited
	}
	_ = syscall.Kill(pg, syscall.SIGKILL) // notify scripts still running, if any
	os.RemoveAll(f.dir)
}
