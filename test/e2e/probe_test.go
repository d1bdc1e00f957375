// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/control/api"
	"github.com/tierwall/tierwall/internal/pkt"
	"github.com/tierwall/tierwall/internal/probe/flow"
	"github.com/tierwall/tierwall/internal/probe/flowprobe"
	"github.com/tierwall/tierwall/internal/testbed/collector"
	"github.com/tierwall/tierwall/internal/testbed/harness"
	"github.com/tierwall/tierwall/internal/testbed/lab"
	"github.com/tierwall/tierwall/internal/testbed/trafgen"
	"github.com/tierwall/tierwall/internal/testutil"
	"github.com/tierwall/tierwall/internal/tier"
)

var probeServer = netip.MustParseAddr("10.80.0.1")

// probeConfig is the probe role on the probe lab, with timeouts short
// enough for a test: flows still open when the generator stops end by
// idle timeout within seconds.
// probeRun is one end-to-end run's probe.
type probeRun struct {
	inline        bool
	nicCap        int
	passiveAction string // "" discard
	engine        string // "" builtin
	binary        string // "" the default build
	// hups is how many SIGHUPs (systemctl reload) the probe gets while
	// the generator runs.
	hups int
}

func probeConfig(dir string, o probeRun, collector string) string {
	mode, egress, twin, ret := "passive", "", "", ""
	if o.engine == "" {
		o.engine = "builtin"
	}
	if o.inline {
		// Inline, the host forwards what it lets through out of its
		// second port; the NIC's return program on the other end puts
		// it on the twin port.
		mode, egress, twin, ret = "inline", lab.PIfHost1, lab.PIfTwin, lab.PIfHRet
	}
	return fmt.Sprintf(`role: probe
interface: %s
state_file: %s/state.json
api:
  socket: %s/api.sock
probe:
  mode: %s
  egress: "%s"
  capacity: 65536
  dpi: {engine: %s, packets: 10, timeout: 1s, ring_bytes: 4194304}
  timeouts: {idle: 2s, active: 120s, end_grace: 500ms}
  policy: {default: offload, dns: software}
  hardware:
    backend: emulated
    capacity: %d
    idle_timeout: 2s
    tcp_auto_unlearn: true
    passive_action: "%s"
    emulated: {netns: %s, wire: %s, host: %s, twin: "%s", return: "%s"}
  export:
    biflow: true
    flush_interval: 50ms
    collectors: [{address: "%s", format: ipfix}]
`, lab.PIfHost, dir, dir, mode, egress, o.engine, o.nicCap, o.passiveAction, lab.PNSNic, lab.PIfWire, lab.PIfHPort, twin, ret, collector)
}

func startProbe(t *testing.T, o probeRun, collector string) (*harness.Daemon, *api.Client) {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "probe.yaml")
	if err := os.WriteFile(cfg, []byte(probeConfig(dir, o, collector)), 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "api.sock")
	if o.binary == "" {
		o.binary = bin
	}
	d := startWith(t, "probe", harness.Options{Tierwall: o.binary, Netns: lab.PNSHost, Config: cfg, Socket: sock, Timeout: 30 * time.Second})
	return d, api.NewClient(sock)
}

// rawSend writes frames out of ifname in the calling thread's namespace.
func rawSend(t *testing.T, ifname string, frames [][]byte) {
	t.Helper()
	out := openRaw(t, ifname, nil)
	defer out.close()
	for _, f := range frames {
		out.send(t, f)
	}
}

// allRecords reads every record the probe kept.
func allRecords(t *testing.T, c *api.Client) []flowprobe.Record {
	t.Helper()
	var out []flowprobe.Record
	var since uint64
	for {
		page, err := c.FlowRecords(context.Background(), since)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, page.Records...)
		if len(page.Records) == 0 {
			return out
		}
		since = page.Next
	}
}

type flowSum struct {
	packets, bytes [2]uint64
	final          int
	reasons        []flowprobe.EndReason
	app            string
	hw             uint64
}

func sumRecords(rs []flowprobe.Record) map[tier.FlowKey]*flowSum {
	m := map[tier.FlowKey]*flowSum{}
	for _, r := range rs {
		s := m[r.Key]
		if s == nil {
			s = &flowSum{}
			m[r.Key] = s
		}
		for d := 0; d < 2; d++ {
			s.packets[d] += r.Packets[d]
			s.bytes[d] += r.Bytes[d]
			s.hw += r.HWPackets[d]
		}
		if r.Final {
			s.final++
			s.app = r.App
		}
		s.reasons = append(s.reasons, r.Reason)
	}
	return m
}

