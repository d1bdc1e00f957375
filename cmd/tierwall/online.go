// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"

	"github.com/tierwall/tierwall/internal/control/config"
)

// run --check --online: what the file alone cannot say but this host can,
// without changing anything or opening a session: the interface exists in
// this network namespace, the build has nDPI when the file asks for it
// (loadAll refuses that already), every flow collector's name resolves and
// has a route, every BGP peer has a route and every local address is this
// host's. A file that passes --check can still fail to start on a host
// where eth0 is called ens3.

// onlineProblem is one thing on this host that would stop the daemon or
// the part of it the field configures.
type onlineProblem struct {
	field, msg string
}

func (p onlineProblem) Error() string { return p.field + ": " + p.msg }

// The host's resolver, routes, interfaces and addresses, as variables so
// that a test on a host without them could stand in.
var (
	resolver = net.DefaultResolver
	// routeTo is the source address the kernel would use to reach a (a
	// UDP "connect" sends nothing), or an error when no route leads there.
	routeTo = func(a netip.Addr) (netip.Addr, error) {
		c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, 9)))
		if err != nil {
			return netip.Addr{}, err
		}
		defer c.Close()
		return c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap(), nil
	}
	interfaceByName = net.InterfaceByName
	hostAddrs       = net.InterfaceAddrs
)

// checkOnline runs the online checks for cfg, printing what passed on out,
// and returns what failed.
func checkOnline(out io.Writer, cfg *config.Config) []error {
	var errs []error
	fail := func(field, format string, a ...any) {
		errs = append(errs, onlineProblem{field, fmt.Sprintf(format, a...)})
	}
	// Role network attaches nothing: it has no interface to find.
	if cfg.Role != config.RoleNetwork {
		if ifi, err := interfaceByName(cfg.Interface); err != nil {
			fail("interface", "%s: no such interface in this network namespace (%v)", cfg.Interface, err)
		} else {
			fmt.Fprintf(out, "online: interface %s exists (index %d, %s)\n", cfg.Interface, ifi.Index, upDown(ifi))
		}
	}
	if cfg.Role == config.RoleProbe && cfg.Probe.DPI.Engine == "ndpi" && ndpiBuiltIn {
		fmt.Fprintln(out, "online: nDPI is built in")
	}
	if cfg.Role == config.RoleProbe {
		for i, c := range cfg.Probe.Export.Collectors {
			field := fmt.Sprintf("probe.export.collectors[%d].address", i)
			host, port, err := net.SplitHostPort(c.Address)
			if err != nil {
				fail(field, "%s: %v", c.Address, err)
				continue
			}
			a, err := resolve(host)
			if err != nil {
				fail(field, "%s does not resolve: %v", host, err)
				continue
			}
			if src, err := routeTo(a); err != nil {
				fail(field, "%s (%s): no route: %v", host, a, err)
			} else {
				fmt.Fprintf(out, "online: collector %s resolves to %s, port %s, from %s\n", host, a, port, src)
			}
		}
	}
	if cfg.Telemetry.Enabled {
		// The telemetry sockets bind where the file says: an address
		// this host does not have fails at start. The ports are not
		// tried: the daemon being checked may be running and hold them.
		if tc, err := cfg.TelemetryConfig(); err == nil {
			var local map[netip.Addr]bool
			for i, l := range tc.Listen {
				field := fmt.Sprintf("telemetry.listen[%d]", i)
				host, _, err := net.SplitHostPort(l)
				if err != nil {
					fail(field, "%s: not address:port: %v", l, err)
					continue
				}
				if a, err := netip.ParseAddr(host); err == nil && !a.Unmap().IsUnspecified() {
					a = a.Unmap()
					if local == nil {
						local = localAddrs()
					}
					if !local[a] {
						fail(field, "%s is not an address of this host", a)
						continue
					}
				}
				fmt.Fprintf(out, "online: telemetry listens on %s (UDP), an address of this host\n", l)
			}
		}
	}
	if cfg.BGP.Enabled() {
		var local map[netip.Addr]bool
		for i, n := range cfg.BGP.Neighbors {
			field := fmt.Sprintf("bgp.neighbors[%d]", i)
			src, err := routeTo(n.AddressAddr)
			if err != nil {
				fail(field+".address", "%s: no route: %v", n.AddressAddr, err)
				continue
			}
			if n.LocalAddressAddr.IsValid() {
				if local == nil {
					local = localAddrs()
				}
				if !local[n.LocalAddressAddr] {
					fail(field+".local_address", "%s is not an address of this host", n.LocalAddressAddr)
					continue
				}
				src = n.LocalAddressAddr
			}
			fmt.Fprintf(out, "online: BGP peer %s has a route, from %s (no session opened)\n", n.AddressAddr, src)
		}
	}
	return errs
}

// resolve is host's first address: a literal as it is, a name through
// the host's resolver (within five seconds).
func resolve(host string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Unmap(), nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	as, err := resolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return netip.Addr{}, err
	}
	if len(as) == 0 {
		return netip.Addr{}, fmt.Errorf("no addresses")
	}
	return as[0].Unmap(), nil
}

func localAddrs() map[netip.Addr]bool {
	m := map[netip.Addr]bool{}
	as, _ := hostAddrs()
	for _, a := range as {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			m[p.Addr().Unmap()] = true
		}
	}
	return m
}

func upDown(ifi *net.Interface) string {
	if ifi.Flags&net.FlagUp != 0 {
		return "up"
	}
	return "down: the daemon attaches, but nothing arrives until it is up"
}
