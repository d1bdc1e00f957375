// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/tierwall/tierwall/internal/cli"
	"github.com/tierwall/tierwall/internal/control/api"
	"github.com/tierwall/tierwall/internal/control/apiv1"
	"github.com/tierwall/tierwall/internal/control/ban"
	"github.com/tierwall/tierwall/internal/control/config"
	"github.com/tierwall/tierwall/internal/control/daemon"
	"github.com/tierwall/tierwall/internal/datapath"
	"github.com/tierwall/tierwall/internal/rule"
)

// addOptions are block/allow add's options beyond the prefixes.
type addOptions struct {
	ttl    time.Duration
	reason string
	update bool
	force  bool
	cmd    *cobra.Command
}

func (o *addOptions) ttlGiven() bool { return o.cmd.Flags().Changed("ttl") }

// ruleCommands builds "block" and "allow": add, del, list.
func ruleCommands(use, short string) *cobra.Command {
	c := cli.Parent(use, short, "add, del or list")
	var file string
	var o addOptions
	change := func(verb string) *cobra.Command {
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
				o.cmd = cmd
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
				ps = unique(ps)
				if o.ttl < 0 {
					return fmt.Errorf("%w: --ttl %v is negative", rule.ErrInvalid, o.ttl)
				}
				dc, p, err := daemonOrDirect()
				if err != nil {
					return err
				}
				add := verb == "add"
				if dc != nil {
					return changeViaDaemon(dc, use, ps, add, &o)
				}
				return changeDirect(p, use, ps, add, &o)
			},
		}
		f := cmd.Flags()
		f.StringVarP(&file, "file", "f", "", "read rules from a file, one per line ('#' comments)")
		if verb == "add" {
			if use == "block" {
				f.DurationVar(&o.ttl, "ttl", 0, "lift the ban after this long (default: never; with --update, 0 makes it permanent); kept by the daemon")
				f.StringVar(&o.reason, "reason", "", `why (default "operator"); kept by the daemon`)
				f.BoolVar(&o.update, "update", false, "replace the reason and expiry of a ban that exists (without it, an existing ban is left unchanged)")
				f.BoolVar(&o.force, "force", false, "accept a prefix wider than the rails' limit (rails.max_ban_prefix_v4/v6); never a ban covering this host's addresses or gateway")
			} else {
				f.BoolVar(&o.force, "force", false, "accept a prefix wider than the rails' limit (rails.max_allow_prefix_v4/v6)")
			}
		}
		addIfaceFlag(cmd)
		return cmd
	}
	var f ruleFilter
	ls := &cobra.Command{
		Use:   "list",
		Short: "list rules with their counters",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, a []string) error {
			if err := f.parse(); err != nil {
				return err
			}
			rows, err := listRules(use)
			if err != nil {
				return err
			}
			if rows, err = f.apply(rows); err != nil {
				return err
			}
			return printRules(rows)
		},
	}
	addIfaceFlag(ls)
	addJSONFlag(ls)
	ls.Flags().StringSliceVar(&f.detectors, "detector", nil, "only rules of these detectors (rate, entropy, operator, …; the daemon's)")
	ls.Flags().StringVar(&f.tier, "tier", "", "only rules in this tier: xdp or hw")
	ls.Flags().StringVar(&f.prefixText, "prefix", "", "only rules that overlap this prefix or address (inside it, or covering it)")
	ls.Flags().DurationVar(&f.olderThan, "older-than", 0, "only rules created longer ago than this (the daemon's)")
	c.AddCommand(change("add"), change("del"), ls)
	if use == "block" {
		c.AddCommand(newFlush())
	}
	return c
}

func newBlock() *cobra.Command {
	return ruleCommands("block", "Block sources: addresses go to the exact tables, prefixes to the LPM tries")
}

func newAllow() *cobra.Command {
	return ruleCommands("allow", "Allowlist source prefixes: they pass whatever the block rules say")
}

// daemonOrDirect is the daemon to go through (nil: change the data plane
// directly) and the data plane the command works on. With no interface
// attached in this network namespace, a daemon answering on --socket (one
// in another namespace) is the one meant.
func daemonOrDirect() (*api.Client, plane, error) {
	if g.url != "" {
		c, err := remoteDaemon()
		return c, plane{}, err
	}
	p, err := target()
	if errors.Is(err, datapath.ErrNotAttached) && !g.direct && g.socket != "" {
		if c, derr := api.Dial(g.socket); derr == nil {
			return c, p, nil
		}
	}
	if err != nil {
		return nil, p, err
	}
	c, err := p.client()
	return c, p, err
}

