// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tierwall/tierwall/internal/cli"
	"github.com/tierwall/tierwall/internal/datapath"
	"github.com/tierwall/tierwall/internal/rule"
	"github.com/tierwall/tierwall/internal/tier"
	"github.com/tierwall/tierwall/internal/tier/autodetect"
	"github.com/tierwall/tierwall/internal/tier/nicstage"
)

// newHW is `tierwall hw`: the NIC tier of a real interface.
func newHW() *cobra.Command {
	c := parent("hw", "Inspect the hardware tier of a real NIC (tc flower, ethtool n-tuple)", "probe")
	var o autodetect.Options
	p := &cobra.Command{
		Use:   "probe -i IFACE",
		Short: "Say which hardware-table backend works on IFACE, or that tierwall runs XDP-only there",
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, a []string) error {
			iface, _, err := ifaceAnd(cmd, a, 0, 0)
			if err != nil {
				return err
			}
			a = []string{iface}
			if _, err := net.InterfaceByName(a[0]); err != nil {
				return fmt.Errorf("%w: %s", datapath.ErrNoInterface, a[0])
			}
			t, err := autodetect.Backend(a[0], o)
			type result struct {
				Caps    *tier.Caps `json:"caps,omitempty"`
				XDPOnly bool       `json:"xdp_only"`
				Reason  string     `json:"reason,omitempty"`
			}
			var r result
			if err != nil {
				if !isUnsupported(err) {
					return err
				}
				r = result{XDPOnly: true, Reason: err.Error()}
			} else {
				caps := t.Caps()
				t.Close()
				r = result{Caps: &caps}
			}
			if g.json {
				return printJSON(r)
			}
			if r.XDPOnly {
				fmt.Println("no hardware tier:", r.Reason)
				return nil
			}
			fmt.Printf("%s: %s backend, %d rules, counters %v, flows %v\n", a[0], r.Caps.Backend, r.Caps.Capacity, r.Caps.Counters, r.Caps.Flows)
			return nil
		},
	}
	p.Flags().IntVar(&o.Capacity, "capacity", 0, "rules the NIC holds (flower cannot report it; default 1024)")
	p.Flags().BoolVar(&g.json, "json", false, "print JSON")
	p.Flags().Uint32Var(&o.NtupleBase, "ntuple-base", 0, "first n-tuple rule location tierwall may use")
	addInterfaceFlag(p)
	c.AddCommand(p)
	return c
}

func isUnsupported(err error) bool { return errors.Is(err, tier.ErrUnsupported) }

