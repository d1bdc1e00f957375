// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/tierwall/tierwall/internal/control/detect"
	"github.com/tierwall/tierwall/internal/rule"
)

func newTop() *cobra.Command {
	var interval time.Duration
	var n int
	c := &cobra.Command{
		Use:   "top",
		Short: "Show the heaviest sources that passed the filter over one snapshot interval",
		Long: "top swaps the feature buffers, waits --interval, swaps again and ranks the sources of\n" +
			"that consistent snapshot. It consumes snapshots: do not run it beside another reader.",
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, a []string) error {
			if interval <= 0 {
				return fmt.Errorf("%w: --interval %v must be positive", rule.ErrInvalid, interval)
			}
			if n <= 0 {
				return fmt.Errorf("%w: -c/--count %d must be positive", rule.ErrInvalid, n)
			}
			// A running daemon owns the snapshots: taking one here would
			// steal an interval from its detectors. Ask it instead.
			dc := dialDaemon()
			if g.url != "" && dc == nil {
				// Say why the daemon named did not answer, rather than
				// reading this host's data plane instead.
				if _, err := remoteDaemon(); err != nil {
					return err
				}
			}
			if dc != nil {
				top, err := dc.Top(context.Background())
				if err != nil {
					return err
				}
				if len(top) > n {
					top = top[:n]
				}
				return printTop(top, fmt.Sprintf("the daemon's last interval (from %s)", dc.Socket))
			}
			p, err := target()
			if err != nil {
				return err
			}
			d, err := openOwned(p, "taking a snapshot steals an interval from its detectors")
			if err != nil {
				return err
			}
			defer d.Close()
			if _, err := d.Snapshot(); err != nil {
				return err
			}
			time.Sleep(interval)
			s, err := d.Snapshot()
			if err != nil {
				return err
			}
			tr := detect.NewTraffic(s.End.Sub(s.Start))
			for _, f := range s.Flows {
				tr.Add(f.Src, f.Dst, f.Proto, f.Packets, f.Bytes, f.SYNs)
			}
			return printTop(tr.Top(n), fmt.Sprintf("%d sources over %.2fs; %d packets never counted since attach: buffer full",
				len(tr.Sources), tr.Interval.Seconds(), s.Overflow))
		},
	}
	c.Flags().DurationVar(&interval, "interval", time.Second, "snapshot interval")
	c.Flags().IntVarP(&n, "count", "c", 20, "sources to show")
	addIfaceFlag(c)
	addJSONFlag(c)
	return c
}

// printTop prints talkers in one schema whoever measured them; the JSON
// is the list itself.
func printTop(ts []detect.Talker, note string) error {
	if g.json {
		return printJSON(ts)
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "SOURCE\tPPS\tBIT/S\tSYN/S\tDESTS\tBANNED\n")
	for _, t := range ts {
		fmt.Fprintf(w, "%s\t%.0f\t%.0f\t%.0f\t%d\t%v\n", t.Src, t.PPS, t.BPS, t.SYNPS, t.Dests, t.Banned)
	}
	w.Flush()
	fmt.Printf("(%s)\n", note)
	return nil
}
