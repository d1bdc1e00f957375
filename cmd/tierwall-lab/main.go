// SPDX-License-Identifier: Apache-2.0

// Command tierwall-lab is tierwall's testbed, kept out of the product
// binary: the namespace lab (internet → emulated NIC → host), the
// live-frames traffic generator, the demo and the paper's evaluation.
// It drives the product through the tierwall binary beside it.
package main

import (
	"os"
	"path/filepath"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/tierwall/tierwall/internal/cli"
)

func init() {
	// -n switches the network namespace of this thread only; keep the main
	// goroutine, which does all the work, on it.
	runtime.LockOSThread()
}

var g struct {
	netns    string
	json     bool
	tierwall string
}

func main() { cli.Main(newRoot()) }

func newRoot() *cobra.Command {
	root := cli.NewRoot("tierwall-lab", "tierwall's testbed: lab, traffic generator, demo, evaluation", &g.netns)
	pf := root.PersistentFlags()
	pf.StringVar(&g.tierwall, "tierwall", "", "the tierwall binary to drive (default: the one beside this command, else $PATH)")
	root.AddCommand(newGen(), newLab(), newDemo(), newEval(), newEvalFlows(), newEvalSpoof(), newEvalNetwork(), newNetcollect())
	return root
}

// tierwallBinary is the product binary the testbed drives.
func tierwallBinary() string {
	if g.tierwall != "" {
		return g.tierwall
	}
	if self, err := os.Executable(); err == nil {
		if p := filepath.Join(filepath.Dir(self), "tierwall"); fileExists(p) {
			return p
		}
	}
	return "tierwall"
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

func args(n cobra.PositionalArgs) cobra.PositionalArgs { return cli.Args(n) }

func parent(use, short, subs string) *cobra.Command { return cli.Parent(use, short, subs) }

func printJSON(v any) error { return cli.PrintJSON(v) }
