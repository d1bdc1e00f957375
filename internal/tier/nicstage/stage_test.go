// SPDX-License-Identifier: Apache-2.0

package nicstage

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/tierwall/tierwall/internal/datapath"
	"github.com/tierwall/tierwall/internal/pkt"
	"github.com/tierwall/tierwall/internal/testutil"
	"github.com/tierwall/tierwall/internal/tier"
)

func nicFrame(src, dst string, proto uint8, sport, dport uint16) []byte {
	f := pkt.Frame{Src: netip.MustParseAddr(src), Dst: netip.MustParseAddr(dst), Proto: proto,
		SrcPort: sport, DstPort: dport, Payload: []byte("nic-test")}
	return f.Build()
}

func runNIC(t *testing.T, n *Stage, frame []byte) uint32 {
	t.Helper()
	ret, err := n.Program().Run(&ebpf.RunOptions{Data: frame})
	if err != nil {
		t.Fatal(err)
	}
	return ret
}

func TestNICStage(t *testing.T) {
	testutil.RequireRoot(t)
	n, err := LoadDetached(Options{Capacity: 4, UpdateLatency: 3 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()

	src := tier.Rule{Match: tier.SourceMatch(netip.MustParseAddr("203.0.113.9")), Action: tier.Drop}
	var waited []time.Duration
	n.sleep = func(d time.Duration) { waited = append(waited, d) }
	if _, err := n.Insert(src); err != nil {
		t.Fatal(err)
	}
	if len(waited) != 1 || waited[0] != 3*time.Millisecond {
		t.Errorf("install waited %v, want the configured 3ms update latency once", waited)
	}
	flow := tier.Rule{Match: tier.Match{Src: netip.MustParseAddr("2001:db8::5"), Dst: netip.MustParseAddr("2001:db8::1"),
		Proto: pkt.ProtoTCP, SrcPort: 40000, DstPort: 443}, Action: tier.Forward}
	if _, err := n.Insert(flow); err != nil {
		t.Fatal(err)
	}

	drop := nicFrame("203.0.113.9", "192.0.2.1", pkt.ProtoUDP, 1, 2)
	fwd := nicFrame("2001:db8::5", "2001:db8::1", pkt.ProtoTCP, 40000, 443)
	otherPort := nicFrame("2001:db8::5", "2001:db8::1", pkt.ProtoTCP, 40001, 443)
	miss := nicFrame("198.51.100.1", "192.0.2.1", pkt.ProtoUDP, 1, 2)
	for i := 0; i < 3; i++ {
		if r := runNIC(t, n, drop); r != xdpDrop {
			t.Fatalf("source rule: verdict %d, want drop", r)
		}
	}
	for _, f := range [][]byte{fwd, fwd, otherPort, miss} {
		if r := runNIC(t, n, f); r != xdpPass {
			t.Fatalf("verdict %d, want pass (no host port in test_run)", r)
		}
	}
	nonIP := make([]byte, 60)
	nonIP[12], nonIP[13] = 0x08, 0x06 // ARP
	runNIC(t, n, nonIP)

	rules, err := n.Rules()
	if err != nil {
		t.Fatal(err)
	}
	got := map[tier.Match]tier.Entry{}
	for _, e := range rules {
		got[e.Rule.Match] = e
	}
	// Hardware byte counters exclude the 14-byte Ethernet header.
	if e := got[src.Match]; e.Counters.Packets != 3 || e.Counters.Bytes != uint64(3*(len(drop)-14)) || e.Rule.Action != tier.Drop {
		t.Errorf("source rule %+v, want 3 packets, %d bytes", e, 3*(len(drop)-14))
	}
	if e := got[flow.Match]; e.Counters.Packets != 2 || e.Rule.Action != tier.Forward {
		t.Errorf("flow rule %+v, want 2 packets", e)
	}
	st, err := n.Stats()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{"hit_drop": 3, "hit_forward": 2, "miss": 2, "unhandled": 1, "tx_error": 0}
	for k, v := range want {
		if st[k].Packets != v {
			t.Errorf("%s = %d, want %d", k, st[k].Packets, v)
		}
	}

	// K = 4: two more fit, the fifth is refused and nothing changes.
	for _, a := range []string{"10.0.0.1", "10.0.0.2"} {
		if _, err := n.Insert(tier.Rule{Match: tier.SourceMatch(netip.MustParseAddr(a)), Action: tier.Drop}); err != nil {
			t.Fatal(err)
		}
	}
	_, err = n.Insert(tier.Rule{Match: tier.SourceMatch(netip.MustParseAddr("10.0.0.3")), Action: tier.Drop})
	if !errors.Is(err, tier.ErrTableFull) {
		t.Fatalf("fifth rule: %v, want ErrTableFull", err)
	}
	if rules, _ := n.Rules(); len(rules) != 4 {
		t.Fatalf("%d rules after a refused insert, want 4", len(rules))
	}
	// Removing frees the slot; the next rule starts with zero counters.
	if last, _, err := n.Delete(src.Match); err != nil || last.Packets != 3 {
		t.Fatalf("delete: %v, last counters %+v, want 3 packets", err, last)
	}
	if _, _, err := n.Delete(src.Match); !errors.Is(err, tier.ErrNoRule) {
		t.Fatalf("second delete: %v, want ErrNoRule", err)
	}
	if r := runNIC(t, n, drop); r != xdpPass {
		t.Fatalf("removed rule still drops")
	}
	re := tier.Rule{Match: tier.SourceMatch(netip.MustParseAddr("10.0.0.3")), Action: tier.Drop}
	if _, err := n.Insert(re); err != nil {
		t.Fatal(err)
	}
	rules, _ = n.Rules()
	for _, e := range rules {
		if e.Rule.Match == re.Match && e.Counters.Packets != 0 {
			t.Errorf("reused slot inherited %d packets", e.Counters.Packets)
		}
	}
	// Bad input is refused before any change.
	for _, bad := range []tier.Rule{
		{Match: tier.Match{}, Action: tier.Drop},
		{Match: tier.SourceMatch(netip.MustParseAddr("10.1.1.1")), Action: 9},
		{Match: tier.Match{Src: netip.MustParseAddr("10.1.1.1"), Dst: netip.MustParseAddr("::1"), Proto: 6}, Action: tier.Drop},
		{Match: tier.Match{Src: netip.MustParseAddr("10.1.1.1"), Dst: netip.MustParseAddr("10.0.0.1"), Proto: 1, SrcPort: 5}, Action: tier.Drop},
	} {
		if _, err := n.Insert(bad); !errors.Is(err, tier.ErrInvalid) {
			t.Errorf("%+v: %v, want ErrInvalid", bad, err)
		}
	}
}

// XDP return codes (uapi/linux/bpf.h).
const (
	xdpDrop = 1
	xdpPass = 2
)

// A mode and its flags read each other back; no mode is hybrid, and flags
// of no mode are a wire.
func TestModeFlags(t *testing.T) {
	for _, m := range []Mode{Hybrid, HW, CPU, Wire} {
		f, err := m.flags()
		if err != nil || nicModeOf(f) != m {
			t.Errorf("%s: flags %d, %v, read back as %s", m, f, err, nicModeOf(f))
		}
	}
	if f, err := Mode("").flags(); err != nil || f != nicTwNicFlagsTW_NIC_F_TABLE {
		t.Errorf("no mode: %d, %v", f, err)
	}
	if _, err := Mode("bogus").flags(); !errors.Is(err, datapath.ErrInvalid) {
		t.Errorf("bogus mode: %v", err)
	}
	if m := nicModeOf(4); m != Wire {
		t.Errorf("unknown flags read as %s", m)
	}
}
