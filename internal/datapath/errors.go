// SPDX-License-Identifier: Apache-2.0

package datapath

import (
	"github.com/tierwall/tierwall/internal/errdefs"
)

// Sentinel errors; callers test them with errors.Is. Each is wrapped with
// the detail of what was being done. They are defined in errdefs so that
// the CLI maps them to exit codes without importing the data plane.
var (
	// ErrTableFull means a rule table has no room for another entry.
	ErrTableFull = errdefs.ErrTableFull
	// ErrNotAttached means no pinned tierwall state exists for the interface.
	ErrNotAttached = errdefs.ErrNotAttached
	// ErrNoInterface means the named network interface does not exist.
	ErrNoInterface = errdefs.ErrNoInterface
	// ErrIncompatible means pinned state exists but cannot be re-adopted as
	// asked (another layout, capacity or attach mode).
	ErrIncompatible = errdefs.ErrIncompatible
	// ErrNoRule means a rule to delete does not exist.
	ErrNoRule = errdefs.ErrNoRule
	// ErrInvalid means the caller passed a value that cannot be a rule; it
	// is the project-wide usage error (rule.ErrInvalid).
	ErrInvalid = errdefs.ErrInvalid
)
