// SPDX-License-Identifier: Apache-2.0

package evalkit

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"sync"
	"syscall"
	"time"
)

// Proc is one tool's process.
type Proc struct {
	Cmd  *exec.Cmd
	done chan struct{}
	mu   sync.Mutex
	out  []string
}

// Stop ends the process: SIGTERM, then SIGKILL if it lingers.
func (p *Proc) Stop() {
	if p.Cmd.Process == nil {
		return
	}
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(3 * time.Second):
		_ = p.Cmd.Process.Kill()
		<-p.done
	}
}

// Lines is the output the process printed so far, a line each.
func (p *Proc) Lines() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.out)
}

// Start runs cmd pinned to CPU 1, keeping its standard output's lines.
func Start(ctx context.Context, name string, args []string, log io.Writer) (*Proc, error) {
	return StartCmd(exec.CommandContext(ctx, "taskset", append([]string{"-c", "1", name}, args...)...), name, log)
}

// StartCmd starts cmd (name is what errors call it), its standard error
// into log, and keeps its standard output's lines until it exits.
func StartCmd(cmd *exec.Cmd, name string, log io.Writer) (*Proc, error) {
	cmd.Stderr = log
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &Proc{Cmd: cmd, done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	go func() {
		s := bufio.NewScanner(out)
		s.Buffer(make([]byte, 1<<20), 1<<20)
		for s.Scan() {
			p.mu.Lock()
			p.out = append(p.out, s.Text())
			p.mu.Unlock()
		}
		_ = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}
