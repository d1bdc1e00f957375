// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tierwall/tierwall/internal/testbed/eval/spoof"
)

func newEvalSpoof() *cobra.Command {
	var out, only string
	var baseline, attack, interval time.Duration
	var clients int
	var rate uint64
	var background, card bool
	var clientRate, connRate float64
	c := &cobra.Command{
		Use:   "eval-spoof",
		Short: "Floods whose sources cannot be listed (spoofed /16, /9, all IPv4, IPv6, reflection, SYN) against the daemon's defaults on the lab: docs/EVALUATION-SPOOF.md",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, a []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
			defer stop()
			p := spoof.Params{LoadBefore: loadAverage(), Tierwall: tierwallBinary(), Only: only, Baseline: baseline, Attack: attack, Interval: interval, Clients: clients, ClientRate: clientRate, ConnRate: connRate, Rate: rate, Background: background, Card: card, Log: os.Stderr}
			start := time.Now()
			rows, err := spoof.Run(ctx, p)
			if err != nil {
				return err
			}
			if only != "" {
				return nil // a partial run is not the document
			}
			md := "EVALUATION-SPOOF.md"
			if background {
				md = "EVALUATION-SPOOF-LOAD.md"
			}
			if card {
				md = strings.TrimSuffix(md, ".md") + "-CARD.md"
			}
			return spoof.Report(out, filepath.Join(filepath.Dir(out), md), rows, p, time.Since(start), time.Now())
		},
	}
	c.Flags().StringVar(&out, "out", "docs/eval", "directory for spoof.json (docs/EVALUATION-SPOOF.md goes next to it)")
	c.Flags().StringVar(&only, "only", "", "run only the scenarios whose name contains this (writes nothing)")
	c.Flags().DurationVar(&baseline, "baseline", 12*time.Second, "legitimate traffic alone before each flood")
	c.Flags().DurationVar(&attack, "attack", 12*time.Second, "length of each flood")
	c.Flags().DurationVar(&interval, "interval", 500*time.Millisecond, "the daemon's interval")
	c.Flags().IntVar(&clients, "clients", 64, "legitimate HTTP clients")
	c.Flags().Float64Var(&clientRate, "client-rate", 200, "requests/s each keep-alive client offers (0: as fast as answered)")
	c.Flags().Float64Var(&connRate, "conn-rate", 30, "new connections/s each client opens in the SYN floods (0: as fast as answered)")
	c.Flags().Uint64Var(&rate, "rate", 0, "cap the flood at this many packets/s (0: the generator's full rate)")
	c.Flags().BoolVar(&card, "card", false, "the emulated NIC in hybrid mode with the daemon's hardware tier on it: source bans and flow policers drop on the card (docs/EVALUATION-SPOOF-CARD.md, -LOAD-CARD.md with --background)")
	c.Flags().BoolVar(&background, "background", false, "a CPU-bound process at nice 0 on each CPU for the whole run (docs/EVALUATION-SPOOF-LOAD.md)")
	return c
}

// loadAverage is /proc/loadavg's three averages ("" when unreadable).
func loadAverage() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(raw))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}
