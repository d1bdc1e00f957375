// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tierwall/tierwall/internal/control/apiv1"
	"github.com/tierwall/tierwall/internal/control/bgp"
	"github.com/tierwall/tierwall/internal/control/bgp/community"
	"github.com/tierwall/tierwall/internal/control/telemetry"
	"github.com/tierwall/tierwall/internal/rule"
)

// stdout runs args and returns what they printed: these commands print to
// os.Stdout, not to cobra's writer.
func stdout(t *testing.T, args ...string) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	got := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		got <- string(b)
	}()
	_, err = execute(args...)
	os.Stdout = old
	w.Close()
	out := <-got
	r.Close()
	if err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
	return out
}

// A network attack's RTBH route names its host group's provider's
// blackhole communities: `tierwall bgp routes` and `tierwall telemetry
// top` show them, as text and as JSON; a route without any shows none.
func TestRoutesShowCommunities(t *testing.T) {
	std, _ := community.ParseStandard("64500:666")
	large, _ := community.ParseLarge("4200000000:666:0")
	victim := netip.MustParsePrefix("198.51.100.7/32")
	bs := apiv1.BGPStatus{Enabled: true, ASN: 65000, Neighbors: []bgp.Neighbor{}, Received: []bgp.Remote{},
		Announced: []bgp.Route{
			{Kind: bgp.FlowSpec, Flow: bgp.Flow{FlowRule: rule.FlowRule{Dst: victim, Proto: 17, Action: rule.FlowDrop}}, Reason: "network attack n1"},
			{Kind: bgp.RTBH, Prefix: victim, Reason: "network attack n1: over the uplinks", Rate: 600000,
				Communities: []community.Standard{std}, LargeCommunities: []community.Large{large}}}}
	ts := telemetry.Status{Enabled: true, Mode: telemetry.Enforce, Listen: []netip.AddrPort{}, Exporters: []telemetry.ExporterStats{},
		Attacks: []telemetry.Attack{}, Top: []telemetry.Talker{},
		Plan: []telemetry.Upstream{{Attack: "n1", Kind: telemetry.UpRTBH, Prefix: victim, Reason: "network attack n1", PPS: 600000,
			Communities: telemetry.Communities{Standard: []string{"64500:666"}, Large: []string{"4200000000:666:0"}}}}}
	sock := filepath.Join(t.TempDir(), "api.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	for path, v := range map[string]any{"GET /v1/bgp": bs, "GET /v1/telemetry": ts} {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(v)
		})
	}
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(l) }() // ErrServerClosed at cleanup
	t.Cleanup(func() { srv.Close() })

	text := stdout(t, "--socket", sock, "bgp", "routes")
	var rtbh, flowspec string
	for _, l := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(l, "rtbh "):
			rtbh = l
		case strings.HasPrefix(l, "flowspec "):
			flowspec = l
		}
	}
	if !strings.Contains(text, "COMMUNITIES") || !strings.Contains(rtbh, "64500:666,4200000000:666:0") {
		t.Errorf("bgp routes: the RTBH route's communities are not shown:\n%s", text)
	}
	if strings.Contains(flowspec, "64500:666") {
		t.Errorf("bgp routes: communities on a route without any:\n%s", text)
	}
	js := stdout(t, "--socket", sock, "bgp", "routes", "--json")
	var routes struct {
		Announced []bgp.Route `json:"announced"`
	}
	if err := json.Unmarshal([]byte(js), &routes); err != nil {
		t.Fatalf("%v: %s", err, js)
	}
	if len(routes.Announced) != 2 || len(routes.Announced[1].Communities) != 1 || routes.Announced[1].Communities[0] != std ||
		len(routes.Announced[1].LargeCommunities) != 1 || routes.Announced[1].LargeCommunities[0] != large {
		t.Errorf("bgp routes --json: %s", js)
	}
	if strings.Contains(js, `"communities": null`) || strings.Count(js, `"communities"`) != 1 {
		t.Errorf("bgp routes --json: communities on the route without any: %s", js)
	}

	if text := stdout(t, "--socket", sock, "telemetry", "top"); !strings.Contains(text, "enforce rtbh: 198.51.100.7/32 communities 64500:666,4200000000:666:0") {
		t.Errorf("telemetry top: the RTBH action's communities are not shown:\n%s", text)
	}
	js = stdout(t, "--socket", sock, "telemetry", "top", "--json")
	var top struct {
		Plan []telemetry.Upstream `json:"plan"`
	}
	if err := json.Unmarshal([]byte(js), &top); err != nil {
		t.Fatalf("%v: %s", err, js)
	}
	if len(top.Plan) != 1 || strings.Join(top.Plan[0].Communities.Standard, ",") != "64500:666" || strings.Join(top.Plan[0].Communities.Large, ",") != "4200000000:666:0" {
		t.Errorf("telemetry top --json: %s", js)
	}
}
