// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/control/mitigate"
	"github.com/tierwall/tierwall/internal/pkt"
	rulepkg "github.com/tierwall/tierwall/internal/rule"
	"github.com/tierwall/tierwall/internal/testbed/bgppeer"
	"github.com/tierwall/tierwall/internal/testbed/harness"
	"github.com/tierwall/tierwall/internal/testutil"
)

// A fleet of three tierwall hosts, each in its own namespace behind a
// veth to a router namespace holding a route reflector (Debian's gobgpd)
// and the attacker. Every host peers with the reflector in iBGP, sends
// its bans as FlowSpec and enforces what the reflector reflects.
const (
	nsRR      = "twf-rr"
	fleetAS   = 65010
	rrAPIPort = "50071"
	fleetSize = 3
)

func fleetHost(i int) (ns, ifHost, ifRR string, host, rr netip.Addr) {
	return fmt.Sprintf("twf-h%d", i), fmt.Sprintf("twf-h%d", i), fmt.Sprintf("twf-r%d", i),
		netip.MustParseAddr(fmt.Sprintf("10.77.%d.2", i)), netip.MustParseAddr(fmt.Sprintf("10.77.%d.1", i))
}

func setupFleet(t *testing.T) {
	testutil.RequireRoot(t)
	if _, err := exec.LookPath("gobgpd"); err != nil {
		t.Fatalf("gobgpd is not installed (scripts/deps.sh installs it): %v", err)
	}
	cleanup := func() {
		_ = exec.Command("pkill", "-f", "gobgpd -f "+filepath.Join(os.TempDir(), "twf-")).Run()
		for i := 1; i <= fleetSize; i++ {
			ns, _, _, _, _ := fleetHost(i)
			_ = exec.Command("ip", "netns", "del", ns).Run()
			harness.RemovePins(ns)
		}
		_ = exec.Command("ip", "netns", "del", nsRR).Run()
	}
	cleanup()
	t.Cleanup(cleanup)
	sh(t, "ip", "netns", "add", nsRR)
	sh(t, "ip", "-n", nsRR, "link", "set", "lo", "up")
	for i := 1; i <= fleetSize; i++ {
		ns, ifHost, ifRR, host, rr := fleetHost(i)
		sh(t, "ip", "netns", "add", ns)
		sh(t, "ip", "link", "add", ifRR, "netns", nsRR, "type", "veth", "peer", "name", ifHost, "netns", ns)
		sh(t, "ip", "-n", ns, "link", "set", "lo", "up")
		sh(t, "ip", "-n", ns, "link", "set", ifHost, "up")
		sh(t, "ip", "-n", nsRR, "link", "set", ifRR, "up")
		sh(t, "ip", "-n", ns, "addr", "add", host.String()+"/24", "dev", ifHost)
		sh(t, "ip", "-n", nsRR, "addr", "add", rr.String()+"/24", "dev", ifRR)
	}
}

// startReflector runs gobgpd in the router namespace as the fleet's route
// reflector, with graceful restart toward every host (a host's crash
// leaves its routes in place, stale, until it is back).
func startReflector(t *testing.T) {
	t.Helper()
	dir, err := os.MkdirTemp("", "twf-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	var b strings.Builder
	fmt.Fprintf(&b, "[global.config]\n  as = %d\n  router-id = \"10.77.0.1\"\n  port = 179\n", fleetAS)
	for i := 1; i <= fleetSize; i++ {
		_, _, _, host, _ := fleetHost(i)
		fmt.Fprintf(&b, `
[[neighbors]]
  [neighbors.config]
    neighbor-address = "%s"
    peer-as = %d
  [neighbors.route-reflector.config]
    route-reflector-client = true
    route-reflector-cluster-id = "10.77.0.1"
  [neighbors.graceful-restart.config]
    enabled = true
    restart-time = 120
  [[neighbors.afi-safis]]
    [neighbors.afi-safis.config]
      afi-safi-name = "ipv4-flowspec"
    [neighbors.afi-safis.mp-graceful-restart.config]
      enabled = true
`, host, fleetAS)
	}
	conf := filepath.Join(dir, "gobgpd.toml")
	writeFile(t, conf, []byte(b.String()))
	cmd := exec.Command("ip", "netns", "exec", nsRR, "gobgpd", "-f", conf, "--api-hosts", "127.0.0.1:"+rrAPIPort, "--pprof-disable", "-p")
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("gobgpd log:\n%s", out.String())
		}
	})
	waitFor(t, "gobgpd's API", 10*time.Second, func() bool {
		return exec.Command("ip", "netns", "exec", nsRR, "gobgp", "-p", rrAPIPort, "global").Run() == nil
	})
}

