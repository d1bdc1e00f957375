// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tierwall/tierwall/internal/control/apiv1"
	"github.com/tierwall/tierwall/internal/control/bgp"
)

// newBGP shows the daemon's BGP speaker: the sessions, what goes upstream
// and what the fleet sends.
func newBGP() *cobra.Command {
	c := &cobra.Command{Use: "bgp", Short: "show the BGP speaker: neighbors, and routes announced and received"}
	status := func() (apiv1.BGPStatus, error) {
		dc, err := needDaemon("the BGP speaker's state")
		if err != nil {
			return apiv1.BGPStatus{}, err
		}
		return dc.BGP(context.Background())
	}
	neighbors := &cobra.Command{Use: "neighbors", Short: "BGP sessions: state, families, routes each way", Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, a []string) error {
			st, err := status()
			if err != nil {
				return err
			}
			if g.json {
				return printJSON(st.Neighbors)
			}
			if !st.Enabled {
				fmt.Println("BGP is off (bgp.asn is 0)")
				return nil
			}
			fmt.Printf("local AS %d, router id %s\n", st.ASN, st.RouterID)
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "NEIGHBOR\tAS\tSTATE\tSINCE\tSEND\tRECEIVE\tANNOUNCED\tRECEIVED\tACCEPTED\tFAMILIES")
			for _, n := range st.Neighbors {
				since := "-"
				if !n.Since.IsZero() {
					since = time.Since(n.Since).Truncate(time.Second).String()
				}
				fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%v\t%d\t%d\t%d\t%s\n", n.Address, n.ASN, n.State, since, strings.Join(n.Send, ","), n.Receive,
					n.Announced, n.Received, n.Accepted, strings.Join(n.Families, ","))
			}
			return w.Flush()
		}}
	routes := &cobra.Command{Use: "routes", Short: "routes announced upstream and FlowSpec received from peers", Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, a []string) error {
			st, err := status()
			if err != nil {
				return err
			}
			if g.json {
				return printJSON(struct {
					Announced []bgp.Route  `json:"announced"`
					Received  []bgp.Remote `json:"received"`
				}{st.Announced, st.Received})
			}
			if !st.Enabled {
				fmt.Println("BGP is off (bgp.asn is 0)")
				return nil
			}
			printBGPRoutes(st)
			return nil
		}}
	addJSONFlag(neighbors)
	addJSONFlag(routes)
	c.AddCommand(neighbors, routes)
	return c
}

func printBGPRoutes(st apiv1.BGPStatus) {
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ANNOUNCED\tROUTE\tRATE PPS\tCOMMUNITIES\tREASON")
	for _, r := range st.Announced {
		// A route's own communities (network mode's host group's, on its
		// RTBH routes): which provider it asks to blackhole. The
		// configured ones every route carries are in the configuration.
		var cs []string
		for _, c := range r.Communities {
			cs = append(cs, c.String())
		}
		for _, c := range r.LargeCommunities {
			cs = append(cs, c.String())
		}
		fmt.Fprintf(w, "%s\t%s\t%.0f\t%s\t%s\n", r.Kind, r.String(), r.Rate, dash(strings.Join(cs, ",")), oneLine(r.Reason))
	}
	_ = w.Flush()
	w = tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "RECEIVED FROM\tFLOWSPEC\tSTATE")
	for _, r := range st.Received {
		state := "enforced"
		switch {
		case r.Refused != "":
			state = "refused: " + r.Refused
		case !r.Lost.IsZero():
			state = "held (session lost " + time.Since(r.Lost).Truncate(time.Second).String() + " ago)"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\n", r.Peer, r.Flow.String(), state)
	}
	_ = w.Flush()
}