// runProbe sends the generator's flows (HTTP, TLS and DNS, with TCP
// handshakes and FINs) and a few ICMP packets through the emulated NIC to
// the probe, waits until every flow has its final record, and checks the
// records against the generator's exact per-flow report.
func runProbe(t *testing.T, o probeRun) (*api.Client, map[tier.FlowKey]*flowSum, *trafgen.Report) {
	testutil.RequireRoot(t)
	if err := lab.ProbeUp(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lab.ProbeDown() })
	testutil.RequireCommand(t, "nfcapd", "nfdump")
	nf, err := collector.Start(collector.Options{Netns: lab.PNSHost, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nf.Kill)
	d, c := startProbe(t, o, nf.Addr)
	hupsDone := make(chan struct{})
	if o.hups > 0 {
		go func() {
			defer close(hupsDone)
			for i := 0; i < o.hups; i++ {
				time.Sleep(300 * time.Millisecond)
				if err := d.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
					t.Errorf("SIGHUP %d: %v", i+1, err)
					return
				}
			}
		}()
	} else {
		close(hupsDone)
	}

	var rep *trafgen.Report
	inNS(t, lab.PNSInet, func() {
		src := hwaddr(t, lab.PNSInet, lab.PIfInet)
		dst := hwaddr(t, lab.PNSNic, lab.PIfWire)
		var err error
		rep, err = trafgen.Run(context.Background(), trafgen.Spec{Iface: lab.PIfInet, SrcMAC: [6]byte(src), DstMAC: [6]byte(dst),
			Dst: probeServer, Flows: 40, BirthEvery: 25, Apps: []string{"http", "tls", "dns"}, Packets: 8000, PacketSize: 128,
			// Paced: at full speed a flow (~1000 frames) can end before its
			// learn lands when the machine is busy (CI runs other packages
			// alongside); at 2000/s a flow lives ~500 ms, far past the
			// learn latency, so some of every flow is counted by the NIC.
			Rate: 2000})
		if err != nil {
			t.Fatal(err)
		}
		var icmp [][]byte
		for i := 0; i < 5; i++ {
			icmp = append(icmp, pkt.Frame{SrcMAC: [6]byte(src), DstMAC: [6]byte(dst), Src: netip.MustParseAddr("10.128.9.9"),
				Dst: probeServer, Proto: pkt.ProtoICMP, Payload: []byte("ping")}.Build())
		}
		rawSend(t, lab.PIfInet, icmp)
	})
	<-hupsDone
	if o.hups > 0 {
		time.Sleep(200 * time.Millisecond) // the last one handled
		if d.Exited() {
			t.Fatalf("the probe exited on SIGHUP; its log:\n%s", d.Output())
		}
		if n := strings.Count(d.Output(), "reload: configuration unchanged"); n == 0 {
			t.Errorf("%d SIGHUPs, no reload logged", o.hups)
		}
	}
	if rep.Sent != rep.Scheduled {
		t.Logf("generator: %d of %d frames sent (the report counts only what left)", rep.Sent, rep.Scheduled)
	}
	var sums map[tier.FlowKey]*flowSum
	var missing []trafgen.FlowStat
	for deadline := time.Now().Add(30 * time.Second); ; {
		sums = sumRecords(allRecords(t, c))
		missing = missing[:0]
		for _, f := range rep.Flows {
			if s := sums[f.Key]; f.Packets[0]+f.Packets[1] > 0 && (s == nil || s.final == 0) {
				missing = append(missing, f)
			}
		}
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			st, _ := c.FlowStatus(context.Background())
			if st.NIC != nil {
				t.Logf("NIC verdicts: %+v", st.NIC.Verdicts)
			}
			t.Fatalf("%d of %d flows have no final record after 30 s, e.g. %+v (records %+v); probe: %+v",
				len(missing), len(rep.Flows), missing[0], sums[missing[0].Key], st)
			_ = st.NIC // in st: the NIC's verdicts
		}
		time.Sleep(200 * time.Millisecond)
	}
	identified, flows := 0, 0
	for _, f := range rep.Flows {
		if f.Packets[0]+f.Packets[1] == 0 {
			continue
		}
		s := sums[f.Key]
		if s.final != 1 || s.packets != f.Packets || s.bytes != f.Bytes {
			t.Errorf("flow %d %v (%s): records count packets %v bytes %v in %d final records, generator sent %v %v",
				f.Index, f.Key, f.App, s.packets, s.bytes, s.final, f.Packets, f.Bytes)
		}
		// The generator sends bursts that overflow the veth rings, and a
		// flow whose request frame never left cannot be classified:
		// "unknown" is right for it, another application never is.
		switch s.app {
		case f.App:
			identified++
		case "unknown":
		default:
			t.Errorf("flow %d %v: DPI says %q, generator ran %q", f.Index, f.Key, s.app, f.App)
		}
		flows++
	}
	if identified < flows*3/4 {
		t.Errorf("DPI identified %d of %d flows", identified, flows)
	}
	files, err := nf.Stop(time.Second)
	if err != nil {
		t.Fatal(err)
	}
	checkCollector(t, files, rep, sums)
	return c, sums, rep
}

