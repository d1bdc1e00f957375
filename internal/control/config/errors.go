// SPDX-License-Identifier: Apache-2.0

package config

import (
	"errors"
	"fmt"
	"strings"
)

// FieldError is one thing wrong with a configuration file, located the way
// an operator looks for it: file and line, then the field's path from the
// document's root ("detectors.rate.pps", "rails.allow[2]").
type FieldError struct {
	File string // "" when parsed from bytes
	Line int    // 0 when unknown (a default, or a field not in the file)
	Path string // dotted field path; "" for the document itself
	Msg  string
}

func (e *FieldError) Error() string {
	var b strings.Builder
	switch {
	case e.File != "" && e.Line > 0:
		fmt.Fprintf(&b, "%s:%d: ", e.File, e.Line)
	case e.File != "":
		fmt.Fprintf(&b, "%s: ", e.File)
	case e.Line > 0:
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Is makes every FieldError an ErrInvalid (and so errdefs.ErrInvalid) for
// errors.Is.
func (e *FieldError) Is(target error) bool { return errors.Is(ErrInvalid, target) }

// Errors is every structural error found in one file, in file order: a
// typo and a bad duration are reported together, not one per attempt.
type Errors []*FieldError

func (es Errors) Error() string {
	s := make([]string, len(es))
	for i, e := range es {
		s[i] = e.Error()
	}
	return strings.Join(s, "\n")
}

func (es Errors) Is(target error) bool { return errors.Is(ErrInvalid, target) }

// Unwrap lets errors.As find each FieldError.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// bad is a validation error: field is the path, v the offending value. The
// file and line are filled in by Parse from where the field was written.
func bad(field string, v any, why string) error {
	return &FieldError{Path: field, Msg: fmt.Sprintf("%v %s", v, why)}
}

// locate fills in the file and, when the field (or, failing that, its
// nearest parent) was written in the file, its line.
func locate(err error, file string, lines map[string]int) error {
	var fe *FieldError
	if !errors.As(err, &fe) {
		return err
	}
	fe.File = file
	if fe.Line == 0 {
		for p := fe.Path; p != ""; p = parent(p) {
			if l, ok := lines[p]; ok {
				fe.Line = l
				break
			}
		}
	}
	return err
}

// parent drops the last element of a path: "a.b[2]" → "a.b" → "a" → "".
func parent(p string) string {
	i := strings.LastIndexAny(p, ".[")
	if i < 0 {
		return ""
	}
	return p[:i]
}
