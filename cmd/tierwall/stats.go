package main

import (
	"context"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/tierwall/tierwall/internal/datapath"
)

func newStats() *cobra.Command {
	c := &cobra.Command{
		Use:   "stats",
		Short: "Show packets and bytes per verdict and how full each table is",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, a []string) error {
			d, err := open()
			if err != nil {
				return err
			}
			defer d.Close()
			s, err := d.Stats()
			if err != nil {
				return err
			}
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
			// The hardware tier is the daemon's (placement owns its table):
			// shown when one answers, under the name the metrics use.
			if dc := dialDaemon(); dc != nil {
				if t, err := dc.Tiers(context.Background()); err == nil && t.Hardware != nil {
					fmt.Fprintf(w, "nic (%s)\t%d\t%d\t\n", t.Hardware.Backend, t.Hardware.Occupancy, t.Hardware.Capacity)
				}
			}
			w.Flush()
			fmt.Printf("\nfeature buffer: %d keys per snapshot, %d packets not counted (full)\n", s.Tables["feature"].Capacity, s.FeatureOverflow)
			return nil
		},
	}
	addIfaceFlag(c)
	addJSONFlag(c)
	return c
}
