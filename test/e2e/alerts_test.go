// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/control/alert"
	"github.com/tierwall/tierwall/internal/pkt"
	"github.com/tierwall/tierwall/internal/testbed/harness"
	"github.com/tierwall/tierwall/internal/testutil"
)

// Names of the alerting test's lab (prefix tw14e, its own).
const (
	nsAlTx = "tw14e-tx"
	nsAlRx = "tw14e-rx"
	ifAlTx = "tw14e-a"
	ifAlRx = "tw14e-b"
)

// TestAlertWebhookAndPcap: the real daemon and filter on a veth pair; a
// UDP flood from one source is detected and banned, the webhook receives
// the attack's start and, once the ban is lifted, its end with the
// report, and the pcap of the drops the filter sampled in XDP reads back
// with tcpdump — from the daemon's file and through `tierwall attacks
// pcap`.
func TestAlertWebhookAndPcap(t *testing.T) {
	testutil.RequireRoot(t)
	tcpdump, err := exec.LookPath("tcpdump")
	if err != nil {
		t.Fatal("tcpdump is not installed (scripts/deps.sh installs it)")
	}
	cleanup, err := harness.VethPair(nsAlTx, ifAlTx, nsAlRx, ifAlRx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	victim := netip.MustParseAddr("10.214.0.2")
	attacker := netip.MustParseAddr("10.214.9.66")
	sh(t, "ip", "-n", nsAlRx, "addr", "add", victim.String()+"/24", "dev", ifAlRx)

	// The webhook listens in the daemon's namespace: a socket stays in
	// the namespace it was made in, whichever thread serves it.
	var ln net.Listener
	inNS(t, nsAlRx, func() {
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	})
	hooks := make(chan alert.Report, 16)
	var bodies sync.Map
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var rep alert.Report
		if err := json.NewDecoder(r.Body).Decode(&rep); err != nil {
			t.Errorf("webhook body: %v", err)
			return
		}
		bodies.Store(rep.Event, rep)
		hooks <- rep
	})}
	go func() { _ = srv.Serve(ln) }() // ends with Close
	t.Cleanup(func() { srv.Close() })

	dir := t.TempDir()
	sock := filepath.Join(dir, "api.sock")
	cfgPath := filepath.Join(dir, "tierwall.yaml")
	writeFile(t, cfgPath, []byte(fmt.Sprintf(`interface: %s
interval: 200ms
state_file: %s
capacity: {exact4: 1024, exact6: 1024, prefix: 64, allow: 64, features: 4096}
detectors:
  rate: {enabled: true, pps: 1000, learn_intervals: 0}
  entropy: {enabled: false}
  victim: {enabled: false}
bans: {ttl: 1h, hold: 600ms, unban_pps: 50}
api: {socket: %s}
alerts:
  webhooks: [http://%s/hook]
  end_after: 2
  sample_every: 1
  sample_packets: 300
`, ifAlRx, filepath.Join(dir, "state.json"), sock, ln.Addr())))
	startWith(t, "daemon", harness.Options{Tierwall: bin, Netns: nsAlRx, Config: cfgPath, Socket: sock})

	mac := hwaddr(t, nsAlRx, ifAlRx)
	frame := pkt.Frame{Src: attacker, Dst: victim, Proto: pkt.ProtoUDP, SrcPort: 4444, DstPort: 9999, Payload: []byte("tw14e flood")}
	copy(frame.DstMAC[:], mac)
	burst := make([][]byte, 100)
	for i := range burst {
		burst[i] = frame.Build()
	}
	flood := func(d time.Duration) {
		inNS(t, nsAlTx, func() {
			for end := time.Now().Add(d); time.Now().Before(end); {
				rawSend(t, ifAlTx, burst) // ~5000 pps: five times the threshold
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
	wait := func(ev alert.Event, within time.Duration) alert.Report {
		t.Helper()
		deadline := time.After(within)
		for {
			select {
			case r := <-hooks:
				if r.Event == ev {
					return r
				}
			case <-deadline:
				t.Fatalf("no %s webhook within %s", ev, within)
			}
		}
	}

	flood(time.Second)
	start := wait(alert.EventStart, 5*time.Second)
	if start.Victim != victim || strings.Join(start.Detectors, ",") != "rate" || start.Rung != "source-bans" ||
		len(start.Bans) != 1 || start.Bans[0] != netip.PrefixFrom(attacker, 32) || start.PeakPPS < 1000 {
		t.Fatalf("start report %+v", start)
	}
	flood(time.Second) // dropped in XDP now, and sampled
	end := wait(alert.EventEnd, 15*time.Second)
	if end.ID != start.ID || end.Ended.IsZero() || end.Packets == 0 || end.Pcap == "" {
		t.Fatalf("end report %+v", end)
	}
	t.Logf("end report: %d packets in %s, peak %.0f pps, %v", end.Packets, end.Pcap, end.PeakPPS, end.Bans)
	if len(end.TopSources) == 0 || end.TopSources[0].Addr != attacker {
		t.Errorf("top sources %+v", end.TopSources)
	}
	want := fmt.Sprintf("%s.4444 > %s.9999: UDP", attacker, victim)
	readPcap := func(path string) {
		t.Helper()
		out, err := exec.Command(tcpdump, "-nr", path).CombinedOutput()
		if err != nil {
			t.Fatalf("tcpdump -r %s: %v\n%s", path, err, out)
		}
		if n := strings.Count(string(out), want); n != end.Packets {
			t.Errorf("tcpdump shows %d packets %q, the report says %d:\n%s", n, want, end.Packets, out)
		}
	}
	readPcap(end.Pcap)

	out := sh(t, bin, "attacks", "list", "--socket", sock)
	if !strings.Contains(out, end.ID) || !strings.Contains(out, "ended") {
		t.Errorf("attacks list:\n%s", out)
	}
	saved := filepath.Join(dir, "out.pcap")
	sh(t, bin, "attacks", "pcap", end.ID, "-o", saved, "--socket", sock)
	readPcap(saved)
	if _, code := runTw(bin, "attacks", "pcap", "nope", "-o", filepath.Join(dir, "none.pcap"), "--socket", sock); code != 2 {
		t.Errorf("pcap of an unknown attack: exit %d, want 2", code)
	}
	if _, err := os.Stat(filepath.Join(dir, "none.pcap")); err == nil {
		t.Error("a failed fetch left a file")
	}
}

// runTw runs the binary and returns its output and exit code.
func runTw(bin string, args ...string) (string, int) {
	out, err := exec.Command(bin, args...).CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), ee.ExitCode()
	}
	if err != nil {
		return err.Error(), -1
	}
	return string(out), 0
}