// checkCollector reads back what nfcapd received from the probe (IPFIX
// biflows: the initiator is the source) and checks every flow's packets,
// bytes and end reason against the generator's report.
func checkCollector(t *testing.T, files []string, rep *trafgen.Report, sums map[tier.FlowKey]*flowSum) {
	t.Helper()
	got, err := collector.Read(files...)
	if err != nil {
		t.Fatal(err)
	}
	type tot struct {
		pkts, bytes [2]uint64 // by direction of the flow key
		reasons     []int
	}
	byKey := map[tier.FlowKey]*tot{}
	for _, g := range got {
		k, d := tier.NewFlowKey(g.Proto, g.Src, g.Dst)
		x := byKey[k]
		if x == nil {
			x = &tot{}
			byKey[k] = x
		}
		x.pkts[d] += g.Packets
		x.bytes[d] += g.Bytes
		x.pkts[1-d] += g.OutPkts
		x.bytes[1-d] += g.OutBytes
		x.reasons = append(x.reasons, g.Reason)
	}
	for _, f := range rep.Flows {
		if f.Packets[0]+f.Packets[1] == 0 {
			continue
		}
		x := byKey[f.Key]
		if x == nil {
			t.Errorf("flow %d %v (%s): not at the collector", f.Index, f.Key, f.App)
			continue
		}
		if x.pkts != f.Packets || x.bytes != f.Bytes {
			t.Errorf("flow %d %v (%s): collector has packets %v bytes %v, generator sent %v %v",
				f.Index, f.Key, f.App, x.pkts, x.bytes, f.Packets, f.Bytes)
		}
		// The last record's reason is the flow's: FIN from the client
		// (and the server's answer) ends a TCP flow, the rest time out.
		want := int(flowprobe.EndIdle)
		if f.Key.Proto == pkt.ProtoTCP && f.FIN {
			want = int(flowprobe.EndOfFlow)
		}
		if last := x.reasons[len(x.reasons)-1]; last != want {
			t.Errorf("flow %d %v (%s, FIN sent %v): collector's end reason %d, want %d (probe's records: %v)",
				f.Index, f.Key, f.App, f.FIN, last, want, sums[f.Key].reasons)
		}
		delete(byKey, f.Key)
	}
	// What is left is the ICMP packets' flow and nothing else.
	for k, x := range byKey {
		if k.Proto != pkt.ProtoICMP {
			t.Errorf("collector has a flow the generator never sent: %v %+v", k, x)
		}
	}
}

