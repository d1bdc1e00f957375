// SPDX-License-Identifier: Apache-2.0

package modes

import (
	"bytes"
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/testbed/trafgen"
	"github.com/tierwall/tierwall/internal/testutil"
)

// TestSmoke runs the whole evaluation pipeline at toy sizes: every
// mechanism and mode sets up, measures and tears down, HTTP runs, and the
// report (CSV, plots, Markdown) is written. It checks the pipeline, never
// speeds.
func TestSmoke(t *testing.T) {
	testutil.RequireRoot(t)
	var log bytes.Buffer
	err := Run(context.Background(), Options{Sizes: []int{1, 64}, Dists: []trafgen.Dist{trafgen.Uniform, trafgen.Gaussian},
		Duration: 300 * time.Millisecond, Log: &log, Smoke: true})
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	for _, want := range []string{"tierwall-host", "xdp-filter", "nft-netdev", "nft-prerouting", "ipset", "iptables", "lab-hybrid", "lab-nic-hw", "lab-nic", "http"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("no %s measurement in the log:\n%s", want, log.String())
		}
	}
}

func TestModelIsLabelledAndBounded(t *testing.T) {
	rows := []Row{{Figure: "drop-rate", Mechanism: "tierwall-host", Dist: "uniform", Sources: 1000, DropMpps: 4, CPUPct: 100}}
	m := modelRows(rows, []string{"uniform"})
	if len(m) != 2 || m[0].Figure != "model" || !strings.HasPrefix(m[0].Mechanism, "model ") {
		t.Fatalf("%+v", m)
	}
	// 250 ns/pkt on 4 cores: 16 Mpps host; K=512 of 1000 uniform sources in
	// hardware: 0.512*37.2 + min(0.488*37.2, 16) = 19.05 + 16 = 35.05.
	if m[0].DropMpps != 16 || math.Abs(m[1].DropMpps-35.0464) > 1e-3 {
		t.Errorf("model %.2f / %.2f", m[0].DropMpps, m[1].DropMpps)
	}
}
