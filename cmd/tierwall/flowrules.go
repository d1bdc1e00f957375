// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tierwall/tierwall/internal/cli"
	"github.com/tierwall/tierwall/internal/control/api"
	"github.com/tierwall/tierwall/internal/rule"
)

const flowRuleSyntax = `A rule is words: dst PREFIX [proto tcp|udp|icmp|icmpv6|N] [dport N|LO-HI]
[sport N|LO-HI] [flags VALUE/MASK] [length LO-HI] [frag none|fragment|later]
then drop | rate-limit PPS | syn-cookie, and optionally bypass-known-good.
A rule that stops traffic to this host's own addresses needs --force; one that
can stop its BGP sessions or rails.management_ports (SSH) is refused even so.

  tierwall flowrule add dst 198.51.100.7/32 proto udp sport 53 drop
  tierwall flowrule add dst 198.51.100.7/32 proto udp rate-limit 20000 bypass-known-good --ttl 1h
  tierwall flowrule add dst 198.51.100.7/32 proto tcp dport 443 flags S/SA syn-cookie`

// newFlowRule builds "flowrule": rules that match what traffic is sent to
// and looks like, for floods whose sources cannot be listed. The daemon
// owns them (its ladder adds and withdraws its own), so they go through it.
func newFlowRule() *cobra.Command {
	c := &cobra.Command{Use: "flowrule", Short: "Flow rules (FlowSpec-style): match destination, protocol, ports, flags, length; drop, rate-limit or SYN cookies",
		Long: flowRuleSyntax, Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, a []string) error {
			return cli.Usage(fmt.Errorf("flowrule needs a subcommand: add, del or list"))
		}}
	var (
		ttl    time.Duration
		reason string
		force  bool
	)
	// The daemon keeps the flow rules; it is found as every command finds
	// it (this used dialDaemon, which missed a daemon owning no filter in
	// this namespace and answered --direct with "none answers").
	daemonOnly := func() (*api.Client, error) { return needDaemon("the flow rule table") }
	add := &cobra.Command{Use: "add WORDS...", Short: "add a flow rule (all or nothing)", Long: flowRuleSyntax,
		Args: args(cobra.MinimumNArgs(2)),
		RunE: func(cmd *cobra.Command, a []string) error {
			r, err := rule.ParseFlowRule(a)
			if err != nil {
				return err
			}
			if ttl < 0 {
				return fmt.Errorf("%w: negative --ttl", rule.ErrInvalid)
			}
			dc, err := daemonOnly()
			if err != nil {
				return err
			}
			out, err := dc.PostFlowRule(context.Background(), r, reason, ttl, force)
			if err != nil {
				return err
			}
			fmt.Printf("flowrule add: %s\n", out.FlowRule)
			return nil
		}}
	add.Flags().DurationVar(&ttl, "ttl", 0, "remove the rule after this long (0: until removed)")
	add.Flags().StringVar(&reason, "reason", "operator", "why, shown in events and listings")
	add.Flags().BoolVar(&force, "force", false, "take a rule that stops traffic to this host's own addresses (never one that can stop its BGP or management sessions)")
	del := &cobra.Command{Use: "del WORDS...", Short: "remove the flow rule with this match and action", Long: flowRuleSyntax,
		Args: args(cobra.MinimumNArgs(2)),
		RunE: func(cmd *cobra.Command, a []string) error {
			r, err := rule.ParseFlowRule(a)
			if err != nil {
				return err
			}
			dc, err := daemonOnly()
			if err != nil {
				return err
			}
			if err := dc.DeleteFlowRule(context.Background(), r); err != nil {
				return err
			}
			fmt.Printf("flowrule del: %s\n", r)
			return nil
		}}
	ls := &cobra.Command{Use: "list", Short: "list flow rules in match order, with counters", Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, a []string) error {
			dc, err := daemonOnly()
			if err != nil {
				return err
			}
			rs, err := dc.FlowRules(context.Background())
			if err != nil {
				return err
			}
			if g.json {
				return printJSON(rs)
			}
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "RULE\tORIGIN\tMATCHED PPS\tDROPPED PPS\tPACKETS\tDROPPED\tKNOWN-GOOD\tON THE CARD\tEXPIRES\tREASON")
			for _, r := range rs {
				exp := "never"
				if !r.Expires.IsZero() {
					exp = time.Until(r.Expires).Round(time.Second).String()
				}
				card := "-"
				if r.NIC != "" {
					card = r.NIC
				}
				fmt.Fprintf(w, "%s\t%s\t%.0f\t%.0f\t%d\t%d\t%d\t%s\t%s\t%s\n", r.FlowRule, r.Origin, r.MatchedPPS, r.DroppedPPS,
					r.Counters.Packets, r.Counters.Dropped, r.Counters.PassedKnownGood, card, exp, oneLine(r.Reason))
			}
			return w.Flush()
		}}
	addJSONFlag(ls)
	c.AddCommand(add, del, ls)
	return c
}

// newVictims shows the per-victim detector: who is attacked, with what
// evidence, and the mitigations in force.
func newVictims() *cobra.Command {
	c := &cobra.Command{Use: "victims", Short: "show destinations under attack and the mitigation ladder's choices", Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, a []string) error {
			dc, err := needDaemon("the per-victim detector's view")
			if err != nil {
				return err
			}
			v, err := dc.Victims(context.Background())
			if err != nil {
				return err
			}
			if g.json {
				return printJSON(v)
			}
			if !v.Enabled {
				fmt.Println("the per-victim detector is off (detectors.victim.enabled)")
				return nil
			}
			fmt.Printf("tracked destinations %d, known-good clients %d\n", v.Tracked, v.KnownGood)
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "VICTIM\tNEW\tPPS\tBASELINE PPS\tSOURCES\tNEW SOURCES\tSIGNALS")
			for _, j := range v.Attacks {
				e := j.Evidence
				fmt.Fprintf(w, "%s\t%v\t%.0f\t%.0f\t%d\t%d\t%s\n", j.Victim, j.New, e.PPS, e.BaselinePPS, e.Sources, e.NewSources, e.Signals)
			}
			if err := w.Flush(); err != nil {
				return err
			}
			w = tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "MITIGATION\tVICTIM\tRUNG\tWHAT\tREASON")
			for _, m := range v.Active {
				var what []string
				for _, p := range m.Prefixes {
					what = append(what, p.String())
				}
				for _, r := range m.Rules {
					what = append(what, r.String())
				}
				fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\n", m.ID, m.Victim, m.Rung, strings.Join(what, "; "), oneLine(m.Reason))
			}
			return w.Flush()
		}}
	addJSONFlag(c)
	return c
}

func oneLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }
