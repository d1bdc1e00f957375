// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"os"
	"os/signal"
	"time"

	"github.com/spf13/cobra"

	"github.com/tierwall/tierwall/internal/testbed/demo"
)

func newDemo() *cobra.Command {
	o := demo.Options{Out: os.Stdout}
	c := &cobra.Command{
		Use:   "demo",
		Short: "Run the whole scenario on the lab: NIC + daemon, legitimate HTTP, a 1K-source flood, live view, summary, cleanup",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, a []string) error {
			o.Tierwall = tierwallBinary()
			o.Keep = o.Keep || os.Getenv("TWDEMO_KEEP") == "1"
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
			defer stop()
			s, err := demo.Run(ctx, o)
			if g.json && s != nil {
				if perr := printJSON(s); perr != nil && err == nil {
					err = perr
				}
			}
			return err
		},
	}
	f := c.Flags()
	f.IntVar(&o.Attackers, "attackers", 1000, "attacking sources")
	f.DurationVar(&o.Attack, "attack", 30*time.Second, "attack duration")
	f.DurationVar(&o.Baseline, "baseline", 6*time.Second, "legitimate traffic alone before the attack")
	f.IntVar(&o.Clients, "clients", 256, "legitimate client addresses")
	f.BoolVar(&o.Keep, "keep", false, "leave the lab up afterwards (also TWDEMO_KEEP=1)")
	f.BoolVar(&g.json, "json", false, "print the summary as JSON at the end")
	return c
}
