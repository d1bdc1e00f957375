// SPDX-License-Identifier: Apache-2.0

package alert

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

var (
	victim = netip.MustParseAddr("192.0.2.10")
	t0     = time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestTrackerLifecycle: the first detection starts an attack, a new
// detector or a higher rung escalates it, an interval with nothing new
// says nothing, and it ends only after EndAfter quiet intervals with its
// mitigations gone.
func TestTrackerLifecycle(t *testing.T) {
	tr := &Tracker{EndAfter: 2}
	step := func(i int, mitigated bool, obs ...Observation) []Report {
		return tr.Observe(t0.Add(time.Duration(i)*time.Second), obs, func(*Report, map[netip.Prefix]struct{}) bool { return mitigated })
	}
	flood := Observation{Victim: victim, Detector: "victim", Rung: "source-bans", Level: 1, PPS: 1000, BPS: 8e6,
		Sources: []Source{{netip.MustParseAddr("198.51.100.1"), 900}}, Bans: []netip.Prefix{netip.MustParsePrefix("198.51.100.1/32")}}
	want := func(got []Report, ev Event) Report {
		t.Helper()
		if len(got) != 1 || got[0].Event != ev {
			t.Fatalf("got %+v, want one %s", got, ev)
		}
		return got[0]
	}
	r := want(step(0, true, flood), EventStart)
	if r.Victim != victim || r.Rung != "source-bans" || r.PeakPPS != 1000 || len(r.Bans) != 1 || len(r.TopSources) != 1 {
		t.Errorf("start report %+v", r)
	}
	if got := step(1, true, flood); len(got) != 0 {
		t.Errorf("same detection again: %+v, want nothing", got)
	}
	up := flood
	up.Rung, up.Level, up.PPS, up.FlowRules = "flow-rule", 3, 5000, []string{"dst 192.0.2.10/32 udp drop"}
	r = want(step(2, true, up), EventEscalation)
	if r.Rung != "flow-rule" || r.PeakPPS != 5000 || len(r.FlowRules) != 1 {
		t.Errorf("escalation report %+v", r)
	}
	rate := flood
	rate.Detector = "rate"
	want(step(3, true, rate), EventEscalation)
	for i := 4; i < 8; i++ { // quiet, but the flow rule is still in force
		if got := step(i, true); len(got) != 0 {
			t.Fatalf("interval %d, mitigated: %+v, want nothing", i, got)
		}
	}
	r = want(step(8, false), EventEnd)
	if r.Ended.IsZero() || r.Duration != 8 || strings.Join(r.Detectors, ",") != "victim,rate" {
		t.Errorf("end report %+v", r)
	}
	if len(tr.Active()) != 0 {
		t.Errorf("%d attacks still active", len(tr.Active()))
	}
	if r2 := want(step(9, true, flood), EventStart); r2.ID == r.ID {
		t.Errorf("a new attack reused ID %s", r.ID)
	}
}

// TestWebhookRetries: a failing endpoint is retried with backoff until
// it answers 2xx, and the body is the report.
func TestWebhookRetries(t *testing.T) {
	var calls atomic.Int32
	got := make(chan Report, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) < 3 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		var rep Report
		if err := json.NewDecoder(r.Body).Decode(&rep); err != nil || r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("body: %v, content type %q", err, r.Header.Get("Content-Type"))
		}
		got <- rep
	}))
	defer srv.Close()
	n := NewNotifier(NotifierConfig{Webhooks: []string{srv.URL}, Retries: 3, Backoff: 10 * time.Millisecond}, quiet())
	defer n.Close(time.Second)
	n.Notify(Report{ID: "a1", Event: EventStart, Victim: victim})
	select {
	case r := <-got:
		if r.ID != "a1" || r.Victim != victim || r.Event != EventStart {
			t.Errorf("received %+v", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("no webhook after %d calls", calls.Load())
	}
	n.Close(time.Second)
	if n.Sent.Load() != 1 || n.Failed.Load() != 0 || calls.Load() != 3 {
		t.Errorf("sent %d failed %d calls %d, want 1, 0, 3", n.Sent.Load(), n.Failed.Load(), calls.Load())
	}
}

// TestNotifyNeverBlocks: with the sender stuck on a slow endpoint, Notify
// returns at once and counts what the full queue drops.
func TestNotifyNeverBlocks(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release }))
	defer srv.Close()
	defer close(release)
	n := NewNotifier(NotifierConfig{Webhooks: []string{srv.URL}, Timeout: 5 * time.Second, Queue: 2}, quiet())
	defer n.Close(0)
	start := time.Now()
	for i := range 10 {
		n.Notify(Report{ID: string(rune('a' + i))})
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("10 notifications took %s", d)
	}
	// One is being sent, two wait: at least seven dropped.
	if n.Dropped.Load() < 7 {
		t.Errorf("dropped %d, want at least 7", n.Dropped.Load())
	}
}

