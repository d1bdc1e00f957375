// SPDX-License-Identifier: Apache-2.0

package probed

import (
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/tierwall/tierwall/internal/config"
	"github.com/tierwall/tierwall/internal/tier"
)

func TestFlowerBackendOnAMissingPortFails(t *testing.T) {
	cfg, err := config.Parse([]byte("role: probe\ninterface: eth0\nprobe:\n  hardware: {backend: flower, flower: {iface: twno-such0}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if !errors.Is(err, tier.ErrUnsupported) || !strings.Contains(err.Error(), "flower flow table on twno-such0") {
		t.Fatalf("New: %v, want the flower backend's ErrUnsupported", err)
	}
}
