// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"net"
	"slices"
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
	// url and tokenFile name a daemon's TCP API (api.tcp, api.token_file
	// in its configuration), on this host or another.
	url       string
	tokenFile string
}

var g globals

// rootCmd is the command line being run (for flags given explicitly).
var rootCmd *cobra.Command

func newRoot() *cobra.Command {
	root := cli.NewRoot("tierwall", "XDP DDoS filter and flow feature extraction, across NIC, kernel and user space", &g.netns)
	pf := root.PersistentFlags()
	pf.StringVar(&g.pinRoot, "bpffs", "", "bpffs mount to pin under (default /sys/fs/bpf, mounted if missing)")
	_ = pf.MarkHidden("bpffs")
	pf.StringVar(&g.socket, "socket", "/run/tierwall/api.sock",
		"daemon API socket, for when no interface is attached in this namespace (the daemon that owns a data plane is found from its owner record)")
	pf.StringVar(&g.url, "url", "", "a daemon's TCP API (http://HOST:PORT, its api.tcp; another host's through an SSH tunnel or a TLS proxy, https://): every command that asks a daemon asks that one")
	pf.StringVar(&g.tokenFile, "token-file", "", "file holding the bearer token of the daemon at --url (its api.token_file)")
	pf.BoolVar(&g.direct, "direct", false, "change the data plane directly even when a daemon owns it (the daemon adopts the change only when it restarts)")
	root.AddCommand(newAttach(), newDetach(), newBlock(), newAllow(), newStats(), newTop(), newHW(), newNIC(), newRun(), newFlows(), newFlowRule(), newVictims(), newWatch(), newAttacks(), newBGP(), newProvisional(), newDoctor(), newCleanup(), newTelemetry())
	cli.AddVersion(root, &g.json)
	rootCmd = root
	return root
}

func args(n cobra.PositionalArgs) cobra.PositionalArgs { return cli.Args(n) }

// addIfaceFlag is -i/--interface on every command that names one
// (--iface, the old spelling, still works, hidden).
func addIfaceFlag(c *cobra.Command) {
	c.Flags().StringVarP(&g.iface, "interface", "i", "", "interface (default: the only attached one)")
	c.Flags().StringVar(&g.iface, "iface", "", "interface")
	_ = c.Flags().MarkHidden("iface")
}

func addJSONFlag(c *cobra.Command) {
	c.Flags().BoolVar(&g.json, "json", false, "print JSON")
}

// resolveIface is -i, or the only interface attached in this network
// namespace.
func resolveIface() (string, error) {
	names, err := datapath.Attached(g.pinRoot)
	if err != nil {
		return "", err
	}
	if g.iface != "" {
		// The same mistake says the same in every command: a name that
		// is no interface here is that (stats said "no daemon answers",
		// top "not attached"), and one without the filter says how to
		// attach it.
		if !slices.Contains(names, g.iface) {
			if _, err := net.InterfaceByName(g.iface); err != nil {
				return "", fmt.Errorf("%w: %s", datapath.ErrNoInterface, g.iface)
			}
			return "", fmt.Errorf("%w: %s (run tierwall attach -i %s)", datapath.ErrNotAttached, g.iface, g.iface)
		}
		return g.iface, nil
	}
	switch len(names) {
	case 0:
		return "", fmt.Errorf("%w: no interface (run tierwall attach -i IFACE)", datapath.ErrNotAttached)
	case 1:
		return names[0], nil
	default:
		return "", fmt.Errorf("%w: several interfaces attached (%s); pick one with -i", rule.ErrInvalid, strings.Join(names, ", "))
	}
}

// open finds the interface to work on and opens its pinned state, to read
// it.
func open() (*datapath.Datapath, error) {
	name, err := resolveIface()
	if err != nil {
		return nil, err
	}
	return datapath.Open(name, g.pinRoot)
}

// openToChange opens the data plane p to change it directly: refused when
// a daemon owns it, unless --direct (then with a warning).
func openToChange(p plane) (*datapath.Datapath, error) {
	return openOwned(p, "it must make the change")
}

// openOwned opens p's data plane for what only its owner may do (why):
// refused when a daemon owns it, unless --direct.
func openOwned(p plane, why string) (*datapath.Datapath, error) {
	if p.owned && !g.direct {
		return nil, p.errOwned(why, "go through its API")
	}
	p.warnDirect()
	return datapath.Open(p.iface, g.pinRoot)
}

func printJSON(v any) error { return cli.PrintJSON(v) }
