// Command tierwall drives the tierwall data plane: attach the XDP filter
// to an interface, manage block and allow rules, read counters and the
// heaviest sources. Rules live in pinned BPF maps, so they keep working
// after this command exits.
package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"github.com/tierwall/tierwall/internal/config"
	"github.com/tierwall/tierwall/internal/datapath"
	"github.com/tierwall/tierwall/internal/rule"
	"github.com/tierwall/tierwall/internal/tier"
)

var errorsIs = errors.Is

func init() {
	// --netns switches the network namespace of this thread only; keep the
	// main goroutine, which does all the work, on it.
	runtime.LockOSThread()
}

// Exit codes: 2 for anything the user can fix (bad input, full table,
// unknown interface, not attached), 1 for everything else.
const (
	exitFailure = 1
	exitUsage   = 2
)

func main() {
	if err := newRoot().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "tierwall:", err)
		os.Exit(exitCode(err))
	}
}

type usageError struct{ error }

func (u usageError) Unwrap() error { return u.error }

func exitCode(err error) int {
	var u usageError
	for _, s := range []error{rule.ErrInvalid, datapath.ErrTableFull, datapath.ErrNoInterface,
		datapath.ErrNotAttached, datapath.ErrNoRule, datapath.ErrIncompatible,
		tier.ErrInvalid, tier.ErrTableFull, tier.ErrNoRule, config.ErrInvalid} {
		if errors.Is(err, s) {
			return exitUsage
		}
	}
	if errors.As(err, &u) {
		return exitUsage
	}
	return exitFailure
}
