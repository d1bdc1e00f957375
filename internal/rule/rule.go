// SPDX-License-Identifier: Apache-2.0

// Package rule parses what operators type as rules: a bare address (a
// /32 or /128 rule) or a prefix, one per argument or per line of a file.
package rule

import (
	"bufio"
	"fmt"
	"io"
	"net/netip"
	"strings"

	"github.com/tierwall/tierwall/internal/errdefs"
)

// ErrInvalid is the project's usage error (errdefs.ErrInvalid): a value
// that cannot be a rule, an address, a prefix or an option. Every layer
// wraps it, so the CLI tells bad input (exit code 2) from failures with
// errors.Is.
var ErrInvalid = errdefs.ErrInvalid

// Parse turns "192.0.2.1", "2001:db8::1", "198.51.100.0/24" or
// "2001:db8::/32" into a prefix, refusing anything CheckPrefix refuses.
func Parse(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	var p netip.Prefix
	if strings.Contains(s, "/") {
		var err error
		if p, err = netip.ParsePrefix(s); err != nil {
			return p, fmt.Errorf("%w: %q is not an address or prefix", ErrInvalid, s)
		}
	} else {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return p, fmt.Errorf("%w: %q is not an address or prefix", ErrInvalid, s)
		}
		if a.Zone() != "" {
			return p, fmt.Errorf("%w: %q: zoned addresses are not rules", ErrInvalid, s)
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	if err := CheckPrefix(p); err != nil {
		return p, err
	}
	return p, nil
}

// ParseList parses each of ss with Parse; at the first that is neither
// an address nor a prefix it stops, with that one's index.
func ParseList(ss []string) (_ []netip.Prefix, bad int, _ error) {
	out := make([]netip.Prefix, 0, len(ss))
	for i, s := range ss {
		p, err := Parse(s)
		if err != nil {
			return nil, i, err
		}
		out = append(out, p)
	}
	return out, 0, nil
}

// ParseAll parses every argument; the first bad one fails the whole set.
func ParseAll(args []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(args))
	for _, a := range args {
		p, err := Parse(a)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// ReadList reads one rule per line; blank lines and '#' comments are
// skipped. Errors name the line.
func ReadList(r io.Reader, name string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		if strings.TrimSpace(line) == "" {
			continue
		}
		p, err := Parse(line)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, n, err)
		}
		out = append(out, p)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	return out, nil
}

// CheckPrefix rejects what cannot be a rule: invalid, zoned, IPv4-mapped
// IPv6 (packets carry the IPv4 form) or with host bits set (ambiguous).
func CheckPrefix(p netip.Prefix) error {
	a := p.Addr()
	switch {
	case !p.IsValid():
		return fmt.Errorf("%w: invalid prefix", ErrInvalid)
	case a.Zone() != "":
		return fmt.Errorf("%w: %s: zoned addresses are not rules", ErrInvalid, p)
	case a.Is4In6():
		return fmt.Errorf("%w: %s is IPv4-mapped; use %s", ErrInvalid, p, netip.PrefixFrom(a.Unmap(), max(p.Bits()-96, 0)))
	case p.Masked() != p:
		return fmt.Errorf("%w: %s has host bits set; did you mean %s?", ErrInvalid, p, p.Masked())
	}
	return nil
}
