// SPDX-License-Identifier: Apache-2.0

// Package community reads and writes BGP communities as operators write
// them: RFC 1997 communities ("64500:666") and RFC 8092 large communities
// ("65000:666:1", for 4-byte ASNs, which a 2-byte field cannot name).
// It imports nothing of GoBGP, so that the configuration validates with
// the same parser the speaker encodes with. It lives under config (the
// text operators write) so that the import runs one way: the speaker
// (internal/control/bgp) imports config, never the reverse.
package community

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrSyntax is returned for text that is not a community of the kind
// asked for.
var ErrSyntax = errors.New("not a community")

// Standard is an RFC 1997 community: ASN in the high 16 bits, the value
// in the low 16.
type Standard uint32

// Large is an RFC 8092 large community: the global administrator (an
// ASN) and two local data parts, 32 bits each.
type Large struct {
	Global, Local1, Local2 uint32
}

// Well-known communities tierwall puts on its announcements.
const (
	Blackhole Standard = 65535<<16 | 666   // RFC 7999
	NoExport  Standard = 65535<<16 | 65281 // RFC 1997
)

// numbers splits s into n decimal fields of at most bits bits each. A
// leading "+", a sign or a leading zero is refused: each community has one
// spelling, so that a configuration and what peers show compare as text.
func numbers(s string, n, bits int) ([]uint64, bool) {
	parts := strings.Split(s, ":")
	if len(parts) != n {
		return nil, false
	}
	out := make([]uint64, n)
	for i, p := range parts {
		if p == "" || p[0] < '0' || p[0] > '9' || len(p) > 1 && p[0] == '0' {
			return nil, false
		}
		v, err := strconv.ParseUint(p, 10, bits)
		if err != nil {
			return nil, false
		}
		out[i] = v
	}
	return out, true
}

// ParseStandard reads "ASN:VALUE", two numbers 0..65535.
func ParseStandard(s string) (Standard, error) {
	v, ok := numbers(s, 2, 16)
	if !ok {
		return 0, fmt.Errorf("%w: %q is not ASN:VALUE (two numbers 0..65535)", ErrSyntax, s)
	}
	return Standard(v[0]<<16 | v[1]), nil
}

// ParseLarge reads "GLOBAL:LOCAL1:LOCAL2", three numbers 0..4294967295
// (RFC 8092 §3's canonical form).
func ParseLarge(s string) (Large, error) {
	v, ok := numbers(s, 3, 32)
	if !ok {
		return Large{}, fmt.Errorf("%w: %q is not GLOBAL:LOCAL1:LOCAL2 (three numbers 0..4294967295, RFC 8092)", ErrSyntax, s)
	}
	return Large{uint32(v[0]), uint32(v[1]), uint32(v[2])}, nil
}

func (c Standard) String() string { return fmt.Sprintf("%d:%d", uint32(c)>>16, uint32(c)&0xffff) }

func (l Large) String() string { return fmt.Sprintf("%d:%d:%d", l.Global, l.Local1, l.Local2) }

// MarshalText makes communities readable in JSON.
func (c Standard) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// UnmarshalText reads what MarshalText wrote.
func (c *Standard) UnmarshalText(b []byte) error {
	v, err := ParseStandard(string(b))
	if err != nil {
		return err
	}
	*c = v
	return nil
}

// MarshalText makes large communities readable in JSON.
func (l Large) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

// UnmarshalText reads what MarshalText wrote.
func (l *Large) UnmarshalText(b []byte) error {
	v, err := ParseLarge(string(b))
	if err != nil {
		return err
	}
	*l = v
	return nil
}

// ParseStandards reads a list; the error names the index of the first
// bad one.
func ParseStandards(ss []string) ([]Standard, error) {
	out := make([]Standard, 0, len(ss))
	for i, s := range ss {
		c, err := ParseStandard(s)
		if err != nil {
			return nil, fmt.Errorf("[%d]: %w", i, err)
		}
		out = append(out, c)
	}
	return out, nil
}

// ParseLarges reads a list; the error names the index of the first bad
// one.
func ParseLarges(ss []string) ([]Large, error) {
	out := make([]Large, 0, len(ss))
	for i, s := range ss {
		c, err := ParseLarge(s)
		if err != nil {
			return nil, fmt.Errorf("[%d]: %w", i, err)
		}
		out = append(out, c)
	}
	return out, nil
}