// reflectorFlowSpec lists the reflector's IPv4 FlowSpec routes: NLRI
// text and how many paths each has.
func reflectorFlowSpec(t *testing.T) map[string]int {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", nsRR, "gobgp", "-p", rrAPIPort, "global", "rib", "-a", "ipv4-flowspec", "-j").Output()
	if err != nil {
		t.Fatalf("gobgp global rib: %v", err)
	}
	var rib map[string][]json.RawMessage
	if err := json.Unmarshal(out, &rib); err != nil {
		t.Fatalf("gobgp global rib: %v\n%s", err, out)
	}
	got := map[string]int{}
	for nlri, paths := range rib {
		got[nlri] = len(paths)
	}
	return got
}

func fleetConfig(t *testing.T, dir string, i int) (cfgPath, sock string) {
	_, ifHost, _, host, rr := fleetHost(i)
	sock = filepath.Join(dir, "api.sock")
	cfgPath = filepath.Join(dir, "tierwall.yaml")
	writeFile(t, cfgPath, []byte(fmt.Sprintf(`interface: %s
interval: 500ms
state_file: %s
capacity: {exact4: 1024, exact6: 1024, prefix: 64, allow: 64, features: 4096}
detectors:
  rate: {enabled: true, pps: 2000}
  entropy: {enabled: false}
  victim: {enabled: false}
  heavy: {enabled: false}
bans: {ttl: 1h, hold: 30s}
bgp:
  asn: %d
  router_id: %s
  listen_port: -1
  neighbors:
    - {address: %s, asn: %d, local_address: %s, send: [flowspec], receive: true, hold_time: 9s}
  announce: {min_pps: 2000, destination: 10.77.0.0/16, host_bans: true}
  accept: {own_prefixes: [10.77.0.0/16]}
api:
  socket: %s
`, ifHost, filepath.Join(dir, "state.json"), fleetAS, host, rr, fleetAS, host, sock)))
	return cfgPath, sock
}

func startFleetDaemon(t *testing.T, i int, cfgPath, sock string) *harness.Daemon {
	t.Helper()
	ns, _, _, _, _ := fleetHost(i)
	return startWith(t, fmt.Sprintf("host %d daemon", i), harness.Options{Tierwall: bin, Netns: ns, Exec: true, Config: cfgPath, Socket: sock})
}

// flood sends frames from src to host i for dur at pps, from the router
// namespace, on the clock.
func flood(t *testing.T, i int, src netip.Addr, pps int, dur time.Duration) {
	t.Helper()
	ns, ifHost, ifRR, host, _ := fleetHost(i)
	blast(t, nsRR, ifRR, hwaddr(t, ns, ifHost), src, host, port, pps, dur)
}

// blast sends UDP frames src → dst:dport out of ifc in namespace ns to
// dstMAC for dur at pps, paced on the clock.
func blast(t *testing.T, ns, ifc string, dstMAC net.HardwareAddr, src, dst netip.Addr, dport uint16, pps int, dur time.Duration) {
	t.Helper()
	inNS(t, ns, func() {
		out := openRaw(t, ifc, dstMAC)
		defer out.close()
		f := pkt.Frame{DstMAC: [6]byte(dstMAC), SrcMAC: [6]byte(out.mac), Src: src, Dst: dst,
			Proto: pkt.ProtoUDP, SrcPort: 5555, DstPort: dport, Payload: []byte("blast")}
		b := f.Build()
		start := time.Now()
		for sent := 0; time.Since(start) < dur; {
			due := int(time.Since(start).Seconds() * float64(pps))
			for ; sent < due; sent++ {
				out.send(t, b)
			}
			time.Sleep(time.Millisecond)
		}
	})
}

