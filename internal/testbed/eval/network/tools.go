// SPDX-License-Identifier: Apache-2.0

package network

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tierwall/tierwall/internal/control/config"
	"github.com/tierwall/tierwall/internal/testbed/eval/evalkit"
	"github.com/tierwall/tierwall/internal/testbed/harness"
)

type tierwallProc struct{ *evalkit.Proc }

// tierwallConfig is netcollect's configuration: 101 exporters
// (127.0.0.1 on, the run's and the memory steps'), the run's threshold
// per host, and a host group per carpet bombing's /24 with its total at
// the same threshold.
func tierwallConfig(p Params, addr netip.AddrPort, cells []Cell) *config.Config {
	exporters := make([]config.TelemetryExporter, 101)
	for i := range exporters {
		exporters[i] = config.TelemetryExporter{Address: fmt.Sprintf("127.0.0.%d", 1+i), Name: fmt.Sprintf("r%d", i)}
	}
	c := evalkit.CollectorConfig(addr.String(), exporters, p.Threshold)
	var groups []config.HostGroup
	for _, cell := range cells {
		if cell.Kind == "carpet" {
			name := "carpet-" + strings.NewReplacer(".", "-", "/", "-").Replace(cell.Victim)
			groups = append(groups, config.HostGroup{Name: name, Prefixes: []string{cell.Victim}})
		}
	}
	if len(groups) > 0 {
		c.HostGroups = groups
		c.Telemetry.Groups = map[string]config.TelemetryGroup{}
		for _, g := range groups {
			c.Telemetry.Groups[g.Name] = config.TelemetryGroup{Total: map[string]config.TelemetryLimits{"all": {PPS: p.Threshold}}}
		}
	}
	return c
}

