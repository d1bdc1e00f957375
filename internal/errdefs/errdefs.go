// SPDX-License-Identifier: Apache-2.0

// Package errdefs holds the sentinel errors that more than one layer tests
// with errors.Is. It imports nothing of tierwall, so the CLI can tell an
// error the operator can fix (exit code 2) from a failure without linking
// the data plane that returns it; the owning packages re-export each one
// under their own name (datapath.ErrTableFull is ErrTableFull).
package errdefs

import "errors"

// The data plane's conditions (internal/datapath and its stages).
var (
	// ErrTableFull means a rule table has no room for another entry.
	ErrTableFull = errors.New("table full")
	// ErrNotAttached means no pinned tierwall state exists for the interface.
	ErrNotAttached = errors.New("not attached")
	// ErrNoInterface means the named network interface does not exist.
	ErrNoInterface = errors.New("no such interface")
	// ErrIncompatible means pinned state exists but cannot be re-adopted as
	// asked (another layout, capacity or attach mode).
	ErrIncompatible = errors.New("pinned state incompatible")
	// ErrNoRule means a rule to delete does not exist.
	ErrNoRule = errors.New("no such rule")
)