// eventTime is the time of the daemon's first event of kind about p whose
// detail contains what.
func eventTime(t *testing.T, d *harness.Daemon, kind string, p netip.Prefix, what string) time.Time {
	t.Helper()
	evs, err := d.Client.Events(t.Context(), kind)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if e.Prefix == p && strings.Contains(e.Detail, what) {
			return e.Time
		}
	}
	t.Fatalf("no %s event about %s with %q in %+v", kind, p, what, evs)
	return time.Time{}
}

// fleetVerdicts reads host i's verdict counters from its pinned maps.
func fleetVerdicts(t *testing.T, i int) map[string]uint64 {
	t.Helper()
	ns, _, _, _, _ := fleetHost(i)
	out, err := exec.Command(bin, "-n", ns, "--direct", "stats", "--json").CombinedOutput()
	if err != nil {
		t.Fatalf("tierwall stats on host %d: %v\n%s", i, err, out)
	}
	return verdictsFrom(t, out)
}

// A ban detected on one host drops the attacker's packets on all three
// within 2 s; the detecting host's kill -9 neither withdraws the route
// (graceful restart) nor duplicates it after the restart, and the other
// hosts never lift their remote ban meanwhile.
func TestBGPFleetBanReachesEveryHost(t *testing.T) {
	setupFleet(t)
	startReflector(t)
	type host struct {
		d             *harness.Daemon
		cfgPath, sock string
	}
	hosts := make([]host, fleetSize+1)
	for i := 1; i <= fleetSize; i++ {
		cfgPath, sock := fleetConfig(t, t.TempDir(), i)
		hosts[i] = host{startFleetDaemon(t, i, cfgPath, sock), cfgPath, sock}
	}
	for i := 1; i <= fleetSize; i++ {
		c := hosts[i].d.Client
		waitFor(t, fmt.Sprintf("host %d's session with the reflector", i), 20*time.Second, func() bool {
			st, err := c.BGP(t.Context())
			return err == nil && len(st.Neighbors) == 1 && st.Neighbors[0].State == "established"
		})
	}
	attacker := netip.MustParseAddr("10.66.0.66")
	ap := netip.PrefixFrom(attacker, 32)
	before := map[int]map[string]uint64{}
	for i := 2; i <= fleetSize; i++ {
		before[i] = fleetVerdicts(t, i)
	}
	// Host 1 sees a flood well over its threshold; hosts 2 and 3 see the
	// same source far under theirs, so only the fleet can ban it there.
	done := make(chan struct{})
	go func() {
		defer close(done)
		flood(t, 1, attacker, 10000, 3*time.Second)
	}()
	waitFor(t, "host 1's ban", 5*time.Second, func() bool {
		bs, err := hosts[1].d.Client.Rules(t.Context())
		for _, b := range bs {
			if err == nil && b.Prefix == ap {
				return true
			}
		}
		return false
	})
	// From host 1's decision to the other hosts' XDP, timed by the daemons'
	// own events (one clock: the namespaces share the host's).
	banAt := eventTime(t, hosts[1].d, "ban", ap, "")
	for i := 2; i <= fleetSize; i++ {
		c := hosts[i].d.Client
		waitFor(t, fmt.Sprintf("the remote ban on host %d", i), 2*time.Second, func() bool {
			bs, err := c.Rules(t.Context())
			for _, b := range bs {
				if err == nil && b.Prefix == ap && b.Detector == "bgp" {
					return true
				}
			}
			return false
		})
		lag := eventTime(t, hosts[i].d, "bgp", ap, "applied remote ban").Sub(banAt)
		if lag > 2*time.Second {
			t.Errorf("host %d applied the fleet's ban %v after host 1 decided it, want ≤ 2 s", i, lag)
		}
		t.Logf("host %d: remote ban in XDP %v after host 1's ban", i, lag.Round(time.Millisecond))
	}
	<-done
	// The attacker's packets are dropped in XDP on the other hosts.
	for i := 2; i <= fleetSize; i++ {
		flood(t, i, attacker, 500, 200*time.Millisecond)
		v := fleetVerdicts(t, i)
		if n := v["drop_exact"] - before[i]["drop_exact"]; n < 50 {
			t.Errorf("host %d dropped %d of the attacker's ~100 packets in XDP", i, n)
		}
	}
	// What an operator sees on a receiving host.
	m, err := hosts[2].d.Client.Metrics(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`tierwall_bgp_session_up{neighbor="10.77.2.1"} 1`, `tierwall_bgp_updates_total{change="applied"} 1`,
		`tierwall_bgp_routes{direction="accepted",neighbor="10.77.2.1"} 1`} {
		if !strings.Contains(m, want) {
			t.Errorf("host 2's metrics lack %s", want)
		}
	}
	if out, err := exec.Command("ip", "netns", "exec", "twf-h2", bin, "--socket", hosts[2].sock, "bgp", "routes").CombinedOutput(); err != nil ||
		!strings.Contains(string(out), "src 10.66.0.66/32 dst 10.77.0.0/16 drop") || !strings.Contains(string(out), "enforced") {
		t.Errorf("tierwall bgp routes on host 2: %v\n%s", err, out)
	}
	if out, err := exec.Command("ip", "netns", "exec", "twf-h1", bin, "--socket", hosts[1].sock, "bgp", "neighbors").CombinedOutput(); err != nil ||
		!strings.Contains(string(out), "established") {
		t.Errorf("tierwall bgp neighbors on host 1: %v\n%s", err, out)
	}
	rib := reflectorFlowSpec(t)
	if len(rib) != 1 {
		t.Fatalf("the reflector holds %d FlowSpec routes %v, want host 1's one", len(rib), rib)
	}

	// kill -9 of host 1 mid-attack: the reflector keeps the route (stale),
	// the restarted host announces it again, once.
	hosts[1].d.Kill()
	time.Sleep(time.Second) // the reflector notices the closed session
	if got := reflectorFlowSpec(t); len(got) != 1 {
		t.Fatalf("after host 1's kill -9 the reflector holds %v: graceful restart did not keep the route", got)
	}
	hosts[1].d = startFleetDaemon(t, 1, hosts[1].cfgPath, hosts[1].sock)
	waitFor(t, "host 1 re-established", 20*time.Second, func() bool {
		st, err := hosts[1].d.Client.BGP(t.Context())
		if err != nil {
			t.Logf("host 1: %v", err)
			return false
		}
		if len(st.Neighbors) == 1 && st.Neighbors[0].State == "established" && len(st.Announced) == 1 {
			return true
		}
		t.Logf("host 1: neighbours %+v, announced %v", st.Neighbors, st.Announced)
		return false
	})
	time.Sleep(time.Second) // End-of-RIB and the reflector's stale sweep
	for nlri, paths := range reflectorFlowSpec(t) {
		if paths != 1 {
			t.Errorf("after the restart the reflector holds %d paths for %s, want 1", paths, nlri)
		}
	}
	if got := reflectorFlowSpec(t); len(got) != 1 {
		t.Errorf("after the restart the reflector holds %v, want one route", got)
	}
	for i := 2; i <= fleetSize; i++ {
		evs, err := hosts[i].d.Client.Events(t.Context(), "bgp")
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			if strings.Contains(e.Detail, "lifted remote ban") {
				t.Errorf("host %d lifted its remote ban while host 1 restarted: %s", i, e.Detail)
			}
		}
	}
	// Host 1's operator lifts the ban: the route is withdrawn everywhere.
	if err := hosts[1].d.Client.DeleteRule(t.Context(), ap); err != nil {
		t.Fatal(err)
	}
	for i := 2; i <= fleetSize; i++ {
		c := hosts[i].d.Client
		waitFor(t, fmt.Sprintf("the remote ban lifted on host %d", i), 10*time.Second, func() bool {
			bs, err := c.Rules(t.Context())
			if err != nil {
				return false
			}
			for _, b := range bs {
				if b.Prefix == ap {
					return false
				}
			}
			return true
		})
	}
}

