// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

// newProvisional shows the XDP heavy-hitter detector's provisional drops:
// sources caught within milliseconds that the daemon has not yet judged.
func newProvisional() *cobra.Command {
	c := &cobra.Command{Use: "provisional", Short: "show the heavy-hitter detector's provisional drops and counters", Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, a []string) error {
			dc, err := needDaemon("the heavy-hitter detector's state")
			if err != nil {
				return err
			}
			st, err := dc.Heavy(context.Background())
			if err != nil {
				return err
			}
			if g.json {
				return printJSON(st)
			}
			if !st.Enabled {
				fmt.Println("the heavy-hitter detector is off (detectors.heavy.enabled)")
				return nil
			}
			s := st.Stats
			fmt.Printf("caught %d, table full %d, reports lost %d, exempt (known good %d, protected %d), expired %d, monitor-only %v\n",
				s.Caught, s.TableFull, s.RingFull, s.ExemptGood, s.ExemptProtect, s.Expired, st.Monitor)
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "PREFIX\tKIND\tCOUNT\tAGE\tEXPIRES IN\tPACKETS\tBYTES\tSTATE")
			for _, p := range st.Entries {
				state := "dropping"
				switch {
				case p.Revoked:
					state = "revoked (exempt)"
				case p.Monitor:
					state = "counting (monitor-only)"
				}
				fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\t%d\t%d\t%s\n", p.Prefix, p.Kind, p.Count, time.Since(p.Added).Truncate(time.Millisecond),
					time.Until(p.Expires).Truncate(time.Millisecond), p.Packets, p.Bytes, state)
			}
			return w.Flush()
		}}
	addJSONFlag(c)
	return c
}
