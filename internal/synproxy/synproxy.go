// SPDX-License-Identifier: Apache-2.0

// Package synproxy sets up the kernel half of the SYN-cookie stage: the
// nftables SYNPROXY that takes the ACKs whose cookies the XDP program
// (internal/synproxy/xdp) passed, checks them again and opens the real
// connections to the server. For each protected destination and port it
// leaves SYNs untracked in the raw table (the XDP program answers them; if
// one gets past it, SYNPROXY answers it the same way), hands untracked and
// invalid packets to SYNPROXY, and drops what is still invalid after it.
// Known-good sources (the XDP filter's list: clients that completed
// handshakes or were steady before the attack) skip all of it, as they skip
// the XDP stage: their connections open as without a proxy, and those
// already open when the proxy comes up go on, where conntrack, which only
// starts tracking then and with loose pickup off, would call them invalid
// and cut them.
//
// The whole ruleset is one table, inet tierwall_synproxy, always replaced
// in a single nft transaction: a failed Apply leaves the previous ruleset
// (or none) as it was. The sysctls SYNPROXY needs are set before the
// ruleset is loaded and put back if loading fails; their previous values
// travel in the table's comment, so Remove restores them even from another
// process than the one that applied.
//
// IPv6 needs trusted checksums: nft's synproxy statement checks every
// packet with the IPv4 checksum routine (nf_ip_checksum in
// nft_synproxy_do_eval), which only passes an IPv6 segment whose checksum
// the device already vouched for (CHECKSUM_UNNECESSARY, most NICs for
// TCP; CHECKSUM_PARTIAL from a local veth peer). Where the NIC hands up
// CHECKSUM_COMPLETE or none, IPv6 cookie ACKs are dropped as bad checksums
// (seen on 6.18 with veth and tx checksum offload off).
package synproxy

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/tierwall/tierwall/internal/rule"
)

// Table is the nftables table Apply owns, in family inet.
const Table = "tierwall_synproxy"

// Defaults of Config fields left zero; the XDP program's defaults are the
// same, and the two must agree (what the SYN-ACK announces is what
// SYNPROXY assumes the client was told).
const (
	DefaultMSS    = 1460
	DefaultWScale = 7
)

// ErrInvalid is the project's usage error (rule.ErrInvalid).
var ErrInvalid = rule.ErrInvalid

// The sysctls SYNPROXY needs, with the value it needs. Without loose
// pickup off, conntrack would take the cookie ACK for the middle of an
// established connection and never hand it to SYNPROXY; without
// timestamps the server answers SYNPROXY's SYN without them, while the
// client was promised them (and its window scale and SACK ride in them).
// tcp_syncookies is not needed: neither SYNPROXY nor the XDP cookie
// helpers read it.
var sysctls = []struct{ key, want string }{
	{"net.netfilter.nf_conntrack_tcp_loose", "0"},
	{"net.ipv4.tcp_timestamps", "1"},
}

// Target is one protected destination: a prefix and the TCP ports on it.
type Target struct {
	Dst   netip.Prefix
	Ports rule.PortRange // the zero range is every port
}

func (t Target) String() string {
	if t.Ports.Any() {
		return t.Dst.String()
	}
	return fmt.Sprintf("%s port %s", t.Dst, t.Ports)
}

// TargetsOf returns the targets of the syn-cookie rules among rs.
func TargetsOf(rs []rule.FlowRule) []Target {
	var out []Target
	for _, r := range rs {
		if r.Action == rule.FlowSYNCookie {
			out = append(out, Target{Dst: r.Dst, Ports: r.DstPorts})
		}
	}
	return out
}

// Config is what Apply installs.
type Config struct {
	// Netns is the network namespace (a name under /run/netns) to set up;
	// "" is the caller's own.
	Netns   string
	Targets []Target
	// MSS and WScale are announced to clients in the server's name: they
	// must be the server's, and the XDP program's (its Options).
	MSS    uint16
	WScale uint8
	// KnownGood are sources that bypass the proxy (IPv4-mapped IPv6
	// addresses count as IPv4); at most MaxKnownGood.
	KnownGood []netip.Addr
}

// MaxKnownGood is how many known-good sources the table's sets hold, per
// family: twice the detector's default capacity.
const MaxKnownGood = 1 << 17

// goodSets splits addrs by family for the sets good4 and good6.
func goodSets(addrs []netip.Addr) (v4, v6 []string, err error) {
	for _, a := range addrs {
		if !a.IsValid() {
			return nil, nil, fmt.Errorf("%w: invalid known-good address", ErrInvalid)
		}
		a = a.Unmap()
		if a.Is4() {
			v4 = append(v4, a.String())
		} else {
			v6 = append(v6, a.WithZone("").String())
		}
	}
	if len(v4) > MaxKnownGood || len(v6) > MaxKnownGood {
		return nil, nil, fmt.Errorf("%w: %d IPv4 and %d IPv6 known-good sources, more than the %d a set holds", ErrInvalid, len(v4), len(v6), MaxKnownGood)
	}
	return v4, v6, nil
}