// changeViaDaemon applies the change through the daemon's API: its bans,
// its rails, its state file.
func changeViaDaemon(dc *api.Client, use string, ps []netip.Prefix, add bool, o *addOptions) error {
	ctx := context.Background()
	verb := "del"
	if add {
		verb = "add"
	}
	where := "through the daemon at " + dc.Socket
	// One request whatever the count, all or nothing in the daemon's
	// loop: 199K prefixes one request each took five minutes and left
	// half of them changed when stopped.
	done := startProgress(fmt.Sprintf("%s %s: %d rule(s) %s", use, verb, len(ps), where))
	defer done()
	switch {
	case !add && use == api.Block:
		r, err := dc.DeleteRules(ctx, ps)
		done()
		if err != nil {
			return err
		}
		fmt.Printf("%s %s: %d rule(s) %s\n", use, verb, r.Prefixes, where)
		return nil
	case use == api.Allow:
		err := dc.ChangeAllows(ctx, ps, add, o.force)
		done()
		if err != nil {
			return err
		}
		fmt.Printf("%s %s: %d rule(s) %s\n", use, verb, len(ps), where)
		return nil
	}
	ttl := ""
	if o.ttlGiven() {
		ttl = o.ttl.String()
	}
	if len(ps) == 1 {
		var r apiv1.BanResult
		req := apiv1.RuleRequest{Prefix: ps[0].String(), Reason: o.reason, TTL: ttl, Force: o.force, Update: o.update}
		err := dc.Do(ctx, "POST", "/v1/rules", req, &r)
		done()
		if err != nil {
			return err
		}
		switch r.Result {
		case ban.Exists:
			fmt.Printf("block add: %s is already banned (%s): unchanged, %s; --update replaces its reason or expiry\n", r.Prefix, describe(r.Ban), where)
		case ban.Updated:
			fmt.Printf("block add: %s updated (%s) %s\n", r.Prefix, describe(r.Ban), where)
		default:
			fmt.Printf("block add: %s added (%s) %s\n", r.Prefix, describe(r.Ban), where)
		}
		return nil
	}
	var r apiv1.BatchResult
	req := apiv1.BatchRequest{Prefixes: make([]string, len(ps)), Reason: o.reason, TTL: ttl, Force: o.force, Update: o.update, AllOrNothing: true}
	for i, p := range ps {
		req.Prefixes[i] = p.String()
	}
	err := dc.Do(ctx, "POST", "/v1/rules/batch", req, &r)
	done()
	if err != nil {
		return err
	}
	fmt.Printf("block add: %d rule(s) %s: %d added, %d already banned (unchanged), %d updated\n", r.Prefixes, where, r.New, r.Exists, r.Updated)
	return nil
}

// describe is a ban's detector, reason and expiry, for a message.
func describe(b ban.Ban) string {
	exp := "no expiry"
	if !b.Expires.IsZero() {
		exp = "expires in " + time.Until(b.Expires).Round(time.Second).String()
	}
	return fmt.Sprintf("%s: %s, %s", b.Detector, b.Reason, exp)
}

// changeDirect changes the data plane itself: no daemon owns it (or
// --direct). The rails still apply; what only a daemon keeps (reason,
// expiry) is refused rather than dropped.
func changeDirect(p plane, use string, ps []netip.Prefix, add bool, o *addOptions) error {
	if add && (o.ttlGiven() || o.reason != "" || o.update) {
		return cli.Usage(fmt.Errorf("--ttl, --reason and --update are kept by the daemon, and no daemon owns the data plane on %s "+
			"(a rule added directly has no reason and never expires)", p.iface))
	}
	if add {
		if err := checkDirect(use, ps, o.force); err != nil {
			return err
		}
	}
	d, err := openToChange(p)
	if err != nil {
		return err
	}
	defer d.Close()
	done := startProgress(fmt.Sprintf("%s %s: %d rule(s) on %s", use, map[bool]string{true: "add", false: "del"}[add], len(ps), d.Iface))
	defer done()
	if !add {
		f := d.Unblock
		if use == api.Allow {
			f = d.Disallow
		}
		err := f(ps...)
		done()
		if err != nil {
			return err
		}
		fmt.Printf("%s del: %d rule(s) on %s\n", use, len(ps), d.Iface)
		return nil
	}
	exists, err := present(d, use, ps)
	if err != nil {
		return err
	}
	f := d.Block
	if use == api.Allow {
		f = d.Allow
	}
	err = f(ps...)
	done()
	if err != nil {
		return err
	}
	fmt.Printf("%s add: %d rule(s) on %s: %d added, %d already there (unchanged)\n", use, len(ps), d.Iface, len(ps)-exists, exists)
	return nil
}

