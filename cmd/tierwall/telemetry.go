// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
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
				// Late datagrams filled some gaps: they were not lost.
				lost := fmt.Sprint(e.SequenceGaps - min(e.Reordered, e.SequenceGaps))
				if e.Reordered > 0 {
					lost += fmt.Sprintf(" (+%d late)", e.Reordered)
				}
				if e.LossScale > 1 {
					// What the records are scaled by for it now.
					lost += fmt.Sprintf(" (×%.2f)", e.LossScale)
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%d\t%s\t%d\t%d\t%d\t%s\t%d\t%s\n", e.Address, dash(e.Name), dash(strings.Join(ps, ",")),
					e.Datagrams, e.Records, e.DecodeErrors, lost, e.Resets, e.Templates, e.TemplatesRefused, rate, e.RateMismatches, seen)
			}
			if err := w.Flush(); err != nil {
				return err
			}
			if st.Unknown > 0 {
				fmt.Printf("%d datagrams from exporters not configured, ignored (last from %s)\n", st.Unknown, st.LastUnknown)
			}
			return printInterfaces(st)
		}}
	top := &cobra.Command{Use: "top", Short: "the heaviest destinations in the feed (scaled by sampling), the network attacks and the upstream plan", Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, a []string) error {
			st, err := status()
			if err != nil {
				return err
			}
			if g.json {
				return printJSON(struct {
					Top        []telemetry.Talker       `json:"top"`
					Attacks    []telemetry.Attack       `json:"attacks"`
					Plan       []telemetry.Upstream     `json:"plan"`
					Capacities []telemetry.GroupUplinks `json:"capacities"`
				}{st.Top, st.Attacks, st.Plan, st.Capacities})
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
			printCapacities(st.Capacities)
			return nil
		}}
	top.Flags().IntVarP(&n, "count", "c", 20, "destinations to show (at most 1000)")
	addJSONFlag(exporters)
	addJSONFlag(top)
	c.AddCommand(exporters, top)
	return c
}

// printInterfaces lists the interfaces the exporters' sFlow counter
// samples describe, and the host groups' uplink capacities.
func printInterfaces(st telemetry.Status) error {
	n := 0
	for _, e := range st.Exporters {
		n += len(e.Interfaces)
		if e.InterfacesRefused > 0 {
			fmt.Printf("%s: %d counter samples of interfaces past the interface tables' bounds, not kept\n", e.Address, e.InterfacesRefused)
		}
	}
	if n > 0 {
		fmt.Println()
		w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "EXPORTER\tIFINDEX\tSTATUS\tSPEED\tIN BIT/S\tIN UTIL\tOUT BIT/S\tOUT UTIL\tIN PPS\tOUT PPS\tERRORS IN/OUT\tDISCARDS IN/OUT\tRESETS\tLAST SAMPLE")
		for _, e := range st.Exporters {
			for _, x := range e.Interfaces {
				status := "down"
				switch {
				case x.OperUp:
					status = "up"
				case !x.AdminUp:
					status = "admin down"
				}
				fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%.0f\t%s\t%.0f\t%s\t%.0f\t%.0f\t%d/%d\t%d/%d\t%d\t%s ago\n", e.Address, x.IfIndex, status, speed(x.SpeedBPS),
					x.InBPS, util(x.InUtilisation, x.SpeedBPS), x.OutBPS, util(x.OutUtilisation, x.SpeedBPS), x.InPPS, x.OutPPS,
					x.InErrors, x.OutErrors, x.InDiscards, x.OutDiscards, x.Resets, time.Since(x.LastSample).Truncate(time.Second))
			}
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
	printCapacities(st.Capacities)
	return nil
}

// printCapacities says what each host group's RTBH is judged against.
func printCapacities(cs []telemetry.GroupUplinks) {
	for _, c := range cs {
		var ups []string
		for _, u := range c.Uplinks {
			s := fmt.Sprintf("%s ifIndex %d ", u.Exporter, u.IfIndex)
			switch {
			case !u.Known:
				s += "unknown (no recent counter sample)"
			case !u.OperUp:
				s += "down"
			default:
				s += fmt.Sprintf("%s, in %s", speed(u.SpeedBPS), util(u.InUtilisation, u.SpeedBPS))
			}
			ups = append(ups, s)
		}
		what := fmt.Sprintf("%s bit/s (%s)", speed(uint64(c.CapacityBPS)), c.Source)
		if c.CapacityBPS == 0 {
			what = "none: never blackholed (" + c.Source + ")"
		}
		fmt.Printf("group %s: uplink capacity %s", c.Group, what)
		if len(ups) > 0 {
			fmt.Printf("; uplinks %s", strings.Join(ups, "; "))
		}
		fmt.Println()
	}
}

// speed reads bits/s as an interface speed is named.
func speed(bps uint64) string {
	switch {
	case bps == 0:
		return "-"
	case bps%1e9 == 0:
		return fmt.Sprintf("%dG", bps/1e9)
	case bps%1e6 == 0:
		return fmt.Sprintf("%dM", bps/1e6)
	}
	return strconv.FormatUint(bps, 10)
}

// util is a utilisation in percent, "-" at an unknown speed.
func util(u float64, speed uint64) string {
	if speed == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*u)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
