package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/tierwall/tierwall/internal/api"
	"github.com/tierwall/tierwall/internal/cli"
	"github.com/tierwall/tierwall/internal/datapath"
	"github.com/tierwall/tierwall/internal/rule"
)

// ruleCommands builds "block" and "allow": add, del, list.
func ruleCommands(use, short string, add, del func(*datapath.Datapath, ...netip.Prefix) error,
	list func(*datapath.Datapath) ([]datapath.Rule, error)) *cobra.Command {
	c := &cobra.Command{Use: use, Short: short, Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, a []string) error {
			return cli.Usage(fmt.Errorf("%s needs a subcommand: add, del or list", use))
		}}
	var file string
	change := func(verb string, f func(*datapath.Datapath, ...netip.Prefix) error) *cobra.Command {
		cmd := &cobra.Command{
			Use:   verb + " ADDR|PREFIX...",
			Short: verb + " rules (all or nothing)",
			Args: args(func(c *cobra.Command, a []string) error {
				if len(a) == 0 && file == "" {
					return fmt.Errorf("give addresses or prefixes, or --file")
				}
				return nil
			}),
			RunE: func(cmd *cobra.Command, a []string) error {
				ps, err := rule.ParseAll(a)
				if err != nil {
					return err
				}
				if file != "" {
					fh, err := os.Open(file)
					if err != nil {
						return fmt.Errorf("%w: %v", rule.ErrInvalid, err)
					}
					more, err := rule.ReadList(fh, file)
					fh.Close()
					if err != nil {
						return err
					}
					ps = append(ps, more...)
				}
				if dc := dialDaemon(); dc != nil {
					if err := dc.Change(context.Background(), use, ps, verb == "add", "tierwall block add"); err != nil {
						return err
					}
					fmt.Printf("%s %s: %d rule(s) through the daemon at %s\n", use, verb, len(ps), g.socket)
					return nil
				}
				d, err := open()
				if err != nil {
					return err
				}
				defer d.Close()
				if err := f(d, ps...); err != nil {
					return err
				}
				fmt.Printf("%s %s: %d rule(s) on %s\n", use, verb, len(ps), d.Iface)
				return nil
			},
		}
		cmd.Flags().StringVarP(&file, "file", "f", "", "read rules from a file, one per line ('#' comments)")
		addIfaceFlag(cmd)
		return cmd
	}
	ls := &cobra.Command{
		Use:   "list",
		Short: "list rules with their counters",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, a []string) error {
			if dc := dialDaemon(); dc != nil && use == "block" {
				return listViaDaemon(dc)
			}
			d, err := open()
			if err != nil {
				return err
			}
			defer d.Close()
			rs, err := list(d)
			if err != nil {
				return err
			}
			if g.json {
				if rs == nil {
					rs = []datapath.Rule{}
				}
				return printJSON(rs)
			}
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "PREFIX\tKIND\tPACKETS\tBYTES\tLAST HIT")
			for _, r := range rs {
				last := "never"
				if r.LastHit != nil {
					last = time.Since(*r.LastHit).Round(time.Second).String() + " ago"
				}
				fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%s\n", r.Prefix, r.Kind, r.Packets, r.Bytes, last)
			}
			return w.Flush()
		},
	}
	addIfaceFlag(ls)
	addJSONFlag(ls)
	c.AddCommand(change("add", add), change("del", del), ls)
	return c
}

func newBlock() *cobra.Command {
	return ruleCommands("block", "Block sources: addresses go to the exact tables, prefixes to the LPM tries",
		(*datapath.Datapath).Block, (*datapath.Datapath).Unblock, (*datapath.Datapath).Blocked)
}

func newAllow() *cobra.Command {
	return ruleCommands("allow", "Allowlist source prefixes: they pass whatever the block rules say",
		(*datapath.Datapath).Allow, (*datapath.Datapath).Disallow, (*datapath.Datapath).Allowed)
}

// listViaDaemon shows the daemon's bans: tier, detector, rate, expiry.
func listViaDaemon(dc *api.Client) error {
	rs, err := dc.Rules(context.Background())
	if err != nil {
		return err
	}
	if g.json {
		return printJSON(rs)
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "PREFIX\tTIER\tDETECTOR\tRATE PPS\tPACKETS\tEXPIRES\tREASON")
	for _, r := range rs {
		exp := "never"
		if !r.Expires.IsZero() {
			exp = "in " + time.Until(r.Expires).Round(time.Second).String()
		}
		fmt.Fprintf(w, "%v\t%v\t%v\t%.0f\t%v\t%s\t%v\n", r.Prefix, r.Tier, r.Detector, r.Rate, r.Packets, exp, r.Reason)
	}
	return w.Flush()
}
