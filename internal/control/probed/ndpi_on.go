// SPDX-License-Identifier: Apache-2.0

//go:build ndpi

package probed

import (
	"fmt"

	"github.com/tierwall/tierwall/internal/probe/dpi"
)

func newNDPI() (dpi.Classifier, error) {
	c, err := dpi.NewNDPI()
	if err != nil {
		return nil, fmt.Errorf("starting nDPI: %w", err)
	}
	return c, nil
}
