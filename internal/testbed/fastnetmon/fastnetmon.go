// SPDX-License-Identifier: Apache-2.0

// Package fastnetmon is FastNetMon Community (Debian's package) as the
// reference tierwall is measured against: by the detect→drop benchmark
// (cmd/tierwall-bench, capturing a veth with AF_PACKET) and by the
// network-mode evaluation (internal/testbed/eval/network, its sFlow and
// NetFlow collectors). It writes one instance's configuration and files,
// parses what its notify script recorded, and installs the package where
// it is missing. Starting the process is the caller's: each runs it its
// own way (a namespace, a process group, the evaluation's process
// tracking).
package fastnetmon

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

const (
	// Bin is where Debian's package puts the daemon.
	Bin     = "/usr/sbin/fastnetmon"
	Package = "fastnetmon"
	// policyRCD, when present, tells invoke-rc.d not to start services:
	// the package's postinst would otherwise start fastnetmon on the
	// host's interfaces.
	policyRCD = "/usr/sbin/policy-rc.d"
)

// Config is one instance: a per-host packet threshold, every other ban
// trigger off, the notify script as its only action, and either an
// AF_PACKET capture of Interface or sFlow and NetFlow collectors.
type Config struct {
	Dir          string         // its files: configuration, lists, notify script and log, stats
	Networks     []netip.Prefix // the hosts it watches
	ThresholdPPS int
	// Average is average_calculation_time, seconds: the exponential
	// moving average's window (5 as shipped; 1 the shortest it parses).
	Average int
	// Interface, for an AF_PACKET capture; empty for the collectors.
	Interface string
	// SFlow and NetFlow are the collectors' addresses (Interface empty).
	SFlow, NetFlow netip.AddrPort
}

// option is one configuration line; the file keeps their order.
type option struct{ key, value string }

// options are c's configuration lines: option names as in the package's
// /etc/fastnetmon.conf (1.2.4).
func (c Config) options() []option {
	dir := c.Dir
	o := []option{
		{"logging_level", "info"}, {"logging_local_syslog_logging", "off"}, {"logging_remote_syslog_logging", "off"},
		{"disable_usage_report", "on"},
		{"enable_ban", "on"}, {"enable_ban_ipv6", "off"},
		{"process_incoming_traffic", "on"}, {"process_outgoing_traffic", "off"},
		{"ban_time", "1900"}, {"unban_only_if_attack_finished", "on"},
		{"networks_list_path", filepath.Join(dir, "networks")}, {"white_list_path", filepath.Join(dir, "whitelist")},
		{"enable_connection_tracking", "off"},
		{"ban_for_pps", "on"}, {"threshold_pps", strconv.Itoa(c.ThresholdPPS)},
		{"ban_for_bandwidth", "off"}, {"ban_for_flows", "off"},
		{"mirror_afxdp", "off"}, {"mirror_netmap", "off"}, {"pcap", "off"},
		{"average_calculation_time", strconv.Itoa(c.Average)},
		{"notify_script_path", filepath.Join(dir, "notify.sh")},
		{"collect_attack_pcap_dumps", "off"},
		{"redis_enabled", "off"}, {"mongodb_enabled", "off"}, {"exabgp", "off"}, {"gobgp", "off"},
		{"influxdb", "off"}, {"graphite", "off"},
		{"monitor_local_ip_addresses", "off"}, {"monitor_openvz_vps_ip_addresses", "off"},
		{"cli_stats_file_path", filepath.Join(dir, "cli.dat")}, {"cli_stats_ipv6_file_path", filepath.Join(dir, "cli6.dat")},
		{"enable_api", "off"}, {"prometheus", "off"},
	}
	if c.Interface != "" {
		return append(o,
			option{"ban_for_tcp_bandwidth", "off"}, option{"ban_for_udp_bandwidth", "off"}, option{"ban_for_icmp_bandwidth", "off"},
			option{"ban_for_tcp_pps", "off"}, option{"ban_for_udp_pps", "off"}, option{"ban_for_icmp_pps", "off"},
			option{"mirror_afpacket", "on"}, option{"netflow", "off"}, option{"sflow", "off"},
			option{"interfaces", c.Interface},
			option{"my_hosts_enable_ban", "off"})
	}
	// The collectors: rates recalculated every second (its minimum),
	// checked every second, the feed's sampling rate taken as given.
	return append(o,
		option{"ban_details_records_count", "20"}, option{"check_period", "1"},
		option{"threshold_mbps", "1000000"}, option{"threshold_flows", "100000000"},
		option{"mirror_afpacket", "off"},
		option{"sflow", "on"}, option{"sflow_host", c.SFlow.Addr().String()}, option{"sflow_port", strconv.Itoa(int(c.SFlow.Port()))},
		option{"netflow", "on"}, option{"netflow_host", c.NetFlow.Addr().String()}, option{"netflow_port", strconv.Itoa(int(c.NetFlow.Port()))},
		option{"netflow_sampling_ratio", "1"},
		option{"speed_calculation_delay", "1"},
		option{"pid_path", filepath.Join(dir, "fastnetmon.pid")},
		option{"kafka_traffic_export", "off"})
}

