// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tierwall/tierwall/internal/rule"
	"github.com/tierwall/tierwall/internal/testbed/trafgen"
)

func newGen() *cobra.Command {
	var s trafgen.Spec
	var dst, dstMAC, base, spoof, dist, clients, apps string
	var top int
	var noFlows bool
	c := &cobra.Command{
		Use:   "gen IFACE --dst ADDR --dst-mac MAC --duration D",
		Short: "Flood 64-byte UDP or TCP SYN frames, or play TCP/UDP flows, out of IFACE at the kernel's live-frames rate",
		Long: `gen transmits crafted frames with BPF_PROG_TEST_RUN in live-frames mode: the
fastest sender on these machines. Sources follow a uniform, Gaussian or Zipf rate
distribution (or are random inside --spoof), the ranking can change every
--reshuffle, the rate can be capped, and the run always ends after --duration.
It reports what the kernel was handed to transmit, per source with --top.

With --flows A it plays both ends of A concurrent flows instead: a sliding window
of 5-tuples, a new flow every --birth-every frames or --birth per second (each
closing the oldest), TCP with handshake and FIN or UDP, the first data frames
carrying DNS, HTTP or TLS messages (--apps), data frames of --size bytes. --dst
is the first server. The report is exact per flow (--json prints every flow
unless --no-flows): frames the kernel failed to transmit are not counted.`,
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
			if clients != "" {
				if s.Clients, err = netip.ParsePrefix(clients); err != nil {
					return fmt.Errorf("%w: --clients %q", rule.ErrInvalid, clients)
				}
			}
			if apps != "" {
				s.Apps = strings.Split(apps, ",")
			}
			s.NoFlowReport = noFlows
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
			defer stop()
			rep, err := trafgen.Run(ctx, s)
			if err != nil {
				return err
			}
			if s.Flows > 0 {
				if g.json {
					return printJSON(rep)
				}
				fmt.Printf("sent %d frames (%d more not transmitted) in %v: %.2f Mpps; %d active flows, %d born, %d ended, %.0f births/s\n",
					rep.Sent, rep.Dropped, rep.Elapsed.Round(time.Millisecond), rep.PPS/1e6, rep.Window, rep.Born, rep.Ended, rep.BirthRate)
				return nil
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
	f.IntVar(&s.Flows, "flows", 0, "flow mode: this many active flows")
	f.Float64Var(&s.BirthRate, "birth", 0, "flow mode: new flows per second (paced on the measured send rate)")
	f.Float64Var(&s.BirthEvery, "birth-every", 0, "flow mode: a new flow every this many frames (reproducible)")
	f.IntVar(&s.PacketSize, "size", 64, "flow mode: data frame size on the wire with FCS (64..1518)")
	f.StringVar(&s.Proto, "proto", "tcp", "flow mode: protocol of generic flows: tcp, udp or mixed")
	f.StringVar(&apps, "apps", "generic", "flow mode: applications, round-robin over flows: dns, http, tls, generic")
	f.Uint64Var(&s.Packets, "packets", 0, "flow mode: stop after exactly this many frames (0: at --duration)")
	f.StringVar(&clients, "clients", "", "flow mode: client prefix (default 10.128.0.0/16 or fd00:100::/112)")
	f.IntVar(&s.Servers, "servers", 1, "flow mode: server addresses counted from --dst")
	f.StringVar(&s.Host, "host", "www.example.com", "flow mode: DNS name, HTTP Host and TLS SNI")
	f.BoolVar(&noFlows, "no-flows", false, "flow mode: report totals only")
	f.BoolVar(&g.json, "json", false, "print JSON")
	return c
}
