// SPDX-License-Identifier: Apache-2.0

//go:build !ndpi

package probed

import (
	"errors"
	"strings"
	"testing"

	"github.com/tierwall/tierwall/internal/control/config"
)

// A build without nDPI says how to build one that has it: the message
// named a make build-ndpi target that the Makefile never had.
func TestNDPIMissingSaysHowToBuild(t *testing.T) {
	_, err := newNDPI()
	if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), "go build -tags ndpi ./cmd/tierwall") ||
		strings.Contains(err.Error(), "make build-ndpi") {
		t.Errorf("newNDPI: %v", err)
	}
}
