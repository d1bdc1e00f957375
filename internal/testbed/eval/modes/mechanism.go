// SPDX-License-Identifier: Apache-2.0

// Package modes reproduces the paper's evaluation (§V) on one machine:
// drop rate and CPU use against the number of attackers for every
// baseline and every tierwall mode, HTTP requests served under attack,
// and a labelled model of a real 25G hybrid. `make eval` runs it.
package modes

import (
	"bufio"
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"

	"github.com/tierwall/tierwall/internal/datapath"
	"github.com/tierwall/tierwall/internal/testbed/bench"
	"github.com/tierwall/tierwall/internal/testbed/eval/evalkit"
)

// A Mechanism blocks a set of sources on the receiving interface and
// counts what it dropped. Every method runs on a thread in the receiver's
// network namespace.
type Mechanism interface {
	Name() string
	// MaxRules is how many sources it can hold (0: no limit).
	MaxRules() int
	Setup(iface string, srcs []netip.Addr) error
	Dropped() (uint64, error)
	// Teardown removes what Setup made. The next mechanism is measured on
	// the same interface, so a failure must not pass unnoticed.
	Teardown() error
}

// --- tierwall in host mode --------------------------------------------

type tierwallHost struct {
	d *datapath.Datapath
}

func (m *tierwallHost) Name() string  { return "tierwall-host" }
func (m *tierwallHost) MaxRules() int { return 0 }
func (m *tierwallHost) Setup(iface string, srcs []netip.Addr) error {
	var err error
	if m.d, err = datapath.Attach(iface, datapath.Options{ExactCapacity4: max(len(srcs), 1024), ExactCapacity6: 1024,
		PrefixCapacity: 64, AllowCapacity: 64, FeatureCapacity: 1 << 14}); err != nil {
		return err
	}
	return m.d.BlockBulk(srcs)
}
func (m *tierwallHost) Dropped() (uint64, error) {
	s, err := m.d.Stats()
	if err != nil {
		return 0, err
	}
	return s.Verdicts["drop_exact"].Packets, nil
}
func (m *tierwallHost) Teardown() error {
	if m.d == nil {
		return nil
	}
	iface := m.d.Iface
	m.d.Close()
	return datapath.Detach(iface, "")
}

// --- iptables (legacy: one rule per source, matched linearly) ----------

type iptablesRaw struct{}

func (iptablesRaw) Name() string  { return "iptables" }
func (iptablesRaw) MaxRules() int { return 0 }
func (iptablesRaw) Setup(iface string, srcs []netip.Addr) error {
	var b strings.Builder
	b.WriteString("*raw\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n")
	for _, a := range srcs {
		fmt.Fprintf(&b, "-A PREROUTING -s %s/32 -j DROP\n", a)
	}
	b.WriteString("COMMIT\n")
	return evalkit.ShIn(b.String(), "iptables-legacy-restore")
}

var pktsCol = regexp.MustCompile(`^\s*(\d+)\s+\d+\s+DROP`)

func sumDropCounters(out string) uint64 {
	var n uint64
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if m := pktsCol.FindStringSubmatch(sc.Text()); m != nil {
			v, _ := strconv.ParseUint(m[1], 10, 64)
			n += v
		}
	}
	return n
}

func (iptablesRaw) Dropped() (uint64, error) {
	out, err := evalkit.Sh("iptables-legacy", "-t", "raw", "-nvxL", "PREROUTING")
	if err != nil {
		return 0, err
	}
	return sumDropCounters(out), nil
}
func (iptablesRaw) Teardown() error {
	_, err := evalkit.Sh("iptables-legacy", "-t", "raw", "-F", "PREROUTING")
	return err
}

// --- ipset hash:ip with one iptables rule ------------------------------

type ipsetOne struct{}

