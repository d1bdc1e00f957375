// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/testbed/eval/spoof"
	"github.com/tierwall/tierwall/internal/testutil"
)

// The spoofed-flood experiment's pipeline (make eval-spoof) on a spoofed
// UDP flood and a SYN flood, capped at a rate CI's machine takes whole:
// the lab split pins everything it names, the daemon (with its memory
// budget) detects each flood and XDP drops it, and no client is banned.
// Behaviour with counts; the rates are make eval-spoof's.
func TestEvalSpoofSmoke(t *testing.T) {
	testutil.RequireRoot(t)
	var log bytes.Buffer
	rows, err := spoof.Run(context.Background(), spoof.Params{Tierwall: bin, Only: "udp-spoof-16,syn-spoof-200k",
		Baseline: 6 * time.Second, Attack: 4 * time.Second, Clients: 8, ClientRate: 50, ConnRate: 10, Rate: 100_000, Log: &log})
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	if len(rows) != 2 {
		t.Fatalf("%d rows, want 2\n%s", len(rows), log.String())
	}
	for _, r := range rows {
		name := r.Scenario.Name
		if r.DetectIntervals < 0 || r.DroppedFrom3 < 0.95 {
			t.Errorf("%s: detected after %.1f intervals, %.1f%% dropped from the 3rd", name, r.DetectIntervals, 100*r.DroppedFrom3)
		}
		if r.BaselineRPS == 0 || r.AttackRPS == 0 || r.HostCPUBefore <= 0 || r.HostCPUDuring <= 0 {
			t.Errorf("%s: nothing measured: %.0f → %.0f req/s, host CPU %.0f%% → %.0f%%", name, r.BaselineRPS, r.AttackRPS, r.HostCPUBefore, r.HostCPUDuring)
		}
		if len(r.ClientsBanned) != 0 || len(r.BeforeFlood) != 0 {
			t.Errorf("%s: clients banned %v, before the flood %v", name, r.ClientsBanned, r.BeforeFlood)
		}
		// The stack opens no connection the clients did not ask for
		// (each may have one in flight from the reference phase).
		if r.Scenario.SYN && (r.ClientConns == 0 || r.PassiveOpens > r.ClientConns+8) {
			t.Errorf("%s: %d passive opens for %d client connections", name, r.PassiveOpens, r.ClientConns)
		}
		if r.DaemonMaxRSSMB == 0 || r.DaemonMaxRSSMB > 256 {
			t.Errorf("%s: daemon peak RSS %d MB, outside its 256 MiB budget", name, r.DaemonMaxRSSMB)
		}
	}
	if t.Failed() {
		t.Log(log.String())
	}
}

// The same pipeline with the emulated card as the daemon's hardware tier
// (make eval-spoof --card): the flood's flow rule, which no client's
// traffic matches, goes to the card's policers and the card drops the
// flood before the host's port; the clients are untouched.
func TestEvalSpoofSmokeCard(t *testing.T) {
	testutil.RequireRoot(t)
	var log bytes.Buffer
	rows, err := spoof.Run(context.Background(), spoof.Params{Tierwall: bin, Only: "udp-spoof-9", Card: true,
		Baseline: 6 * time.Second, Attack: 4 * time.Second, Clients: 8, ClientRate: 50, ConnRate: 10, Rate: 100_000, Log: &log})
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	if len(rows) != 1 {
		t.Fatalf("%d rows, want 1\n%s", len(rows), log.String())
	}
	r := rows[0]
	if r.DetectIntervals < 0 || r.DroppedFrom3 < 0.95 {
		t.Errorf("detected after %.1f intervals, %.1f%% dropped from the 3rd", r.DetectIntervals, 100*r.DroppedFrom3)
	}
	var onCard uint64
	for _, fr := range r.FlowRules {
		onCard += fr.NICDropped
	}
	if onCard == 0 {
		t.Errorf("the card dropped nothing for the flow rules %+v", r.FlowRules)
	}
	if len(r.ClientsBanned) != 0 || len(r.BeforeFlood) != 0 {
		t.Errorf("clients banned %v, before the flood %v", r.ClientsBanned, r.BeforeFlood)
	}
	if t.Failed() {
		t.Log(log.String())
	}
}