func (c Config) check() (Config, error) {
	if c.MSS == 0 {
		c.MSS = DefaultMSS
	}
	if c.WScale == 0 {
		c.WScale = DefaultWScale
	}
	if _, _, err := goodSets(c.KnownGood); err != nil {
		return c, err
	}
	switch {
	case len(c.Targets) == 0:
		return c, fmt.Errorf("%w: no destination to protect (Remove takes the setup down)", ErrInvalid)
	case c.MSS < 536:
		return c, fmt.Errorf("%w: MSS %d below the 536 every host accepts", ErrInvalid, c.MSS)
	case c.WScale > 14:
		return c, fmt.Errorf("%w: window scale %d above 14", ErrInvalid, c.WScale)
	}
	for _, t := range c.Targets {
		if !t.Dst.IsValid() || t.Dst != t.Dst.Masked() {
			return c, fmt.Errorf("%w: destination %s is not a masked prefix", ErrInvalid, t.Dst)
		}
		if t.Dst.Addr().Is4In6() {
			return c, fmt.Errorf("%w: destination %s is IPv4-mapped; give it as IPv4", ErrInvalid, t.Dst)
		}
		if !t.Ports.Any() && (t.Ports.Lo == 0 || t.Ports.Lo > t.Ports.Hi) {
			return c, fmt.Errorf("%w: port range %d-%d", ErrInvalid, t.Ports.Lo, t.Ports.Hi)
		}
	}
	return c, nil
}

// commentPrefix starts the table's comment; the saved sysctls follow as
// key=value words (nft comments hold 128 bytes, plenty for two).
const commentPrefix = "tierwall synproxy; saved"

func comment(saved map[string]string) string {
	words := []string{commentPrefix}
	for _, s := range sysctls {
		if v, ok := saved[s.key]; ok {
			words = append(words, s.key+"="+v)
		}
	}
	return strings.Join(words, " ")
}

func parseComment(c string) (map[string]string, error) {
	rest, ok := strings.CutPrefix(c, commentPrefix)
	if !ok {
		return nil, fmt.Errorf("table %s has comment %q, not ours", Table, c)
	}
	saved := map[string]string{}
	for _, w := range strings.Fields(rest) {
		k, v, ok := strings.Cut(w, "=")
		if !ok || !slices.ContainsFunc(sysctls, func(s struct{ key, want string }) bool { return s.key == k }) {
			return nil, fmt.Errorf("table %s: saved sysctl %q not understood", Table, w)
		}
		saved[k] = v
	}
	return saved, nil
}

// Ruleset is the nft script Apply loads for c, with saved in the table's
// comment: the table created if missing (so that the delete cannot fail),
// deleted, and created whole, all one transaction.
func Ruleset(c Config, saved map[string]string) (string, error) {
	c, err := c.check()
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "table inet %s\ndelete table inet %s\ntable inet %s {\n", Table, Table, Table)
	fmt.Fprintf(&b, "\tcomment %q\n", comment(saved))
	v4, v6, _ := goodSets(c.KnownGood) // check() vetted them
	for _, set := range []struct {
		name, typ string
		elems     []string
	}{{"good4", "ipv4_addr", v4}, {"good6", "ipv6_addr", v6}} {
		fmt.Fprintf(&b, "\tset %s {\n\t\ttype %s; size %d;\n", set.name, set.typ, MaxKnownGood)
		if len(set.elems) > 0 {
			fmt.Fprintf(&b, "\t\telements = { %s }\n", strings.Join(set.elems, ", "))
		}
		b.WriteString("\t}\n")
	}
	const skipGood = "\t\tip saddr @good4 accept\n\t\tip6 saddr @good6 accept\n"
	b.WriteString("\tchain raw {\n\t\ttype filter hook prerouting priority raw; policy accept;\n")
	b.WriteString(skipGood)
	for _, t := range c.Targets {
		fmt.Fprintf(&b, "\t\t%s tcp flags & (fin|syn|rst|ack) == syn notrack\n", match(t))
	}
	b.WriteString("\t}\n")
	// Input for a server on this host, forward for one behind it.
	for _, hook := range []string{"input", "forward"} {
		fmt.Fprintf(&b, "\tchain %s {\n\t\ttype filter hook %s priority filter; policy accept;\n", hook, hook)
		b.WriteString(skipGood)
		for _, t := range c.Targets {
			fmt.Fprintf(&b, "\t\t%s ct state invalid,untracked synproxy mss %d wscale %d timestamp sack-perm\n",
				match(t), c.MSS, c.WScale)
			fmt.Fprintf(&b, "\t\t%s ct state invalid drop\n", match(t))
		}
		b.WriteString("\t}\n")
	}
	b.WriteString("}\n")
	return b.String(), nil
}

