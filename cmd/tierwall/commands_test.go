// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// commandPaths is every command of the tree under root, as the words that
// name it on the command line (the root itself excluded).
func commandPaths(root *cobra.Command) [][]string {
	var out [][]string
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		for _, s := range c.Commands() {
			p := append(append([]string(nil), path...), s.Name())
			out = append(out, p)
			walk(s, p)
		}
	}
	walk(root, nil)
	return out
}

// execute runs args on a fresh tree and turns a panic into an error: cobra
// panics when a command redefines a flag of its parents, which it only
// notices when that command runs (tierwall flows panicked on every use,
// its --help and completion included, with "unable to redefine 'n'
// shorthand").
func execute(args ...string) (out string, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	g = globals{}
	var b bytes.Buffer
	root := newRoot()
	root.SetOut(&b)
	root.SetErr(&b)
	root.SetArgs(args)
	err = root.Execute()
	return b.String(), err
}

// Every command and subcommand answers --help and help, and flag
// completion, without a panic; the shells' completion scripts generate.
func TestEveryCommandHelpAndCompletion(t *testing.T) {
	paths := commandPaths(newRoot())
	if len(paths) < 20 {
		t.Fatalf("walked only %d commands: %v", len(paths), paths)
	}
	for _, p := range paths {
		name := strings.Join(p, " ")
		out, err := execute(append(p, "--help")...)
		if err != nil || !strings.Contains(out, "Usage:") {
			t.Errorf("%s --help: %v, printed %q", name, err, out)
		}
		if _, err := execute(append([]string{"help"}, p...)...); err != nil {
			t.Errorf("help %s: %v", name, err)
		}
		// What a shell asks when the user types "tierwall <p> --<TAB>".
		if _, err := execute(append(append([]string{cobra.ShellCompRequestCmd}, p...), "--")...); err != nil {
			t.Errorf("completing %s --: %v", name, err)
		}
	}
	for _, sh := range []string{"bash", "zsh", "fish"} {
		out, err := execute("completion", sh)
		if err != nil || !strings.Contains(out, "tierwall") {
			t.Errorf("completion %s: %v, %d bytes", sh, err, len(out))
		}
	}
}

// flows takes its count as -c/--count, like top; -n stays the global
// network namespace.
func TestFlowsCountFlag(t *testing.T) {
	for _, args := range [][]string{{"flows", "-c", "0"}, {"flows", "--count", "-1"}} {
		_, err := execute(args...)
		if err == nil || !strings.Contains(err.Error(), "must be positive") {
			t.Errorf("%v: %v, want a refused count", args, err)
		}
	}
}

// The man page's COMMANDS section names every top-level command (it
// listed flows but not attacks, provisional, bgp, watch, victims or
// flowrule), each in bold where an entry names it.
func TestManPageNamesEveryCommand(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy/tierwall.8"))
	if err != nil {
		t.Fatal(err)
	}
	_, sec, _ := strings.Cut(string(b), "\n.SH COMMANDS\n")
	sec, _, _ = strings.Cut(sec, "\n.SH ")
	named := map[string]bool{}
	for _, l := range strings.Split(sec, "\n") {
		if !strings.HasPrefix(l, ".B ") && !strings.HasPrefix(l, ".BR ") {
			continue
		}
		// .BR stats ", " top | .B watch \fR[...] | .BR bgp " " neighbors | routes
		l = strings.NewReplacer(`\-`, "-", `\fR`, " ", `\fB`, " ", `\fI`, " ", `"`, " ", ",", " ", "|", " ").Replace(l)
		for _, w := range strings.Fields(l)[1:] {
			named[w] = true
		}
	}
	for _, c := range newRoot().Commands() {
		if c.Name() != "help" && !named[c.Name()] {
			t.Errorf("deploy/tierwall.8: COMMANDS has no entry naming %s", c.Name())
		}
	}
}
