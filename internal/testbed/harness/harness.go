// SPDX-License-Identifier: Apache-2.0

// Package harness runs the product for the testbed: a `tierwall run`
// daemon in a network namespace with its output captured and its typed API
// client. One copy, so a fix reaches the demo, the benchmarks and the
// end-to-end tests alike.
package harness

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tierwall/tierwall/internal/bpffs"
	"github.com/tierwall/tierwall/internal/control/api"
)

// Daemon is a running `tierwall run`.
type Daemon struct {
	Cmd      *exec.Cmd
	Client   *api.Client
	out      *syncBuffer
	waitExit chan struct{}
}

// syncBuffer is the daemon's output, written by exec's copier goroutine
// while the caller reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
	w  io.Writer // also written to, if set
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.w != nil {
		// The copy is best effort: failing this Write would stop exec's
		// copier and so the daemon's output, captured or not.
		_, _ = s.w.Write(p)
	}
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Options of StartDaemon.
type Options struct {
	Tierwall string // the product binary
	Netns    string // namespace to run in ("" here)
	// Exec runs the whole process in Netns (ip netns exec) rather than
	// with -n, which moves only the loop's thread: what starts threads
	// of its own that open sockets (the BGP speaker) needs it.
	Exec    bool
	Config  string    // path of the YAML configuration
	Socket  string    // its api.socket, to wait on and talk to
	Log     io.Writer // also receives the daemon's output (optional)
	Timeout time.Duration
	CPUs    string   // run on these CPUs only (taskset's list, e.g. "1"); "" anywhere
	Env     []string // added to the daemon's environment
}

// StartDaemon starts the daemon and waits until its API answers /v1/status
// (or the process exits, or Timeout passes: default 15 s).
func StartDaemon(o Options) (*Daemon, error) {
	args := []string{"run", "--config", o.Config}
	name := o.Tierwall
	switch {
	case o.Netns != "" && o.Exec:
		args = append([]string{"netns", "exec", o.Netns, o.Tierwall}, args...)
		name = "ip"
	case o.Netns != "":
		args = append([]string{"-n", o.Netns}, args...)
	}
	if o.CPUs != "" {
		if name == "ip" {
			return nil, fmt.Errorf("harness: CPUs and Exec together are not supported")
		}
		// taskset sets the affinity before exec, so every thread the
		// daemon ever starts inherits it.
		args = append([]string{"-c", o.CPUs, o.Tierwall}, args...)
		name = "taskset"
	}
	d := &Daemon{Cmd: exec.Command(name, args...), out: &syncBuffer{w: o.Log}, Client: api.NewClient(o.Socket)}
	d.Cmd.Stdout, d.Cmd.Stderr = d.out, d.out
	if len(o.Env) > 0 {
		d.Cmd.Env = append(os.Environ(), o.Env...)
	}
	if err := d.Cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", o.Tierwall, err)
	}
	exited := make(chan struct{})
	go func() { d.Cmd.Wait(); close(exited) }()
	d.Cmd = &exec.Cmd{Process: d.Cmd.Process} // Wait is the goroutine's now
	timeout := o.Timeout
	if timeout == 0 {
		timeout = 15 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		if _, err := d.Client.Status(ctx); err == nil {
			d.waitExit = exited
			return d, nil
		}
		select {
		case <-exited:
			return nil, fmt.Errorf("daemon exited before its API answered:\n%s", d.out)
		case <-ctx.Done():
			d.Cmd.Process.Kill()
			<-exited
			return nil, fmt.Errorf("daemon API did not answer within %v:\n%s", timeout, d.out)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Output is everything the daemon printed so far.
func (d *Daemon) Output() string { return d.out.String() }

// Stop sends SIGTERM and waits for the exit (SIGKILL after 10 s).
func (d *Daemon) Stop() {
	d.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.waitExit:
	case <-time.After(10 * time.Second):
		d.Cmd.Process.Kill()
		<-d.waitExit
	}
}

// Kill ends the daemon with SIGKILL, as a crash would.
func (d *Daemon) Kill() {
	d.Cmd.Process.Kill()
	<-d.waitExit
}

// Exited reports whether the process has ended.
func (d *Daemon) Exited() bool {
	select {
	case <-d.waitExit:
		return true
	default:
		return false
	}
}

// Run runs a command and wraps its output into the error.
func Run(args ...string) error {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// RemovePins removes the pinned state of every filter in namespace ns, so
// the next attach there starts fresh.
func RemovePins(ns string) { _ = bpffs.RemoveNetns(bpffs.DefaultBPFFS, ns) }

// VethPair makes two fresh network namespaces joined by a veth pair, both
// ends up: ifA in nsA, ifB in nsB. Leftovers of a crashed run (the
// namespaces, nsB's pinned filter state) are removed first. The returned
// cleanup removes them again.
func VethPair(nsA, ifA, nsB, ifB string) (cleanup func(), err error) {
	cleanup = func() {
		_ = exec.Command("ip", "netns", "del", nsA).Run() // may not exist
		_ = exec.Command("ip", "netns", "del", nsB).Run()
		RemovePins(nsB)
	}
	cleanup()
	for _, c := range [][]string{
		{"ip", "netns", "add", nsA}, {"ip", "netns", "add", nsB},
		{"ip", "link", "add", ifA, "netns", nsA, "type", "veth", "peer", "name", ifB, "netns", nsB},
		{"ip", "-n", nsA, "link", "set", ifA, "up"}, {"ip", "-n", nsB, "link", "set", ifB, "up"},
		{"ip", "-n", nsA, "link", "set", "lo", "up"}, {"ip", "-n", nsB, "link", "set", "lo", "up"},
	} {
		if err := Run(c...); err != nil {
			cleanup()
			return nil, err
		}
	}
	return cleanup, nil
}
