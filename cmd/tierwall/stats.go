// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tierwall/tierwall/internal/control/api"
	"github.com/tierwall/tierwall/internal/control/apiv1"
	"github.com/tierwall/tierwall/internal/datapath"
)

func newStats() *cobra.Command {
	c := &cobra.Command{
		Use:   "stats",
		Short: "Show packets and bytes per verdict and how full each table is",
		Long: "stats reads the filter attached in this network namespace (-i, or the only one). With\n" +
			"--socket, or when nothing is attached here, it asks the daemon instead, the way every\n" +
			"command finds it; a daemon in the probe role answers with its flow counters.",
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, a []string) error {
			d, err := open()
			if err == nil && !daemonGiven() {
				defer d.Close()
				s, err := d.Stats()
				if err != nil {
					return err
				}
				// The hardware tier is the daemon's (placement owns its
				// table): shown when one answers.
				var hw *apiv1.HWTier
				if dc := dialDaemon(); dc != nil {
					if t, err := dc.Tiers(context.Background()); err == nil {
						hw = t.Hardware
					}
				}
				return printStats(s, hw)
			}
			if d != nil {
				d.Close()
			}
			// -i naming no interface here is that mistake, --socket or not.
			if errors.Is(err, datapath.ErrNoInterface) || err != nil && !errors.Is(err, datapath.ErrNotAttached) && !daemonGiven() {
				return err
			}
			dc, err := needDaemon("with no filter attached here, stats")
			if err != nil {
				return err
			}
			return daemonStats(dc)
		},
	}
	addIfaceFlag(c)
	addJSONFlag(c)
	return c
}

// daemonStats prints what the daemon on dc counts: its filter's verdicts
// and tables, or a probe's flow counters.
func daemonStats(dc *api.Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	t, err := dc.Tiers(ctx)
	var se *api.StatusError
	if errors.As(err, &se) && se.Code == http.StatusNotFound {
		// The probe role serves no /v1/tiers: its counters are the flow
		// tier's.
		st, err := dc.FlowStatus(ctx)
		if err != nil {
			return err
		}
		if g.json {
			return printJSON(st)
		}
		return printFlowStatus(st)
	}
	if err != nil {
		return err
	}
	if t.XDP == nil {
		return fmt.Errorf("the daemon at %s reported no filter counters", dc.Socket)
	}
	return printStats(t.XDP, t.Hardware)
}

// printStats prints the filter's counters s and, when a daemon places
// rules in one, the hardware table hw under the name the metrics use.
func printStats(s *datapath.Stats, hw *apiv1.HWTier) error {
	if g.json {
		return printJSON(s)
	}
	fmt.Printf("interface %s (%s mode)\n\n", s.Interface, s.Mode)
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "VERDICT\tACTION\tPACKETS\tBYTES\t")
	for _, r := range datapath.Reasons() {
		v := s.Verdicts[r]
		act := "pass"
		if datapath.IsDrop(r) {
			act = "drop"
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\t\n", r, act, v.Packets, v.Bytes)
	}
	w.Flush()
	fmt.Println()
	w = tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "TABLE\tENTRIES\tCAPACITY\t")
	for _, t := range []string{"exact4", "exact6", "prefix", "allow", "flow"} {
		if o, ok := s.Tables[t]; ok {
			fmt.Fprintf(w, "%s\t%d\t%d\t\n", t, o.Entries, o.Capacity)
		}
	}
	if hw != nil {
		fmt.Fprintf(w, "nic (%s)\t%d\t%d\t\n", hw.Backend, hw.Occupancy, hw.Capacity)
	}
	w.Flush()
	fmt.Printf("\nfeature buffer: %d keys per snapshot, %d packets not counted (full)\n", s.Tables["feature"].Capacity, s.FeatureOverflow)
	return nil
}
