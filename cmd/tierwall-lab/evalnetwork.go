// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/tierwall/tierwall/internal/control/config"
	"github.com/tierwall/tierwall/internal/control/telemetry"
	"github.com/tierwall/tierwall/internal/testbed/eval/network"
)

func newEvalNetwork() *cobra.Command {
	var out, only, fnm string
	var flood, gap time.Duration
	var threshold float64
	var repeat int
	c := &cobra.Command{
		Use:   "eval-network",
		Short: "Network mode beside FastNetMon on the same sFlow, NetFlow v9 and IPFIX feed: detection delays, false positives, ingest on one core, memory: docs/EVALUATION-NETWORK.md",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, a []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
			defer stop()
			self, err := os.Executable()
			if err != nil {
				return fmt.Errorf("finding this binary: %w", err)
			}
			p := network.Params{Self: self, FastNetMon: fnm, Flood: flood, Gap: gap, Repeat: repeat, Threshold: threshold, Only: only, Log: os.Stderr}
			start := time.Now()
			res, err := network.Run(ctx, p)
			if err != nil {
				return err
			}
			if only == "ingest" {
				return printJSON(res.Ingest)
			}
			if only != "" {
				return printJSON(res.Cells)
			}
			return network.Report(out, filepath.Join(filepath.Dir(out), "EVALUATION-NETWORK.md"), res, time.Since(start), time.Now())
		},
	}
	c.Flags().StringVar(&out, "out", "docs/eval", "directory for network.json (docs/EVALUATION-NETWORK.md goes next to it)")
	c.Flags().StringVar(&only, "only", "", "run only the floods whose name contains this, print them (writes nothing); \"ingest\": the ingest ladder alone")
	c.Flags().StringVar(&fnm, "fastnetmon", "/usr/sbin/fastnetmon", "the FastNetMon binary")
	c.Flags().IntVar(&repeat, "repeat", 3, "repetitions of every flood")
	c.Flags().DurationVar(&flood, "flood", 2500*time.Millisecond, "length of each sFlow flood (NetFlow and IPFIX floods last 1.5 s more)")
	c.Flags().DurationVar(&gap, "gap", 500*time.Millisecond, "quiet after each flood (and a random pause of up to a second)")
	c.Flags().Float64Var(&threshold, "threshold", 50000, "per-host packets/s threshold, the same in both tools")
	return c
}

// newNetcollect runs network mode's collector and detector alone, from
// a tierwall.yaml's telemetry section, as `tierwall run` starts them: the
// evaluation's tierwall side, in a process of its own so that it can be
// pinned and measured. It prints each attack as it starts, and its
// counters on SIGUSR1, as JSON lines.
func newNetcollect() *cobra.Command {
	var file string
	c := &cobra.Command{
		Use:    "netcollect",
		Short:  "network mode's collector and detector alone (eval-network's tierwall side)",
		Hidden: true,
		Args:   args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, a []string) error {
			cfg, err := config.Load(file)
			if err != nil {
				return err
			}
			tc, err := cfg.TelemetryConfig()
			if err != nil {
				return err
			}
			var mu sync.Mutex
			enc := json.NewEncoder(os.Stdout)
			print := func(v network.NetcollectLine) {
				mu.Lock()
				defer mu.Unlock()
				_ = enc.Encode(v)
			}
			svc, err := telemetry.Start(tc, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})), func(ch telemetry.Change) {
				for _, at := range ch.Started {
					raw, err := json.Marshal(at)
					if err == nil {
						m := json.RawMessage(raw)
						print(network.NetcollectLine{Attack: &m, Reported: time.Now()})
					}
				}
			})
			if err != nil {
				return err
			}
			defer svc.Close()
			sig := make(chan os.Signal, 1)
			signal.Notify(sig, syscall.SIGUSR1, syscall.SIGTERM, os.Interrupt)
			for s := range sig {
				if s != syscall.SIGUSR1 {
					return nil
				}
				var st network.NetcollectStats
				for _, e := range svc.Decoder().Exporters() {
					st.Datagrams += e.Datagrams
					st.Records += e.Records
					st.DecodeErrors += e.DecodeErrors
					st.SequenceGaps += e.SequenceGaps
					st.Templates += e.Templates
					st.TemplatesRefused += e.TemplatesRefused
				}
				// The live heap after a collection: RSS also holds what
				// the GC has not returned yet.
				runtime.GC()
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				st.LiveHeap = ms.HeapAlloc
				print(network.NetcollectLine{Stats: &st})
			}
			return nil
		},
	}
	c.Flags().StringVar(&file, "config", "", "tierwall.yaml with the telemetry section")
	return c
}
