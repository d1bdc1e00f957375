// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is set at link time:
//
//	go build -ldflags "-X github.com/tierwall/tierwall/internal/cli.version=v1.2.0"
//
// Without it, the module version from the build info is used ("(devel)"
// for a build from a work tree), with the VCS revision Go records.
var version string

// Build is what a binary knows of its own build.
type Build struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"` // VCS revision, "+dirty" when the tree was modified; "" unknown
	GoVersion string `json:"go_version"`
}

// BuildInfo describes this binary's build.
func BuildInfo() Build {
	b := Build{Version: version, GoVersion: runtime.Version()}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		if b.Version == "" {
			b.Version = "unknown"
		}
		return b
	}
	if b.Version == "" {
		b.Version = info.Main.Version
	}
	if b.Version == "" {
		b.Version = "(devel)"
	}
	dirty := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Commit = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if len(b.Commit) > 12 {
		b.Commit = b.Commit[:12]
	}
	if dirty && b.Commit != "" {
		b.Commit += "+dirty"
	}
	return b
}

func (b Build) String() string {
	s := b.Version
	if b.Commit != "" {
		s += " (" + b.Commit + ")"
	}
	return s + " " + b.GoVersion
}

// AddVersion gives root a --version flag and a version subcommand
// (--json for scripts).
func AddVersion(root *cobra.Command, jsonOut *bool) {
	root.Version = BuildInfo().String()
	root.SetVersionTemplate(root.Name() + " {{.Version}}\n")
	c := &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit and Go version of this binary",
		Args:  Args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, a []string) error {
			if *jsonOut {
				return PrintJSON(BuildInfo())
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", root.Name(), BuildInfo())
			return nil
		},
	}
	c.Flags().BoolVar(jsonOut, "json", false, "print JSON")
	root.AddCommand(c)
}
