// SPDX-License-Identifier: Apache-2.0

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
		Use:   "status [--json]",
		Short: "Say what of the lab exists",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, a []string) error {
			if g.json {
				return printJSON(labStatus())
			}
			fmt.Print(lab.Status())
			return nil
		},
	}
	st.Flags().BoolVar(&g.json, "json", false, "print JSON")
	c.AddCommand(up, down, st)
	return c
}

// labState is `lab status --json`: what a script needs to decide whether
// to build the lab, and where its hosts are.
type labState struct {
	Up         bool     `json:"up"`    // some lab namespace exists
	Ready      bool     `json:"ready"` // every link of the lab is up
	Problem    string   `json:"problem,omitempty"`
	Namespaces []string `json:"namespaces"` // never null
	Host4      string   `json:"host4"`
	Host6      string   `json:"host6"`
	Client4    string   `json:"client4"`
	Client6    string   `json:"client6"`
}

func labStatus() labState {
	s := labState{Namespaces: lab.Namespaces(), Host4: lab.Host4.String(), Host6: lab.Host6.String(),
		Client4: lab.Client4.String(), Client6: lab.Client6.String()}
	if s.Namespaces == nil {
		s.Namespaces = []string{}
	}
	if s.Up = len(s.Namespaces) > 0; s.Up {
		if err := lab.Ready(); err != nil {
			s.Problem = err.Error()
		} else {
			s.Ready = true
		}
	}
	return s
}