// match is the nft match of a target's packets.
func match(t Target) string {
	fam := "ip"
	if t.Dst.Addr().Is6() {
		fam = "ip6"
	}
	m := fmt.Sprintf("%s daddr %s", fam, t.Dst)
	switch {
	case t.Ports.Any():
		m += " meta l4proto tcp"
	case t.Ports.Lo == t.Ports.Hi:
		m += fmt.Sprintf(" tcp dport %d", t.Ports.Lo)
	default:
		m += fmt.Sprintf(" tcp dport %d-%d", t.Ports.Lo, t.Ports.Hi)
	}
	return m
}

// Apply installs the setup for c, replacing any earlier one of ours in the
// namespace. The ruleset is replaced atomically; the sysctls are set first
// and put back when the ruleset fails to load, so a failed Apply changes
// nothing. The values saved for Remove are those from before the first
// Apply.
func Apply(ctx context.Context, c Config) error {
	return apply(ctx, newHost(c.Netns), c)
}

// Remove takes the setup down in namespace netns ("" the caller's): the
// sysctls back to their saved values, then the table deleted. Without our
// table it does nothing; an error leaves what is left for a retry.
func Remove(ctx context.Context, netns string) error {
	return remove(ctx, newHost(netns))
}

// SetKnownGood makes addrs the sources that bypass the proxy in namespace
// netns ("" the caller's), replacing the sets' contents in one nft
// transaction: on error the previous contents stay. The table must be
// installed (Apply).
func SetKnownGood(ctx context.Context, netns string, addrs []netip.Addr) error {
	return setKnownGood(ctx, newHost(netns), addrs)
}

func setKnownGood(ctx context.Context, h host, addrs []netip.Addr) error {
	v4, v6, err := goodSets(addrs)
	if err != nil {
		return err
	}
	var b strings.Builder
	for _, set := range []struct {
		name  string
		elems []string
	}{{"good4", v4}, {"good6", v6}} {
		fmt.Fprintf(&b, "flush set inet %s %s\n", Table, set.name)
		if len(set.elems) > 0 {
			fmt.Fprintf(&b, "add element inet %s %s { %s }\n", Table, set.name, strings.Join(set.elems, ", "))
		}
	}
	if err := h.nft(ctx, b.String()); err != nil {
		return fmt.Errorf("setting the known-good sets of table inet %s: %w", Table, err)
	}
	return nil
}

// Installed reports whether the namespace has our table.
func Installed(ctx context.Context, netns string) (bool, error) {
	_, ok, err := current(ctx, newHost(netns))
	return ok, err
}

func apply(ctx context.Context, h host, c Config) error {
	c, err := c.check()
	if err != nil {
		return err
	}
	saved, installed, err := current(ctx, h)
	if err != nil {
		return err
	}
	// Values before this call, for the rollback; the saved ones are
	// those from before the first Apply.
	before := map[string]string{}
	for _, s := range sysctls {
		v, err := h.sysctl(s.key)
		if err != nil {
			return fmt.Errorf("reading sysctl %s: %w", s.key, err)
		}
		before[s.key] = v
	}
	if !installed {
		saved = before
	}
	script, err := Ruleset(c, saved)
	if err != nil {
		return err
	}
	var changed []string
	rollback := func(cause error) error {
		errs := []error{cause}
		for _, k := range changed {
			if err := h.setSysctl(k, before[k]); err != nil {
				errs = append(errs, fmt.Errorf("restoring sysctl %s=%s: %w", k, before[k], err))
			}
		}
		return errors.Join(errs...)
	}
	for _, s := range sysctls {
		if before[s.key] == s.want {
			continue
		}
		if err := h.setSysctl(s.key, s.want); err != nil {
			return rollback(fmt.Errorf("setting sysctl %s=%s: %w", s.key, s.want, err))
		}
		changed = append(changed, s.key)
	}
	if err := h.nft(ctx, script); err != nil {
		return rollback(fmt.Errorf("loading table inet %s: %w", Table, err))
	}
	return nil
}

func remove(ctx context.Context, h host) error {
	saved, installed, err := current(ctx, h)
	if err != nil || !installed {
		return err
	}
	for _, s := range sysctls {
		v, ok := saved[s.key]
		if !ok {
			continue
		}
		if err := h.setSysctl(s.key, v); err != nil {
			return fmt.Errorf("restoring sysctl %s=%s: %w", s.key, v, err)
		}
	}
	script := fmt.Sprintf("table inet %s\ndelete table inet %s\n", Table, Table)
	if err := h.nft(ctx, script); err != nil {
		return fmt.Errorf("deleting table inet %s: %w", Table, err)
	}
	return nil
}

// current reads our table's saved sysctls, and whether it exists.
func current(ctx context.Context, h host) (map[string]string, bool, error) {
	c, ok, err := h.table(ctx)
	if err != nil || !ok {
		return nil, ok, err
	}
	saved, err := parseComment(c)
	if err != nil {
		return nil, true, fmt.Errorf("reading saved sysctls: %w", err)
	}
	return saved, true, nil
}
