package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tierwall/tierwall/internal/rule"
	"github.com/tierwall/tierwall/internal/testbed/eval"
)

func newEvalFlows() *cobra.Command {
	var actives, sizes, modes, out, cells string
	var dur time.Duration
	var smoke bool
	c := &cobra.Command{
		Use:   "eval-flows",
		Short: "Reproduce the flow-offload experiment of Deri et al. (HPSR 2024) on the probe lab: CSV, plots and docs/EVALUATION-FLOWS.md",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, a []string) error {
			bin := tierwallBinary()
			ints := func(flag, s string) ([]int, error) {
				var v []int
				for _, f := range strings.Split(s, ",") {
					n, err := strconv.Atoi(strings.TrimSpace(f))
					if err != nil || n <= 0 {
						return nil, fmt.Errorf("%w: --%s %q", rule.ErrInvalid, flag, s)
					}
					v = append(v, n)
				}
				return v, nil
			}
			as, err := ints("active", actives)
			if err != nil {
				return err
			}
			ss, err := ints("sizes", sizes)
			if err != nil {
				return err
			}
			var ms []string
			for _, m := range strings.Split(modes, ",") {
				if m = strings.TrimSpace(m); m != "passive" && m != "inline" {
					return fmt.Errorf("%w: --modes %q (passive, inline)", rule.ErrInvalid, modes)
				}
				ms = append(ms, m)
			}
			p := eval.FlowsParams{Tierwall: bin, Cells: eval.FlowCells(as, ss, ms), Duration: dur, Log: os.Stderr}
			if cells != "" {
				var keep []eval.FlowCell
				for _, cl := range p.Cells {
					if strings.Contains(cl.String(), cells) {
						keep = append(keep, cl)
					}
				}
				p.Cells = keep
			}
			if smoke {
				p.Cells = []eval.FlowCell{{Mode: "passive", Size: 64, Active: 1000, Offload: true, DPI: true},
					{Mode: "inline", Size: 64, Active: 1000, Offload: false, DPI: true}}
				// Paced well below what the host can take: the smoke
				// run checks that every packet is counted, not speed.
				p.Duration, p.Rate, p.Idle = 4*time.Second, 50_000, 2*time.Second
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
			defer stop()
			started := time.Now()
			rows, runErr := eval.Flows(ctx, p)
			if smoke {
				return eval.FlowsSmoke(rows, runErr)
			}
			if len(rows) == 0 {
				return runErr
			}
			if err := os.MkdirAll(out, 0o755); err != nil {
				return err
			}
			raw, _ := json.MarshalIndent(rows, "", " ")
			if err := os.WriteFile(filepath.Join(out, "flows.json"), raw, 0o644); err != nil {
				return err
			}
			if err := eval.FlowsReport(out, filepath.Join(filepath.Dir(out), "EVALUATION-FLOWS.md"), rows, p, started); err != nil {
				return err
			}
			return runErr
		},
	}
	f := c.Flags()
	f.StringVar(&actives, "active", "1000,10000,100000,1000000", "active flows")
	f.StringVar(&sizes, "sizes", "64,970", "frame sizes on the wire (bytes, with FCS)")
	f.StringVar(&modes, "modes", "passive,inline", "probe modes")
	f.StringVar(&cells, "cells", "", "run only the cells whose name contains this (e.g. \"passive 64B 10000 flows\")")
	f.DurationVar(&dur, "duration", 20*time.Second, "length of each run (flows live 10 s)")
	f.StringVar(&out, "out", "docs/eval", "directory for CSV and plots (docs/EVALUATION-FLOWS.md goes next to it)")
	f.BoolVar(&smoke, "smoke", false, "CI smoke run: two short cells; checks that every packet is counted, writes nothing under docs")
	return c
}
