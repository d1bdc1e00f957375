// SPDX-License-Identifier: Apache-2.0

package telemetry

import (
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	tt "github.com/tierwall/tierwall/internal/control/telemetry/telemetrytest"
	"github.com/tierwall/tierwall/internal/rule"
)

func TestPlanLadder(t *testing.T) {
	host := netip.MustParsePrefix("198.51.100.7/32")
	amp := Attack{ID: "a1", Dst: []netip.Prefix{host}, Group: "dc", Kinds: []Kind{kindAmp}, PeakPPS: 2e5, PeakBPS: 2.2e9,
		Signature: Signature{Proto: 17, SrcPort: 53, MinLen: 1400, MaxLen: 1460}}
	syn := Attack{ID: "a2", Dst: []netip.Prefix{netip.MustParsePrefix("198.51.100.8/32")}, Group: "dc", Kinds: []Kind{KindSYN}, PeakPPS: 1e6, PeakBPS: 4.8e8,
		Signature: Signature{Proto: 6, DstPort: 443, SYNOnly: true, MinLen: 60, MaxLen: 60}}
	carpet := Attack{ID: "a3", Dst: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}, Group: "dc", Carpet: true, PeakBPS: 9e9,
		Signature: Signature{Proto: 17, SrcPort: 123, MinLen: 468, MaxLen: 468}}
	frag := Attack{ID: "a4", Dst: []netip.Prefix{netip.MustParsePrefix("198.51.100.9/32")}, Group: "dc", PeakBPS: 1e8,
		Signature: Signature{Proto: 17, FragShare: 0.95, MinLen: 1500, MaxLen: 1500}}
	ended := syn
	ended.ID, ended.Ended = "a5", time.Unix(1, 0)
	mon := amp
	mon.ID, mon.Monitor = "a6", true
	cfg := ActionConfig{FlowAction: rule.FlowRateLimit, RatePPS: 5000, Policies: map[string]GroupPolicy{"dc": {UplinkBPS: 1e9}}}
	ups := Plan([]Attack{amp, syn, carpet, frag, ended, mon}, cfg)
	want := []Upstream{
		{Attack: "a1", Kind: UpFlowSpec, Rule: rule.FlowRule{Dst: host, Proto: 17, SrcPorts: rule.PortRange{Lo: 53, Hi: 53}, Length: rule.Range16{Lo: 1400, Hi: 1460}, Action: rule.FlowDrop}},
		{Attack: "a1", Kind: UpRTBH, Prefix: host},
		{Attack: "a2", Kind: UpFlowSpec, Rule: rule.FlowRule{Dst: syn.Dst[0], Proto: 6, DstPorts: rule.PortRange{Lo: 443, Hi: 443},
			TCPFlags: rule.TCPFlagMatch{Mask: 0x12, Value: 0x02}, Length: rule.Range16{Lo: 60, Hi: 60}, Action: rule.FlowRateLimit, RatePPS: 5000}},
		{Attack: "a3", Kind: UpFlowSpec, Rule: rule.FlowRule{Dst: carpet.Dst[0], Proto: 17, SrcPorts: rule.PortRange{Lo: 123, Hi: 123}, Length: rule.Range16{Lo: 468, Hi: 468}, Action: rule.FlowDrop}},
		{Attack: "a4", Kind: UpFlowSpec, Rule: rule.FlowRule{Dst: frag.Dst[0], Proto: 17, Fragment: rule.FragAnyFrag, Length: rule.Range16{Lo: 1500, Hi: 1500}, Action: rule.FlowRateLimit, RatePPS: 5000}},
	}
	if len(ups) != len(want) {
		t.Fatalf("%d actions: %+v", len(ups), ups)
	}
	for i, u := range ups {
		w := want[i]
		if u.Attack != w.Attack || u.Kind != w.Kind || u.Rule != w.Rule || u.Prefix != w.Prefix {
			t.Errorf("action %d:\n got %+v\nwant %+v", i, u, w)
		}
		if u.Kind == UpFlowSpec {
			if err := u.Rule.Check(); err != nil {
				t.Errorf("action %d: rule %v: %v", i, u.Rule, err)
			}
		}
	}
	if ups := Plan([]Attack{amp}, ActionConfig{Mode: Monitor}); len(ups) != 0 {
		t.Errorf("monitor mode planned %v", ups)
	}
}

// A group's RTBH communities go on its blackhole routes only: not on its
// FlowSpec, not on another group's blackhole.
func TestPlanGroupCommunities(t *testing.T) {
	a := Attack{ID: "a1", Dst: []netip.Prefix{netip.MustParsePrefix("198.51.100.7/32")}, Group: "dc", PeakBPS: 2e9, Signature: Signature{Proto: 17}}
	b := Attack{ID: "a2", Dst: []netip.Prefix{netip.MustParsePrefix("203.0.113.7/32")}, Group: "other", PeakBPS: 2e9, Signature: Signature{Proto: 17}}
	dc := Communities{Standard: []string{"64500:666"}, Large: []string{"65000:666:1"}}
	cfg := ActionConfig{Policies: map[string]GroupPolicy{"dc": {UplinkBPS: 1e9}, "other": {UplinkBPS: 1e9}},
		RTBH: map[string]Communities{"dc": dc}}
	ups := Plan([]Attack{a, b}, cfg)
	if len(ups) != 4 {
		t.Fatalf("%d actions: %+v", len(ups), ups)
	}
	for _, u := range ups {
		want := Communities{}
		if u.Kind == UpRTBH && u.Attack == "a1" {
			want = dc
		}
		if !slices.Equal(u.Communities.Standard, want.Standard) || !slices.Equal(u.Communities.Large, want.Large) {
			t.Errorf("%s %s: communities %+v, want %+v", u.Attack, u.Kind, u.Communities, want)
		}
	}
}

func TestServiceEndToEndOverUDP(t *testing.T) {
	lo := netip.MustParseAddr("127.0.0.1")
	th := hostLimits(50_000)
	s, err := Start(Config{Listen: []string{"127.0.0.1:0"},
		Decoder:  DecoderConfig{Exporters: []ExporterConfig{{Address: lo}}},
		Detector: DetectorConfig{Host: th},
		Action:   ActionConfig{Mode: DryRun}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	conn, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(s.Addrs()[0]))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// 30 samples at 1:10000 in one datagram: 300k packets in an instant.
	sf := tt.SFlow{Agent: lo}
	for i := 0; i < 30; i++ {
		sf.Flow(10000, tt.Packet{Src: reflector, Dst: victim, Proto: 17, SrcPort: 11211, DstPort: 80, Length: 1400})
	}
	if _, err := conn.Write(sf.Bytes()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		st := s.Status(10)
		if len(st.Plan) > 0 {
			if st.Plan[0].Rule.SrcPorts.Lo != 11211 || st.Plan[0].Rule.Action != rule.FlowDrop || len(st.Attacks) != 1 || st.Exporters[0].Records != 30 {
				t.Errorf("status %+v", st)
			}
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no plan: %+v", s.Status(10))
}
