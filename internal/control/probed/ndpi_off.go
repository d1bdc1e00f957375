// SPDX-License-Identifier: Apache-2.0

//go:build !ndpi

package probed

import (
	"fmt"

	"github.com/tierwall/tierwall/internal/control/config"
	"github.com/tierwall/tierwall/internal/probe/dpi"
)

// newNDPI refuses: says how to build with nDPI as run --check does (there
// is no make target for it).
func newNDPI() (dpi.Classifier, error) {
	return nil, fmt.Errorf("%w: probe.dpi.engine: ndpi: this tierwall was built without nDPI (build it with `go build -tags ndpi ./cmd/tierwall`, "+
		"which needs cgo and libndpi-dev), or use engine: builtin", config.ErrInvalid)
}
