// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/tierwall/tierwall/internal/bpffs"
	"github.com/tierwall/tierwall/internal/control/daemon"
	"github.com/tierwall/tierwall/internal/datapath"
	"github.com/tierwall/tierwall/internal/synproxy"
)

func newAttach() *cobra.Command {
	var mode string
	var o datapath.Options
	c := &cobra.Command{
		Use:   "attach -i IFACE",
		Short: "Attach the filter to IFACE, or re-adopt its pinned rules and counters",
		Args:  args(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			iface, _, err := ifaceAnd(cmd, a, 0, 0)
			if err != nil {
				return err
			}
			a = []string{iface}
			if cmd.Flags().Changed("mode") {
				m, err := datapath.ParseMode(mode)
				if err != nil {
					return err
				}
				o.Mode = m
			}
			o.PinRoot = g.pinRoot
			// Attaching over a daemon's data plane swaps its program:
			// that is the daemon's to do.
			if err := refuseOwned(a[0], "replace its program"); err != nil {
				return err
			}
			d, err := datapath.Attach(a[0], o)
			if err != nil {
				return err
			}
			defer d.Close()
			for _, w := range d.Warnings {
				fmt.Fprintln(os.Stderr, "tierwall: warning:", w)
			}
			s, err := d.Stats()
			if err != nil {
				return err
			}
			fmt.Printf("attached to %s (%s mode), state in %s\n", d.Iface, s.Mode, d.Dir)
			return nil
		},
	}
	addInterfaceFlag(c)
	f := c.Flags()
	f.StringVar(&mode, "mode", "native", "XDP mode: native or generic (default native, generic as a fallback with a warning), or nic-cpu to run on the emulated NIC of this interface")
	f.IntVar(&o.ExactCapacity4, "exact4-capacity", 0, fmt.Sprintf("IPv4 /32 rules (default %d)", datapath.DefaultExactCapacity))
	f.IntVar(&o.ExactCapacity6, "exact6-capacity", 0, fmt.Sprintf("IPv6 /128 rules (default %d)", datapath.DefaultExactCapacity))
	f.IntVar(&o.PrefixCapacity, "prefix-capacity", 0, fmt.Sprintf("prefix rules (default %d)", datapath.DefaultPrefixCapacity))
	f.IntVar(&o.AllowCapacity, "allow-capacity", 0, fmt.Sprintf("allowlist prefixes (default %d)", datapath.DefaultAllowCapacity))
	f.IntVar(&o.FeatureCapacity, "feature-capacity", 0, fmt.Sprintf("flow keys per CPU per snapshot (default %d)", datapath.DefaultFeatureCapacity))
	return c
}

func newDetach() *cobra.Command {
	c := &cobra.Command{
		Use:   "detach -i IFACE",
		Short: "Remove the filter from IFACE and delete its rules and counters",
		Args:  args(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			iface, _, err := ifaceAnd(cmd, a, 0, 0)
			if err != nil {
				return err
			}
			a = []string{iface}
			if err := refuseOwned(a[0], "detach its filter"); err != nil {
				return err
			}
			if err := datapath.Detach(a[0], g.pinRoot); err != nil {
				return err
			}
			// Detach leaves nothing of the interface behind (its lock file,
			// a namespace's emptied pin directory: they piled up).
			fmt.Printf("detached from %s\n", a[0])
			return removeSynproxy(a[0])
		},
	}
	addInterfaceFlag(c)
	return c
}

// refuseOwned refuses to act on iface's data plane while a daemon owns it,
// unless --direct.
func refuseOwned(iface, what string) error {
	o, ok := daemon.OwnerOf(ownerDir, daemon.OwnerKey(g.pinRoot, iface))
	p := plane{iface: iface, owner: o, owned: ok}
	if ok && !g.direct {
		return p.errOwned("only it may "+what, "stop it first")
	}
	p.warnDirect()
	return nil
}

// removeSynproxy takes down the SYN proxy's kernel side in this namespace
// once the filter on iface is gone: its nftables table and the sysctls it
// changed (nf_conntrack_tcp_loose 1 to 0), restored to the values saved
// in the table. The daemon leaves them in place when it stops, so that a
// restart mid-attack keeps the clients' handshakes; detach is the end of
// the filter, and without it the table only turns loose pickup off for
// the whole namespace. Another filter in the namespace may be the one
// using them: then they stay, and detach says so.
func removeSynproxy(iface string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ok, err := synproxy.Installed(ctx, "")
	if err != nil {
		return fmt.Errorf("looking for the SYN proxy's table: %w", err)
	}
	if !ok {
		return nil
	}
	if others := otherFilters(iface); len(others) > 0 {
		fmt.Fprintf(os.Stderr, "tierwall: the SYN proxy's table inet %s stays: the filter on %s in this namespace may use it\n",
			synproxy.Table, strings.Join(others, ", "))
		return nil
	}
	if err := synproxy.Remove(ctx, ""); err != nil {
		return fmt.Errorf("removing the SYN proxy's table and restoring its sysctls: %w", err)
	}
	fmt.Printf("removed the SYN proxy's table inet %s and restored the sysctls it changed\n", synproxy.Table)
	return nil
}

// otherFilters names the interfaces other than iface with a filter pinned
// in this network namespace.
func otherFilters(iface string) []string {
	root := g.pinRoot
	if root == "" {
		var err error
		if root, err = bpffs.Root(); err != nil {
			return nil
		}
	}
	ents, err := os.ReadDir(filepath.Dir(bpffs.FilterDir(root, iface)))
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		// ns:* are other namespaces' directories (under the host's).
		if e.IsDir() && !strings.HasPrefix(e.Name(), "ns:") && e.Name() != bpffs.PinName(iface) {
			out = append(out, bpffs.IfaceFromPin(e.Name()))
		}
	}
	slices.Sort(out)
	return out
}
