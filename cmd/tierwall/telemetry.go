// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tierwall/tierwall/internal/control/telemetry"
)

// newTelemetry shows network mode: the routers that send telemetry, and
// the destinations and attacks the feed shows.
func newTelemetry() *cobra.Command {
	c := &cobra.Command{Use: "telemetry", Short: "show network mode: telemetry exporters, top destinations and network attacks"}
	var n int
	status := func() (telemetry.Status, error) {
		dc, err := needDaemon("network mode's state")
		if err != nil {
			return telemetry.Status{}, err
		}
		return dc.Telemetry(context.Background(), n)
	}
	off := func(st telemetry.Status) bool {
		if !st.Enabled {
			fmt.Println("network mode is off (telemetry.enabled is false)")
		}
		return !st.Enabled
	}
	exporters := &cobra.Command{Use: "exporters", Short: "routers sending sFlow, NetFlow or IPFIX: datagrams, records, errors, loss, templates, sampling rate", Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, a []string) error {
			st, err := status()
			if err != nil {
				return err
			}
			if g.json {
				return printJSON(st.Exporters)
			}
			if off(st) {
				return nil
			}
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "EXPORTER\tNAME\tPROTOCOLS\tDATAGRAMS\tRECORDS\tERRORS\tLOST\tRESETS\tTEMPLATES\tREFUSED\tRATE\tMISMATCH\tLAST SEEN")
			for _, e := range st.Exporters {
				var ps []string
				for _, p := range e.Protocols {
					ps = append(ps, p.String())
				}
				seen := "never"
				if !e.LastSeen.IsZero() {
					seen = time.Since(e.LastSeen).Truncate(time.Millisecond).String() + " ago"
				}
				rate := fmt.Sprintf("1:%d", e.SamplingRate)
				if e.Configured > 0 {
					rate += fmt.Sprintf(" (conf 1:%d)", e.Configured)
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%d\t%s\n", e.Address, dash(e.Name), dash(strings.Join(ps, ",")),
					e.Datagrams, e.Records, e.DecodeErrors, e.SequenceGaps, e.Resets, e.Templates, e.TemplatesRefused, rate, e.RateMismatches, seen)
			}
			if err := w.Flush(); err != nil {
				return err
			}
			if st.Unknown > 0 {
				fmt.Printf("%d datagrams from exporters not configured, ignored (last from %s)\n", st.Unknown, st.LastUnknown)
			}
			return nil
		}}
	top := &cobra.Command{Use: "top", Short: "the heaviest destinations in the feed (scaled by sampling), the network attacks and the upstream plan", Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, a []string) error {
			st, err := status()
			if err != nil {
				return err
			}
			if g.json {
				return printJSON(struct {
					Top     []telemetry.Talker   `json:"top"`
					Attacks []telemetry.Attack   `json:"attacks"`
					Plan    []telemetry.Upstream `json:"plan"`
				}{st.Top, st.Attacks, st.Plan})
			}
			if off(st) {
				return nil
			}
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "DESTINATION\tGROUP\tPPS\tBIT/S\tFLOWS/S\tBY KIND (PPS)")
			for _, t := range st.Top {
				all := t.Kinds["all"]
				var ks []string
				for k, l := range t.Kinds {
					if k != "all" {
						ks = append(ks, fmt.Sprintf("%s %.0f", k, l.PPS))
					}
				}
				slices.Sort(ks)
				fmt.Fprintf(w, "%s\t%s\t%.0f\t%.0f\t%.0f\t%s\n", t.Dst, dash(t.Group), all.PPS, all.BPS, all.FlowsPS, strings.Join(ks, ", "))
			}
			if err := w.Flush(); err != nil {
				return err
			}
			for _, a := range st.Attacks {
				state := "on"
				if !a.Ended.IsZero() {
					state = "over " + a.Ended.Format(time.TimeOnly)
				}
				fmt.Printf("attack %s on %v (%s): %v, peak %.0f pps %.0f bit/s, detected %s, %s after its first record; %s\n",
					a.ID, a.Dst, dash(a.Group), a.Kinds, a.PeakPPS, a.PeakBPS, a.Detected.Format(time.TimeOnly),
					a.Detected.Sub(a.FirstRecord).Round(time.Millisecond), state)
			}
			for _, u := range st.Plan {
				what := u.Prefix.String()
				if u.Kind == telemetry.UpFlowSpec {
					what = u.Rule.String()
				}
				if cs := slices.Concat(u.Communities.Standard, u.Communities.Large); len(cs) > 0 {
					what += " communities " + strings.Join(cs, ",")
				}
				fmt.Printf("%s %s: %s (%s)\n", st.Mode, u.Kind, what, u.Reason)
			}
			return nil
		}}
	top.Flags().IntVarP(&n, "count", "c", 20, "destinations to show (at most 1000)")
	addJSONFlag(exporters)
	addJSONFlag(top)
	c.AddCommand(exporters, top)
	return c
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
