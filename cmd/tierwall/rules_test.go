// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/json"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/control/apiv1"
	"github.com/tierwall/tierwall/internal/control/ban"
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
	view := apiv1.RuleView{Ban: ban.Ban{Prefix: p, Detector: "operator", Reason: "abuse", Expires: time.Now().Add(time.Hour)}, Packets: 3, Tier: "xdp"}
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

// A prefix given twice is one rule: block add X X asked for, and counted,
// two.
func TestDuplicateArgumentCountedOnce(t *testing.T) {
	var got apiv1.BatchRequest
	sock := filepath.Join(t.TempDir(), "api.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/rules/batch", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewDecoder(r.Body).Decode(&got)
		_ = json.NewEncoder(w).Encode(apiv1.BatchResult{Prefixes: len(got.Prefixes), New: len(got.Prefixes)})
	})
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { srv.Close() })
	if _, err := execute("--bpffs", t.TempDir(), "--socket", sock, "block", "add", "192.0.2.1", "198.51.100.0/24", "192.0.2.1/32"); err != nil {
		t.Fatal(err)
	}
	if strings.Join(got.Prefixes, " ") != "192.0.2.1/32 198.51.100.0/24" {
		t.Errorf("sent %v, want each prefix once", got.Prefixes)
	}
}
