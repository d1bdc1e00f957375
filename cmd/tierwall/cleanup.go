// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/tierwall/tierwall/internal/bpffs"
	"github.com/tierwall/tierwall/internal/cli"
	"github.com/tierwall/tierwall/internal/control/daemon"
	"github.com/tierwall/tierwall/internal/synproxy"
)

// Pins outlive every tierwall process by design (bans keep dropping when
// the daemon stops), and so do the SYN proxy's nftables table and the
// sysctls it set, and the lock files and owner records under /run: a
// host that no longer runs tierwall needs one command that takes all of
// it away, and says what it takes (--dry-run: only that).

// cleanupStep is one thing tierwall left on the host and how to remove it.
type cleanupStep struct {
	what string
	do   func() error
}

// cleanupPlan is everything to remove, in order, and the daemons still
// running (which would lose their data plane).
type cleanupPlan struct {
	steps []cleanupStep
	live  []daemon.Owner
}

func newCleanup() *cobra.Command {
	var dryRun, force bool
	runDir := bpffs.RunDir
	c := &cobra.Command{
		Use:   "cleanup [--dry-run]",
		Short: "Remove everything tierwall put on this host: pinned filters and NIC stages, the SYN proxy's table and sysctls, lock and run files",
		Long: "cleanup removes the pinned filters and emulated NIC stages of every network namespace (their\n" +
			"XDP programs go with the pins: the bans stop being enforced), the SYN proxy's nftables table\n" +
			"with the sysctls it changed put back (in this namespace and each one with a filter pinned), and\n" +
			"the lock files, owner records and bpffs bind mount under /run/tierwall. The configuration\n" +
			"(/etc/tierwall) and the saved bans (/var/lib/tierwall) stay. It refuses while a tierwall daemon\n" +
			"runs, unless --force; --dry-run lists what it would remove and removes nothing.",
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, a []string) error {
			root := g.pinRoot
			if root == "" {
				// Not bpffs.Root: cleaning up must not mount bpffs.
				root = bpffs.DefaultBPFFS
			}
			p, err := planCleanup(root, runDir)
			if err != nil {
				return err
			}
			for _, o := range p.live {
				fmt.Fprintf(os.Stderr, "tierwall: the tierwall daemon pid %d (config %s) runs on %s\n", o.PID, o.Config, o.Interface)
			}
			if len(p.live) > 0 && !force && !dryRun {
				return cli.Usage(fmt.Errorf("%d tierwall daemon(s) running: stop them first (systemctl stop tierwall), or pass --force "+
					"to take their data plane from under them", len(p.live)))
			}
			if len(p.steps) == 0 {
				fmt.Println("nothing of tierwall's left on this host")
				return nil
			}
			var errs []error
			for _, s := range p.steps {
				if dryRun {
					fmt.Println("would remove", s.what)
					continue
				}
				if err := s.do(); err != nil {
					errs = append(errs, fmt.Errorf("removing %s: %w", s.what, err))
					continue
				}
				fmt.Println("removed", s.what)
			}
			return errors.Join(errs...)
		},
	}
	c.Flags().BoolVar(&dryRun, "dry-run", false, "list what would be removed, and remove nothing")
	c.Flags().BoolVar(&force, "force", false, "also while a tierwall daemon runs (its filter stops enforcing its bans)")
	// Tests clean a private tree; the product's is the one place every
	// tierwall process shares.
	c.Flags().StringVar(&runDir, "run-dir", bpffs.RunDir, "directory of lock files and owner records")
	_ = c.Flags().MarkHidden("run-dir")
	return c
}

// planCleanup lists what tierwall left under the pin root and runDir, and
// the SYN proxy tables of this namespace and of each namespace with pins.
func planCleanup(root, runDir string) (cleanupPlan, error) {
	var p cleanupPlan
	ents, err := os.ReadDir(runDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return p, fmt.Errorf("listing %s: %w", runDir, err)
	}
	for _, e := range ents {
		if key, ok := strings.CutSuffix(e.Name(), ".owner"); ok {
			if o, alive := daemon.OwnerOf(runDir, key); alive {
				p.live = append(p.live, o)
			}
		}
	}

	// The SYN proxy first: its table names the sysctl values to put back.
	namespaces := []string{""}
	trees := []string{filepath.Join(root, "tierwall"), filepath.Join(root, "tierwall-nic")}
	seen := map[string]bool{}
	for _, tree := range trees {
		ents, _ := os.ReadDir(tree)
		for _, e := range ents {
			name, ok := strings.CutPrefix(bpffs.IfaceFromPin(e.Name()), "ns.")
			// Only namespaces that still exist have a table to remove;
			// this one (-n) is "" already.
			if ok && !seen[name] && !strings.Contains(name, "/") && "ns:"+name != bpffs.NetnsTag() &&
				bpffs.Exists(filepath.Join("/run/netns", name)) {
				seen[name] = true
				namespaces = append(namespaces, name)
			}
		}
	}
	sort.Strings(namespaces[1:])
	for _, ns := range namespaces {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ok, err := synproxy.Installed(ctx, ns)
		cancel()
		if err != nil {
			return p, fmt.Errorf("looking for the SYN proxy's table in %s: %w", nsName(ns), err)
		}
		if ok {
			ns := ns
			p.steps = append(p.steps, cleanupStep{
				what: fmt.Sprintf("the SYN proxy's table inet %s in %s, putting back the sysctls it changed", synproxy.Table, nsName(ns)),
				do: func() error {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					return synproxy.Remove(ctx, ns)
				}})
		}
	}

	// Pins: one step per interface or namespace, so the listing says
	// whose they are; removing a link's pin detaches its XDP program.
	for _, tree := range trees {
		ents, err := os.ReadDir(tree)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return p, fmt.Errorf("listing %s: %w", tree, err)
		}
		kind := "filter"
		if filepath.Base(tree) == "tierwall-nic" {
			kind = "emulated NIC stage"
		}
		for _, e := range ents {
			path := filepath.Join(tree, e.Name())
			what := fmt.Sprintf("the pinned %s on %s (%s)", kind, bpffs.IfaceFromPin(e.Name()), path)
			if ns, ok := strings.CutPrefix(e.Name(), "ns:"); ok {
				what = fmt.Sprintf("every pinned %s of network namespace %s (%s)", kind, bpffs.IfaceFromPin(ns), path)
			}
			p.steps = append(p.steps, cleanupStep{what: what, do: func() error { return os.RemoveAll(path) }})
		}
		p.steps = append(p.steps, cleanupStep{what: "the pin directory " + tree, do: func() error { return os.Remove(tree) }})
	}

	// /run: the bind mount of bpffs, then every lock file and record.
	for _, e := range ents {
		path := filepath.Join(runDir, e.Name())
		if e.IsDir() && e.Name() == "bpffs" {
			p.steps = append(p.steps, cleanupStep{what: "the bind mount of bpffs at " + path, do: func() error {
				if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
					return err // EINVAL: not a mount point (any more)
				}
				return os.Remove(path)
			}})
			continue
		}
		p.steps = append(p.steps, cleanupStep{what: path, do: func() error { return os.RemoveAll(path) }})
	}
	if len(ents) > 0 {
		p.steps = append(p.steps, cleanupStep{what: "the directory " + runDir, do: func() error { return os.Remove(runDir) }})
	}
	return p, nil
}

func nsName(ns string) string {
	if ns == "" {
		return "this network namespace"
	}
	return "network namespace " + ns
}
