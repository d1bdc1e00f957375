// SPDX-License-Identifier: Apache-2.0

// Package errdefs holds the sentinel errors that more than one layer tests
// with errors.Is. It imports nothing of tierwall, so the CLI can tell an
// error the operator can fix (exit code 2) from a failure without linking
// the data plane that returns it; the owning packages re-export each one
// under their own name (datapath.ErrTableFull is ErrTableFull).
package errdefs

import "errors"

// ErrInvalid is the project's usage error: a value that cannot be a rule,
// an address, a prefix, an option or a configuration. Every layer wraps it,
// directly or through a sentinel of its own made by Invalid, so the CLI
// tells bad input (exit code 2) from failures with one errors.Is.
var ErrInvalid = errors.New("invalid argument")

// Invalid returns a package's own invalid-input sentinel: it reads as msg
// ("invalid configuration"), so messages name the layer that refused, and
// errors.Is finds ErrInvalid through it, so callers need not know every
// layer's sentinel.
func Invalid(msg string) error { return &invalid{msg} }

type invalid struct{ msg string }

func (e *invalid) Error() string { return e.msg }
func (e *invalid) Unwrap() error { return ErrInvalid }

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
