// SPDX-License-Identifier: Apache-2.0

package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/tierwall/tierwall/internal/control/kernel"
)

// errProgramsRefused makes doctor exit 1: this kernel refuses a program
// that no missing feature explains.
var errProgramsRefused = errors.New("programs refused by this kernel's verifier")

// newDoctor is `tierwall doctor`: what this kernel gives tierwall.
func newDoctor() *cobra.Command {
	c := &cobra.Command{
		Use:   "doctor",
		Short: "Say what this kernel supports: the BPF features each part needs, and whether every program loads",
		Long: `doctor probes the running kernel as bpftool feature does, then loads every
program of tierwall's BPF objects (and unloads it again), printing the
instructions the verifier walked for each against its limit of 1,000,000.
A program refused for a missing feature (the SYN proxy without nf_conntrack)
is reported as degraded: that part is off, the rest runs. Exit 1 when a
program is refused for any other reason: tierwall does not run on this kernel.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r := kernel.Check()
			if g.json {
				if err := printJSON(r); err != nil {
					return err
				}
			} else {
				printDoctor(r)
			}
			if n := len(r.Failed()); n > 0 {
				return fmt.Errorf("%w: %d", errProgramsRefused, n)
			}
			return nil
		},
	}
	c.Flags().BoolVar(&g.json, "json", false, "print JSON")
	return c
}

func printDoctor(r kernel.Report) {
	fmt.Printf("kernel %s\n\nfeatures:\n", r.Release)
	w := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
	for _, f := range r.Features {
		st := "yes"
		if !f.OK {
			st = "NO"
		}
		d := f.Detail
		if d != "" {
			d = " (" + d + ")"
		}
		fmt.Fprintf(w, "  %s\t%s%s\t%s\n", f.Name, st, d, f.For)
	}
	w.Flush()
	fmt.Println("\nprograms:")
	w = tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
	for _, p := range r.Programs {
		switch {
		case p.Loaded:
			fmt.Fprintf(w, "  %s/%s\tloads\t%d insns verified (%.1f%% of the limit)\n", p.Object, p.Name, p.Verified, 100*float64(p.Verified)/kernel.ComplexityLimit)
		case p.Degraded != "":
			fmt.Fprintf(w, "  %s/%s\toff\tneeds %s\n", p.Object, p.Name, p.Degraded)
		default:
			fmt.Fprintf(w, "  %s/%s\tREFUSED\t%s\n", p.Object, p.Name, firstLine(p.Error))
		}
	}
	w.Flush()
	for _, p := range r.Failed() {
		fmt.Printf("\n%s/%s refused:\n%s\n", p.Object, p.Name, p.Error)
	}
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