// newNIC is `tierwall nic`: the emulated SmartNIC stage.
func newNIC() *cobra.Command {
	c := parent("nic", "Drive the emulated SmartNIC stage (a bump-in-the-wire XDP hardware table)", "attach, detach, add, del or list")
	var o nicstage.Options
	at := &cobra.Command{
		Use:   "attach -i WIRE HOST",
		Short: "Attach the NIC stage to WIRE, forwarding what it does not drop to HOST",
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, a []string) error {
			wire, rest, err := ifaceAnd(cmd, a, 1, 1)
			if err != nil {
				return err
			}
			a = append([]string{wire}, rest...)
			o.PinRoot = g.pinRoot
			t, err := nicstage.AttachTable(a[0], a[1], o)
			if err != nil {
				return err
			}
			defer t.Close()
			caps := t.Caps()
			mode, err := t.Stage().Mode()
			if err != nil {
				return err
			}
			fmt.Printf("emulated NIC on %s (%s): %d-rule table, %v per update\n", a[0], mode, caps.Capacity, t.Stage().UpdateLatency())
			if mode == nicstage.HW || mode == nicstage.CPU {
				fmt.Printf("run the filter on its CPU with: tierwall attach %s --mode nic-cpu (in this namespace)\n", a[0])
			}
			return nil
		},
	}
	at.Flags().IntVar(&o.Capacity, "capacity", 0, fmt.Sprintf("hardware table size K (default %d)", nicstage.DefaultCapacity))
	at.Flags().DurationVar(&o.UpdateLatency, "latency", 0, fmt.Sprintf("emulated time per rule update (default %v)", nicstage.DefaultLatency))
	at.Flags().StringVar((*string)(&o.Mode), "mode", "", "hybrid (table, misses to the host; default), nic-hw (table, misses to the filter on the NIC CPU), nic (all through the NIC CPU), wire (pass everything)")
	at.Flags().Uint64Var(&o.CPURate, "cpu-rate", 0, "packets/s the NIC CPU can filter (nic, nic-hw); 0: no cap")
	de := &cobra.Command{
		Use:   "detach -i WIRE",
		Short: "Remove the NIC stage and its rules from WIRE",
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, a []string) error {
			wire, _, err := ifaceAnd(cmd, a, 0, 0)
			if err != nil {
				return err
			}
			return nicstage.Detach(wire, g.pinRoot)
		},
	}
	var action string
	add := &cobra.Command{
		Use:   "add -i WIRE SOURCE...",
		Short: "Install source rules in the NIC table (each waits for the update latency)",
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, a []string) error {
			wire, srcs, err := ifaceAnd(cmd, a, 1, -1)
			if err != nil {
				return err
			}
			return nicChange(wire, srcs, true, action)
		},
	}
	add.Flags().StringVar(&action, "action", "drop", "drop or forward")
	del := &cobra.Command{
		Use:   "del -i WIRE SOURCE...",
		Short: "Remove source rules from the NIC table",
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, a []string) error {
			wire, srcs, err := ifaceAnd(cmd, a, 1, -1)
			if err != nil {
				return err
			}
			return nicChange(wire, srcs, false, "")
		},
	}
	ls := &cobra.Command{
		Use:   "list -i WIRE",
		Short: "List the NIC table with hardware counters, and the stage's verdicts",
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, a []string) error {
			wire, _, err := ifaceAnd(cmd, a, 0, 0)
			if err != nil {
				return err
			}
			n, err := openNIC(wire)
			if err != nil {
				return err
			}
			defer n.Close()
			es, err := n.Rules()
			if err != nil {
				return err
			}
			st, err := n.Stats()
			if err != nil {
				return err
			}
			pol, err := n.PolicerCounters()
			if err != nil {
				return err
			}
			if g.json {
				type rule struct {
					Match   string        `json:"match"`
					Action  string        `json:"action"`
					Counter tier.Counters `json:"counters"`
				}
				type policer struct {
					Rule    string        `json:"rule"`
					Matched tier.Counters `json:"matched"`
					Dropped uint64        `json:"dropped_packets"`
				}
				out := struct {
					Capacity int                         `json:"capacity"`
					Rules    []rule                      `json:"rules"`
					Policers []policer                   `json:"policers"`
					Verdicts map[string]datapath.Counter `json:"verdicts"`
				}{Capacity: n.Capacity(), Rules: []rule{}, Policers: []policer{}, Verdicts: st}
				for _, e := range es {
					out.Rules = append(out.Rules, rule{e.Rule.Match.String(), e.Rule.Action.String(), e.Counters})
				}
				for _, p := range pol {
					out.Policers = append(out.Policers, policer{p.Rule.String(), p.Matched, p.Dropped})
				}
				return printJSON(out)
			}
			fmt.Printf("%d of %d rules\n", len(es), n.Capacity())
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "MATCH\tACTION\tPACKETS\tL3 BYTES")
			for _, e := range es {
				fmt.Fprintf(w, "%s\t%s\t%d\t%d\n", e.Rule.Match, e.Rule.Action, e.Counters.Packets, e.Counters.Bytes)
			}
			w.Flush()
			// The flow rules the daemon put on the card
			// (docs/ARCHITECTURE.md, "Flow policers").
			fmt.Printf("\n%d of %d flow policers\n", len(pol), n.PolicerCapacity())
			if len(pol) > 0 {
				w = tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "POLICER\tMATCHED\tDROPPED")
				for _, p := range pol {
					fmt.Fprintf(w, "%s\t%d\t%d\n", p.Rule, p.Matched.Packets, p.Dropped)
				}
				w.Flush()
			}
			fmt.Println()
			for _, v := range nicstage.Verdicts {
				fmt.Printf("%-12s %d packets\n", v, st[v].Packets)
			}
			return nil
		},
	}
	ls.Flags().BoolVar(&g.json, "json", false, "print JSON")
	for _, sub := range []*cobra.Command{at, de, add, del, ls} {
		addInterfaceFlag(sub)
	}
	c.AddCommand(at, de, add, del, ls)
	return c
}

