// Package rule parses what operators type as rules: a bare address (a
// /32 or /128 rule) or a prefix, one per argument or per line of a file.
package rule

import (
	"bufio"
	"fmt"
	"io"
	"net/netip"
	"strings"

	"github.com/tierwall/tierwall/internal/datapath"
)

// Parse turns "192.0.2.1", "2001:db8::1", "198.51.100.0/24" or
// "2001:db8::/32" into a prefix, refusing anything CheckPrefix refuses.
func Parse(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	var p netip.Prefix
	if strings.Contains(s, "/") {
		var err error
		if p, err = netip.ParsePrefix(s); err != nil {
			return p, fmt.Errorf("%w: %q is not an address or prefix", datapath.ErrInvalid, s)
		}
	} else {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return p, fmt.Errorf("%w: %q is not an address or prefix", datapath.ErrInvalid, s)
		}
		if a.Zone() != "" {
			return p, fmt.Errorf("%w: %q: zoned addresses are not rules", datapath.ErrInvalid, s)
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	if err := datapath.CheckPrefix(p); err != nil {
		return p, err
	}
	return p, nil
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
