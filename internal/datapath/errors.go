// SPDX-License-Identifier: Apache-2.0

package datapath

import (
	"errors"

	"github.com/tierwall/tierwall/internal/rule"
)

// Sentinel errors; callers test them with errors.Is. Each is wrapped with
// the detail of what was being done.
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
	// ErrInvalid means the caller passed a value that cannot be a rule; it
	// is the project-wide usage error of package rule.
	ErrInvalid = rule.ErrInvalid
)
