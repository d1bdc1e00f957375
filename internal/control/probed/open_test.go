// SPDX-License-Identifier: Apache-2.0

package probed

import (
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/tierwall/tierwall/internal/control/config"
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

func TestChangedSections(t *testing.T) {
	a, err := config.Parse([]byte("role: probe\ninterface: eth0\n"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := config.Parse([]byte("role: probe\ninterface: eth0\nprobe: {timeouts: {idle: 7s}}\nlog: {level: debug}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := changedSections(a, a); len(got) != 0 {
		t.Errorf("the same configuration: %v changed", got)
	}
	if got := strings.Join(changedSections(a, b), ","); got != "log,probe" {
		t.Errorf("changed %q, want log,probe", got)
	}
}
