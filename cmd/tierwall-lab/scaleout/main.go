// SPDX-License-Identifier: Apache-2.0

// Command tierwall-scaleout runs network mode split over NATS JetStream
// (internal/control/scaleout): collectors that decode their routers' telemetry
// and publish per-destination aggregates, detectors that judge their
// partitions, and the measurement of two collectors against one
// (make eval-scaleout). Both roles read the telemetry section of a
// tierwall.yaml (exporters, listen addresses, thresholds, host groups);
// every collector and detector of a deployment must be given the same
// --partitions and host groups. The product runs the same roles from
// `tierwall run` (telemetry.scaleout:, docs/SCALEOUT.md); this binary stays
// for the measurement, which starts collectors as processes of its own.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/tierwall/tierwall/internal/cli"
	"github.com/tierwall/tierwall/internal/control/config"
	"github.com/tierwall/tierwall/internal/control/scaleout"
	"github.com/tierwall/tierwall/internal/control/telemetry"
	evalscaleout "github.com/tierwall/tierwall/internal/testbed/eval/scaleout"
)

func main() { cli.Main(newRoot()) }

func newRoot() *cobra.Command {
	// Each root its own -n: the test runs two commands at once.
	var netns string
	root := cli.NewRoot("tierwall-scaleout", "network mode over NATS JetStream: collectors, detectors, the measurement", &netns)
	root.AddCommand(newCollect(), newDetect(), newEval())
	return root
}

// common are the flags both roles take.
type common struct {
	file, url, name string
	partitions      int
	stream          scaleout.StreamConfig
}

func (c *common) flags(cmd *cobra.Command) {
	host, _ := os.Hostname()
	cmd.Flags().StringVar(&c.file, "config", "/etc/tierwall/tierwall.yaml", "tierwall.yaml with the telemetry section")
	cmd.Flags().StringVar(&c.url, "nats", "nats://127.0.0.1:4222", "the NATS server (JetStream enabled)")
	cmd.Flags().StringVar(&c.name, "name", host, "this process's name in its messages and the server's connections: unique per collector (detectors track collectors by it)")
	cmd.Flags().IntVar(&c.partitions, "partitions", 16, "partitions of the destinations: the same in every collector and detector")
	cmd.Flags().StringVar(&c.stream.Name, "stream", "TIERWALL_AGGREGATES", "the JetStream stream")
	cmd.Flags().StringVar(&c.stream.Subject, "subject", "tierwall.aggregates", "the prefix of the stream's subjects, one per partition")
}

func (c *common) load() (telemetry.Config, scaleout.Partitioner, error) {
	cfg, err := config.Load(c.file)
	if err != nil {
		return telemetry.Config{}, scaleout.Partitioner{}, err
	}
	tc, err := cfg.TelemetryConfig()
	if err != nil {
		return telemetry.Config{}, scaleout.Partitioner{}, err
	}
	if c.partitions < 1 || c.partitions > 65535 {
		return tc, scaleout.Partitioner{}, cli.Usage(fmt.Errorf("--partitions %d: between 1 and 65535", c.partitions))
	}
	return tc, scaleout.Partitioner{N: c.partitions, Groups: tc.Detector.Groups}, nil
}

// printer writes JSON lines from several goroutines.
type printer struct {
	mu  sync.Mutex
	enc *json.Encoder
}

func (p *printer) print(v any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	_ = p.enc.Encode(v)
}

func logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

func newCollect() *cobra.Command {
	var c common
	var listen []string
	cmd := &cobra.Command{
		Use:   "collect",
		Short: "decode the routers' telemetry and publish per-destination aggregates every tick; counters as a JSON line on SIGUSR1",
		Args:  cli.Args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			tc, pt, err := c.load()
			if err != nil {
				return err
			}
			if len(listen) > 0 {
				tc.Listen = listen
			}
			nc, err := scaleout.Connect(c.url, c.name, scaleout.Auth{})
			if err != nil {
				return err
			}
			defer nc.Close()
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			col, err := scaleout.StartCollector(ctx, nc, scaleout.CollectorConfig{Listen: tc.Listen, Decoder: tc.Decoder, Detector: tc.Detector,
				Publisher: scaleout.PublisherConfig{Name: c.name, Partitioner: pt, Stream: c.stream}}, logger())
			if err != nil {
				return err
			}
			p := &printer{enc: json.NewEncoder(os.Stdout)}
			usr1 := make(chan os.Signal, 1)
			signal.Notify(usr1, syscall.SIGUSR1)
			for {
				select {
				case <-usr1:
					p.print(collectorStats(col))
				case <-ctx.Done():
					cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					defer cancel()
					return col.Close(cctx)
				}
			}
		},
	}
	c.flags(cmd)
	cmd.Flags().StringSliceVar(&listen, "listen", nil, "UDP addresses to listen on (default: the configuration's telemetry.listen)")
	return cmd
}

func collectorStats(col *scaleout.Collector) evalscaleout.CollectorStats {
	var st evalscaleout.CollectorStats
	for _, e := range col.Decoder().Exporters() {
		st.Datagrams += e.Datagrams
		st.Records += e.Records
		st.DecodeErrors += e.DecodeErrors
	}
	st.Publisher = col.Publisher().Stats()
	st.Overflow, _ = col.Partial().Overflow()
	return st
}

