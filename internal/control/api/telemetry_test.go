// SPDX-License-Identifier: Apache-2.0

package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/control/config"
	"github.com/tierwall/tierwall/internal/control/daemon"
	tt "github.com/tierwall/tierwall/internal/control/telemetry/telemetrytest"
)

// /v1/telemetry with network mode on, an exporter and an attack in
// dry-run: the answer matches its schema, and the client reads it, the
// RTBH action's host group communities included.
func TestTelemetryEndpoint(t *testing.T) {
	cfg := config.Default()
	cfg.Interface = "mem0"
	cfg.Interval = time.Second
	cfg.StateFile = filepath.Join(t.TempDir(), "state.json")
	cfg.API.Socket = ""
	cfg.HostGroups = []config.HostGroup{{Name: "customers", Prefixes: []string{"198.51.100.0/24"}}}
	cfg.Telemetry = config.Telemetry{Enabled: true, Listen: []string{"127.0.0.1:0"}, Mode: "dry-run",
		Exporters:  []config.TelemetryExporter{{Address: "127.0.0.1", Name: "edge1"}},
		Thresholds: map[string]config.TelemetryLimits{"all": {PPS: 50000}},
		Groups: map[string]config.TelemetryGroup{"customers": {UplinkBPS: 1e6,
			Communities: []string{"64500:666"}, LargeCommunities: []string{"4200000000:666:0"}}}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	d, err := daemon.NewOver(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), &memDP{blocked: map[netip.Prefix]uint64{}, at: time.Now()}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- d.Run(ctx, nil) }()
	srv := httptest.NewServer((&Server{D: d}).Handler())
	defer func() {
		srv.Close()
		cancel()
		if err := <-ran; err != nil {
			t.Errorf("daemon: %v", err)
		}
	}()
	conn, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(d.Telemetry(0).Listen[0]))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sf := tt.SFlow{Agent: netip.MustParseAddr("127.0.0.1")}
	for i := 0; i < 20; i++ {
		sf.Flow(10000, tt.Packet{Src: netip.MustParseAddr("203.0.113.9"), Dst: netip.MustParseAddr("198.51.100.7"), Proto: 6, SrcPort: 4000, DstPort: 443, TCPFlags: 2, Length: 60})
	}
	if _, err := conn.Write(sf.Bytes()); err != nil {
		t.Fatal(err)
	}
	doc := loadSpec(t)
	sc := doc.Paths["/v1/telemetry"]["get"].Responses["200"].Content["application/json"].Schema
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, _, b := call(t, "GET", srv.URL+"/v1/telemetry?top=5")
		if code != http.StatusOK {
			t.Fatalf("%d %s", code, b)
		}
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		for _, e := range doc.validate("/v1/telemetry", sc, v) {
			t.Error(e)
		}
		st, err := (&Client{Socket: srv.URL, base: srv.URL, hc: srv.Client()}).Telemetry(context.Background(), 5)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Plan) > 0 {
			if len(st.Attacks) != 1 || len(st.Top) != 1 || st.Exporters[0].Name != "edge1" || st.Plan[0].Rule.TCPFlags.Value != 2 {
				t.Errorf("status %+v", st)
			}
			if len(st.Plan) != 2 || st.Plan[1].Kind != "rtbh" ||
				fmt.Sprint(st.Plan[1].Communities.Standard, st.Plan[1].Communities.Large) != "[64500:666] [4200000000:666:0]" {
				t.Errorf("plan %+v, want an RTBH action with the group's communities", st.Plan)
			}
			var flat bytes.Buffer
			if err := json.Compact(&flat, b); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(flat.String(), `"communities":{"standard":["64500:666"],"large":["4200000000:666:0"]}`) {
				t.Errorf("answer without the RTBH action's communities: %s", flat.String())
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no plan: %s", b)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code, _, _ := call(t, "GET", srv.URL+"/v1/telemetry?top=x"); code != http.StatusBadRequest {
		t.Errorf("top=x: %d", code)
	}
}
