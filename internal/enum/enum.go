// SPDX-License-Identifier: Apache-2.0

// Package enum names the values of tierwall's small integer enums once:
// String, Parse and the text (un)marshalling of each enum read one table,
// where each enum had its own switch for each direction, and some parsers
// forgot to wrap the invalid-input error the CLI turns into exit code 2.
package enum

import (
	"fmt"
	"slices"
	"strings"
)

// Integer is what an enum is made of.
type Integer interface {
	~uint8 | ~uint16 | ~uint32 | ~int
}

// Names is one enum's table. Build it once, at package level, with New.
type Names[T Integer] struct {
	what    string
	invalid error
	names   map[T]string
	order   []T
	aliases map[string]T
	empty   *T
}

// New makes the table of an enum: what it is, in words ("attach mode"),
// for messages; the package's invalid-input sentinel, which Parse's errors
// wrap (it must wrap errdefs.ErrInvalid); and each value's name.
func New[T Integer](what string, invalid error, names map[T]string) *Names[T] {
	n := &Names[T]{what: what, invalid: invalid, names: names, aliases: map[string]T{}}
	for v := range names {
		n.order = append(n.order, v)
	}
	slices.Sort(n.order)
	return n
}

// Alias makes Parse take another name for v (an older or a common one).
func (n *Names[T]) Alias(name string, v T) *Names[T] {
	n.aliases[name] = v
	return n
}

// Empty makes Parse read "" as v (an option's default).
func (n *Names[T]) Empty(v T) *Names[T] {
	n.empty = &v
	return n
}

// String is v's name, or what(number) for a value without one.
func (n *Names[T]) String(v T) string {
	if s, ok := n.names[v]; ok {
		return s
	}
	return fmt.Sprintf("%s(%d)", strings.ReplaceAll(n.what, " ", "-"), v)
}

// Known reports whether v has a name.
func (n *Names[T]) Known(v T) bool {
	_, ok := n.names[v]
	return ok
}

// Parse reads a name (or an alias, or "" when Empty gave it a value).
func (n *Names[T]) Parse(s string) (T, error) {
	if s == "" && n.empty != nil {
		return *n.empty, nil
	}
	for v, name := range n.names {
		if name == s {
			return v, nil
		}
	}
	if v, ok := n.aliases[s]; ok {
		return v, nil
	}
	return 0, fmt.Errorf("%w: %s %q: want %s", n.invalid, n.what, s, n.list())
}

// Marshal is MarshalText's body: the name, or an error for a value
// without one (JSON must not carry "kind(7)" as if it were a name).
func (n *Names[T]) Marshal(v T) ([]byte, error) {
	if s, ok := n.names[v]; ok {
		return []byte(s), nil
	}
	return nil, fmt.Errorf("%w: %s %d has no name", n.invalid, n.what, v)
}

// Unmarshal is UnmarshalText's body: *dst changes only on success.
func (n *Names[T]) Unmarshal(dst *T, b []byte) error {
	v, err := n.Parse(string(b))
	if err != nil {
		return err
	}
	*dst = v
	return nil
}

// list is the names in value order: "a, b or c".
func (n *Names[T]) list() string {
	s := make([]string, len(n.order))
	for i, v := range n.order {
		s[i] = n.names[v]
	}
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}
