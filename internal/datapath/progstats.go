// SPDX-License-Identifier: Apache-2.0

package datapath

import (
	"fmt"
	"io"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// RunTimeStats turns the kernel's BPF run-time statistics on until the
// closer is closed (BPF_ENABLE_STATS: counted per program while any such
// file descriptor is open; off by default because it costs two clock
// reads per run). The evaluation measures XDP time with it.
func RunTimeStats() (io.Closer, error) {
	c, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		return nil, fmt.Errorf("enabling BPF run-time statistics: %w", err)
	}
	return c, nil
}

// Prog is a loaded program found by id (e.g. the XDP program an
// interface reports), held open to read its statistics.
type Prog struct{ p *ebpf.Program }

// OpenProg opens the program with this id.
func OpenProg(id uint32) (*Prog, error) {
	p, err := ebpf.NewProgramFromID(ebpf.ProgramID(id))
	if err != nil {
		return nil, fmt.Errorf("opening BPF program %d: %w", id, err)
	}
	return &Prog{p}, nil
}

// RunTime is the program's total run time so far, counted while
// RunTimeStats was on.
func (p *Prog) RunTime() (time.Duration, error) {
	st, err := p.p.Stats()
	if err != nil {
		return 0, fmt.Errorf("reading BPF program statistics: %w", err)
	}
	return st.Runtime, nil
}

// Close releases the program.
func (p *Prog) Close() error { return p.p.Close() }
