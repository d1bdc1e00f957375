// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/pkt"
	"github.com/tierwall/tierwall/internal/testbed/harness"
	"github.com/tierwall/tierwall/internal/testutil"
	"golang.org/x/sys/unix"
)

// The pinned feature buffers keep counting while no daemon reads them. A
// daemon that starts later must not take those counts as its first
// interval's: 3 s of ping -f, 20 s before the start, banned the source for
// "37017 pps" and opened an attack (issue 33). A flood after the start is
// still banned, so the quiet start is not a detector that never fires.
func TestNoBanFromCountsBeforeTheStart(t *testing.T) {
	setup(t)
	// The filter is attached with the daemon's capacities and no daemon
	// runs, as after `tierwall attach` or a stopped daemon.
	mustTw(t, "attach", "-i", ifRx, "--exact4-capacity", "4096", "--exact6-capacity", "1024",
		"--prefix-capacity", "256", "--allow-capacity", "64", "--feature-capacity", "8192")
	t.Cleanup(func() { tw(t, "detach", "-i", ifRx) })

	atk := netip.MustParseAddr("10.200.0.77")
	flood := func(d time.Duration) int {
		rxMAC := hwaddr(t, nsRx, ifRx)
		var out rawOut
		inNS(t, nsTx, func() { out = openRaw(t, ifTx, rxMAC) })
		defer out.close()
		f := pkt.Frame{DstMAC: [6]byte(rxMAC), SrcMAC: [6]byte(out.mac), Src: atk, Dst: rx4,
			Proto: pkt.ProtoUDP, SrcPort: 5555, DstPort: port, Payload: []byte("prestart")}
		b := f.Build()
		n := 0
		for end := time.Now().Add(d); time.Now().Before(end); {
			err := unix.Sendto(out.fd, b, 0, out.sa)
			if errors.Is(err, unix.ENOBUFS) {
				time.Sleep(200 * time.Microsecond) // back-pressure, not a failure
				continue
			}
			if err != nil {
				t.Fatalf("sending: %v", err)
			}
			n++
		}
		return n
	}
	sent := flood(3 * time.Second)
	passed := verdicts(t)["pass"]
	t.Logf("before the start: %d frames in 3 s, %d passed the filter into the feature buffers", sent, passed)
	if passed < 3000 {
		t.Fatalf("setup: only %d packets passed the filter before the start", passed)
	}
	time.Sleep(testutil.Scaled(2 * time.Second))

	dir := t.TempDir()
	sock := filepath.Join(dir, "api.sock")
	cfgPath := filepath.Join(dir, "tierwall.yaml")
	writeFile(t, cfgPath, []byte(fmt.Sprintf(`interface: %s
interval: 200ms
state_file: %s
capacity: {exact4: 4096, exact6: 1024, prefix: 256, allow: 64, features: 8192}
detectors:
  rate: {enabled: true, pps: 400, learn_intervals: 0}
  entropy: {enabled: false}
bans: {ttl: 1h, hold: 1m, unban_pps: 50} # a ban made at the start stays to be seen
api: {socket: %s}
`, ifRx, filepath.Join(dir, "state.json"), sock)))
	d := startWith(t, "daemon", harness.Options{Tierwall: bin, Netns: nsRx, Config: cfgPath, Socket: sock})
	c := apiClient(sock)
	time.Sleep(testutil.Scaled(2 * time.Second)) // ten intervals
	if bs := bans(t, c); len(bs) != 0 {
		t.Fatalf("banned for counts from before the start: %v\n%s", bs, d.Output())
	}
	code, body := call(t, c, "GET", "/v1/attacks", "")
	var attacks []json.RawMessage
	if code != 200 || json.Unmarshal(body, &attacks) != nil {
		t.Fatalf("GET /v1/attacks: %d %s", code, body)
	}
	if len(attacks) != 0 {
		t.Fatalf("an attack opened from counts before the start: %s", body)
	}
	if !strings.Contains(d.Output(), "discarded the feature counts from before the start") {
		t.Errorf("the discarded counts are not logged:\n%s", d.Output())
	} else if n := loggedPackets(d.Output()); n < passed/2 {
		t.Errorf("logged %d discarded packets, %d passed before the start", n, passed)
	}

	// The same flood after the start is banned.
	flood(time.Second)
	waitFor(t, "the flood after the start banned", 5*time.Second, func() bool {
		_, ok := bans(t, c)[atk.String()+"/32"]
		return ok
	})
}

// loggedPackets is the packets= count of the daemon's "discarded" line.
func loggedPackets(out string) uint64 {
	for _, line := range strings.Split(out, "\n") {
		if !strings.Contains(line, "discarded the feature counts") {
			continue
		}
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "packets="); ok {
				n, _ := strconv.ParseUint(v, 10, 64)
				return n
			}
		}
	}
	return 0
}