// BIRD's static FlowSpec route, received over a real session, becomes a
// remote flow rule that drops the matching frames in XDP (and only them),
// and is lifted when BIRD's session goes away (accept.hold 0).
func TestBGPBirdFlowSpecDroppedInXDP(t *testing.T) {
	testutil.RequireRoot(t)
	p, err := bgppeer.NewPair("xdp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	bird, err := bgppeer.StartBird(t.Context(), bgppeer.Options{Netns: p.Router, RouterID: p.Router4, ASN: 64600, LocalAddr: p.Router4,
		PeerAddr: p.Host4, PeerASN: 65001, StaticFlowSpec: []string{fmt.Sprintf("flow4 { dst %s/32; proto 17; dport 53; }", p.Host4)}})
	if err != nil {
		t.Fatal(err)
	}
	birdUp := true
	t.Cleanup(func() {
		if birdUp {
			_ = bird.Close()
		}
	})
	dir := t.TempDir()
	sock := filepath.Join(dir, "api.sock")
	cfgPath := filepath.Join(dir, "tierwall.yaml")
	writeFile(t, cfgPath, []byte(fmt.Sprintf(`interface: %s
interval: 500ms
state_file: %s
capacity: {exact4: 1024, exact6: 1024, prefix: 64, allow: 64, features: 4096}
detectors:
  rate: {enabled: true, pps: 100000}
  entropy: {enabled: false}
  heavy: {enabled: false}
bgp:
  asn: 65001
  router_id: %s
  listen_port: -1
  neighbors:
    - {address: %s, asn: 64600, receive: true}
  accept: {own_prefixes: [10.77.0.0/24]}
api:
  socket: %s
`, p.HostIf, filepath.Join(dir, "state.json"), p.Host4, p.Router4, sock)))
	d := startWith(t, "daemon", harness.Options{Tierwall: bin, Netns: p.Host, Exec: true, Config: cfgPath, Socket: sock})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("BIRD log:\n%s", bird.Log())
		}
	})
	// Applied with the known-good bypass, which FlowSpec cannot carry.
	want := rulepkg.FlowRule{Dst: netip.PrefixFrom(p.Host4, 32), Proto: 17, DstPorts: rulepkg.PortRange{Lo: 53, Hi: 53}, Action: rulepkg.FlowDrop, KnownGoodBypass: true}
	remote := func() bool {
		rs, err := d.Client.FlowRules(t.Context())
		return err == nil && slices.ContainsFunc(rs, func(r mitigate.Rule) bool { return r.FlowRule == want && r.Origin == mitigate.Remote })
	}
	waitFor(t, "BIRD's rule as a remote flow rule", 20*time.Second, remote)

	verdictsOf := func() map[string]uint64 {
		out, err := exec.Command(bin, "-n", p.Host, "--direct", "stats", "--json").CombinedOutput()
		if err != nil {
			t.Fatalf("tierwall stats: %v\n%s", err, out)
		}
		return verdictsFrom(t, out)
	}
	mac := hwaddr(t, p.Host, p.HostIf)
	src := netip.MustParseAddr("10.66.0.53")
	v0 := verdictsOf()
	blast(t, p.Router, p.RouterIf, mac, src, p.Host4, 53, 1000, 200*time.Millisecond)
	v1 := verdictsOf()
	blast(t, p.Router, p.RouterIf, mac, src, p.Host4, 54, 1000, 200*time.Millisecond)
	v2 := verdictsOf()
	if n := v1["drop_flow"] - v0["drop_flow"]; n < 150 {
		t.Errorf("udp/53: %d frames dropped by the flow rule, want the ~200 sent (verdicts moved %v)", n, delta(v0, v1))
	}
	if n := v2["drop_flow"] - v1["drop_flow"]; n != 0 {
		t.Errorf("udp/54: %d frames dropped by the flow rule, want none", n)
	}

	// BIRD goes away: the rule is lifted with the session.
	birdUp = false
	if err := bird.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the remote rule lifted after the session loss", 20*time.Second, func() bool { return !remote() })
}
