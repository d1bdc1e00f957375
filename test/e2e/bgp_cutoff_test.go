// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"fmt"
	"net/netip"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/control/mitigate"
	rulepkg "github.com/tierwall/tierwall/internal/rule"
	"github.com/tierwall/tierwall/internal/testbed/bgppeer"
	"github.com/tierwall/tierwall/internal/testbed/harness"
	"github.com/tierwall/tierwall/internal/testutil"
)

// A hostile gobgpd peer sends every rule of issue 33 that once cut the
// host off, and 223 /8 source bans: the host stays reachable, its session
// stays up, none of the cutting rules is enforced, a rule for one of its
// services is, and no more source bans are applied than the rails allow.
func TestBGPPeerCannotCutHostOff(t *testing.T) {
	testutil.RequireRoot(t)
	p, err := bgppeer.NewPair("cut")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	host := p.Host4.String() + "/32"
	static := []string{
		"ipv4-flowspec match destination " + host + " packet-length >=61&<=65535 then discard",
		"ipv4-flowspec match destination " + host + " protocol tcp tcp-flags P then discard",
		"ipv4-flowspec match destination " + host + " protocol tcp then rate-limit 500",
		"ipv4-flowspec match destination " + host + " protocol tcp source-port ==179 destination-port >=32768&<=39999 then discard",
		"ipv4-flowspec match destination " + host + " then discard",
		"ipv4-flowspec match destination " + host + " protocol udp destination-port ==53 then discard",
	}
	for i := 1; i <= 223; i++ {
		static = append(static, fmt.Sprintf("ipv4-flowspec match destination 10.77.0.0/24 source %d.0.0.0/8 then discard", i))
	}
	peer, err := bgppeer.StartGobgpd(t.Context(), bgppeer.Options{Netns: p.Router, RouterID: p.Router4, ASN: 64600, LocalAddr: p.Router4,
		PeerAddr: p.Host4, PeerASN: 65001, StaticFlowSpec: static})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("gobgpd log:\n%s", peer.Log())
		}
		_ = peer.Close()
	})
	dir := t.TempDir()
	sock := filepath.Join(dir, "api.sock")
	cfgPath := filepath.Join(dir, "tierwall.yaml")
	writeFile(t, cfgPath, []byte(fmt.Sprintf(`interface: %s
interval: 1s
state_file: %s
capacity: {exact4: 1024, exact6: 1024, prefix: 1024, allow: 64, features: 4096}
detectors:
  rate: {enabled: true, pps: 100000}
  entropy: {enabled: false}
  heavy: {enabled: false}
rails:
  max_new_per_interval: 20
  max_total: 50
bgp:
  asn: 65001
  router_id: %s
  listen_port: -1
  neighbors:
    - {address: %s, asn: 64600, receive: true}
  accept: {own_prefixes: [10.77.0.0/16], max_rules: 1000}
api:
  socket: %s
`, p.HostIf, filepath.Join(dir, "state.json"), p.Host4, p.Router4, sock)))
	d := startWith(t, "daemon", harness.Options{Tierwall: bin, Netns: p.Host, Exec: true, Config: cfgPath, Socket: sock})

	dns := rulepkg.FlowRule{Dst: netip.PrefixFrom(p.Host4, 32), Proto: 17, DstPorts: rulepkg.PortRange{Lo: 53, Hi: 53}, Action: rulepkg.FlowDrop}
	// Applied with the known-good bypass, which FlowSpec cannot carry.
	applied := dns
	applied.KnownGoodBypass = true
	waitFor(t, "the udp/53 rule enforced", 30*time.Second, func() bool {
		rs, err := d.Client.FlowRules(t.Context())
		return err == nil && slices.ContainsFunc(rs, func(r mitigate.Rule) bool { return r.FlowRule == applied && r.Origin == mitigate.Remote })
	})
	remoteBans := func() (n int, own bool) {
		rs, err := d.Client.Rules(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			if r.Detector == "bgp" {
				n++
				own = own || r.Prefix.Contains(p.Host4)
			}
		}
		return n, own
	}
	// Up to max_total over a few intervals, never past it.
	seen := 0
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		n, own := remoteBans()
		if own {
			t.Fatal("a peer banned the host's own /8")
		}
		if n > 50 {
			t.Fatalf("%d remote bans, past rails.max_total 50", n)
		}
		seen = n
		time.Sleep(200 * time.Millisecond)
	}
	if seen != 50 {
		t.Errorf("%d remote bans in the end, want rails.max_total's 50", seen)
	}
	rs, err := d.Client.FlowRules(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Origin == mitigate.Remote && r.FlowRule != applied {
			t.Errorf("a peer's rule on the host is enforced: %s", r.FlowRule)
		}
	}
	st, err := d.Client.BGP(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Neighbors) != 1 || st.Neighbors[0].State != "established" {
		t.Fatalf("the session is not up: %+v", st.Neighbors)
	}
	if n := len(st.Received); n != len(static) {
		t.Errorf("%d routes received, want the %d sent", n, len(static))
	}
	refused := 0
	for _, r := range st.Received {
		if r.Flow.Dst.Contains(p.Host4) && r.Flow.Dst.Bits() == 32 && r.Flow.FlowRule != dns {
			if r.Refused == "" {
				t.Errorf("%s shown enforced", r.Flow)
			}
			t.Logf("%s: refused: %s", r.Flow, r.Refused)
		}
		if r.Refused != "" {
			refused++
		}
	}
	if want := 5 + 223 - 50; refused != want {
		t.Errorf("%d routes shown refused, want %d (5 rules on the host, 173 bans past the rails)", refused, want)
	}
	if out, err := exec.Command("ip", "netns", "exec", p.Router, "ping", "-c", "3", "-i", "0.2", "-W", "1", p.Host4.String()).CombinedOutput(); err != nil {
		t.Fatalf("the host does not answer ping: %v\n%s", err, out)
	}
}
