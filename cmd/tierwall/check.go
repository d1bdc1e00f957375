// SPDX-License-Identifier: Apache-2.0

package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	"github.com/tierwall/tierwall/internal/control/config"
)

// errCheckFailed is --check's verdict on a file the daemon would refuse:
// an invalid configuration, exit 2 as the man page's EXIT STATUS says.
type errCheckFailed struct {
	path string
	n    int
}

func (e errCheckFailed) Error() string {
	return fmt.Sprintf("%s: refused (%d error(s) above)", e.path, e.n)
}

func (e errCheckFailed) Unwrap() error { return config.ErrInvalid }

// checkConfig loads path as run would, prints every error on stderr one a
// line, and changes nothing.
func checkConfig(cmd *cobra.Command, path string, online bool) error {
	cfg, errs := loadAll(path)
	if len(errs) == 0 && online {
		// Located as the offline errors are: file:line: field.
		var doc yaml.Node
		if b, err := os.ReadFile(path); err == nil {
			_ = yaml.Unmarshal(b, &doc)
		}
		for _, e := range checkOnline(cmd.OutOrStdout(), cfg) {
			var p onlineProblem
			if errors.As(e, &p) {
				e = &config.FieldError{File: path, Line: lineOf(&doc, p.field), Path: p.field, Msg: p.msg}
			}
			errs = append(errs, e)
		}
	}
	if len(errs) > 0 {
		for _, err := range errs {
			fmt.Fprintln(cmd.ErrOrStderr(), err)
		}
		return errCheckFailed{path: path, n: len(errs)}
	}
	if cfg.Role == config.RoleNetwork {
		fmt.Fprintf(cmd.OutOrStdout(), "%s: ok (role %s, no interface)\n", path, cfg.Role)
		return nil
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s: ok (role %s, interface %s)\n", path, cfg.Role, cfg.Interface)
	return nil
}

// loadConfig is what run loads: config.Load and what only this binary
// can tell, every error found. run and run --check share it, so --check
// passes nothing run refuses.
func loadConfig(path string) (*config.Config, error) {
	cfg, errs := loadAll(path)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return cfg, nil
}

// checkBuild refuses what the configuration asks of this binary that it
// was built without. doc, when known, locates the field.
func checkBuild(cfg *config.Config, path string, doc *yaml.Node) error {
	if cfg.Role == config.RoleProbe && cfg.Probe.DPI.Engine == "ndpi" && !ndpiBuiltIn {
		return &config.FieldError{File: path, Line: lineOf(doc, "probe.dpi.engine"), Path: "probe.dpi.engine",
			Msg: "ndpi: this tierwall was built without nDPI (build it with `go build -tags ndpi ./cmd/tierwall`, " +
				"which needs cgo and libndpi-dev), or use engine: builtin"}
	}
	return nil
}

// loadAll is config.Load with every error: it reports every
// structural error at once but stops validating at the first wrong value,
// so each field found wrong is taken out of the document (its default
// takes its place) and the rest validated again. Errors keep the lines of
// the file as written.
func loadAll(path string) (*config.Config, []error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, []error{fmt.Errorf("%w: %w", config.ErrInvalid, err)}
	}
	var orig yaml.Node
	_ = yaml.Unmarshal(b, &orig) // a syntax error is ParseFile's to report
	var errs []error
	seen := map[string]bool{}
	for {
		cfg, err := config.ParseFile(path, b)
		if err == nil {
			if err := checkBuild(cfg, path, &orig); err != nil {
				return nil, append(errs, err)
			}
			if len(errs) > 0 {
				return nil, errs
			}
			return cfg, nil
		}
		var fe *config.FieldError
		var all config.Errors
		if errors.As(err, &all) || !errors.As(err, &fe) || fe.Path == "" || seen[fe.Path] {
			return nil, append(errs, err) // structural (all of them), or nothing to take out
		}
		seen[fe.Path] = true
		if len(errs) > 0 { // a document re-encoded: its lines are not the file's
			fe.Line = lineOf(&orig, fe.Path)
		}
		errs = append(errs, fe)
		var doc yaml.Node
		if yaml.Unmarshal(b, &doc) != nil || !remove(&doc, fe.Path) {
			return nil, errs // not written in the file (a required field): nothing more to find
		}
		if b, err = yaml.Marshal(&doc); err != nil {
			return nil, errs
		}
	}
}

// pathSteps splits a field path ("rails.allow[2]") into mapping keys and
// sequence indexes (index -1 for a key).
type step struct {
	key   string
	index int
}

func pathSteps(path string) []step {
	var out []step
	for _, part := range strings.Split(path, ".") {
		key, rest, _ := strings.Cut(part, "[")
		out = append(out, step{key: key, index: -1})
		for rest != "" {
			n, after, _ := strings.Cut(rest, "]")
			i, err := strconv.Atoi(n)
			if err != nil {
				return out
			}
			out = append(out, step{index: i})
			_, rest, _ = strings.Cut(after, "[")
		}
	}
	return out
}

// find walks doc along path: the parent holding the last node found, that
// node's position in the parent's Content, and whether the whole path was
// found.
func find(doc *yaml.Node, path string) (parent *yaml.Node, at int, ok bool) {
	if doc == nil || doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return nil, -1, false
	}
	n := doc.Content[0]
	at = -1
	for _, s := range pathSteps(path) {
		next := -1
		switch {
		case s.index < 0 && n.Kind == yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == s.key {
					next = i
				}
			}
		case s.index >= 0 && n.Kind == yaml.SequenceNode && s.index < len(n.Content):
			next = s.index
		}
		if next < 0 {
			return parent, at, false
		}
		parent, at = n, next
		if n.Kind == yaml.MappingNode {
			n = n.Content[next+1]
		} else {
			n = n.Content[next]
		}
	}
	return parent, at, parent != nil
}

// lineOf is the line where path, or failing that its nearest parent, is
// written in doc; 0 when none is.
func lineOf(doc *yaml.Node, path string) int {
	parent, at, _ := find(doc, path)
	if parent == nil {
		return 0
	}
	return parent.Content[at].Line
}

// remove takes the field at path out of doc; false when it is not there.
func remove(doc *yaml.Node, path string) bool {
	parent, at, ok := find(doc, path)
	if !ok {
		return false
	}
	n := 1
	if parent.Kind == yaml.MappingNode {
		n = 2 // the key and its value
	}
	parent.Content = append(parent.Content[:at], parent.Content[at+n:]...)
	return true
}
