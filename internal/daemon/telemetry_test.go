// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/config"
	tt "github.com/tierwall/tierwall/internal/telemetry/telemetrytest"
)

// announcedNow reads what the fake speaker holds, under the merged
// speaker's lock (network mode announces from its own goroutine).
func announcedNow(d *Daemon, fs *fakeSpeaker) []string {
	d.tele.merged.mu.Lock()
	defer d.tele.merged.mu.Unlock()
	return announcedKeys(fs.announced)
}

func waitAnnounced(t *testing.T, d *Daemon, fs *fakeSpeaker, cond func([]string) bool) []string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if got := announcedNow(d, fs); cond(got) {
			return got
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("announced %q", announcedNow(d, fs))
	return nil
}

// A flood seen only in the routers' sFlow is announced as FlowSpec from
// network mode's tick, and as RTBH when over its group's uplinks; the
// loop's own announcements do not withdraw it; it is withdrawn when the
// feed shows the attack over.
func TestTelemetryAnnouncesThroughTheLoopsSpeaker(t *testing.T) {
	cfg := bgpConfig(t)
	cfg.HostGroups = []config.HostGroup{{Name: "customers", Prefixes: []string{"198.51.100.0/24"}}}
	cfg.Telemetry = config.Telemetry{Enabled: true, Listen: []string{"127.0.0.1:0"},
		Exporters:     []config.TelemetryExporter{{Address: "127.0.0.1"}},
		Thresholds:    map[string]config.TelemetryLimits{"all": {PPS: 50000}},
		Groups:        map[string]config.TelemetryGroup{"customers": {UplinkBPS: 1e9}},
		WithdrawAfter: 300 * time.Millisecond}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	h, fs := bgpHarness(t, cfg)
	t.Cleanup(h.d.closeTelemetry)
	conn, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(h.d.tele.svc.Addrs()[0]))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	victim := netip.MustParseAddr("198.51.100.7")
	// 40 samples at 1:10000 of 1400-byte memcached answers: 400k packets,
	// 4.5 Gbit/s over the uplinks' 1 Gbit/s.
	sf := tt.SFlow{Agent: netip.MustParseAddr("127.0.0.1")}
	for i := 0; i < 40; i++ {
		sf.Flow(10000, tt.Packet{Src: netip.MustParseAddr("203.0.113.9"), Dst: victim, Proto: 17, SrcPort: 11211, DstPort: 80, Length: 1400})
	}
	if _, err := conn.Write(sf.Bytes()); err != nil {
		t.Fatal(err)
	}
	want := []string{"flowspec dst 198.51.100.7/32 proto udp dport 80 sport 11211 length 1400-1400 drop", "rtbh 198.51.100.7/32"}
	got := waitAnnounced(t, h.d, fs, func(g []string) bool { return slices.Equal(g, want) })
	// The loop's interval announces its own set: network mode's stays.
	h.step(t)
	if g := announcedNow(h.d, fs); !slices.Equal(g, got) {
		t.Fatalf("after the loop's step: %q, before %q", g, got)
	}
	st := h.d.Telemetry(5)
	if !st.Enabled || len(st.Attacks) != 1 || len(st.Plan) != 2 || st.Exporters[0].Records != 40 {
		t.Errorf("status %+v", st)
	}
	// No more samples: over after withdraw_after, and withdrawn.
	waitAnnounced(t, h.d, fs, func(g []string) bool { return len(g) == 0 })
}
