// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/control/bgp"
	"github.com/tierwall/tierwall/internal/control/config"
	"github.com/tierwall/tierwall/internal/control/detect"
	"github.com/tierwall/tierwall/internal/control/telemetry"
	tt "github.com/tierwall/tierwall/internal/control/telemetry/telemetrytest"
	"github.com/tierwall/tierwall/internal/testbed/bgppeer"
)

// A memcached reflection flood seen only in an exporter's sFlow reaches a
// real gobgpd as the FlowSpec rule its samples describe, and as RTBH with
// BLACKHOLE and the provider's community since it is over its group's
// uplinks; both are withdrawn when the feed goes quiet. Network mode and
// the speaker run in process, as in the daemon (internal/control/daemon/
// telemetry.go makes the same routes of the plan).
func TestTelemetryFloodToGobgpd(t *testing.T) {
	inHostNS(t, "telemetry", func(t *testing.T, p *bgppeer.Pair) {
		ctx := context.Background()
		peer := startPeer(t, "gobgpd", routerOptions(p))
		s := startSpeaker(t, speakerConfig(t, p, config.BGPNeighbor{Send: []string{"rtbh", "flowspec"}}))
		bothUp(t, ctx, s, peer)

		victim := netip.MustParseAddr("198.51.100.7")
		groups, err := detect.NewHostGroups([]detect.HostGroup{{Name: "customers", Prefixes: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}}})
		if err != nil {
			t.Fatal(err)
		}
		var th telemetry.Thresholds
		th[telemetry.KindAll].PPS = 50000
		pol := map[string]telemetry.GroupPolicy{"customers": {UplinkBPS: 1e9}}
		svc, err := telemetry.Start(telemetry.Config{Listen: []string{"127.0.0.1:0"},
			Decoder:  telemetry.DecoderConfig{Exporters: []telemetry.ExporterConfig{{Address: netip.MustParseAddr("127.0.0.1")}}},
			Detector: telemetry.DetectorConfig{Host: th, Groups: groups, Policies: pol, WithdrawAfter: 500 * time.Millisecond},
			Action:   telemetry.ActionConfig{Policies: pol}}, nil, func(c telemetry.Change) {
			if !c.PlanChanged {
				return
			}
			var rs []bgp.Route
			for _, u := range c.Plan {
				if u.Kind == telemetry.UpRTBH {
					rs = append(rs, bgp.Route{Kind: bgp.RTBH, Prefix: u.Prefix, Reason: u.Reason})
				} else {
					rs = append(rs, bgp.Route{Kind: bgp.FlowSpec, Flow: bgp.Flow{FlowRule: u.Rule}, Reason: u.Reason})
				}
			}
			if _, err := s.Announce(rs); err != nil {
				t.Errorf("announcing %v: %v", rs, err)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		defer svc.Close()
		conn, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(svc.Addrs()[0]))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		// 6 samples at 1:10000 every 100 ms: 600 kpps of 1400-byte
		// memcached answers, 6.7 Gbit/s.
		stop := tt.Feed(conn, netip.MustParseAddr("127.0.0.1"), 10000,
			tt.Packet{Src: netip.MustParseAddr("203.0.113.9"), Dst: victim, Proto: 17, SrcPort: 11211, DstPort: 80, Length: 1400}, 100*time.Millisecond)
		defer stop()
		start := time.Now()
		nlri := "dst 198.51.100.7/32 proto =17 dport =80 sport =11211 len =1400"
		expectAt(t, ctx, peer, bgppeer.Route{Family: bgppeer.IPv4FlowSpec, NLRI: nlri, Communities: flowComms,
			ExtCommunities: []string{bgppeer.TrafficRate(0)}}, false)
		t.Logf("FlowSpec at gobgpd %v after the first datagram", time.Since(start).Round(time.Millisecond))
		expectAt(t, ctx, peer, wantRTBH4, false)
		t.Logf("RTBH at gobgpd %v after the first datagram", time.Since(start).Round(time.Millisecond))
		stop()
		quiet := time.Now()
		expectGone(t, ctx, peer, bgppeer.IPv4FlowSpec, nlri)
		expectGone(t, ctx, peer, bgppeer.IPv4Unicast, wantRTBH4.NLRI)
		t.Logf("withdrawn %v after the feed went quiet (withdraw_after 0.5 s)", time.Since(quiet).Round(time.Millisecond))
		if st := svc.Status(1); len(st.Attacks) != 1 || st.Attacks[0].Ended.IsZero() || !strings.Contains(st.Attacks[0].ID, "198.51.100.7") {
			t.Errorf("attacks %+v", st.Attacks)
		}
	})
}
