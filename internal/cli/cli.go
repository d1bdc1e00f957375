// SPDX-License-Identifier: Apache-2.0

// Package cli is what tierwall's commands share: exit codes that tell bad
// input from failures, argument checks that report usage errors, entering
// a network namespace for -n, and JSON output.
package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/tierwall/tierwall/internal/errdefs"
	"github.com/tierwall/tierwall/internal/tier"
)

// Exit codes: 2 for anything the user can fix (bad input, full table,
// unknown interface, not attached), 1 for everything else.
const (
	ExitFailure = 1
	ExitUsage   = 2
)

// UsageError marks an error the user can fix that carries no sentinel
// (a wrong argument count, an unknown flag).
type UsageError struct{ error }

func (u UsageError) Unwrap() error { return u.error }

// Usage wraps err as a usage error.
func Usage(err error) error { return UsageError{err} }

// ExitCode maps err to the process exit code.
func ExitCode(err error) int {
	// The data plane's sentinels come from errdefs, where datapath
	// defines them, so that this package does not link the data plane;
	// errdefs.ErrInvalid is also every layer's ErrInvalid (rule, tier,
	// config).
	for _, s := range []error{errdefs.ErrInvalid, errdefs.ErrTableFull, errdefs.ErrNoInterface,
		errdefs.ErrNotAttached, errdefs.ErrNoRule, errdefs.ErrIncompatible,
		tier.ErrTableFull, tier.ErrNoRule} {
		if errors.Is(err, s) {
			return ExitUsage
		}
	}
	var u UsageError
	if errors.As(err, &u) {
		return ExitUsage
	}
	return ExitFailure
}

// Main runs root and exits with ExitCode of its error, printing it
// prefixed with the command's name.
func Main(root *cobra.Command) {
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return UsageError{err} })
	if err := root.Execute(); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", root.Name(), err)
		os.Exit(ExitCode(err))
	}
}

// Args checks the positional argument count, as a usage error.
func Args(n cobra.PositionalArgs) cobra.PositionalArgs {
	return func(c *cobra.Command, a []string) error {
		if err := n(c, a); err != nil {
			return UsageError{err}
		}
		return nil
	}
}

// Parent is a command that only groups subcommands; run bare it is a
// usage error naming them.
func Parent(use, short, subs string) *cobra.Command {
	return &cobra.Command{Use: use, Short: short, Args: Args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, a []string) error {
			return UsageError{fmt.Errorf("%s needs a subcommand: %s", use, subs)}
		}}
}

// EnterNetns moves the calling OS thread into the named network namespace
// (from /run/netns). The caller keeps its goroutine locked to the thread.
func EnterNetns(name string) error {
	f, err := os.Open("/run/netns/" + name)
	if err != nil {
		return fmt.Errorf("%w: network namespace %q: %v", errdefs.ErrInvalid, name, err)
	}
	defer f.Close()
	if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("entering network namespace %s: %w", name, err)
	}
	return nil
}

// PrintJSON writes v to stdout, indented.
func PrintJSON(v any) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// NewRoot is a command's root: errors are printed once by Main, and -n
// NAME (stored in *netns) moves the calling thread into that network
// namespace before any subcommand runs.
func NewRoot(use, short string, netns *string) *cobra.Command {
	root := &cobra.Command{
		Use:           use,
		Short:         short,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			if *netns != "" {
				return EnterNetns(*netns)
			}
			return nil
		},
	}
	root.PersistentFlags().StringVarP(netns, "netns", "n", "", "run in the named network namespace (from /run/netns)")
	return root
}
