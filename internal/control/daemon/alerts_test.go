// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"encoding/json"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/control/alert"
	"github.com/tierwall/tierwall/internal/control/config"
	tt "github.com/tierwall/tierwall/internal/control/telemetry/telemetrytest"
	"github.com/tierwall/tierwall/internal/datapath"
	"github.com/tierwall/tierwall/internal/pkt"
)

// fakeSampler is the data plane's drop sampler: what queue holds is what
// the filter dropped, sampled only while every is set.
type fakeSampler struct {
	every uint32
	queue []datapath.Sample
	sets  []uint32
}

func (s *fakeSampler) SetEvery(n uint32) error { s.every = n; s.sets = append(s.sets, n); return nil }
func (s *fakeSampler) Drain(max int) ([]datapath.Sample, error) {
	n := min(max, len(s.queue))
	out := s.queue[:n]
	s.queue = s.queue[n:]
	return out, nil
}
func (s *fakeSampler) Close() error { return nil }
func (s *fakeSampler) drop(f []byte) {
	if s.every > 0 {
		s.queue = append(s.queue, datapath.Sample{Time: time.Now(), Len: len(f), Data: f, Reason: "drop_exact"})
	}
}

// webhookSink collects the reports POSTed to it.
func webhookSink(t *testing.T) (string, <-chan alert.Report) {
	ch := make(chan alert.Report, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var rep alert.Report
		if err := json.NewDecoder(r.Body).Decode(&rep); err != nil {
			t.Errorf("webhook body: %v", err)
		}
		ch <- rep
	}))
	t.Cleanup(srv.Close)
	return srv.URL, ch
}

func nextReport(t *testing.T, ch <-chan alert.Report, ev alert.Event) alert.Report {
	t.Helper()
	select {
	case r := <-ch:
		if r.Event != ev {
			t.Fatalf("webhook got %s (%+v), want %s", r.Event, r, ev)
		}
		return r
	case <-time.After(5 * time.Second):
		t.Fatalf("no %s webhook", ev)
	}
	return alert.Report{}
}

// TestAlertLifecycle: a flood the rate detector bans starts an attack
// (webhook), turns the sampler on, its dropped packets become the
// attack's pcap, and once its ban is lifted the end report carries the
// pcap; the sampler is off again and the API lists the attack.
func TestAlertLifecycle(t *testing.T) {
	url, hooks := webhookSink(t)
	cfg := testConfig(t)
	cfg.Alerts.Webhooks = []string{url}
	cfg.Alerts.EndAfter = 2
	cfg.Alerts.SampleEvery = 1
	// The victim's host group names the attack in its reports.
	cfg.HostGroups = []config.HostGroup{{Name: "dns", Prefixes: []string{"192.0.2.0/24"}}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, cfg, false)
	smp := &fakeSampler{}
	h.d.alerts.sampler = smp
	t.Cleanup(h.d.alerts.close)
	atk, victim := netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("192.0.2.1")
	frame := pkt.Frame{Src: atk, Dst: victim, Proto: pkt.ProtoUDP, SrcPort: 1234, DstPort: 53, Payload: []byte("flood")}.Build()

	h.dp.send(5000, atk)
	h.step(t)
	start := nextReport(t, hooks, alert.EventStart)
	if start.Victim != victim || start.Group != "dns" || start.Rung != "source-bans" || len(start.Bans) != 1 || start.PeakPPS != 5000 ||
		len(start.TopSources) == 0 || start.TopSources[0].Addr != atk || strings.Join(start.Detectors, ",") != "rate" {
		t.Fatalf("start report %+v", start)
	}
	if smp.every != 1 {
		t.Fatalf("sampler at 1 in %d during the attack, want 1", smp.every)
	}
	// Dropped in XDP for a few intervals: sampled.
	for range 3 {
		h.dp.hit(pfx(atk), 5000)
		for range 4 {
			smp.drop(frame)
		}
		h.step(t)
	}
	// Quiet: the ban is lifted after Hold (3s), and the attack ends
	// EndAfter intervals later.
	var end alert.Report
	for i := 0; i < 10 && end.ID == ""; i++ {
		h.step(t)
		select {
		case r := <-hooks:
			end = r
		case <-time.After(100 * time.Millisecond):
		}
	}
	if end.Event != alert.EventEnd || end.ID != start.ID || end.Packets != 12 || end.Pcap == "" || end.Ended.IsZero() {
		t.Fatalf("end report %+v", end)
	}
	if _, ok := h.d.store.Get(pfx(atk)); ok {
		t.Error("attack ended with its ban still in force")
	}
	if smp.every != 0 {
		t.Errorf("sampler left at 1 in %d after the attack", smp.every)
	}
	b, err := os.ReadFile(end.Pcap)
	if err != nil || len(b) != 24+12*(16+len(frame)) {
		t.Fatalf("pcap: %d bytes, %v", len(b), err)
	}
	if tcpdump, err := exec.LookPath("tcpdump"); err == nil {
		out, err := exec.Command(tcpdump, "-nr", end.Pcap).CombinedOutput()
		if err != nil || strings.Count(string(out), "198.51.100.7.1234 > 192.0.2.1.53") != 12 {
			t.Errorf("tcpdump -r: %v\n%s", err, out)
		}
	}
	// The log and the API have it, ended.
	rs, err := h.d.alerts.log.List()
	if err != nil || len(rs) != 1 || rs[0].Event != alert.EventEnd || rs[0].Packets != 12 {
		t.Errorf("attack log: %+v %v", rs, err)
	}
	if p, err := h.d.alerts.log.PcapPath(end.ID); err != nil || p != end.Pcap {
		t.Errorf("pcap path %q %v", p, err)
	}
}

