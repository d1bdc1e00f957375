// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tierwall/tierwall/internal/rule"
	"github.com/tierwall/tierwall/internal/testbed/eval/modes"
	"github.com/tierwall/tierwall/internal/testbed/trafgen"
)

func newEval() *cobra.Command {
	var sizes, dists, only, out, fromCSV string
	var dur time.Duration
	var smoke bool
	var repeat int
	c := &cobra.Command{
		Use:   "eval",
		Short: "Reproduce the paper's evaluation on this machine: CSV, plots and docs/EVALUATION.md",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, a []string) error {
			if fromCSV != "" {
				// Rewrite the document and figures from a run's saved
				// rows: a change of text or plots needs no new run.
				return modes.Rerender(out, filepath.Join(filepath.Dir(out), "EVALUATION.md"), fromCSV)
			}
			o := modes.Options{Out: out, Duration: dur, Log: os.Stderr, Smoke: smoke, Repeat: repeat}
			for _, s := range strings.Split(sizes, ",") {
				n, err := strconv.Atoi(strings.TrimSpace(s))
				if err != nil || n <= 0 {
					return fmt.Errorf("%w: --sizes %q", rule.ErrInvalid, sizes)
				}
				o.Sizes = append(o.Sizes, n)
			}
			for _, d := range strings.Split(dists, ",") {
				o.Dists = append(o.Dists, trafgen.Dist(strings.TrimSpace(d)))
			}
			if only != "" {
				o.Only = map[string]bool{}
				for _, m := range strings.Split(only, ",") {
					o.Only[strings.TrimSpace(m)] = true
				}
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
			defer stop()
			return modes.Run(ctx, o)
		},
	}
	f := c.Flags()
	f.StringVar(&sizes, "sizes", "1,1000,4000,16000,128000", "numbers of attackers")
	f.StringVar(&dists, "dists", "uniform,gaussian", "rate distributions over attackers")
	f.StringVar(&only, "only", "", "comma-separated mechanisms/modes to run (default all)")
	f.DurationVar(&dur, "duration", 2*time.Second, "length of each measurement")
	f.StringVar(&out, "out", "docs/eval", "directory for CSV and plots (docs/EVALUATION.md goes next to it)")
	f.IntVar(&repeat, "repeat", 3, "measurements per drop-rate cell (the median is reported)")
	f.StringVar(&fromCSV, "from-csv", "", "write EVALUATION.md and the plots again from a run's results.csv (and the run.json beside it); no run")
	f.BoolVar(&smoke, "smoke", false, "CI smoke run: checks the pipeline, not speeds; writes nothing under docs")
	return c
}
