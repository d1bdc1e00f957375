package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/tierwall/tierwall/internal/testbed/lab"
)

func newLab() *cobra.Command {
	c := parent("lab", "The testbed: internet (attackers, clients) → emulated NIC → host, in network namespaces", "up, down or status")
	var web bool
	up := &cobra.Command{
		Use:   "up",
		Short: "Build the lab (idempotent; a half-built one is rebuilt)",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, a []string) error {
			if err := lab.Up(); err != nil {
				return err
			}
			if web {
				if err := lab.StartNginx(); err != nil {
					return err
				}
			}
			fmt.Print(lab.Status())
			return nil
		},
	}
	up.Flags().BoolVar(&web, "nginx", true, "serve a small page from the host namespace")
	down := &cobra.Command{
		Use:   "down",
		Short: "Remove everything the lab made, also after a crash",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, a []string) error {
			if err := lab.Down(); err != nil {
				return err
			}
			fmt.Println("lab: down")
			return nil
		},
	}
	st := &cobra.Command{
		Use:   "status",
		Short: "Say what of the lab exists",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, a []string) error {
			fmt.Print(lab.Status())
			return nil
		},
	}
	c.AddCommand(up, down, st)
	return c
}
