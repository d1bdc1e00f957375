package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/tierwall/tierwall/internal/cli"
	"github.com/tierwall/tierwall/internal/datapath"
	"github.com/tierwall/tierwall/internal/rule"
)

type globals struct {
	iface   string
	netns   string
	pinRoot string
	json    bool
	socket  string
	direct  bool
}

var g globals

func newRoot() *cobra.Command {
	root := cli.NewRoot("tierwall", "XDP DDoS filter and flow feature extraction, across NIC, kernel and user space", &g.netns)
	pf := root.PersistentFlags()
	pf.StringVar(&g.pinRoot, "bpffs", "", "bpffs mount to pin under (default /sys/fs/bpf, mounted if missing)")
	_ = pf.MarkHidden("bpffs")
	pf.StringVar(&g.socket, "socket", "/run/tierwall/api.sock", "daemon API socket: block/allow go through a running daemon")
	pf.BoolVar(&g.direct, "direct", false, "change the data plane directly even when a daemon runs")
	root.AddCommand(newAttach(), newDetach(), newBlock(), newAllow(), newStats(), newTop(), newHW(), newNIC(), newRun(), newFlows(), newFlowRule(), newVictims())
	root.AddCommand(newAttacks())
	return root
}

func args(n cobra.PositionalArgs) cobra.PositionalArgs { return cli.Args(n) }

func addIfaceFlag(c *cobra.Command) {
	c.Flags().StringVarP(&g.iface, "iface", "i", "", "interface (default: the only attached one)")
}

func addJSONFlag(c *cobra.Command) {
	c.Flags().BoolVar(&g.json, "json", false, "print JSON")
}

// open finds the interface to work on and opens its pinned state.
func open() (*datapath.Datapath, error) {
	name := g.iface
	if name == "" {
		names, err := datapath.Attached(g.pinRoot)
		if err != nil {
			return nil, err
		}
		switch len(names) {
		case 0:
			return nil, fmt.Errorf("%w: no interface (run tierwall attach IFACE)", datapath.ErrNotAttached)
		case 1:
			name = names[0]
		default:
			return nil, fmt.Errorf("%w: several interfaces attached (%s); pick one with -i", rule.ErrInvalid, strings.Join(names, ", "))
		}
	}
	return datapath.Open(name, g.pinRoot)
}

func printJSON(v any) error { return cli.PrintJSON(v) }
