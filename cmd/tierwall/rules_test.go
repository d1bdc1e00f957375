// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/json"
	"maps"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/ban"
	"github.com/tierwall/tierwall/internal/daemon"
	"github.com/tierwall/tierwall/internal/datapath"
)

func jsonKeys(t *testing.T, v any) []string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return slices.Sorted(maps.Keys(m))
}

// block list printed other columns and JSON keys through the daemon than
// directly; both are ruleRows now, with every key in both.
func TestListRowsAreOneSchema(t *testing.T) {
	p := netip.MustParsePrefix("198.51.100.50/32")
	hit := time.Now()
	direct := rowFromRule(datapath.Rule{Prefix: p, Kind: datapath.KindExact, Packets: 3, Bytes: 180, LastHit: &hit})
	view := daemon.RuleView{Ban: ban.Ban{Prefix: p, Detector: "operator", Reason: "abuse", Tier: "xdp", Expires: time.Now().Add(time.Hour)}, Packets: 3}
	viaDaemon := rowFromBan("block", view, datapath.Rule{}, false)
	counted := rowFromBan("block", view, datapath.Rule{Prefix: p, Bytes: 180, LastHit: &hit}, true)
	want := jsonKeys(t, direct)
	for _, r := range []ruleRow{viaDaemon, counted} {
		if got := jsonKeys(t, r); !slices.Equal(got, want) {
			t.Errorf("keys %v, direct has %v", got, want)
		}
	}
	if direct.Kind != viaDaemon.Kind || direct.Tier != viaDaemon.Tier {
		t.Errorf("kind/tier: direct %s/%s, daemon %s/%s", direct.Kind, direct.Tier, viaDaemon.Kind, viaDaemon.Tier)
	}
	if counted.Bytes == nil || *counted.Bytes != 180 || counted.LastHit == nil || viaDaemon.Bytes != nil {
		t.Errorf("data-plane counters: %+v / %+v", counted, viaDaemon)
	}
}