// addInterfaceFlag gives c -i/--interface (and --iface, the other
// commands' spelling), the interface every command names the same way.
func addInterfaceFlag(c *cobra.Command) {
	c.Flags().StringVarP(&g.iface, "interface", "i", "", "interface")
	c.Flags().StringVar(&g.iface, "iface", "", "interface")
	_ = c.Flags().MarkHidden("iface")
}

// ifaceAnd splits a command's arguments into its interface and the rest,
// of which it wants min..max (max < 0: no limit). The interface comes
// from -i; the first positional argument, the old spelling, still works
// with a warning.
func ifaceAnd(cmd *cobra.Command, a []string, min, max int) (string, []string, error) {
	iface := g.iface
	if !cmd.Flags().Changed("interface") && !cmd.Flags().Changed("iface") {
		if len(a) == 0 {
			return "", nil, cli.Usage(fmt.Errorf("no interface: give it with -i IFACE"))
		}
		iface, a = a[0], a[1:]
		fmt.Fprintf(cmd.ErrOrStderr(), "%s: the interface as a positional argument is deprecated: use -i %s\n", cmd.CommandPath(), iface)
	}
	if iface == "" {
		return "", nil, cli.Usage(fmt.Errorf("empty interface name"))
	}
	if len(a) < min || (max >= 0 && len(a) > max) {
		return "", nil, cli.Usage(fmt.Errorf("%d arguments besides the interface, want %s", len(a), argRange(min, max)))
	}
	return iface, a, nil
}

func argRange(min, max int) string {
	switch {
	case max < 0:
		return fmt.Sprintf("at least %d", min)
	case min == max:
		return fmt.Sprint(min)
	}
	return fmt.Sprintf("%d..%d", min, max)
}

// nicChange validates every source first, so bad input changes nothing.
func nicChange(wire string, srcs []string, add bool, action string) error {
	act := tier.Drop
	switch action {
	case "", "drop":
	case "forward":
		act = tier.Forward
	default:
		return fmt.Errorf("%w: action %q (want drop or forward)", rule.ErrInvalid, action)
	}
	var ms []tier.Match
	for _, s := range srcs {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return fmt.Errorf("%w: %q is not an address", rule.ErrInvalid, s)
		}
		m := tier.SourceMatch(a.Unmap())
		if err := m.Validate(); err != nil {
			return err
		}
		ms = append(ms, m)
	}
	n, err := openNIC(wire)
	if err != nil {
		return err
	}
	defer n.Close()
	t := nicstage.NewTable(n)
	if add {
		if have, _ := n.Rules(); len(have)+len(ms) > n.Capacity() {
			return fmt.Errorf("%w: %d rules in use of %d, %d more asked", tier.ErrTableFull, len(have), n.Capacity(), len(ms))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, m := range ms {
		var lat time.Duration
		if add {
			lat, err = t.Install(ctx, tier.Rule{Match: m, Action: act})
		} else {
			_, lat, err = t.Remove(ctx, m)
		}
		if err != nil {
			return err
		}
		fmt.Printf("%s %s (%v)\n", map[bool]string{true: "installed", false: "removed"}[add], m, lat.Round(time.Microsecond))
	}
	return nil
}

// parent is a command that only groups subcommands: called bare or with
// an unknown subcommand it is a usage error (exit 2), not help and exit 0.
// openNIC opens the NIC stage on wire. A wire that is no interface here
// is said to be that, as every command says of a missing interface, not
// "no NIC stage on" it.
func openNIC(wire string) (*nicstage.Stage, error) {
	n, err := nicstage.Open(wire, g.pinRoot)
	if errors.Is(err, datapath.ErrNotAttached) {
		if _, ierr := net.InterfaceByName(wire); ierr != nil {
			return nil, fmt.Errorf("%w: %s", datapath.ErrNoInterface, wire)
		}
	}
	return n, err
}

func parent(use, short, subs string) *cobra.Command { return cli.Parent(use, short, subs) }
