package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/tierwall/tierwall/internal/daemon"
	"github.com/tierwall/tierwall/internal/datapath"
	"github.com/tierwall/tierwall/internal/datapath/bpffs"
)

func newAttach() *cobra.Command {
	var mode string
	var o datapath.Options
	c := &cobra.Command{
		Use:   "attach IFACE",
		Short: "Attach the filter to IFACE, or re-adopt its pinned rules and counters",
		Args:  args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
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
	return &cobra.Command{
		Use:   "detach IFACE",
		Short: "Remove the filter from IFACE and delete its rules and counters",
		Args:  args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			if err := refuseOwned(a[0], "detach its filter"); err != nil {
				return err
			}
			if err := datapath.Detach(a[0], g.pinRoot); err != nil {
				return err
			}
			// Nothing of the interface may stay behind: its lock file and,
			// in a namespace, the namespace's empty pin directory (they
			// piled up under /run/tierwall and /sys/fs/bpf/tierwall).
			root := g.pinRoot
			if root == "" {
				var err error
				if root, err = bpffs.Root(); err != nil {
					return err
				}
			}
			if err := bpffs.Forget(bpffs.FilterDir(root, a[0])); err != nil {
				fmt.Fprintln(os.Stderr, "tierwall: warning: detached, but cleaning up:", err)
			}
			fmt.Printf("detached from %s\n", a[0])
			return nil
		},
	}
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