func (ipsetOne) Name() string  { return "ipset" }
func (ipsetOne) MaxRules() int { return 0 }
func (ipsetOne) Setup(iface string, srcs []netip.Addr) error {
	var b strings.Builder
	fmt.Fprintf(&b, "create twe-bl hash:ip family inet hashsize %d maxelem %d\n", 1024, max(2*len(srcs), 65536))
	for _, a := range srcs {
		fmt.Fprintf(&b, "add twe-bl %s\n", a)
	}
	if err := evalkit.ShIn(b.String(), "ipset", "restore"); err != nil {
		return err
	}
	_, err := evalkit.Sh("iptables-legacy", "-t", "raw", "-A", "PREROUTING", "-m", "set", "--match-set", "twe-bl", "src", "-j", "DROP")
	return err
}
func (ipsetOne) Dropped() (uint64, error) {
	out, err := evalkit.Sh("iptables-legacy", "-t", "raw", "-nvxL", "PREROUTING")
	if err != nil {
		return 0, err
	}
	return sumDropCounters(out), nil
}
func (ipsetOne) Teardown() error {
	if _, err := evalkit.Sh("iptables-legacy", "-t", "raw", "-F", "PREROUTING"); err != nil {
		return err
	}
	_, err := evalkit.Sh("ipset", "destroy", "twe-bl")
	return err
}

// --- nftables set, in prerouting or in a netdev ingress chain ----------

type nftSet struct{ netdev bool }

func (m nftSet) Name() string {
	if m.netdev {
		return "nft-netdev"
	}
	return "nft-prerouting"
}
func (nftSet) MaxRules() int { return 0 }
func (m nftSet) Setup(iface string, srcs []netip.Addr) error {
	var b strings.Builder
	family, hook := "ip", "type filter hook prerouting priority raw;"
	if m.netdev {
		family, hook = "netdev", fmt.Sprintf("type filter hook ingress device %q priority 0;", iface)
	}
	fmt.Fprintf(&b, "table %s twe {\n set bl { type ipv4_addr; size %d;", family, max(2*len(srcs), 65536))
	if len(srcs) > 0 {
		b.WriteString(" elements = { ")
		for i, a := range srcs {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(a.String())
		}
		b.WriteString(" }")
	}
	fmt.Fprintf(&b, " }\n chain c { %s ip saddr @bl counter drop; }\n}\n", hook)
	return evalkit.ShIn(b.String(), "nft", "-f", "-")
}

var nftCounter = regexp.MustCompile(`counter packets (\d+)`)

func (m nftSet) Dropped() (uint64, error) {
	family := "ip"
	if m.netdev {
		family = "netdev"
	}
	out, err := evalkit.Sh("nft", "list", "chain", family, "twe", "c")
	if err != nil {
		return 0, err
	}
	mm := nftCounter.FindStringSubmatch(out)
	if mm == nil {
		return 0, errors.New("nft: no counter in chain")
	}
	return strconv.ParseUint(mm[1], 10, 64)
}
func (m nftSet) Teardown() error {
	family := "ip"
	if m.netdev {
		family = "netdev"
	}
	_, err := evalkit.Sh("nft", "delete", "table", family, "twe")
	return err
}

// --- xdp-filter (xdp-tools): at most 10K addresses ---------------------

type xdpFilter struct{ iface string }

func (*xdpFilter) Name() string  { return "xdp-filter" }
func (*xdpFilter) MaxRules() int { return 10000 }
func (m *xdpFilter) Setup(iface string, srcs []netip.Addr) error {
	m.iface = iface
	if _, err := evalkit.Sh("xdp-filter", "load", iface, "-m", "native", "-f", "ipv4"); err != nil {
		return err
	}
	if len(srcs) == 0 {
		return nil
	}
	// The CLI adds one address per run: it makes the map, and the rest is
	// written straight into it.
	if _, err := evalkit.Sh("xdp-filter", "ip", srcs[0].String(), "-m", "src"); err != nil {
		return err
	}
	return bench.FillXDPFilter(srcs)
}

var xdpDrop = regexp.MustCompile(`XDP_DROP\s+(\d+) pkts`)

func (m *xdpFilter) Dropped() (uint64, error) {
	out, err := evalkit.Sh("xdp-filter", "status")
	if err != nil {
		return 0, err
	}
	mm := xdpDrop.FindStringSubmatch(out)
	if mm == nil {
		return 0, errors.New("xdp-filter: no XDP_DROP counter in status")
	}
	return strconv.ParseUint(mm[1], 10, 64)
}
func (m *xdpFilter) Teardown() error {
	if m.iface == "" {
		return nil
	}
	_, err := evalkit.Sh("xdp-filter", "unload", m.iface, "--all")
	return err
}

// HostMechanisms are the software mechanisms compared on one interface.
func HostMechanisms() []Mechanism {
	return []Mechanism{&tierwallHost{}, &xdpFilter{}, nftSet{netdev: true}, nftSet{}, ipsetOne{}, iptablesRaw{}}
}
