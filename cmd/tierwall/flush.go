// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/tierwall/tierwall/internal/cli"
	"github.com/tierwall/tierwall/internal/datapath"
	"github.com/tierwall/tierwall/internal/rule"
)

// newFlush is block flush: lift every ban at once. Nothing else in the
// CLI undoes this much, so it asks first on a terminal and, anywhere
// else (a script, a pipe), wants --yes rather than reading an answer
// nobody typed.
func newFlush() *cobra.Command {
	var yes bool
	c := &cobra.Command{
		Use:   "flush",
		Short: "lift every ban (asks first on a terminal; --yes otherwise)",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, a []string) error {
			dc, p, err := daemonOrDirect()
			if err != nil {
				return err
			}
			ctx := context.Background()
			var n int
			where := ""
			var d *datapath.Datapath
			if dc != nil {
				rs, err := dc.Rules(ctx)
				if err != nil {
					return err
				}
				n, where = len(rs), "through the daemon at "+dc.Socket
			} else {
				if d, err = openToChange(p); err != nil {
					return err
				}
				defer d.Close()
				rs, err := d.Blocked()
				if err != nil {
					return err
				}
				n, where = len(rs), "on "+p.iface
			}
			if !yes {
				if !isTerminal(os.Stdin) {
					return cli.Usage(fmt.Errorf("%w: block flush lifts every ban (%d %s) and asks first; stdin is not a terminal, so pass --yes", rule.ErrInvalid, n, where))
				}
				ok, err := confirm(os.Stdin, os.Stderr, fmt.Sprintf("Lift every ban (%d %s)? [y/N] ", n, where))
				if err != nil {
					return err
				}
				if !ok {
					fmt.Println("block flush: nothing changed")
					return nil
				}
			}
			if dc != nil {
				done := startProgress(fmt.Sprintf("block flush: %d rule(s) %s", n, where))
				r, err := dc.FlushRules(ctx)
				done()
				if err != nil {
					return err
				}
				fmt.Printf("block flush: %d rule(s) lifted %s\n", r.Prefixes, where)
				return nil
			}
			return flushDirect(d)
		},
	}
	c.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask (needed when stdin is not a terminal)")
	addIfaceFlag(c)
	return c
}

// flushDirect deletes every block rule of the data plane itself, in one
// all-or-nothing call.
func flushDirect(d *datapath.Datapath) error {
	rs, err := d.Blocked()
	if err != nil {
		return err
	}
	ps := make([]netip.Prefix, len(rs))
	for i, r := range rs {
		ps[i] = r.Prefix
	}
	if len(ps) > 0 {
		done := startProgress(fmt.Sprintf("block flush: %d rule(s) on %s", len(ps), d.Iface))
		err = d.Unblock(ps...)
		done()
		if err != nil {
			return err
		}
	}
	fmt.Printf("block flush: %d rule(s) lifted on %s\n", len(ps), d.Iface)
	return nil
}

// confirm asks question on out and reads a yes or no from in (anything
// but y or yes is no).
func confirm(in io.Reader, out io.Writer, question string) (bool, error) {
	fmt.Fprint(out, question)
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && line == "" {
		if err == io.EOF {
			return false, nil
		}
		return false, fmt.Errorf("reading the answer: %w", err)
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true, nil
	}
	return false, nil
}
