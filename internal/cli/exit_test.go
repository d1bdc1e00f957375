// SPDX-License-Identifier: Apache-2.0

package cli_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/tierwall/tierwall/internal/cli"
	"github.com/tierwall/tierwall/internal/control/config"
	"github.com/tierwall/tierwall/internal/datapath"
	"github.com/tierwall/tierwall/internal/rule"
	"github.com/tierwall/tierwall/internal/tier"
)

// ExitCode names the data plane's sentinels through errdefs, not datapath;
// the data plane's own names must still be those values, or a full table
// would exit 1 instead of 2.
func TestExitCode(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{rule.ErrInvalid, cli.ExitUsage},
		{datapath.ErrInvalid, cli.ExitUsage},
		{datapath.ErrTableFull, cli.ExitUsage},
		{datapath.ErrNoInterface, cli.ExitUsage},
		{datapath.ErrNotAttached, cli.ExitUsage},
		{datapath.ErrNoRule, cli.ExitUsage},
		{datapath.ErrIncompatible, cli.ExitUsage},
		{tier.ErrInvalid, cli.ExitUsage},
		{tier.ErrTableFull, cli.ExitUsage},
		{tier.ErrNoRule, cli.ExitUsage},
		{config.ErrInvalid, cli.ExitUsage},
		{cli.Usage(errors.New("two arguments")), cli.ExitUsage},
		{tier.ErrUnsupported, cli.ExitFailure},
		{datapath.ErrOrphaned, cli.ExitFailure},
		{errors.New("anything else"), cli.ExitFailure},
	} {
		err := fmt.Errorf("doing something: %w", tc.err)
		if got := cli.ExitCode(err); got != tc.want {
			t.Errorf("ExitCode(%v) = %d, want %d", err, got, tc.want)
		}
	}
}