// Render is c as FastNetMon's configuration file.
func (c Config) Render() string {
	var b strings.Builder
	for _, o := range c.options() {
		fmt.Fprintf(&b, "%s = %s\n", o.key, o.value)
	}
	return b.String()
}

// ConfigPath is the configuration file Write makes.
func (c Config) ConfigPath() string { return filepath.Join(c.Dir, "fastnetmon.conf") }

// NotifyLog is the log the notify script appends to: one line per call,
// "SECONDS.NANOS IP DIRECTION PPS ACTION".
func (c Config) NotifyLog() string { return filepath.Join(c.Dir, "notify.log") }

// Write makes c's files in c.Dir: the configuration, the networks list,
// an empty whitelist and the notify script (its log starts empty).
func (c Config) Write() error {
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return fmt.Errorf("making FastNetMon's directory: %w", err)
	}
	var nets strings.Builder
	for _, p := range c.Networks {
		nets.WriteString(p.String() + "\n")
	}
	files := map[string]string{
		"fastnetmon.conf": c.Render(),
		"networks":        nets.String(),
		"whitelist":       "",
		// FastNetMon CE calls it with the victim, direction, pps and
		// action, and may write the attack's details to its stdin. The
		// timestamp first: the call is its only action, and the call's
		// start is the moment it acted. Draining stdin keeps it from
		// blocking.
		"notify.sh":  "#!/bin/sh\necho \"$(date +%s.%N) $*\" >> " + c.NotifyLog() + "\ncat >/dev/null\n",
		"notify.log": "",
	}
	for name, body := range files {
		mode := os.FileMode(0o644)
		if strings.HasSuffix(name, ".sh") {
			mode = 0o755
		}
		if err := os.WriteFile(filepath.Join(c.Dir, name), []byte(body), mode); err != nil {
			return fmt.Errorf("writing FastNetMon's %s: %w", name, err)
		}
	}
	return nil
}

// Args are FastNetMon's arguments for c, logging to logPath.
func (c Config) Args(logPath string) []string {
	return []string{"--configuration_file", c.ConfigPath(), "--log_file", logPath, "--disable_pid_logic"}
}

// Ban is one ban the notify script recorded.
type Ban struct {
	At  time.Time
	IP  netip.Addr
	PPS string
}

// ParseNotify reads the notify script's log; lines that are not a ban
// are skipped.
func ParseNotify(s string) []Ban {
	var out []Ban
	for _, l := range strings.Split(s, "\n") {
		f := strings.Fields(l)
		if len(f) < 5 || f[4] != "ban" {
			continue
		}
		ip, err := netip.ParseAddr(f[1])
		if err != nil {
			continue
		}
		sec, nsec, _ := strings.Cut(f[0], ".")
		si, err1 := strconv.ParseInt(sec, 10, 64)
		ni, err2 := strconv.ParseInt((nsec + "000000000")[:9], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		out = append(out, Ban{At: time.Unix(si, ni), IP: ip, PPS: f[3]})
	}
	return out
}

// Bans reads the notify script's log of c (none when unreadable).
func (c Config) Bans() []Ban {
	raw, err := os.ReadFile(c.NotifyLog())
	if err != nil {
		return nil
	}
	return ParseNotify(string(raw))
}

// Ensure installs the package when missing and leaves its system service
// disabled and stopped either way (only the benchmarks and evaluations
// need it: never `make test` nor scripts/deps.sh); it returns the
// package's version. Progress goes to log.
func Ensure(log io.Writer) (string, error) {
	if _, err := os.Stat(Bin); errors.Is(err, os.ErrNotExist) {
		fmt.Fprintf(log, "installing %s from Debian...\n", Package)
		if err := aptInstall(Package); err != nil {
			return "", err
		}
	}
	if _, err := exec.LookPath("systemctl"); err == nil {
		// Offline (no systemd as PID 1) disable still removes the
		// enablement symlink; stop fails there and has nothing to stop.
		if out, err := exec.Command("systemctl", "disable", Package).CombinedOutput(); err != nil {
			fmt.Fprintf(log, "systemctl disable %s: %v: %s\n", Package, err, out)
		}
		_ = exec.Command("systemctl", "stop", Package).Run() // may not be running, or no systemd
	}
	out, err := exec.Command("dpkg-query", "-W", "-f", "${Version}", Package).Output()
	if err != nil {
		return "", fmt.Errorf("reading %s's version: %w", Package, err)
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