// startTierwall writes a tierwall.yaml with the run's thresholds (a host
// group per carpet bombing's /24, its total at the same threshold) and
// runs netcollect on it.
func startTierwall(ctx context.Context, p Params, dir string, addr netip.AddrPort, cells []Cell) (*tierwallProc, error) {
	cfg := filepath.Join(dir, "tierwall.yaml")
	if err := harness.WriteConfig(cfg, tierwallConfig(p, addr, cells)); err != nil {
		return nil, fmt.Errorf("writing tierwall's configuration: %w", err)
	}
	pr, err := evalkit.Start(ctx, p.Self, []string{"netcollect", "--config", cfg}, p.Log)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(10 * time.Second)
	for evalkit.UDPDrops(addr.Port()) == math.MaxUint64 || !evalkit.Listening(addr.Port()) {
		if time.Now().After(deadline) {
			pr.Stop()
			return nil, fmt.Errorf("tierwall's collector did not listen on %v", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return &tierwallProc{pr}, nil
}

// NetcollectLine is what netcollect prints: an attack as it starts, or
// its counters when asked (SIGUSR1).
type NetcollectLine struct {
	Attack *json.RawMessage `json:"attack,omitempty"`
	// Reported is when netcollect printed the attack: the time it fired,
	// as FastNetMon's notify script records its own.
	Reported time.Time        `json:"reported,omitzero"`
	Stats    *NetcollectStats `json:"stats,omitempty"`
}

// NetcollectStats sum tierwall's exporter counters.
type NetcollectStats struct {
	Datagrams, Records, DecodeErrors, SequenceGaps, TemplatesRefused uint64
	Templates                                                        int
	// LiveHeap is the Go heap in use after a collection (bytes).
	LiveHeap uint64
}

func (t *tierwallProc) attacks() []twAttack {
	var out []twAttack
	for _, l := range t.Lines() {
		var x NetcollectLine
		if json.Unmarshal([]byte(l), &x) != nil || x.Attack == nil {
			continue
		}
		var a twAttack
		if json.Unmarshal(*x.Attack, &a) == nil {
			a.Reported = x.Reported
			out = append(out, a)
		}
	}
	return out
}

func (t *tierwallProc) stats() (NetcollectStats, error) {
	n := len(t.Lines())
	if err := t.Cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		return NetcollectStats{}, fmt.Errorf("asking tierwall for its counters: %w", err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		ls := t.Lines()
		for _, l := range ls[min(n, len(ls)):] {
			var x NetcollectLine
			if json.Unmarshal([]byte(l), &x) == nil && x.Stats != nil {
				return *x.Stats, nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return NetcollectStats{}, errors.New("tierwall did not print its counters")
}

type fnmProc struct {
	*evalkit.Proc
	notify string
}

// fastnetmonConf is FastNetMon's configuration for the run: its sFlow
// and NetFlow collectors on the addresses given, the per-host pps
// threshold, its shortest averaging (1 s) and checks every second, the
// notify script recording when it fires; nothing else on.
func fastnetmonConf(dir string, sflow, nf netip.AddrPort, threshold float64) string {
	return fmt.Sprintf(`logging_level = info
logging_local_syslog_logging = off
logging_remote_syslog_logging = off
disable_usage_report = on
enable_ban = on
enable_ban_ipv6 = off
process_incoming_traffic = on
process_outgoing_traffic = off
ban_details_records_count = 20
ban_time = 1900
unban_only_if_attack_finished = on
networks_list_path = %[1]s/networks_list
white_list_path = %[1]s/networks_whitelist
check_period = 1
enable_connection_tracking = off
ban_for_pps = on
ban_for_bandwidth = off
ban_for_flows = off
threshold_pps = %[6]d
threshold_mbps = 1000000
threshold_flows = 100000000
mirror_afpacket = off
mirror_afxdp = off
mirror_netmap = off
pcap = off
sflow = on
sflow_host = %[2]s
sflow_port = %[3]d
netflow = on
netflow_host = %[4]s
netflow_port = %[5]d
netflow_sampling_ratio = 1
average_calculation_time = 1
speed_calculation_delay = 1
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
pid_path = %[1]s/fastnetmon.pid
cli_stats_file_path = %[1]s/fastnetmon.dat
cli_stats_ipv6_file_path = %[1]s/fastnetmon_ipv6.dat
enable_api = off
kafka_traffic_export = off
prometheus = off
`, dir, sflow.Addr(), sflow.Port(), nf.Addr(), nf.Port(), int(threshold))
}

func startFastNetMon(ctx context.Context, p Params, dir string, sflow, nf netip.AddrPort) (*fnmProc, error) {
	fdir := filepath.Join(dir, "fastnetmon")
	if err := os.MkdirAll(fdir, 0o755); err != nil {
		return nil, fmt.Errorf("making FastNetMon's directory: %w", err)
	}
	notify := filepath.Join(fdir, "notify.log")
	files := map[string]string{
		"networks_list":      netProtected.String() + "\n",
		"networks_whitelist": "",
		"fastnetmon.conf":    fastnetmonConf(fdir, sflow, nf, p.Threshold),
		// FastNetMon CE calls it with IP, direction, pps and action, the
		// attack's details on standard input.
		"notify.sh": "#!/bin/sh\necho \"$(date +%s.%N) $*\" >> " + notify + "\ncat >/dev/null\n",
	}
	for n, s := range files {
		mode := os.FileMode(0o644)
		if strings.HasSuffix(n, ".sh") {
			mode = 0o755
		}
		if err := os.WriteFile(filepath.Join(fdir, n), []byte(s), mode); err != nil {
			return nil, fmt.Errorf("writing FastNetMon's %s: %w", n, err)
		}
	}
	pr, err := evalkit.Start(ctx, p.FastNetMon, []string{"--configuration_file", filepath.Join(fdir, "fastnetmon.conf"),
		"--log_file", filepath.Join(fdir, "fastnetmon.log"), "--disable_pid_logic"}, p.Log)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(15 * time.Second)
	for !evalkit.Listening(sflow.Port()) || !evalkit.Listening(nf.Port()) {
		if time.Now().After(deadline) {
			pr.Stop()
			return nil, fmt.Errorf("FastNetMon did not listen on %v and %v", sflow, nf)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return &fnmProc{Proc: pr, notify: notify}, nil
}

// bans parses the notify script's log: "SECONDS.NANOS IP DIRECTION PPS
// ACTION".
func (f *fnmProc) bans() []fnmBan {
	raw, err := os.ReadFile(f.notify)
	if err != nil {
		return nil
	}
	return ParseNotify(string(raw))
}

// ParseNotify reads the notify script's log; lines that are not a ban
// are skipped.
func ParseNotify(s string) []fnmBan {
	var out []fnmBan
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
		out = append(out, fnmBan{At: time.Unix(si, ni), IP: ip, PPS: f[3]})
	}
	return out
}

// rss reads a Vm* field of /proc/PID/status in KiB.
func rss(pid int, field string) uint64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(raw), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && k == field {
			n, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}