// checkDirect applies the rails a daemon would: the default width limits
// (--force past them) and, for bans, never this host's addresses or
// default gateway.
func checkDirect(use string, ps []netip.Prefix, force bool) error {
	def := config.Default().Rails
	if use == api.Allow {
		for _, p := range ps {
			if limit, wide := def.AllowTooWide(p); wide && !force {
				return fmt.Errorf("%w: allowing %s would let everything from it past every ban: wider than /%d; --force to override (nothing changed)",
					rule.ErrInvalid, p, limit)
			}
		}
		return nil
	}
	ms, err := daemon.ManagementAddrs()
	if err != nil {
		return fmt.Errorf("reading this host's addresses for the rails: %w", err)
	}
	r := ban.Rails{WidestBan4: def.MaxBanPrefixV4, WidestBan6: def.MaxBanPrefixV6, Management: ms}
	for _, p := range ps {
		if why := r.Catastrophic(p, force); why != "" {
			return fmt.Errorf("%w: refusing to ban %s: it is %s (nothing changed)", rule.ErrInvalid, p, why)
		}
	}
	return nil
}

// present counts the rules of ps the data plane holds already.
func present(d *datapath.Datapath, use string, ps []netip.Prefix) (int, error) {
	n := 0
	if use == api.Block {
		rs := make([]datapath.Reading, len(ps))
		if err := d.RuleCountersInto(ps, rs); err != nil {
			return 0, err
		}
		for _, r := range rs {
			if r.Found {
				n++
			}
		}
		return n, nil
	}
	rs, err := d.Allowed()
	if err != nil {
		return 0, err
	}
	have := map[netip.Prefix]bool{}
	for _, r := range rs {
		have[r.Prefix] = true
	}
	for _, p := range ps {
		if have[p] {
			n++
		}
	}
	return n, nil
}

// ruleRow is one rule as block/allow list show it, the same through the
// daemon and directly: what the data plane alone cannot know (detector,
// reason, rate, expiry, tier) is empty or null there; what the daemon
// does not count (bytes, last hit) is read from the data plane when it can
// be, else null.
type ruleRow struct {
	Prefix   netip.Prefix  `json:"prefix"`
	Kind     datapath.Kind `json:"kind"` // exact, prefix or allow
	Tier     string        `json:"tier"` // xdp or hw ("" unknown)
	Detector string        `json:"detector"`
	Reason   string        `json:"reason"`
	RatePPS  *float64      `json:"rate_pps"`
	Packets  uint64        `json:"packets"`
	Bytes    *uint64       `json:"bytes"`
	LastHit  *time.Time    `json:"last_hit"`
	Expires  *time.Time    `json:"expires"` // null: never (or unknown: no daemon)
	// FirstSeen is when the daemon made the ban; null without a daemon.
	FirstSeen *time.Time `json:"first_seen"`
}

func kindOf(use string, p netip.Prefix) datapath.Kind {
	switch {
	case use == api.Allow:
		return datapath.KindAllow
	case p.IsSingleIP():
		return datapath.KindExact
	}
	return datapath.KindPrefix
}

func rowFromRule(r datapath.Rule) ruleRow {
	b := r.Bytes
	return ruleRow{Prefix: r.Prefix, Kind: r.Kind, Tier: "xdp", Packets: r.Packets, Bytes: &b, LastHit: r.LastHit}
}

// listRules reads the rules of use: through the daemon that owns the data
// plane when it answers, else from the data plane (reading changes
// nothing, so no --direct is needed).
func listRules(use string) ([]ruleRow, error) {
	rows := []ruleRow{}
	dc, _, err := daemonOrDirect()
	if err != nil && (g.url != "" || !errors.As(err, new(cli.UsageError))) {
		return nil, err
	}
	// The data plane's own view, when this namespace has one: all of it
	// without a daemon, bytes and last hit with one.
	var dpRules []datapath.Rule
	if d, oerr := open(); oerr == nil {
		if use == api.Block {
			dpRules, oerr = d.Blocked()
		} else {
			dpRules, oerr = d.Allowed()
		}
		d.Close()
		if oerr != nil && dc == nil {
			return nil, oerr
		}
	} else if dc == nil {
		return nil, oerr
	}
	if dc == nil {
		for _, r := range dpRules {
			rows = append(rows, rowFromRule(r))
		}
		return rows, nil
	}
	ctx := context.Background()
	if use == api.Allow {
		a, err := dc.Allowlist(ctx)
		if err != nil {
			return nil, err
		}
		for _, r := range a.DataPlane {
			rows = append(rows, rowFromRule(r))
		}
		return rows, nil
	}
	rs, err := dc.Rules(ctx)
	if err != nil {
		return nil, err
	}
	byPrefix := make(map[netip.Prefix]datapath.Rule, len(dpRules))
	for _, r := range dpRules {
		byPrefix[r.Prefix] = r
	}
	for _, r := range rs {
		x, ok := byPrefix[r.Prefix]
		rows = append(rows, rowFromBan(use, r, x, ok))
	}
	return rows, nil
}