// TestAlertNoSamplingWithoutAttack: no attack, no sampling: the sampler
// is never turned on.
func TestAlertNoSamplingWithoutAttack(t *testing.T) {
	h := newHarness(t, testConfig(t), false)
	smp := &fakeSampler{}
	h.d.alerts.sampler = smp
	for range 3 {
		h.dp.send(10, netip.MustParseAddr("203.0.113.5"))
		h.step(t)
	}
	if len(smp.sets) != 0 {
		t.Errorf("sampler set %v with no attack", smp.sets)
	}
	if rs, err := h.d.alerts.log.List(); err != nil || len(rs) != 0 {
		t.Errorf("attack log %+v %v", rs, err)
	}
}

func TestFrameDst(t *testing.T) {
	v4, v6 := netip.MustParseAddr("192.0.2.9"), netip.MustParseAddr("2001:db8::9")
	for _, f := range []pkt.Frame{
		{Src: netip.MustParseAddr("198.51.100.1"), Dst: v4, Proto: pkt.ProtoUDP},
		{Src: netip.MustParseAddr("198.51.100.1"), Dst: v4, Proto: pkt.ProtoUDP, VLANs: []uint16{7, 8}, QinQ: true},
		{Src: netip.MustParseAddr("2001:db8::1"), Dst: v6, Proto: pkt.ProtoTCP},
	} {
		if got := frameDst(f.Build()); got != f.Dst {
			t.Errorf("%v: %v", f, got)
		}
	}
	if got := frameDst([]byte{1, 2, 3}); got.IsValid() {
		t.Errorf("runt: %v", got)
	}
}

// TestAlertVictimFlowRule: a spoofed flood the victim detector answers
// with a flow rule is one attack on that victim, reported at the
// flow-rule rung with its rule, and it does not end while the rule is in
// force, however quiet the victim is.
func TestAlertVictimFlowRule(t *testing.T) {
	h, fdp := newFlowHarness(t, false)
	h.d.alerts.tracker.EndAfter = 1
	victim := netip.MustParseAddr("192.0.2.80")
	client := netip.MustParseAddr("198.51.100.10")
	rng := rand.New(rand.NewPCG(5, 6))
	for range 40 {
		fdp.deliver(client, victim, 17, 20)
		h.step(t)
	}
	for range 6 {
		fdp.deliver(client, victim, 17, 20)
		for range 20000 {
			fdp.deliver(netip.AddrFrom4([4]byte{byte(1 + rng.IntN(223)), byte(rng.IntN(256)), byte(rng.IntN(256)), byte(rng.IntN(256))}), victim, 17, 5)
		}
		h.step(t)
	}
	if len(fdp.rules) == 0 {
		t.Fatal("no flow rule")
	}
	rs, err := h.d.alerts.log.List()
	if err != nil || len(rs) != 1 {
		t.Fatalf("attack log: %+v %v, want one attack", rs, err)
	}
	r := rs[0]
	if r.Victim != victim || r.Rung != "flow-rule" || len(r.FlowRules) == 0 || !r.Active() || !strings.Contains(strings.Join(r.Detectors, ","), "victim") {
		t.Fatalf("report %+v", r)
	}
	for i := 0; i < 20; i++ {
		fdp.deliver(client, victim, 17, 20)
		h.step(t)
		a, _ := h.d.alerts.log.Get(r.ID)
		if !a.Active() {
			if len(fdp.rules) > 0 {
				t.Fatalf("interval %d: the attack ended with its flow rule in force", i)
			}
			return
		}
	}
	t.Fatalf("the attack never ended; rules %v", fdp.rules)
}

