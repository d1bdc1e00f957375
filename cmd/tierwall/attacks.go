// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tierwall/tierwall/internal/control/alert"
	"github.com/tierwall/tierwall/internal/control/api"
)

func newAttacks() *cobra.Command {
	c := &cobra.Command{
		Use:   "attacks",
		Short: "The running daemon's attack log: list, show a report, fetch its pcap",
		Long: "Every attack the daemon saw, from its first detection to its end (no detection for\n" +
			"alerts.end_after intervals and its mitigations withdrawn), with the packets it dropped\n" +
			"sampled into a pcap while it ran.",
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "List the attacks, oldest first",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, a []string) error {
			return withDaemon(func(ctx context.Context, c *api.Client) error {
				rs, err := c.Attacks(ctx)
				if err != nil {
					return err
				}
				if g.json {
					return printJSON(rs)
				}
				w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "ID\tVICTIM\tGROUP\tSTATE\tSTARTED\tDURATION\tDETECTORS\tRUNG\tPEAK PPS\tBANS\tPACKETS")
				for _, r := range rs {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.0f\t%d\t%d\n", r.ID, victim(r.Victim), or(r.Group, "-"), state(r),
						r.Started.Local().Format(time.DateTime), dur(r.Duration), strings.Join(r.Detectors, ","), or(r.Rung, "-"), r.PeakPPS, r.BanCount, r.Packets)
				}
				return w.Flush()
			})
		},
	}
	show := &cobra.Command{
		Use:   "show ID",
		Short: "Show an attack's report",
		Args:  args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			return withDaemon(func(ctx context.Context, c *api.Client) error {
				r, err := c.Attack(ctx, a[0])
				if err != nil {
					return err
				}
				if g.json {
					return printJSON(r)
				}
				w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintf(w, "id\t%s\nvictim\t%s\nstate\t%s\nstarted\t%s\n", r.ID, victim(r.Victim), state(r), r.Started.Local().Format(time.DateTime))
				if r.Group != "" {
					fmt.Fprintf(w, "group\t%s\n", r.Group)
				}
				if !r.Ended.IsZero() {
					fmt.Fprintf(w, "ended\t%s\n", r.Ended.Local().Format(time.DateTime))
				}
				fmt.Fprintf(w, "duration\t%s\ndetectors\t%s\nrung\t%s\nreason\t%s\npeak\t%.0f pps, %.0f bit/s\n", dur(r.Duration),
					strings.Join(r.Detectors, ", "), or(r.Rung, "-"), or(r.Reason, "-"), r.PeakPPS, r.PeakBPS)
				for i, s := range r.TopSources {
					fmt.Fprintf(w, "%s\t%s at %.0f pps\n", first(i, "top sources"), s.Addr, s.PPS)
				}
				for i, p := range r.Bans {
					fmt.Fprintf(w, "%s\t%s\n", first(i, "bans"), p)
				}
				if r.BanCount > len(r.Bans) {
					fmt.Fprintf(w, "\t… %d bans in all\n", r.BanCount)
				}
				for i, f := range r.FlowRules {
					fmt.Fprintf(w, "%s\t%s\n", first(i, "flow rules"), f)
				}
				fmt.Fprintf(w, "pcap\t%d packets (tierwall attacks pcap %s)\n", r.Packets, r.ID)
				return w.Flush()
			})
		},
	}
	var out string
	pcap := &cobra.Command{
		Use:   "pcap ID",
		Short: "Save an attack's sampled packets as a pcap file (default ID.pcap)",
		Args:  args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			if out == "" {
				out = a[0] + ".pcap"
			}
			return withDaemon(func(ctx context.Context, c *api.Client) (err error) {
				// Written aside and renamed: a failed fetch leaves nothing.
				f, err := os.CreateTemp(filepath.Dir(out), ".tierwall-pcap-*")
				if err != nil {
					return fmt.Errorf("creating %s: %w", out, err)
				}
				defer func() {
					if err != nil {
						os.Remove(f.Name())
					}
				}()
				err = c.AttackPcap(ctx, a[0], f)
				if cerr := f.Close(); err == nil && cerr != nil {
					err = fmt.Errorf("writing %s: %w", out, cerr)
				}
				if err != nil {
					return err
				}
				if err := os.Rename(f.Name(), out); err != nil {
					return fmt.Errorf("writing %s: %w", out, err)
				}
				fmt.Fprintf(os.Stderr, "wrote %s\n", out)
				return nil
			})
		},
	}
	pcap.Flags().StringVarP(&out, "output", "o", "", "file to write")
	addJSONFlag(list)
	addJSONFlag(show)
	c.AddCommand(list, show, pcap)
	return c
}

// withDaemon runs f against the running daemon's API.
func withDaemon(f func(context.Context, *api.Client) error) error {
	c, err := needDaemon("the attack log")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return f(ctx, c)
}

func victim(a netip.Addr) string {
	if !a.IsValid() {
		return "(sources only)"
	}
	return a.String()
}

func state(r alert.Report) string {
	if r.Active() {
		return "active"
	}
	return "ended"
}

func dur(s float64) string { return (time.Duration(s) * time.Second).Round(time.Second).String() }

// first labels the first line of a list in a two-column table.
func first(i int, label string) string {
	if i == 0 {
		return label
	}
	return ""
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