// TestExecHook: the hook gets the report on stdin and the env vars, its
// arguments reach it literally (no shell), and a hook that hangs is
// killed at the timeout.
func TestExecHook(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	script := filepath.Join(dir, "hook.sh")
	body := "#!/bin/sh\n{ cat; echo; echo \"$TIERWALL_EVENT $TIERWALL_ATTACK_ID $TIERWALL_VICTIM $TIERWALL_PCAP\"; echo \"$1\"; } > " + out + "\n"
	if err := os.WriteFile(script, []byte(body), 0o700); err != nil {
		t.Fatal(err)
	}
	n := NewNotifier(NotifierConfig{Exec: []string{script, "$(touch " + dir + "/pwned)"}}, quiet())
	n.Notify(Report{ID: "a2", Event: EventEnd, Victim: victim, Pcap: "/x.pcap"})
	n.Close(5 * time.Second)
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("hook did not run: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	var r Report
	if len(lines) != 3 || json.Unmarshal([]byte(lines[0]), &r) != nil || r.ID != "a2" {
		t.Fatalf("hook saw %q", b)
	}
	if lines[1] != "end a2 192.0.2.10 /x.pcap" || lines[2] != "$(touch "+dir+"/pwned)" {
		t.Errorf("env %q, argument %q", lines[1], lines[2])
	}
	if _, err := os.Stat(filepath.Join(dir, "pwned")); err == nil {
		t.Error("the argument went through a shell")
	}

	n = NewNotifier(NotifierConfig{Exec: []string{"sleep", "30"}, ExecTimeout: 100 * time.Millisecond}, quiet())
	start := time.Now()
	n.Notify(Report{ID: "a3"})
	n.Close(10 * time.Second)
	if d := time.Since(start); d > 5*time.Second || n.Failed.Load() != 1 {
		t.Errorf("hanging hook: took %s, failed %d", d, n.Failed.Load())
	}
}

// TestPcapFormat: the header and records are classic libpcap, and
// tcpdump reads the file.
func TestPcapFormat(t *testing.T) {
	frame := []byte{
		0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 1, 0x08, 0x00, // Ethernet
		0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0, 198, 51, 100, 1, 192, 0, 2, 10, // IPv4 (checksum not needed to print)
		0x30, 0x39, 0, 53, 0, 8, 0, 0, // UDP 12345 -> 53
	}
	var buf bytes.Buffer
	pkts := []Packet{{Time: t0, Len: len(frame), Data: frame}, {Time: t0.Add(1500 * time.Microsecond), Len: 1000, Data: frame}}
	if err := WritePcap(&buf, pkts); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	le := binary.LittleEndian
	if len(b) != 24+2*(16+len(frame)) || le.Uint32(b) != 0xa1b2c3d4 || le.Uint32(b[20:]) != 1 {
		t.Fatalf("pcap header % x (%d bytes)", b[:24], len(b))
	}
	rec2 := b[24+16+len(frame):]
	if le.Uint32(rec2[4:]) != 1500 || le.Uint32(rec2[8:]) != uint32(len(frame)) || le.Uint32(rec2[12:]) != 1000 {
		t.Errorf("second record header % x", rec2[:16])
	}
	if err := WritePcap(io.Discard, []Packet{{Len: 1, Data: frame}}); err == nil {
		t.Error("a record longer than its packet was written")
	}
	tcpdump, err := exec.LookPath("tcpdump")
	if err != nil {
		t.Skip("tcpdump not installed")
	}
	p := filepath.Join(t.TempDir(), "a.pcap")
	if err := writePcapFile(p, pkts); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(tcpdump, "-nr", p).CombinedOutput()
	if err != nil || strings.Count(string(out), "198.51.100.1.12345 > 192.0.2.10.53") != 2 {
		t.Errorf("tcpdump -r: %v\n%s", err, out)
	}
}

// TestLogRotation: the latest report of each attack wins, rotation keeps
// the log bounded, and a rotated-out attack's pcap goes with it.
func TestLogRotation(t *testing.T) {
	dir := t.TempDir()
	l, err := OpenLog(dir, 2000)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.WritePackets("old", []Packet{{Time: t0, Len: 1, Data: []byte{1}}}); err != nil {
		t.Fatal(err)
	}
	if err := l.Append(Report{ID: "old", Event: EventStart}); err != nil {
		t.Fatal(err)
	}
	if err := l.Append(Report{ID: "old", Event: EventEnd, Ended: t0}); err != nil {
		t.Fatal(err)
	}
	r, err := l.Get("old")
	if err != nil || r.Event != EventEnd {
		t.Fatalf("Get: %+v %v, want the end report", r, err)
	}
	for i := range 100 {
		if err := l.Append(Report{ID: "new" + string(rune('a'+i%26)), Reason: strings.Repeat("x", 50)}); err != nil {
			t.Fatal(err)
		}
	}
	var size int64
	for _, f := range []string{"attacks.jsonl", "attacks.jsonl.1"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err == nil {
			size += st.Size()
		}
	}
	if size > 2*2000+500 {
		t.Errorf("log holds %d bytes, bound ~4000", size)
	}
	if _, err := l.Get("old"); err == nil {
		t.Error("the oldest attack outlived two rotations")
	}
	if p, _ := l.PcapPath("old"); fileExists(p) {
		t.Error("its pcap was kept")
	}
	// The last 2000 to 4000 bytes of reports stay.
	line, _ := json.Marshal(Report{ID: "newa", Reason: strings.Repeat("x", 50)})
	rs, err := l.List()
	if lo := 2000 / (len(line) + 1); err != nil || len(rs) < lo || len(rs) > 26 {
		t.Errorf("List: %d attacks (%v), want %d to 26", len(rs), err, lo)
	}
	if _, err := l.Get("new" + string(rune('a'+99%26))); err != nil {
		t.Errorf("the latest attack: %v", err)
	}
	if _, err := l.PcapPath("../../etc/passwd"); err == nil {
		t.Error("a path was accepted as an attack ID")
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// TestTrackerBoundsBans: a botnet's thousands of bans are counted, not
// all listed, and the end still waits for the last of them.
func TestTrackerBoundsBans(t *testing.T) {
	tr := &Tracker{EndAfter: 1}
	var bans []netip.Prefix
	for i := range 2500 {
		bans = append(bans, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 9, byte(i >> 8), byte(i)}), 32))
	}
	got := tr.Observe(t0, []Observation{{Victim: victim, Detector: "rate", Bans: bans[:2000]}}, nil)
	got = append(got, tr.Observe(t0.Add(time.Second), []Observation{{Victim: victim, Detector: "rate", Bans: bans[1000:]}}, nil)...)
	if len(got) != 1 || len(tr.Active()) != 1 {
		t.Fatalf("reports %d, active %d", len(got), len(tr.Active()))
	}
	r := tr.Active()[0]
	if len(r.Bans) != 100 || r.BanCount != 2500 {
		t.Errorf("%d bans listed, %d counted; want 100 and 2500", len(r.Bans), r.BanCount)
	}
	last := bans[2499]
	standing := func(_ *Report, all map[netip.Prefix]struct{}) bool { _, ok := all[last]; return ok }
	if got := tr.Observe(t0.Add(2*time.Second), nil, standing); len(got) != 0 {
		t.Errorf("ended with its last ban standing: %+v", got)
	}
	if got := tr.Observe(t0.Add(3*time.Second), nil, func(*Report, map[netip.Prefix]struct{}) bool { return false }); len(got) != 1 || got[0].Event != EventEnd {
		t.Errorf("bans lifted: %+v, want the end", got)
	}
}

