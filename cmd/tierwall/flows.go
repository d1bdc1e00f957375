// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tierwall/tierwall/internal/control/probed"
	"github.com/tierwall/tierwall/internal/probe/flow"
	"github.com/tierwall/tierwall/internal/rule"
)

func newFlows() *cobra.Command {
	var n int
	var apps, status bool
	c := &cobra.Command{
		Use:   "flows",
		Short: "Show a running probe's largest flows, its totals per application (--apps) or its counters (--status)",
		Long: "flows asks the daemon running in the probe role (role: probe) over its API socket.\n" +
			"Flows are listed from their records, largest first; bytes count from the IP header on.",
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, a []string) error {
			if n <= 0 {
				return fmt.Errorf("%w: --count %d: must be positive", rule.ErrInvalid, n)
			}
			c, err := needDaemon("the flow table")
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			switch {
			case status:
				st, err := c.FlowStatus(ctx)
				if err != nil {
					return err
				}
				if g.json {
					return printJSON(st)
				}
				return printFlowStatus(st)
			case apps:
				as, err := c.FlowApps(ctx)
				if err != nil {
					return err
				}
				if g.json {
					return printJSON(as)
				}
				w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "APP\tFLOWS\tPACKETS\tBYTES\tNIC BYTES")
				for _, a := range as {
					fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\n", a.App, a.Flows, a.Packets, a.Bytes, a.HWBytes)
				}
				return w.Flush()
			}
			rs, err := c.FlowTop(ctx, n)
			if err != nil {
				return err
			}
			if g.json {
				return printJSON(rs)
			}
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "FLOW\tAPP\tHOST\tPACKETS\tBYTES\tTIER\tEND")
			for _, r := range rs {
				fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%s\t%s\n", r.Key, r.App, r.Host, r.Packets[0]+r.Packets[1],
					r.Bytes[0]+r.Bytes[1], r.Tier(), r.Reason)
			}
			return w.Flush()
		},
	}
	// -c/--count as in top: -n is the global --netns, and a second -n made
	// cobra panic on every use of this command.
	c.Flags().IntVarP(&n, "count", "c", 20, "flows to show")
	c.Flags().BoolVar(&apps, "apps", false, "totals per application")
	c.Flags().BoolVar(&status, "status", false, "the probe's counters")
	addJSONFlag(c)
	return c
}

// printFlowStatus prints a probe's counters (flows --status, and stats
// when the daemon asked runs in the probe role).
func printFlowStatus(st probed.Status) error {
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "mode\t%s\n", st.Mode)
	fmt.Fprintf(w, "software flows\t%d of %d (refused %d)\n", st.Software.Flows, st.Software.Capacity, st.Software.Refused)
	for m := flow.Mark(0); m < flow.NumMarks; m++ {
		fmt.Fprintf(w, "packets %s\t%d\n", m, st.Software.Packets[m])
	}
	if st.NIC != nil {
		fmt.Fprintf(w, "nic flows\t%d of %d (%s)\n", st.NIC.Occupancy, st.NIC.Caps.Capacity, st.NIC.Caps.Name)
	}
	e := st.Engine
	fmt.Fprintf(w, "learns\trequested %d done %d failed %d (table full %d) queue full %d\n",
		e.LearnRequests, e.LearnDone, e.LearnFailed, e.LearnTableFull, e.LearnQueueFull)
	fmt.Fprintf(w, "dpi\tin progress %d, samples %d, lost %d, gave up %d, skipped %d\n",
		e.InDPI, e.Samples, st.Software.DPILost, e.DPIGiveups, e.DPISkipped)
	fmt.Fprintf(w, "records\t%d\n", e.Records)
	return w.Flush()
}
