// SPDX-License-Identifier: Apache-2.0

package api

import (
	"os"
	"testing"

	"github.com/tierwall/tierwall/internal/control/ban"
	"github.com/tierwall/tierwall/internal/control/daemon"
)

// The fixtures ban documentation prefixes, which a build host may carry
// on its own interfaces: the management rail is the daemon's to test.
func TestMain(m *testing.M) {
	daemon.SetManagementSource(func() ([]ban.Managed, error) { return nil, nil })
	os.Exit(m.Run())
}