// TestAlertRestoredAfterRestart: an attack a previous daemon left open in
// the log is tracked again and ends with a report, not left active
// forever.
func TestAlertRestoredAfterRestart(t *testing.T) {
	cfg := testConfig(t)
	cfg.Alerts.EndAfter = 2
	lg, err := alert.OpenLog(filepath.Dir(cfg.StateFile), 0)
	if err != nil {
		t.Fatal(err)
	}
	open := alert.Report{ID: "20261123T115959.000Z", Event: alert.EventStart, Victim: netip.MustParseAddr("192.0.2.1"),
		Started: t0.Add(-time.Minute), Detectors: []string{"rate"}, Bans: []netip.Prefix{netip.MustParsePrefix("198.51.100.7/32")}}
	if err := lg.Append(open); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, cfg, false)
	t.Cleanup(h.d.alerts.close)
	if n := len(h.d.alerts.tracker.Active()); n != 1 {
		t.Fatalf("%d attacks tracked after the restart, want 1", n)
	}
	for range 3 {
		h.step(t)
	}
	r, err := lg.Get(open.ID)
	if err != nil || r.Event != alert.EventEnd || r.Ended.IsZero() {
		t.Fatalf("restored attack %+v %v, want ended", r, err)
	}
	// A new attack gets a new ID, after the restored one's.
	h.dp.send(5000, netip.MustParseAddr("198.51.100.8"))
	h.step(t)
	if rs, _ := lg.List(); len(rs) != 2 || rs[1].ID <= open.ID {
		t.Errorf("attacks %+v", rs)
	}
}

// An attack's peak is all its victim received, not one source's rate: a
// 31.5 kpps flood from 30 sources of about 1 kpps each was reported as
// "peak 1081 pps".
func TestAttackPeakIsTheVictimsRate(t *testing.T) {
	h := newHarness(t, testConfig(t), false)
	t.Cleanup(h.d.alerts.close)
	atk := addrs(198, 51, 30)
	h.dp.sendUnblocked(1050, atk)
	h.dp.send(10, netip.MustParseAddr("203.0.113.1")) // a client, under every threshold
	h.step(t)
	as := h.d.alerts.tracker.Active()
	if len(as) != 1 || as[0].Victim != netip.MustParseAddr("192.0.2.1") || as[0].PeakPPS != 30*1050+10 ||
		as[0].PeakBPS != 8*64*(30*1050+10) || as[0].BanCount != 30 {
		for _, a := range as {
			t.Logf("attack %+v", *a)
		}
		t.Fatalf("%d attacks; want one on 192.0.2.1 peaking at %d pps", len(as), 30*1050+10)
	}
}

