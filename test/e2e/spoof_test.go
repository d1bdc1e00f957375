package e2e

import (
	"context"
	"io"
	"testing"
	"time"

	twrule "github.com/tierwall/tierwall/internal/rule"
	"github.com/tierwall/tierwall/internal/testbed/eval"
	"github.com/tierwall/tierwall/internal/testutil"
)

// Floods whose sources cannot be listed, through the real daemon with its
// default detectors, at a paced rate: spoofed sources in a /16 (a prefix
// or a flow rule, as the victim's baseline decides), random sources over
// all IPv4 (a flow rule with the known-good bypass), a reflection flood
// (port rules, the host's own DNS/NTP still answered); XDP drops the flood,
// and no client of the victim is ever banned. Counts only: the rates go in
// make eval-spoof.
func TestSpoofedFloodsStopped(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireCommand(t, "nginx")
	rows, err := eval.Spoof(context.Background(), eval.SpoofParams{Tierwall: bin, Baseline: 6 * time.Second,
		Attack: 4 * time.Second, Rate: 150_000, Clients: 16, Log: io.Discard,
		Only: "udp-spoof-16,udp-spoof-all4,reflection"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 {
		t.Fatalf("%d scenarios ran, want 3", len(rows))
	}
	for _, r := range rows {
		name := r.Scenario.Name
		if r.DetectIntervals < 0 {
			t.Errorf("%s: no mitigation", name)
			continue
		}
		if len(r.ClientsBanned) != 0 {
			t.Errorf("%s: clients banned: %v", name, r.ClientsBanned)
		}
		if r.DroppedFrom3 < 0.8 { // most of it: the 95% target is make eval-spoof's, at full rate
			t.Errorf("%s: %.1f%% of the flood dropped from the third interval", name, 100*r.DroppedFrom3)
		}
		var bypass, port bool
		for _, fr := range r.FlowRules {
			bypass = bypass || (fr.KnownGoodBypass && fr.Counters.Dropped > 0)
			port = port || (fr.SrcPorts == twrule.PortRange{Lo: 53, Hi: 53} || fr.SrcPorts == twrule.PortRange{Lo: 123, Hi: 123})
		}
		switch name {
		case "udp-spoof-all4":
			if !bypass {
				t.Errorf("%s: no flow rule with the known-good bypass dropped anything: %+v", name, r.FlowRules)
			}
		case "reflection-53-123":
			if !port {
				t.Errorf("%s: no source-port rule: %+v", name, r.FlowRules)
			}
			if r.ExchAttack[1] == 0 || r.ExchAttack[0] < r.ExchAttack[1]*9/10 {
				t.Errorf("%s: the host's own DNS/NTP exchanges answered %d of %d during the flood", name, r.ExchAttack[0], r.ExchAttack[1])
			}
		}
	}
}
