// SPDX-License-Identifier: Apache-2.0

package scaleout

import (
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/tierwall/tierwall/internal/control/scaleout/natstest"
)

// startNATS runs nats-server (natstest.Start) and connects to it for the
// test's life.
func startNATS(t *testing.T) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(natstest.Start(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}
