// SPDX-License-Identifier: Apache-2.0

package modes

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/tierwall/tierwall/internal/testbed/eval/evalkit"
	"github.com/tierwall/tierwall/internal/testbed/lab"
	"github.com/tierwall/tierwall/internal/testbed/trafgen"
)

// Options of a whole evaluation.
type Options struct {
	Sizes    []int
	Dists    []trafgen.Dist
	Duration time.Duration
	Only     map[string]bool
	Out      string
	Log      io.Writer
	Smoke    bool
	Repeat   int // measurements per drop-rate cell, median reported
}

// Run runs every experiment and writes the results.
func Run(ctx context.Context, o Options) error {
	started := time.Now()
	release, err := lab.Hold(ctx, "make eval", o.Log)
	if err != nil {
		return err
	}
	defer release()
	p := Params{Sizes: o.Sizes, Dists: o.Dists, Duration: o.Duration, Only: o.Only, Log: o.Log, Repeat: o.Repeat}
	// The sweep's rates stay under what CPU 0 sends while it also runs
	// the NIC stage (more than 1 Mpps arrives at full rate on every host
	// measured so far), so every mode is offered the same load.
	p.SweepSizes, p.SweepRates = []int{1000, 128000}, []uint64{250_000, 500_000, 750_000, 1_000_000}
	if o.Smoke {
		p.Repeat = 1
		p.SweepSizes, p.SweepRates = []int{64}, []uint64{200_000}
	}
	// This process sends from CPU 0; its runtime must not add to the busy
	// share measured on CPU 1.
	restore, err := evalkit.PinProcess(evalkit.GenCPU)
	if err != nil {
		return err
	}
	defer restore()
	rows, err := DropRate(ctx, p)
	if err != nil {
		return err
	}
	more, err := LabModes(ctx, p)
	rows = append(rows, more...)
	if err != nil {
		return err
	}
	attackers, rates := []int{1000, 4000}, []uint64{0, 500_000, 1_000_000, 2_000_000, ^uint64(0)}
	if o.Smoke {
		attackers, rates = []int{64}, []uint64{0, 200_000}
	}
	more, err = HTTP(ctx, p, attackers, rates)
	rows = append(rows, more...)
	if err != nil {
		return err
	}
	if o.Smoke {
		// CI: the pipeline ran end to end; check every cell produced a
		// number (a mechanism that sent traffic but dropped none is
		// broken: every source has a rule), and write nothing under docs.
		for _, r := range rows {
			if (r.Figure == "drop-rate" || r.Figure == "offered") && (r.SentMpps <= 0 || r.DropMpps <= 0) || r.Figure == "http" && r.Extra <= 0 {
				return fmt.Errorf("eval smoke: %s %s/%s/%d measured nothing (sent %.3f Mpps, dropped %.3f Mpps)",
					r.Figure, r.Mechanism, r.Dist, r.Sources, r.SentMpps, r.DropMpps)
			}
		}
		dir, err := os.MkdirTemp("", "tierwall-eval")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		return Report(dir, filepath.Join(dir, "EVALUATION.md"), rows, o, started)
	}
	return Report(o.Out, filepath.Join(filepath.Dir(o.Out), "EVALUATION.md"), rows, o, started)
}