// rowFromBan is a daemon's ban with what the data plane counted of it
// (inDP: the data plane could be read and holds it).
func rowFromBan(use string, r apiv1.RuleView, x datapath.Rule, inDP bool) ruleRow {
	row := ruleRow{Prefix: r.Prefix, Kind: kindOf(use, r.Prefix), Tier: r.Tier, Detector: r.Detector, Reason: r.Reason, Packets: r.Packets}
	rate := r.Rate
	row.RatePPS = &rate
	if !r.Expires.IsZero() {
		e := r.Expires
		row.Expires = &e
	}
	if !r.FirstSeen.IsZero() {
		fs := r.FirstSeen
		row.FirstSeen = &fs
	}
	if inDP {
		b := x.Bytes
		row.Bytes, row.LastHit = &b, x.LastHit
	}
	return row
}

// printRules is the one printer of block/allow list.
func printRules(rows []ruleRow) error {
	if g.json {
		return printJSON(rows)
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "PREFIX\tKIND\tTIER\tDETECTOR\tREASON\tRATE PPS\tPACKETS\tBYTES\tLAST HIT\tEXPIRES")
	dash := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	for _, r := range rows {
		rate, bytes, last, exp := "-", "-", "never", "never"
		if r.RatePPS != nil {
			rate = fmt.Sprintf("%.0f", *r.RatePPS)
		}
		if r.Bytes != nil {
			bytes = fmt.Sprint(*r.Bytes)
		}
		if r.LastHit != nil {
			last = time.Since(*r.LastHit).Round(time.Second).String() + " ago"
		}
		if r.Expires != nil {
			exp = "in " + time.Until(*r.Expires).Round(time.Second).String()
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", r.Prefix, r.Kind, dash(r.Tier), dash(r.Detector),
			dash(strings.ReplaceAll(r.Reason, "\t", " ")), rate, r.Packets, bytes, last, exp)
	}
	return w.Flush()
}

// ruleFilter is block|allow list's filters: an operator looking at
// 200,000 bans wants the entropy detector's, those in hardware, those in
// one network, or those a day old, not all of them.
type ruleFilter struct {
	detectors  []string
	tier       string
	prefixText string
	prefix     netip.Prefix
	olderThan  time.Duration
}

// parse checks the filters before anything is read, as a usage error.
func (f *ruleFilter) parse() error {
	switch f.tier {
	case "", "xdp", "hw":
	default:
		return fmt.Errorf("%w: --tier %q (want xdp or hw)", rule.ErrInvalid, f.tier)
	}
	if f.olderThan < 0 {
		return fmt.Errorf("%w: negative --older-than", rule.ErrInvalid)
	}
	if f.prefixText != "" {
		p, err := rule.Parse(f.prefixText)
		if err != nil {
			return err
		}
		f.prefix = p
	}
	return nil
}

// apply keeps the rows every filter given passes. A filter on what only
// the daemon knows (detector, age) is refused on rows read from the data
// plane alone, rather than matching nothing.
func (f *ruleFilter) apply(rows []ruleRow) ([]ruleRow, error) {
	out := rows[:0]
	for _, r := range rows {
		if (len(f.detectors) > 0 || f.olderThan > 0) && r.FirstSeen == nil {
			return nil, cli.Usage(fmt.Errorf("--detector and --older-than need the daemon's bans: %s was read from the data plane, "+
				"which keeps no detector or age (is the daemon running? give its socket with --socket)", r.Prefix))
		}
		switch {
		case len(f.detectors) > 0 && !slices.Contains(f.detectors, r.Detector):
		case f.tier != "" && r.Tier != f.tier:
		case f.prefix.IsValid() && !f.prefix.Overlaps(r.Prefix):
		case f.olderThan > 0 && time.Since(*r.FirstSeen) < f.olderThan:
		default:
			out = append(out, r)
		}
	}
	return out, nil
}

// unique drops repeated prefixes, the first kept: a rule given twice is
// one rule (block add X X counted two).
func unique(ps []netip.Prefix) []netip.Prefix {
	seen := make(map[netip.Prefix]bool, len(ps))
	out := ps[:0]
	for _, p := range ps {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}
