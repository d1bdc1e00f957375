// SPDX-License-Identifier: Apache-2.0

package config

import (
	"cmp"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// Marshal is c as the YAML the daemon reads back to c: every field that
// differs from Default(), in the order the structs declare them, so a
// file written by a program (the testbed's experiments) is as short as
// one written by hand. Derived fields (yaml:"-") are left out; Load
// resolves them again.
func Marshal(c *Config) ([]byte, error) {
	n, err := diffNode(reflect.ValueOf(*c), reflect.ValueOf(*Default()), "")
	if err != nil {
		return nil, err
	}
	if n == nil {
		n = &yaml.Node{Kind: yaml.MappingNode}
	}
	var b strings.Builder
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(n); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return []byte(b.String()), nil
}

// diffNode is the mapping of v's fields that differ from d's (nil: none),
// recursing into nested structs so an unchanged default stays unsaid.
// Leaves (scalars, lists, maps, pointers) are written whole.
func diffNode(v, d reflect.Value, path string) (*yaml.Node, error) {
	var out *yaml.Node
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if !f.IsExported() || name == "-" || name == "" {
			continue
		}
		p := join(path, name)
		fv, fd := v.Field(i), d.Field(i)
		var val *yaml.Node
		switch {
		case f.Type.Kind() == reflect.Struct && f.Type != durationType:
			n, err := diffNode(fv, fd, p)
			if err != nil {
				return nil, err
			}
			val = n
		case reflect.DeepEqual(fv.Interface(), fd.Interface()):
		case f.Type.Kind() == reflect.Pointer && fv.IsNil():
			// null would leave the default, not the nil asked for.
			return nil, fmt.Errorf("%w: %s: nil cannot be written over the default", ErrInvalid, p)
		default:
			n, err := leafNode(fv)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", p, err)
			}
			val = n
		}
		if val == nil {
			continue
		}
		if out == nil {
			out = &yaml.Node{Kind: yaml.MappingNode}
		}
		out.Content = append(out.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: name}, val)
	}
	return out, nil
}

// leafNode is v whole, but for the zero fields of the structs in it:
// an element of a list or a map decodes into a zero value, so a zero
// field said or unsaid reads back the same. Mappings and lists of
// scalars (and mappings of such mappings) are written on one line.
func leafNode(v reflect.Value) (*yaml.Node, error) {
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}, nil
		}
		v = v.Elem()
	}
	var n *yaml.Node
	switch {
	case v.Kind() == reflect.Struct && v.Type() != durationType:
		n = &yaml.Node{Kind: yaml.MappingNode}
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if !f.IsExported() || name == "-" || name == "" || v.Field(i).IsZero() {
				continue
			}
			fv, err := leafNode(v.Field(i))
			if err != nil {
				return nil, err
			}
			n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: name}, fv)
		}
	case v.Kind() == reflect.Slice || v.Kind() == reflect.Array:
		n = &yaml.Node{Kind: yaml.SequenceNode}
		for i := range v.Len() {
			e, err := leafNode(v.Index(i))
			if err != nil {
				return nil, err
			}
			n.Content = append(n.Content, e)
		}
	case v.Kind() == reflect.Map:
		n = &yaml.Node{Kind: yaml.MappingNode}
		keys := v.MapKeys()
		slices.SortFunc(keys, func(a, b reflect.Value) int { return cmp.Compare(fmt.Sprint(a.Interface()), fmt.Sprint(b.Interface())) })
		for _, k := range keys {
			kn, err := leafNode(k)
			if err != nil {
				return nil, err
			}
			vn, err := leafNode(v.MapIndex(k))
			if err != nil {
				return nil, err
			}
			n.Content = append(n.Content, kn, vn)
		}
	default:
		n = &yaml.Node{}
		if err := n.Encode(v.Interface()); err != nil {
			return nil, err
		}
		return n, nil
	}
	flat := true
	for _, c := range n.Content {
		// A list of mappings stays a list, an element a line.
		flat = flat && (c.Kind == yaml.ScalarNode || n.Kind == yaml.MappingNode && c.Style == yaml.FlowStyle)
	}
	if flat {
		n.Style = yaml.FlowStyle
	}
	return n, nil
}
