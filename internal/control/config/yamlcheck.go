// SPDX-License-Identifier: Apache-2.0

package config

import (
	"fmt"
	"math"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// The YAML library's own errors name Go types, not fields ("field intreval
// not found in type config.Config"), and stop at the first. check walks the
// parsed document beside the Config type instead, so each error carries the
// field's path and line, a typo gets the closest known field, and a value of
// the wrong type says what was expected. It also records where each field
// was written, for validation errors found later.

var durationType = reflect.TypeOf(time.Duration(0))

type checker struct {
	errs  Errors
	lines map[string]int // field path → line of its key
}

func (c *checker) fail(line int, path, format string, a ...any) {
	c.errs = append(c.errs, &FieldError{Line: line, Path: path, Msg: fmt.Sprintf(format, a...)})
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func (c *checker) walk(n *yaml.Node, t reflect.Type, path string) {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind == yaml.DocumentNode {
		for _, m := range n.Content {
			c.walk(m, t, path)
		}
		return
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return // absent: the default stays
	}
	switch {
	case t.Kind() == reflect.Struct && t != durationType:
		if n.Kind != yaml.MappingNode {
			c.fail(n.Line, path, "expected a mapping of fields, got %s", describe(n))
			return
		}
		fields := yamlFields(t)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := join(path, k.Value)
			f, ok := fields[k.Value]
			if !ok {
				msg := "unknown field"
				if s := closest(k.Value, fields); s != "" {
					msg += fmt.Sprintf("; did you mean %q?", s)
				}
				c.fail(k.Line, p, "%s", msg)
				continue
			}
			c.lines[p] = k.Line
			c.walk(v, f.Type, p)
		}
	case t.Kind() == reflect.Map:
		if n.Kind != yaml.MappingNode {
			c.fail(n.Line, path, "expected a mapping, got %s", describe(n))
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := join(path, k.Value)
			c.lines[p] = k.Line
			if msg := c.scalar(k, t.Key()); msg != "" {
				c.fail(k.Line, p, "key %s", msg)
				continue
			}
			c.walk(v, t.Elem(), p)
		}
	case t.Kind() == reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			c.fail(n.Line, path, "expected a list, got %s", describe(n))
			return
		}
		for i, v := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			c.lines[p] = v.Line
			c.walk(v, t.Elem(), p)
		}
	default:
		if n.Kind != yaml.ScalarNode {
			c.fail(n.Line, path, "expected %s, got %s", expected(t), describe(n))
			return
		}
		if msg := c.scalar(n, t); msg != "" {
			c.fail(n.Line, path, "%s", msg)
		}
	}
}

// scalar decodes n as the library will, and on failure says what was
// expected.
func (c *checker) scalar(n *yaml.Node, t reflect.Type) string {
	if err := n.Decode(reflect.New(t).Interface()); err == nil {
		return ""
	}
	msg := fmt.Sprintf("cannot parse %q as %s", n.Value, expected(t))
	if t == durationType {
		if _, err := strconv.ParseFloat(n.Value, 64); err == nil {
			msg += " (a unit is required: " + n.Value + "s, " + n.Value + "ms)"
		} else {
			msg += " (e.g. 500ms, 30s, 5m, 1h)"
		}
	}
	return msg
}

func expected(t reflect.Type) string {
	if t == durationType {
		return "a duration"
	}
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		b := t.Bits()
		return fmt.Sprintf("an integer %d..%d", int64(-1)<<(b-1), int64(1)<<(b-1)-1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if t.Bits() == 64 {
			return "a non-negative integer"
		}
		return fmt.Sprintf("an integer 0..%d", uint64(1)<<t.Bits()-1)
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	}
	return t.String()
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	return fmt.Sprintf("%q", n.Value)
}

// yamlFields maps a struct's YAML names to its fields, as yaml.v3 does:
// the tag's name, else the lower-cased field name; "-" is not a field.
func yamlFields(t reflect.Type) map[string]reflect.StructField {
	out := make(map[string]reflect.StructField, t.NumField())
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = strings.ToLower(f.Name)
		}
		out[name] = f
	}
	return out
}

// closest is the known name nearest to s, if near enough to be a typo:
// at most a third of its letters off (and at least one).
func closest(s string, names map[string]reflect.StructField) string {
	best, bestD := "", math.MaxInt
	for n := range names {
		d := distance(s, n)
		if d < bestD || (d == bestD && n < best) {
			best, bestD = n, d
		}
	}
	if bestD > max(1, len(s)/3) {
		return ""
	}
	return best
}

// distance is the optimal-string-alignment edit distance: insertions,
// deletions, substitutions and transpositions of neighbours ("intreval"
// is one edit from "interval") each cost one.
func distance(a, b string) int {
	a, b = strings.ToLower(a), strings.ToLower(b)
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

var syntaxLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// syntaxError turns the parser's "yaml: line 3: mapping values are not
// allowed in this context" into a located FieldError.
func syntaxError(err error) *FieldError {
	m := syntaxLine.FindStringSubmatch(err.Error())
	if m == nil {
		return &FieldError{Msg: strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	l, _ := strconv.Atoi(m[1])
	return &FieldError{Line: l, Msg: "invalid YAML: " + m[2]}
}