// TestReportGroup: a report names its victim's host group, from its
// start to its end and in its JSON line; a victimless one names none.
func TestReportGroup(t *testing.T) {
	asked := 0
	tr := &Tracker{EndAfter: 1, GroupOf: func(a netip.Addr) string {
		asked++
		if a == victim {
			return "customers"
		}
		return ""
	}}
	flood := Observation{Victim: victim, Detector: "victim", PPS: 1000}
	alone := Observation{Detector: "rate", PPS: 500}
	rs := tr.Observe(t0, []Observation{flood, alone}, nil)
	if len(rs) != 2 {
		t.Fatalf("reports %+v", rs)
	}
	for _, r := range rs {
		if want := map[bool]string{true: "customers", false: ""}[r.Victim == victim]; r.Group != want {
			t.Errorf("report on %v: group %q, want %q", r.Victim, r.Group, want)
		}
	}
	rs = tr.Observe(t0.Add(time.Second), nil, nil)
	if len(rs) != 2 || rs[0].Event != EventEnd {
		t.Fatalf("end %+v", rs)
	}
	for _, r := range rs {
		if r.Victim == victim && r.Group != "customers" {
			t.Errorf("end report lost its group: %+v", r)
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if has := bytes.Contains(b, []byte(`"group":"customers"`)); has != (r.Victim == victim) {
			t.Errorf("JSON %s", b)
		}
	}
	if asked != 1 {
		t.Errorf("GroupOf asked %d times, want once (the victim's start)", asked)
	}
}
