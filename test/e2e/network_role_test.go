// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	tt "github.com/tierwall/tierwall/internal/control/telemetry/telemetrytest"
	"github.com/tierwall/tierwall/internal/testbed/bgppeer"
	"github.com/tierwall/tierwall/internal/testbed/harness"
	"github.com/tierwall/tierwall/internal/testutil"
)

// The tierwall binary in role network, as deploy/network.yaml runs it:
// a reflection flood seen only in an exporter's sFlow reaches a real
// gobgpd as the FlowSpec rule its samples describe and as RTBH (over the
// group's uplinks), the operator sees the exporter and the attack
// through the CLI, and both routes are withdrawn when the feed goes
// quiet. TestTelemetryFloodToGobgpd runs the same in process.
func TestNetworkRoleToGobgpd(t *testing.T) {
	inHostNS(t, "netrole", func(t *testing.T, p *bgppeer.Pair) {
		if bin == "" {
			t.Fatal("no tierwall binary (TIERWALL_BIN)")
		}
		ctx := context.Background()
		peer := startPeer(t, "gobgpd", routerOptions(p))
		dir := t.TempDir()
		probe, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		port := probe.LocalAddr().(*net.UDPAddr).Port
		probe.Close()
		sock := filepath.Join(dir, "api.sock")
		cfg := fmt.Sprintf(`role: network
hardware: {backend: none}
state_file: %[1]s/state.json
api: {socket: %[2]s}
hostgroups:
  - name: customers
    prefixes: [198.51.100.0/24]
telemetry:
  enabled: true
  listen: ["127.0.0.1:%[3]d"]
  mode: enforce
  withdraw_after: 500ms
  exporters: [{address: 127.0.0.1, name: edge1}]
  thresholds: {all: {pps: 50000}}
  groups:
    customers: {uplink_bps: 1e9}
  flowspec: {action: drop}
bgp:
  asn: %[4]d
  router_id: %[5]s
  neighbors:
    - {address: %[6]s, asn: %[7]d, local_address: %[5]s, send: [flowspec, rtbh]}
  announce:
    next_hop4: %[8]s
    communities: ["%[9]s"]
`, dir, sock, port, bgpAS, p.Host4, p.Router4, bgpRouterAS, bgpNextHop4, bgpCommunity)
		cfgPath := filepath.Join(dir, "network.yaml")
		if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, code := runTw(bin, "run", "--check", "--online", "--config", cfgPath); code != 0 {
			t.Fatalf("run --check --online: exit %d\n%s", code, out)
		}
		startWith(t, "tierwall (role network)", harness.Options{Tierwall: bin, Config: cfgPath, Socket: sock, Timeout: testutil.Scaled(30 * time.Second)})

		conn, err := net.DialUDP("udp", nil, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		// 6 samples at 1:10000 every 100 ms: 600 kpps of 1400-byte
		// memcached answers, 6.7 Gbit/s, over the group's 1 Gbit/s.
		victim := netip.MustParseAddr("198.51.100.7")
		stop := tt.Feed(conn, netip.MustParseAddr("127.0.0.1"), 10000,
			tt.Packet{Src: netip.MustParseAddr("203.0.113.9"), Dst: victim, Proto: 17, SrcPort: 11211, DstPort: 80, Length: 1400}, 100*time.Millisecond)
		defer stop()
		nlri := "dst 198.51.100.7/32 proto =17 dport =80 sport =11211 len =1400"
		expectAt(t, ctx, peer, bgppeer.Route{Family: bgppeer.IPv4FlowSpec, NLRI: nlri, Communities: flowComms,
			ExtCommunities: []string{bgppeer.TrafficRate(0)}}, false)
		expectAt(t, ctx, peer, wantRTBH4, false)

		// What the operator sees: the exporter's counters and the attack.
		out, code := runTw(bin, "--socket", sock, "telemetry", "exporters", "--json")
		if code != 0 {
			t.Fatalf("telemetry exporters: exit %d\n%s", code, out)
		}
		var ex []struct {
			Address   string `json:"address"`
			Datagrams uint64 `json:"datagrams"`
			Records   uint64 `json:"records"`
		}
		if err := json.Unmarshal([]byte(out), &ex); err != nil {
			t.Fatalf("telemetry exporters --json: %v\n%s", err, out)
		}
		if len(ex) != 1 || ex[0].Address != "127.0.0.1" || ex[0].Datagrams == 0 || ex[0].Records < 6*ex[0].Datagrams {
			t.Errorf("exporters %+v", ex)
		}
		if out, code := runTw(bin, "--socket", sock, "telemetry", "top"); code != 0 || !strings.Contains(out, "198.51.100.7") {
			t.Errorf("telemetry top: exit %d, no victim in\n%s", code, out)
		}

		stop()
		expectGone(t, ctx, peer, bgppeer.IPv4FlowSpec, nlri)
		expectGone(t, ctx, peer, bgppeer.IPv4Unicast, wantRTBH4.NLRI)
	})
}
