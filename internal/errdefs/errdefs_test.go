// SPDX-License-Identifier: Apache-2.0

package errdefs_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/tierwall/tierwall/internal/control/config"
	"github.com/tierwall/tierwall/internal/datapath"
	"github.com/tierwall/tierwall/internal/errdefs"
	"github.com/tierwall/tierwall/internal/probe/export"
	"github.com/tierwall/tierwall/internal/probe/export/ipfix"
	"github.com/tierwall/tierwall/internal/rule"
	"github.com/tierwall/tierwall/internal/synproxy"
	"github.com/tierwall/tierwall/internal/tier"
)

// Every package's ErrInvalid keeps its own words and is errdefs.ErrInvalid
// to errors.Is, while staying distinct from the others' where it has words
// of its own (a hardware rule error is not a configuration error).
func TestInvalidAcrossPackages(t *testing.T) {
	for _, tc := range []struct {
		err error
		msg string
	}{
		{rule.ErrInvalid, "invalid argument"},
		{datapath.ErrInvalid, "invalid argument"},
		{synproxy.ErrInvalid, "invalid argument"},
		{tier.ErrInvalid, "invalid hardware rule"},
		{config.ErrInvalid, "invalid configuration"},
		{export.ErrInvalid, "invalid flow export configuration"},
		{ipfix.ErrInvalid, "invalid export options"},
	} {
		err := fmt.Errorf("%w: detail", tc.err)
		if got, want := err.Error(), tc.msg+": detail"; got != want {
			t.Errorf("message %q, want %q", got, want)
		}
		if !errors.Is(err, errdefs.ErrInvalid) || !errors.Is(err, rule.ErrInvalid) || !errors.Is(err, tc.err) {
			t.Errorf("%v: not errdefs.ErrInvalid, rule.ErrInvalid and itself", err)
		}
	}
	if errors.Is(fmt.Errorf("%w: x", tier.ErrInvalid), config.ErrInvalid) ||
		errors.Is(fmt.Errorf("%w: x", rule.ErrInvalid), tier.ErrInvalid) {
		t.Error("one layer's ErrInvalid matches another's")
	}
	if _, err := config.Parse([]byte("interface: [")); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("a configuration error %v is not errdefs.ErrInvalid", err)
	}
}
