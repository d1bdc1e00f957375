// SPDX-License-Identifier: Apache-2.0

package config

import (
	"errors"

	"github.com/tierwall/tierwall/internal/control/bgp"
)

// The speaker's section (bgp:) is internal/control/bgp's, which defaults
// and checks it; these are its names here, where the file is parsed.
type (
	BGP         = bgp.Config
	BGPNeighbor = bgp.NeighborConfig
	BGPAnnounce = bgp.AnnounceConfig
	BGPAccept   = bgp.AcceptConfig
)

// validateBGP resolves the bgp: section, its error located as this
// package's own.
func validateBGP(b *BGP) error { return fromBGP(b.Resolve()) }

// fromBGP turns the speaker's field error into this package's, which
// Load places at its line in the file.
func fromBGP(err error) error {
	var fe *bgp.FieldError
	if errors.As(err, &fe) {
		return bad(fe.Path, fe.Value, fe.Why)
	}
	return err
}