func TestProbePassive(t *testing.T) {
	c, sums, rep := runProbe(t, probeRun{nicCap: 1 << 16})
	st, err := c.FlowStatus(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Software.Packets[flow.MarkMiss] == 0 || st.Software.Packets[flow.MarkUnhandled] < 5 {
		t.Errorf("marks at the host: %v, want misses and the 5 ICMP packets unhandled", st.Software.Packets)
	}
	var hw uint64
	reasons := map[flowprobe.EndReason]int{}
	for _, f := range rep.Flows {
		if s := sums[f.Key]; s != nil {
			hw += s.hw
			for _, r := range s.reasons {
				reasons[r]++
			}
		}
	}
	if hw == 0 {
		t.Error("no packet was counted by the NIC: nothing offloaded")
	}
	if reasons[flowprobe.EndOfFlow] == 0 || reasons[flowprobe.EndIdle] == 0 {
		t.Errorf("end reasons %v: want TCP ends (FIN) and idle ends (flows open at the end, DNS)", reasons)
	}
	e := st.Engine
	if e.LearnDone == 0 || e.Unlearned[tier.CauseTCPTerm] == 0 || e.Unlearned[tier.CauseIdle] == 0 {
		t.Errorf("engine %+v: want learns, TCP-term and idle unlearns", e)
	}
	if st.Software.Flows == 0 && e.Records == 0 {
		t.Error("no flows")
	}
}

func TestProbeTableFullStaysInSoftware(t *testing.T) {
	// A NIC table of 4 flows: the rest fail to learn and stay in
	// software, and the records still count every packet (runProbe).
	c, _, _ := runProbe(t, probeRun{nicCap: 4})
	st, err := c.FlowStatus(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Engine.LearnTableFull == 0 {
		t.Errorf("engine %+v: want learns refused for a full table", st.Engine)
	}
	if st.Software.Packets[flow.MarkUnhandled] <= 5 {
		t.Errorf("marks %v: misses of a full table are unhandled", st.Software.Packets)
	}
}

func TestProbeInline(t *testing.T) {
	c, sums, rep := runProbe(t, probeRun{inline: true, nicCap: 1 << 16})
	var sent, hw uint64
	for _, f := range rep.Flows {
		sent += f.Packets[0] + f.Packets[1]
		if s := sums[f.Key]; s != nil {
			hw += s.hw
		}
	}
	if hw == 0 {
		t.Error("inline: nothing went through the NIC")
	}
	// Everything but discards reaches the far side: hits straight from
	// the NIC, the rest forwarded by the host.
	out, err := lab.RxPackets(lab.PNSSink, lab.PIfOut)
	if err != nil {
		t.Fatal(err)
	}
	if out < sent {
		st, _ := c.FlowStatus(context.Background())
		t.Errorf("far side received %d packets, generator sent %d flow packets; NIC %+v; host %+v", out, sent, st.NIC, st.Software)
	}
}

// A passive probe whose NIC forwards offloaded flows: the host sees them
// marked hit and leaves them to the NIC's counters, so every packet is
// still counted once (runProbe checks the records and the collector).
func TestProbePassiveForwardMarksHit(t *testing.T) {
	c, _, _ := runProbe(t, probeRun{nicCap: 1 << 16, passiveAction: "forward"})
	st, err := c.FlowStatus(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Software.Packets[flow.MarkHit] == 0 || st.Software.Packets[flow.MarkMiss] == 0 || st.Software.Packets[flow.MarkUnhandled] < 5 {
		t.Errorf("marks at the host %v: want hits, misses and the 5 ICMP packets unhandled", st.Software.Packets)
	}
	if v := st.NIC.Verdicts["hit_host"]; v.Packets != st.Software.Packets[flow.MarkHit] {
		t.Errorf("NIC sent %d hits to the host, the host saw %d", v.Packets, st.Software.Packets[flow.MarkHit])
	}
}

// nDPI from Debian (the build with -tags ndpi) classifies the lab's
// traffic end to end as the built-in classifier does: the generator's
// HTTP, TLS and DNS flows start with real handshakes (runProbe checks
// that no flow is named another application and that most are named).
func TestProbeNDPI(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireCommand(t, "pkg-config")
	if err := exec.Command("pkg-config", "--exists", "libndpi").Run(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("libndpi-dev missing (scripts/deps.sh installs it) and CI=true forbids skipping")
		}
		t.Skip("skipping: libndpi-dev not installed (scripts/deps.sh installs it)")
	}
	ndpiBin := filepath.Join(t.TempDir(), "tierwall-ndpi")
	build := exec.Command("go", "build", "-tags", "ndpi", "-o", ndpiBin, "../../cmd/tierwall")
	build.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building tierwall with nDPI: %v\n%s", err, out)
	}
	c, _, _ := runProbe(t, probeRun{nicCap: 1 << 16, engine: "ndpi", binary: ndpiBin})
	st, err := c.FlowStatus(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, app := range []string{"http", "tls", "dns"} {
		if st.Engine.Classified[app] == 0 {
			t.Errorf("nDPI classified %v: no %s flow", st.Engine.Classified, app)
		}
	}
}

// systemctl reload is SIGHUP: ten of them while flows run leave the probe
// up, its XDP tier attached and every flow's count exact (runProbe checks
// the records and the collector against the generator's report).
func TestProbeSurvivesReload(t *testing.T) {
	c, _, _ := runProbe(t, probeRun{nicCap: 1 << 16, hups: 10})
	if _, err := c.FlowStatus(context.Background()); err != nil {
		t.Fatalf("the probe's API after the reloads: %v", err)
	}
}