func newDetect() *cobra.Command {
	var c common
	var owned string
	cmd := &cobra.Command{
		Use:   "detect",
		Short: "judge the partitions owned from every collector's aggregates; attacks, and collectors gone quiet, as JSON lines; counters on SIGUSR1",
		Args:  cli.Args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			tc, pt, err := c.load()
			if err != nil {
				return err
			}
			parts, err := parseOwned(owned, pt.N)
			if err != nil {
				return cli.Usage(err)
			}
			nc, err := scaleout.Connect(c.url, c.name, scaleout.Auth{})
			if err != nil {
				return err
			}
			defer nc.Close()
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			det := telemetry.NewDetector(tc.Detector)
			cons, err := scaleout.Consume(ctx, nc, scaleout.DetectorConfig{Partitioner: pt, Stream: c.stream, Owned: parts}, det, logger())
			if err != nil {
				return err
			}
			defer cons.Close()
			p := &printer{enc: json.NewEncoder(os.Stdout)}
			tk := time.NewTicker(det.Config().Tick)
			defer tk.Stop()
			usr1 := make(chan os.Signal, 1)
			signal.Notify(usr1, syscall.SIGUSR1)
			quiet := map[string]bool{}
			tick := det.Config().Tick
			var judged int64 // the tick last judged in
			for {
				var now time.Time
				select {
				case <-ctx.Done():
					return nil
				case <-usr1:
					p.print(map[string]any{"stats": cons.Stats(), "collectors": cons.Collectors(), "untracked_records": det.Untracked()})
					continue
				case <-cons.Completed():
					// Every collector has reported the tick just ended:
					// judge now rather than at this detector's own tick.
					now = time.Now()
				case now = <-tk.C:
					// The fallback, when a collector is late; not twice in
					// a tick.
					if now.UnixNano()/int64(tick) <= judged {
						continue
					}
					now = time.Now()
				}
				judged = now.UnixNano() / int64(tick)
				started, ended := det.Judge(now)
				for _, a := range started {
					p.print(map[string]any{"started": a})
				}
				for _, a := range ended {
					p.print(map[string]any{"ended": a})
				}
				// A collector silent for a second while others report: its
				// routers' share is missing from every rate.
				silent := map[string]bool{}
				for _, n := range cons.Quiet(time.Second) {
					silent[n] = true
					if !quiet[n] {
						p.print(map[string]any{"collector_quiet": n})
					}
				}
				for n := range quiet {
					if !silent[n] {
						p.print(map[string]any{"collector_back": n})
					}
				}
				quiet = silent
			}
		},
	}
	c.flags(cmd)
	cmd.Flags().StringVar(&owned, "owned", "", "partitions this detector judges, as 0-7,9 (default: all)")
	return cmd
}

// parseOwned reads --owned: "0-7,9" (empty: all of 0…n-1, nil).
func parseOwned(s string, n int) ([]int, error) {
	out, err := scaleout.ParseOwned(s, n)
	if err != nil {
		return nil, fmt.Errorf("--owned %q: %w", s, err)
	}
	return out, nil
}

func newEval() *cobra.Command {
	var out, natsServer string
	var rounds int
	var step time.Duration
	var rates []float64
	var render bool
	cmd := &cobra.Command{
		Use:   "eval",
		Short: "two collectors against one on the same replayed sFlow feed: datagrams/s ingested with no loss (docs/EVALUATION-SCALEOUT.md)",
		Args:  cli.Args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
			defer stop()
			self, err := os.Executable()
			if err != nil {
				return fmt.Errorf("finding this binary: %w", err)
			}
			md := filepath.Join(filepath.Dir(out), "EVALUATION-SCALEOUT.md")
			if render {
				// The document again from the run's results: for a change
				// of the document's wording, not of what was measured.
				raw, err := os.ReadFile(filepath.Join(out, "scaleout.json"))
				if err != nil {
					return fmt.Errorf("reading the results: %w", err)
				}
				var res evalscaleout.Result
				if err := json.Unmarshal(raw, &res); err != nil {
					return fmt.Errorf("reading the results: %w", err)
				}
				return evalscaleout.Report(out, md, res, res.Took, res.At)
			}
			start := time.Now()
			res, err := evalscaleout.Run(ctx, evalscaleout.Params{Self: self, NATSServer: natsServer, Rounds: rounds, Step: step, Rates: rates, Log: os.Stderr})
			if err != nil {
				return err
			}
			res.Took, res.At = time.Since(start).Round(time.Second), time.Now().UTC()
			return evalscaleout.Report(out, md, res, res.Took, res.At)
		},
	}
	cmd.Flags().StringVar(&out, "out", "docs/eval", "directory for scaleout.json (docs/EVALUATION-SCALEOUT.md goes next to it)")
	cmd.Flags().StringVar(&natsServer, "nats-server", "nats-server", "the NATS server binary (Debian's nats-server)")
	cmd.Flags().IntVar(&rounds, "rounds", 5, "rounds of the whole ladder (each rate: one collector, then two)")
	cmd.Flags().DurationVar(&step, "step", 2*time.Second, "how long each rate is offered")
	cmd.Flags().BoolVar(&render, "render", false, "write the document again from --out's scaleout.json, measuring nothing")
	cmd.Flags().Float64SliceVar(&rates, "rates", nil, "datagrams/s offered, ascending (default: 20k to 240k, then all the sender sends)")
	return cmd
}
