// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"syscall"
	"time"

	"github.com/tierwall/tierwall/internal/control/apiv1"
	"github.com/tierwall/tierwall/internal/control/ban"
)

// The rails against catastrophic rules. Width: a ban of 0.0.0.0/0 drops
// all traffic and an allow of ::/0 turns IPv6 filtering off, so rules
// wider than the configured limits need the operator's force. Management:
// a ban covering this host's own addresses or its default gateway cuts
// the operator off the machine that would lift it, so none is accepted,
// forced or not, from the API, the CLI, a detector or the state file. The
// store applies both (ban.Rails); this file keeps their inputs current.

// mgmtEvery is how often the interval re-reads the host's addresses and
// routes (DHCP, an operator's ip addr add).
const mgmtEvery = 30 * time.Second

// hostManagement reads the management addresses of the network namespace
// this thread is in; tests replace it.
var hostManagement = ManagementAddrs

// SetManagementSource replaces how daemons made afterwards learn the
// host's management addresses and returns the previous source. For tests
// of packages above the daemon (a build host's own addresses, 192.0.2.2
// on some, would otherwise refuse their fixtures' bans) and for embedders
// that know the addresses another way.
func SetManagementSource(f func() ([]ban.Managed, error)) (previous func() ([]ban.Managed, error)) {
	previous, hostManagement = hostManagement, f
	return previous
}

// ManagementAddrs lists this network namespace's addresses (every
// interface but loopback; link-local ones too: IPv6 neighbour discovery
// comes from them) and its default gateways, read over netlink.
func ManagementAddrs() ([]ban.Managed, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("listing interfaces: %w", err)
	}
	var out []ban.Managed
	names := map[int]string{}
	for _, ifc := range ifs {
		names[ifc.Index] = ifc.Name
		if ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			return nil, fmt.Errorf("reading the addresses of %s: %w", ifc.Name, err)
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(n.IP); ok {
					out = append(out, ban.Managed{Addr: ip.Unmap(), What: "address of " + ifc.Name})
				}
			}
		}
	}
	gws, err := defaultGateways(names)
	if err != nil {
		return nil, err
	}
	return append(out, gws...), nil
}

// defaultGateways reads the main table's default routes (both families).
// Multipath default routes (RTA_MULTIPATH) are not read.
func defaultGateways(names map[int]string) ([]ban.Managed, error) {
	rib, err := syscall.NetlinkRIB(syscall.RTM_GETROUTE, syscall.AF_UNSPEC)
	if err != nil {
		return nil, fmt.Errorf("reading routes: %w", err)
	}
	msgs, err := syscall.ParseNetlinkMessage(rib)
	if err != nil {
		return nil, fmt.Errorf("parsing routes: %w", err)
	}
	var out []ban.Managed
	for i := range msgs {
		m := &msgs[i]
		// struct rtmsg: family, dst_len, src_len, tos, table, ...
		if m.Header.Type != syscall.RTM_NEWROUTE || len(m.Data) < syscall.SizeofRtMsg || m.Data[1] != 0 {
			continue
		}
		table := uint32(m.Data[4])
		attrs, err := syscall.ParseNetlinkRouteAttr(m)
		if err != nil {
			continue
		}
		var gw netip.Addr
		dev := ""
		for _, a := range attrs {
			switch a.Attr.Type {
			case syscall.RTA_GATEWAY:
				gw, _ = netip.AddrFromSlice(a.Value)
			case syscall.RTA_OIF:
				if len(a.Value) == 4 {
					dev = names[int(nativeUint32(a.Value))]
				}
			case syscall.RTA_TABLE:
				if len(a.Value) == 4 {
					table = nativeUint32(a.Value)
				}
			}
		}
		if !gw.IsValid() || table != syscall.RT_TABLE_MAIN {
			continue
		}
		what := "default gateway"
		if dev != "" {
			what += " via " + dev
		}
		out = append(out, ban.Managed{Addr: gw.Unmap(), What: what})
	}
	return out, nil
}

// nativeUint32 decodes a netlink attribute's u32 (host byte order; every
// architecture tierwall runs on is little-endian).
func nativeUint32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

// refreshManagement re-reads the management addresses into the rails. A
// failed read keeps the last list (and says so): an empty one would let
// the next ban cut the host off.
func (d *Daemon) refreshManagement(now time.Time) {
	d.mgmtAt = now
	ms, err := hostManagement()
	if err != nil {
		d.event(now, "error", netip.Prefix{}, "reading this host's addresses for the rails: %v (keeping the last %d)", err, len(d.mgmt))
		ms = d.mgmt
	}
	if !slices.Equal(ms, d.mgmt) {
		d.log.Info("management addresses never banned", "addresses", fmt.Sprint(ms))
	}
	d.mgmt = ms
	d.store.Rails.Management = ms
}

// keepManagement refreshes the management addresses every mgmtEvery.
func (d *Daemon) keepManagement(now time.Time) {
	if now.Sub(d.mgmtAt) >= mgmtEvery || now.Before(d.mgmtAt) {
		d.refreshManagement(now)
	}
}

// checkAllow is the width rail of the allowlist.
func checkAllow(p netip.Prefix, limit4, limit6 int, force bool) error {
	if limit, wide := ban.TooWide(p, limit4, limit6); wide && !force {
		return fmt.Errorf("%w: allowing %s would let everything from it past every ban: wider than /%d (rails.max_allow_prefix_v4/v6); force to override", apiv1.ErrBadRequest, p, limit)
	}
	return nil
}
