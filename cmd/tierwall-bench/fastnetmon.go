// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/tierwall/tierwall/internal/testbed/fastnetmon"
)

// FastNetMon CE, from Debian, as the reference the detect→drop section
// compares with (internal/testbed/fastnetmon): the benchmark installs it
// when missing, keeps its system service disabled, and runs its own
// instance in the benchmark's namespace.

// fnmInstance is one FastNetMon process in a namespace, with its files.
type fnmInstance struct {
	cfg    fastnetmon.Config
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
	cfg := fastnetmon.Config{Dir: dir, Networks: []netip.Prefix{victims}, ThresholdPPS: pps, Average: average, Interface: iface}
	f := &fnmInstance{cfg: cfg, exited: make(chan struct{})}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	if err := cfg.Write(); err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "fnm.log")
	// ip netns exec execs FastNetMon itself; its own process group lets
	// Stop end the notify scripts it started too.
	f.cmd = exec.Command("ip", append([]string{"netns", "exec", ns, fastnetmon.Bin}, cfg.Args(logPath)...)...)
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

// Log is FastNetMon's log and output so far.
func (f *fnmInstance) Log() string {
	log, _ := os.ReadFile(filepath.Join(f.cfg.Dir, "fnm.log"))
	out, _ := os.ReadFile(filepath.Join(f.cfg.Dir, "stdout"))
	return string(log) + string(out)
}

// Banned returns when the notify script was first called to ban victim.
func (f *fnmInstance) Banned(victim netip.Addr) (time.Time, bool) {
	for _, b := range f.cfg.Bans() {
		if b.IP == victim {
			return b.At, true
		}
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
	os.RemoveAll(f.cfg.Dir)
}