// A flood seen only in the routers' sFlow is notified as host mode's
// attacks are: a start report to the webhook naming the victim, the host
// group, the kind and the rates, with the FlowSpec and RTBH routes
// announced for it (the group's communities on the RTBH); an end report
// under the same ID once the feed shows it over, listing what was
// withdrawn; both in the attack log. Network attacks were events and
// metrics only.
func TestNetworkAttackNotified(t *testing.T) {
	url, hooks := webhookSink(t)
	cfg := bgpConfig(t)
	cfg.Alerts.Webhooks = []string{url}
	cfg.HostGroups = []config.HostGroup{{Name: "customers", Prefixes: []string{"198.51.100.0/24"}}}
	cfg.Telemetry = config.Telemetry{Enabled: true, Listen: []string{"127.0.0.1:0"},
		Exporters:  []config.TelemetryExporter{{Address: "127.0.0.1"}},
		Thresholds: map[string]config.TelemetryLimits{"all": {PPS: 50000}},
		Groups: map[string]config.TelemetryGroup{"customers": {UplinkBPS: 1e9,
			Communities: []string{"64600:666"}, LargeCommunities: []string{"4200000000:666:7"}}},
		WithdrawAfter: 300 * time.Millisecond}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	h, _ := bgpHarness(t, cfg)
	t.Cleanup(h.d.alerts.close)
	t.Cleanup(h.d.closeTelemetry)
	// Network mode reports through the loop: serve it.
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	go func() {
		for {
			select {
			case f := <-h.d.reqs:
				f()
			case <-stop:
				return
			}
		}
	}()
	conn, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(h.d.tele.svc.Addrs()[0]))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	victim := netip.MustParseAddr("198.51.100.7")
	// 40 samples at 1:10000 of 1400-byte memcached answers: 400k packets,
	// 4.5 Gbit/s over the uplinks' 1 Gbit/s.
	sf := tt.SFlow{Agent: netip.MustParseAddr("127.0.0.1")}
	for range 40 {
		sf.Flow(10000, tt.Packet{Src: netip.MustParseAddr("203.0.113.9"), Dst: victim, Proto: 17, SrcPort: 11211, DstPort: 80, Length: 1400})
	}
	if _, err := conn.Write(sf.Bytes()); err != nil {
		t.Fatal(err)
	}
	start := nextReport(t, hooks, alert.EventStart)
	if start.Victim != victim || start.Group != "customers" || strings.Join(start.Detectors, ",") != "network:all" || start.PeakPPS < 50000 || start.PeakBPS <= 1e9 ||
		!strings.Contains(start.Reason, "host group customers") || !strings.Contains(start.Reason, "198.51.100.7/32") {
		t.Fatalf("start report %+v", start)
	}
	rtbh := "rtbh 198.51.100.7/32 communities 64600:666,4200000000:666:7"
	flowspec := "flowspec dst 198.51.100.7/32 proto udp dport 80 sport 11211 length 1400-1400 drop"
	if start.Rung != "rtbh" || !slices.Contains(start.FlowRules, rtbh) || !slices.Contains(start.FlowRules, flowspec) ||
		!strings.Contains(start.Reason, "announced upstream: ") {
		t.Errorf("start report: rung %q, upstream %q, reason %q; want both routes announced", start.Rung, start.FlowRules, start.Reason)
	}
	// No more samples: over after withdraw_after.
	end := nextReport(t, hooks, alert.EventEnd)
	if end.ID != start.ID || end.Ended.IsZero() || end.Victim != victim || !strings.Contains(end.Reason, "withdrawn") ||
		!strings.Contains(end.Reason, rtbh) || end.PeakPPS < start.PeakPPS {
		t.Errorf("end report %+v", end)
	}
	rs, err := h.d.alerts.log.List()
	if err != nil || len(rs) != 1 || rs[0].ID != start.ID || rs[0].Event != alert.EventEnd {
		t.Errorf("attack log: %+v %v", rs, err)
	}
	// The event follows the notification's queueing: wait for it.
	deadline := time.Now().Add(5 * time.Second)
	for !hasEventLocked(h.d, "attack", start.ID+" start") || !hasEventLocked(h.d, "attack", start.ID+" end") {
		if time.Now().After(deadline) {
			t.Fatal("no attack events for the network attack")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// hasEventLocked is hasEvent for a daemon whose loop is served by another
// goroutine.
func hasEventLocked(d *Daemon, kind, substr string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return hasEvent(d, kind, substr)
}

// A network attack the log still has open when the daemon starts is
// ended, not handed to the host tracker: network mode starts afresh and
// would name it again under a new ID.
func TestNetworkAttackEndedAtRestart(t *testing.T) {
	cfg := testConfig(t)
	lg, err := alert.OpenLog(filepath.Dir(cfg.StateFile), cfg.Alerts.LogMaxBytes)
	if err != nil {
		t.Fatal(err)
	}
	open := alert.Report{ID: "20261128T170000.000Z-net-1-198.51.100.7", Event: alert.EventStart, Victim: netip.MustParseAddr("198.51.100.7"),
		Started: t0.Add(-time.Minute), Detectors: []string{"network:udp"}, TopSources: []alert.Source{}, Bans: []netip.Prefix{}, FlowRules: []string{}}
	if err := lg.Append(open); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, cfg, false)
	t.Cleanup(h.d.alerts.close)
	if n := len(h.d.alerts.tracker.Active()); n != 0 {
		t.Errorf("%d attacks restored into host mode's tracker", n)
	}
	rs, err := h.d.alerts.log.List()
	if err != nil || len(rs) != 1 || rs[0].Event != alert.EventEnd || rs[0].Ended.IsZero() || !strings.Contains(rs[0].Reason, "restart") {
		t.Errorf("attack log: %+v %v", rs, err)
	}
}
