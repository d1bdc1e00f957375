package main

import (
	"fmt"
	"net/netip"
	"os"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/tierwall/tierwall/internal/rule"
)

// talker is one source's traffic over the snapshot, as rates.
type talker struct {
	Src      netip.Addr `json:"src"`
	PPS      float64    `json:"pps"`
	BPS      float64    `json:"bps"`
	SYNPS    float64    `json:"syn_pps"`
	Dests    int        `json:"destinations"`
	Packets  uint64     `json:"packets"`
	Interval float64    `json:"interval_seconds"`
}

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
			if interval <= 0 || n <= 0 {
				return fmt.Errorf("%w: --interval and -n must be positive", rule.ErrInvalid)
			}
			// A running daemon owns the snapshots: taking one here would
			// steal an interval from its detectors. Ask it instead.
			if dc := dialDaemon(); dc != nil {
				var top []map[string]any
				if err := dc.do("GET", "/v1/top", nil, &top); err != nil {
					return err
				}
				if len(top) > n {
					top = top[:n]
				}
				if g.json {
					return printJSON(top)
				}
				w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
				fmt.Fprintln(w, "SOURCE\tPPS\tBPS\tPACKETS\tBANNED\t")
				for _, t := range top {
					fmt.Fprintf(w, "%v\t%.0f\t%.0f\t%v\t%v\t\n", t["src"], t["pps"], t["bps"], t["packets"], t["banned"])
				}
				fmt.Printf("last daemon interval (from %s)\n", g.socket)
				return w.Flush()
			}
			d, err := open()
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
			secs := s.End.Sub(s.Start).Seconds()
			by := map[netip.Addr]*talker{}
			for _, f := range s.Flows {
				t := by[f.Src]
				if t == nil {
					t = &talker{Src: f.Src, Interval: secs}
					by[f.Src] = t
				}
				t.Packets += f.Packets
				t.PPS += float64(f.Packets) / secs
				t.BPS += float64(f.Bytes*8) / secs
				t.SYNPS += float64(f.SYNs) / secs
				t.Dests++
			}
			ts := make([]talker, 0, len(by))
			for _, t := range by {
				ts = append(ts, *t)
			}
			sort.Slice(ts, func(i, j int) bool {
				if ts[i].Packets != ts[j].Packets {
					return ts[i].Packets > ts[j].Packets
				}
				return ts[i].Src.Less(ts[j].Src)
			})
			if len(ts) > n {
				ts = ts[:n]
			}
			if g.json {
				return printJSON(ts)
			}
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintf(w, "SOURCE\tPPS\tBIT/S\tSYN/S\tDESTS\n")
			for _, t := range ts {
				fmt.Fprintf(w, "%s\t%.0f\t%.0f\t%.0f\t%d\n", t.Src, t.PPS, t.BPS, t.SYNPS, t.Dests)
			}
			w.Flush()
			fmt.Printf("(%d sources over %.2fs; %d packets never counted since attach: buffer full)\n", len(by), secs, s.Overflow)
			return nil
		},
	}
	c.Flags().DurationVar(&interval, "interval", time.Second, "snapshot interval")
	c.Flags().IntVarP(&n, "count", "c", 20, "sources to show")
	addIfaceFlag(c)
	addJSONFlag(c)
	return c
}
