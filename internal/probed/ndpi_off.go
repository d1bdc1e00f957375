// SPDX-License-Identifier: Apache-2.0

//go:build !ndpi

package probed

import (
	"fmt"

	"github.com/tierwall/tierwall/internal/config"
	"github.com/tierwall/tierwall/internal/dpi"
)

func newNDPI() (dpi.Classifier, error) {
	return nil, fmt.Errorf("%w: probe.dpi.engine: ndpi: this tierwall was built without nDPI (make build-ndpi, or go build -tags ndpi)", config.ErrInvalid)
}
