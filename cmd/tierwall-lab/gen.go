package main

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"sort"
	"time"

	"github.com/spf13/cobra"

	"github.com/tierwall/tierwall/internal/rule"
	"github.com/tierwall/tierwall/internal/testbed/trafgen"
)

func newGen() *cobra.Command {
	var s trafgen.Spec
	var dst, dstMAC, base, spoof, dist string
	var top int
	c := &cobra.Command{
		Use:   "gen IFACE --dst ADDR --dst-mac MAC --duration D",
		Short: "Flood 64-byte UDP or TCP SYN frames out of IFACE at the kernel's live-frames rate",
		Long: `gen transmits crafted frames with BPF_PROG_TEST_RUN in live-frames mode: the
fastest sender on these machines. Sources follow a uniform, Gaussian or Zipf rate
distribution (or are random inside --spoof), the ranking can change every
--reshuffle, the rate can be capped, and the run always ends after --duration.
It reports what the kernel was handed to transmit, per source with --top.`,
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			s.Iface = a[0]
			var err error
			if s.Dst, err = netip.ParseAddr(dst); err != nil {
				return fmt.Errorf("%w: --dst %q", rule.ErrInvalid, dst)
			}
			mac, err := net.ParseMAC(dstMAC)
			if err != nil || len(mac) != 6 {
				return fmt.Errorf("%w: --dst-mac %q", rule.ErrInvalid, dstMAC)
			}
			s.DstMAC = [6]byte(mac)
			if ifc, err := net.InterfaceByName(s.Iface); err == nil && len(ifc.HardwareAddr) == 6 {
				s.SrcMAC = [6]byte(ifc.HardwareAddr)
			}
			if base != "" {
				if s.Base, err = netip.ParsePrefix(base); err != nil {
					return fmt.Errorf("%w: --base %q", rule.ErrInvalid, base)
				}
			}
			if spoof != "" {
				if s.Spoof, err = netip.ParsePrefix(spoof); err != nil {
					return fmt.Errorf("%w: --spoof %q", rule.ErrInvalid, spoof)
				}
			}
			s.Dist = trafgen.Dist(dist)
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
			defer stop()
			rep, err := trafgen.Run(ctx, s)
			if err != nil {
				return err
			}
			type srcCount struct {
				Src     netip.Addr `json:"src"`
				Packets uint64     `json:"packets"`
			}
			var tops []srcCount
			for a, n := range rep.PerSource {
				tops = append(tops, srcCount{a, n})
			}
			sort.Slice(tops, func(i, j int) bool { return tops[i].Packets > tops[j].Packets })
			if len(tops) > top {
				tops = tops[:top]
			}
			if g.json {
				return printJSON(struct {
					*trafgen.Report
					Top []srcCount `json:"top"`
				}{rep, tops})
			}
			fmt.Printf("sent %d frames in %v: %.2f Mpps, %d sources, %d ranking epoch(s)\n", rep.Sent, rep.Elapsed.Round(time.Millisecond), rep.PPS/1e6, rep.Sources, rep.Epochs)
			for _, t := range tops {
				fmt.Printf("  %-40s %d\n", t.Src, t.Packets)
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&dst, "dst", "", "destination address (its family sets the sources')")
	f.StringVar(&dstMAC, "dst-mac", "", "destination MAC (the peer's)")
	f.IntVar(&s.Sources, "sources", 1000, "attacking sources")
	f.StringVar(&base, "base", "", "prefix the sources are numbered from (default 10.128.0.0/9 or fd00:100::/32)")
	f.StringVar(&dist, "dist", "uniform", "rate distribution over sources: uniform, gaussian or zipf")
	f.Float64Var(&s.ZipfS, "zipf-s", 1, "Zipf exponent")
	f.StringVar(&spoof, "spoof", "", "random sources inside this prefix instead of --sources")
	f.BoolVar(&s.SYN, "syn", false, "TCP SYN instead of UDP")
	f.Uint16Var(&s.DstPort, "port", 9, "destination port")
	f.Uint64Var(&s.Rate, "rate", 0, "packets per second (0: as fast as possible)")
	f.DurationVar(&s.Duration, "duration", 5*time.Second, "how long to send (at most 1h)")
	f.DurationVar(&s.Reshuffle, "reshuffle", 0, "change the ranking of sources this often")
	f.Uint64Var(&s.Seed, "seed", 1, "random seed")
	f.IntVar(&top, "top", 0, "print the N heaviest sources sent")
	f.BoolVar(&g.json, "json", false, "print JSON")
	return c
}
