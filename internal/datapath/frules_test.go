// SPDX-License-Identifier: Apache-2.0

package datapath

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/tierwall/tierwall/internal/datapath/progtest"
	"github.com/tierwall/tierwall/internal/netnsx"
	"github.com/tierwall/tierwall/internal/pkt"
	"github.com/tierwall/tierwall/internal/rule"
	"github.com/tierwall/tierwall/internal/testutil"
)

// Every rule the parser accepts survives the trip through the bank: the
// bank is the only record of the set, and counter identity depends on it.
func TestFlowRuleEncodingRoundTrip(t *testing.T) {
	for _, s := range []string{
		"dst 198.51.100.7/32 proto udp sport 53 rate-limit 1000 bypass-known-good",
		"dst 2001:db8::/64 proto tcp dport 80 flags S/SA syn-cookie",
		"dst 198.51.100.0/24 proto udp dport 1000-2000 length 0-64 frag none drop",
		"dst 198.51.100.0/24 frag later drop",
		"dst 198.51.100.0/24 frag fragment drop",
		"dst 10.0.0.0/8 proto 47 drop",
		"dst 2001::/16 proto udp sport 0-65535 dport 0-65535 length 0-65535 drop",
		"dst 198.51.100.7/32 proto tcp flags 0/F drop",
	} {
		r := mustFlowRules(t, []string{s})[0]
		e := encodeFlowRule(&r, 7)
		if got := decodeFlowRule(&e); got != r || e.Id != 7 {
			t.Errorf("%s: decoded as %s (id %d)", r, got, e.Id)
		}
	}
}

func sendN(t *testing.T, d *Datapath, frame []byte, n int) uint32 {
	t.Helper()
	return progtest.RunEach(t, d.Program(), frame, n)
}

func flowCounters(t *testing.T, d *Datapath) map[string]FlowRuleCounters {
	t.Helper()
	cs, err := d.FlowRuleCounters()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]FlowRuleCounters{}
	for _, c := range cs {
		out[c.Rule.String()] = c
	}
	return out
}

// A bad rule anywhere in the batch, too many rules or the same rule twice
// change nothing: the data plane keeps the set it had.
func TestSetFlowRulesAllOrNothing(t *testing.T) {
	d := loadTestDatapath(t)
	good := mustFlowRules(t, fixtureFlowRules[:3])
	if err := d.SetFlowRules(good); err != nil {
		t.Fatal(err)
	}
	bad := append(slices.Clone(good[:2]), rule.FlowRule{Dst: netip.MustParsePrefix("198.18.0.0/24"), Proto: 17, Action: rule.FlowSYNCookie})
	if err := d.SetFlowRules(bad); !errors.Is(err, ErrInvalid) {
		t.Errorf("a syn-cookie UDP rule: %v, want ErrInvalid", err)
	}
	if err := d.SetFlowRules(append(slices.Clone(good), good[1])); !errors.Is(err, ErrInvalid) {
		t.Errorf("a rule twice: %v, want ErrInvalid", err)
	}
	var many []rule.FlowRule
	for i := 0; i <= FlowRuleCapacity; i++ {
		many = append(many, rule.FlowRule{Dst: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 0, byte(i), 0}), 24), Action: rule.FlowDrop})
	}
	if err := d.SetFlowRules(many); !errors.Is(err, ErrTableFull) {
		t.Errorf("%d rules: %v, want ErrTableFull", len(many), err)
	}
	if err := d.SetFlowRules(many[:FlowRuleCapacity]); err != nil {
		t.Errorf("%d rules: %v", FlowRuleCapacity, err)
	}
	if err := d.SetFlowRules(bad); err == nil {
		t.Fatal("bad set accepted")
	}
	got, err := d.FlowRules()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, many[:FlowRuleCapacity]) {
		t.Errorf("after refused sets the data plane holds %d rules, want the %d it had", len(got), FlowRuleCapacity)
	}
	// Emptying the set stops matching, and frule_n goes back to 0.
	if err := d.SetFlowRules(nil); err != nil {
		t.Fatal(err)
	}
	if got, _ := d.FlowRules(); len(got) != 0 {
		t.Errorf("%d rules after an empty set", len(got))
	}
	if s, _ := d.Stats(); s.Tables["flow"].Entries != 0 {
		t.Errorf("flow table occupancy %+v after an empty set", s.Tables["flow"])
	}
}

// A rule kept across SetFlowRules keeps its counters wherever it moves in
// the order; a new rule, even one equal to a rule removed earlier, starts
// at zero.
func TestFlowRuleCountersFollowKeptRules(t *testing.T) {
	d := loadTestDatapath(t)
	rs := mustFlowRules(t, []string{
		"dst 198.18.0.0/24 proto udp sport 53 drop",
		"dst 198.18.0.0/24 proto udp sport 123 drop",
		"dst 198.18.0.0/24 proto udp sport 19 drop",
	})
	a, b, c := rs[0], rs[1], rs[2]
	fa := flowPkt{src: "10.9.9.9", dst: "198.18.0.1", proto: pkt.ProtoUDP, sport: 53, dport: 1}.build()
	fb := flowPkt{src: "10.9.9.9", dst: "198.18.0.1", proto: pkt.ProtoUDP, sport: 123, dport: 1}.build()
	if err := d.SetFlowRules([]rule.FlowRule{a, b}); err != nil {
		t.Fatal(err)
	}
	sendN(t, d, fa, 3)
	sendN(t, d, fb, 2)
	if err := d.SetFlowRules([]rule.FlowRule{c, b, a}); err != nil {
		t.Fatal(err)
	}
	got := flowCounters(t, d)
	if got[a.String()].Matched.Packets != 3 || got[a.String()].Dropped != 3 || got[a.String()].Index != 2 {
		t.Errorf("kept rule a: %+v, want 3 matched and dropped at index 2", got[a.String()])
	}
	if got[b.String()].Matched.Packets != 2 || got[b.String()].Matched.Bytes != uint64(2*len(fb)) {
		t.Errorf("kept rule b: %+v, want 2 packets, %d bytes", got[b.String()], 2*len(fb))
	}
	if got[c.String()].Matched.Packets != 0 {
		t.Errorf("new rule c: %+v, want zero", got[c.String()])
	}
	if err := d.SetFlowRules([]rule.FlowRule{a}); err != nil {
		t.Fatal(err)
	}
	if err := d.SetFlowRules([]rule.FlowRule{a, b}); err != nil {
		t.Fatal(err)
	}
	got = flowCounters(t, d)
	if got[b.String()].Matched.Packets != 0 || got[a.String()].Matched.Packets != 3 {
		t.Errorf("re-added b %+v (want 0), kept a %+v (want 3)", got[b.String()], got[a.String()])
	}
}

// The rate limit, all CPUs together: on one CPU a fresh rule admits its
// burst (10 ms of the per-CPU rate), then the per-CPU rate for the time
// that passed, and drops the rest. The bounds use the time measured around
// the run, so they hold however slow the machine is.
func TestFlowRateLimit(t *testing.T) {
	d := loadTestDatapath(t)
	const rate, n = 100_000, 20_000
	r := mustFlowRules(t, []string{"dst 198.18.1.0/24 proto udp rate-limit 100000"})
	if err := d.SetFlowRules(r); err != nil {
		t.Fatal(err)
	}
	perCPU := float64(rate) / float64(d.sizes.ncpu)
	burst := max(int(perCPU/100), 1)
	frame := flowPkt{src: "10.9.9.9", dst: "198.18.1.1", proto: pkt.ProtoUDP, sport: 1, dport: 2}.build()
	before := observe(t, d)
	var elapsed time.Duration
	onCPU(t, 0, func() {
		start := time.Now()
		sendN(t, d, frame, n)
		elapsed = time.Since(start)
	})
	after := observe(t, d)
	passed := int(after.verdicts["pass"].Packets - before.verdicts["pass"].Packets)
	dropped := int(after.verdicts["drop_flow_rate"].Packets - before.verdicts["drop_flow_rate"].Packets)
	most := burst + int(perCPU*elapsed.Seconds()) + 1
	t.Logf("%d packets in %v: %d passed (burst %d, at most %d), %d dropped", n, elapsed, passed, burst, most, dropped)
	if passed < burst || passed > most {
		t.Errorf("%d passed, want %d to %d", passed, burst, most)
	}
	if passed+dropped != n {
		t.Errorf("passed %d + dropped %d != %d", passed, dropped, n)
	}
	c := flowCounters(t, d)[r[0].String()]
	if c.Matched.Packets != n || c.Dropped != uint64(dropped) || c.PassedKnownGood != 0 {
		t.Errorf("rule counters %+v, want %d matched, %d dropped", c, n, dropped)
	}
}

// Known-good sources bypass drop and rate-limit rules with the flag, and
// only those; IPv4-mapped inputs are stored as IPv4.
func TestKnownGoodBypass(t *testing.T) {
	d := loadTestDatapath(t)
	rs := mustFlowRules(t, []string{
		"dst 198.18.1.0/24 proto udp rate-limit 1 bypass-known-good",
		"dst 198.18.2.0/24 proto udp drop bypass-known-good",
		"dst 198.18.3.0/24 proto udp drop",
	})
	if err := d.SetFlowRules(rs); err != nil {
		t.Fatal(err)
	}
	if err := d.AddKnownGood(mustAddrs(t, []string{"::ffff:10.7.7.7", "2001:db8:600d::7"})); err != nil {
		t.Fatal(err)
	}
	// The rule-by-rule semantics, with the members' own rate out of the
	// way (TestKnownGoodSpoofedMember tests it).
	if err := d.SetKnownGoodRate(1 << 31); err != nil {
		t.Fatal(err)
	}
	const n = 1000
	for _, c := range []struct {
		src, dst string
		reason   string
		rule     int
	}{
		{"10.7.7.7", "198.18.1.1", "pass_known_good", 0},
		{"10.7.7.7", "198.18.2.1", "pass_known_good", 1},
		{"10.7.7.7", "198.18.3.1", "drop_flow", 2},
		{"2001:db8:600d::7", "::ffff:198.18.2.1", "pass_known_good", 1},
		{"10.9.9.9", "198.18.2.1", "drop_flow", 1},
	} {
		before, cb := observe(t, d), flowCounters(t, d)[rs[c.rule].String()]
		sendN(t, d, flowPkt{src: c.src, dst: c.dst, proto: pkt.ProtoUDP, sport: 1, dport: 2}.build(), n)
		after, ca := observe(t, d), flowCounters(t, d)[rs[c.rule].String()]
		if got := after.verdicts[c.reason].Packets - before.verdicts[c.reason].Packets; got != n {
			t.Errorf("%s > %s: %d of %d packets %s", c.src, c.dst, got, n, c.reason)
		}
		wantGood := uint64(0)
		if c.reason == "pass_known_good" {
			wantGood = n
		}
		if ca.Matched.Packets-cb.Matched.Packets != n || ca.PassedKnownGood-cb.PassedKnownGood != wantGood {
			t.Errorf("%s > %s: rule counters moved %+v -> %+v", c.src, c.dst, cb, ca)
		}
	}
}

// A member's address alone is no pass: a flood spoofed from it passes a
// bypass rule only within the member's rate, while the packets of the
// member's real connections (a socket of this host for their exact
// 4-tuple) pass whatever the flood did to that rate.
func TestKnownGoodSpoofedMember(t *testing.T) {
	d := loadTestDatapath(t)
	if got, err := d.KnownGoodRate(); err != nil || got != DefaultKnownGoodPPS {
		t.Fatalf("new state's known-good rate %d (%v), want %d", got, err, DefaultKnownGoodPPS)
	}
	for _, fam := range []struct{ network, host string }{{"tcp4", "127.0.0.1"}, {"tcp6", "::1"}} {
		t.Run(fam.network, func(t *testing.T) {
			ln, err := net.Listen(fam.network, net.JoinHostPort(fam.host, "0"))
			if err != nil {
				t.Skipf("no %s loopback: %v", fam.network, err)
			}
			defer ln.Close()
			conn, err := net.Dial(fam.network, ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			srv := ln.Addr().(*net.TCPAddr).AddrPort()
			cli := conn.LocalAddr().(*net.TCPAddr).AddrPort()
			rs := mustFlowRules(t, []string{fmt.Sprintf("dst %s proto tcp drop bypass-known-good", netip.PrefixFrom(srv.Addr(), srv.Addr().BitLen()))})
			if err := d.SetFlowRules(rs); err != nil {
				t.Fatal(err)
			}
			if err := d.AddKnownGood([]netip.Addr{cli.Addr()}); err != nil {
				t.Fatal(err)
			}
			const rate = 1000
			if err := d.SetKnownGoodRate(rate); err != nil {
				t.Fatal(err)
			}
			ack := flowPkt{src: cli.Addr().String(), dst: srv.Addr().String(), proto: pkt.ProtoTCP, sport: cli.Port(), dport: srv.Port(), flags: pkt.TCPFlagACK}.build()
			spoofed := flowPkt{src: cli.Addr().String(), dst: srv.Addr().String(), proto: pkt.ProtoTCP, sport: cli.Port() ^ 0x5a5a, dport: srv.Port(), flags: pkt.TCPFlagACK}.build()

			// The spoofed flood: the member's burst (100 ms of its
			// rate) and what the rate earns while it runs pass; the
			// rest is the rule's to drop.
			const n = 3000
			before := observe(t, d)
			start := time.Now()
			progtest.RunEach(t, d.Program(), spoofed, n)
			elapsed := time.Since(start)
			after := observe(t, d)
			passed := after.verdicts["pass_known_good"].Packets - before.verdicts["pass_known_good"].Packets
			dropped := after.verdicts["drop_flow"].Packets - before.verdicts["drop_flow"].Packets
			most := uint64(rate/10 + rate*elapsed.Seconds() + float64(d.sizes.ncpu))
			t.Logf("spoofed: %d of %d passed in %v (at most %d), %d dropped", passed, n, elapsed, most, dropped)
			if passed < rate/10 || passed > most || passed+dropped != n {
				t.Errorf("spoofed from a member: %d passed, %d dropped of %d; want %d to %d passed, the rest dropped", passed, dropped, n, rate/10, most)
			}

			// The member's connection, its rate spent by the flood:
			// every packet passes.
			before = observe(t, d)
			progtest.RunEach(t, d.Program(), ack, 500)
			after = observe(t, d)
			if got := after.verdicts["pass_known_good"].Packets - before.verdicts["pass_known_good"].Packets; got != 500 {
				t.Errorf("the member's own connection: %d of 500 passed", got)
			}

			// Rate 0: nothing passes outside a connection, the
			// connection still does.
			if err := d.SetKnownGoodRate(0); err != nil {
				t.Fatal(err)
			}
			before = observe(t, d)
			progtest.RunEach(t, d.Program(), spoofed, 100)
			progtest.RunEach(t, d.Program(), ack, 100)
			after = observe(t, d)
			if p, dr := after.verdicts["pass_known_good"].Packets-before.verdicts["pass_known_good"].Packets,
				after.verdicts["drop_flow"].Packets-before.verdicts["drop_flow"].Packets; p != 100 || dr != 100 {
				t.Errorf("rate 0: %d passed, %d dropped; want the connection's 100 passed, the spoofed 100 dropped", p, dr)
			}
		})
	}
}

func TestKnownGoodVerbs(t *testing.T) {
	d := loadTestDatapath(t)
	in := mustAddrs(t, []string{"10.7.7.7", "::ffff:10.7.7.8", "2001:db8:600d::7"})
	if err := d.AddKnownGood(in); err != nil {
		t.Fatal(err)
	}
	list := func() []string {
		got, err := d.KnownGood()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, a := range got {
			out = append(out, a.String())
		}
		slices.Sort(out)
		return out
	}
	if got, want := list(), []string{"10.7.7.7", "10.7.7.8", "2001:db8:600d::7"}; !slices.Equal(got, want) {
		t.Errorf("known good %v, want %v", got, want)
	}
	for _, bad := range [][]netip.Addr{
		{netip.MustParseAddr("10.1.1.1"), {}},
		{netip.MustParseAddr("10.1.1.1"), netip.MustParseAddr("fe80::1%eth0")},
	} {
		if err := d.AddKnownGood(bad); !errors.Is(err, rule.ErrInvalid) {
			t.Errorf("adding %v: %v, want ErrInvalid", bad, err)
		}
		if err := d.RemoveKnownGood(append(bad, in[0])); !errors.Is(err, rule.ErrInvalid) {
			t.Errorf("removing %v: %v, want ErrInvalid", bad, err)
		}
	}
	if n, err := d.KnownGoodCount(); err != nil || n != 3 {
		t.Errorf("count %d, %v after refused changes, want 3", n, err)
	}
	if err := d.RemoveKnownGood(mustAddrs(t, []string{"::ffff:10.7.7.7", "2001:db8:600d::7", "10.1.1.1"})); err != nil {
		t.Fatal(err)
	}
	if got := list(); !slices.Equal(got, []string{"10.7.7.8"}) {
		t.Errorf("after removal %v", got)
	}
}

// LRU eviction is the bound: a full list takes new entries.
func TestKnownGoodFullRefusesNeverEvicts(t *testing.T) {
	testutil.RequireRoot(t)
	d, err := LoadDetached(Options{ExactCapacity4: 64, ExactCapacity6: 64, PrefixCapacity: 64, AllowCapacity: 64, FeatureCapacity: 64, KnownGoodCapacity: 256})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	addr := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 8, byte(i >> 8), byte(i)}) }
	var first []netip.Addr
	for i := range 256 {
		first = append(first, addr(i))
	}
	// Added one at a time, from whichever CPU this thread is on: an LRU
	// evicted members here before it was full.
	for _, a := range first {
		if err := d.AddKnownGood([]netip.Addr{a}); err != nil {
			t.Fatalf("member %s of 256 in a list of 256: %v", a, err)
		}
	}
	if err := d.AddKnownGood([]netip.Addr{addr(300)}); err == nil {
		t.Error("a 257th member went into a list of 256")
	}
	held, err := d.KnownGood()
	if err != nil {
		t.Fatal(err)
	}
	if len(held) != 256 {
		t.Fatalf("%d members held, want the 256 added", len(held))
	}
	for _, a := range held {
		if !slices.Contains(first, a) {
			t.Fatalf("%s held: a member was evicted for it", a)
		}
	}
}

// With no SYN proxy loaded, syn-cookie traffic passes (fixtures); with one
// in tw_jmp the filter tail-calls it, and its verdict is the packet's.
func TestSynproxyTailCall(t *testing.T) {
	d := loadTestDatapath(t)
	r := mustFlowRules(t, []string{"dst 198.18.0.0/24 proto tcp dport 80 syn-cookie"})
	if err := d.SetFlowRules(r); err != nil {
		t.Fatal(err)
	}
	// Attach type XDP, as SEC("xdp") loads it: a prog array takes only
	// programs of its owner's type and expected attach type.
	tx, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.XDP, AttachType: ebpf.AttachXDP, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 3 /* XDP_TX */), asm.Return()}})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	frame := flowPkt{src: "10.9.9.9", dst: "198.18.0.1", proto: pkt.ProtoTCP, sport: 1, dport: 80, flags: pkt.TCPFlagSYN}.build()
	if err := d.SetSynproxy(tx); err != nil {
		t.Fatal(err)
	}
	before := observe(t, d)
	if ret := sendN(t, d, frame, 1); ret != 3 {
		t.Errorf("action %d with a proxy returning XDP_TX, want 3", ret)
	}
	after := observe(t, d)
	for name, v := range after.verdicts {
		if v != before.verdicts[name] {
			t.Errorf("verdict %s moved on a tail call: the proxy counts its packets", name)
		}
	}
	if c := flowCounters(t, d)[r[0].String()]; c.Matched.Packets != 1 {
		t.Errorf("rule counters %+v, want 1 matched", c)
	}
	if err := d.SetSynproxy(nil); err != nil {
		t.Fatal(err)
	}
	if err := d.SetSynproxy(nil); err != nil {
		t.Fatalf("clearing twice: %v", err)
	}
	if ret := sendN(t, d, frame, 1); ret != xdpPass {
		t.Errorf("action %d without a proxy, want XDP_PASS", ret)
	}
}

// The port profile counts both ports of TCP and UDP traffic that passed,
// per snapshot: nothing dropped, no later fragment; and SYNs without ACK
// by IP length, IPv6 apart.
func TestPortProfile(t *testing.T) {
	d := loadTestDatapath(t)
	if err := d.SetFlowRules(mustFlowRules(t, []string{"dst 198.18.0.0/24 proto udp sport 19 drop"})); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Snapshot(); err != nil {
		t.Fatal(err)
	}
	udp, tcp := uint8(pkt.ProtoUDP), uint8(pkt.ProtoTCP)
	sendN(t, d, flowPkt{src: "10.9.9.9", dst: "198.18.0.1", proto: udp, sport: 53, dport: 4444}.build(), 5)
	sendN(t, d, flowPkt{src: "2001:db8:c1ea::1", dst: "2001:db8::1", proto: udp, sport: 53, dport: 5555}.build(), 2)
	sendN(t, d, flowPkt{src: "10.9.9.9", dst: "198.18.0.1", proto: tcp, sport: 40000, dport: 443, flags: pkt.TCPFlagSYN}.build(), 3)
	sendN(t, d, flowPkt{src: "10.9.9.9", dst: "198.18.0.1", proto: udp, sport: 19, dport: 4444}.build(), 9) // dropped
	sendN(t, d, flowPkt{src: "10.9.9.9", dst: "198.18.0.1", proto: udp, later: true}.build(), 4)            // no ports
	sendN(t, d, flowPkt{src: "10.9.9.9", dst: "198.18.0.1", proto: udp, sport: 53, first: true}.build(), 1) // first fragment: ports
	sendN(t, d, flowPkt{src: "10.9.9.8", dst: "198.18.0.1", proto: tcp, sport: 1, dport: 80, flags: pkt.TCPFlagSYN, payload: -1}.build(), 6)
	sendN(t, d, flowPkt{src: "2001:db8:c1ea::1", dst: "2001:db8::1", proto: tcp, sport: 1, dport: 80, flags: pkt.TCPFlagSYN, payload: -1}.build(), 7)
	sendN(t, d, flowPkt{src: "10.9.9.8", dst: "198.18.0.1", proto: tcp, sport: 1, dport: 80, flags: pkt.TCPFlagSYN | pkt.TCPFlagACK, payload: -1}.build(), 2) // no SYN without ACK
	sendN(t, d, flowPkt{src: "10.9.9.8", dst: "198.18.0.1", proto: tcp, sport: 1, dport: 80, flags: pkt.TCPFlagSYN, payload: 1400}.build(), 1)
	s, err := d.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	p := s.Ports
	if p.UDPSrc[53] != 8 || p.UDPDst[4444] != 5 || p.UDPDst[5555] != 2 || p.TCPSrc[40000] != 3 || p.TCPDst[443] != 3 || p.UDPSrc[19] != 0 {
		t.Errorf("profile: udp src 53=%d dst 4444=%d 5555=%d, tcp src 40000=%d dst 443=%d, udp src 19=%d",
			p.UDPSrc[53], p.UDPDst[4444], p.UDPDst[5555], p.TCPSrc[40000], p.TCPDst[443], p.UDPSrc[19])
	}
	// 3 SYNs of 48 bytes (20 + 20 + "tierwall"), 6 of 40, 7 IPv6 ones
	// of 60, one of 1,440.
	var syns uint64
	for _, n := range p.SYNLen {
		syns += n
	}
	if p.SYNLen[48] != 3 || p.SYNLen[40] != 6 || p.SYNLen[SYNLenV6|60] != 7 || p.SYNLen[1440] != 1 || syns != 17 {
		t.Errorf("SYN lengths: 48=%d 40=%d v6 60=%d 1440=%d, %d in all; want 3, 6, 7, 1 of 17",
			p.SYNLen[48], p.SYNLen[40], p.SYNLen[SYNLenV6|60], p.SYNLen[1440], syns)
	}
	top, total := p.Top(17, true, 1)
	if len(top) != 1 || top[0] != (PortCount{Port: 53, Packets: 8}) || total != 8 {
		t.Errorf("top UDP source %v of %d, want port 53 with 8 of 8", top, total)
	}
	if s, err = d.Snapshot(); err != nil {
		t.Fatal(err)
	}
	if _, total := s.Ports.Top(17, true, 1); total != 0 {
		t.Errorf("next snapshot has %d UDP packets by source port, want 0", total)
	}
}

// The filter keeps well clear of the verifier's limit of a million
// processed instructions, which it came within half of before the parser
// became a function of its own.
func TestVerifierHeadroom(t *testing.T) {
	d := loadTestDatapath(t)
	info, err := d.Program().Info()
	if err != nil {
		t.Fatal(err)
	}
	n, ok := info.VerifiedInstructions()
	if !ok {
		t.Skip("kernel does not report verified instructions")
	}
	t.Logf("verifier processed %d instructions", n)
	if n > 700_000 {
		t.Errorf("verifier processed %d instructions, want at most 700K (limit 1M)", n)
	}
}

// Flow rules and the known-good list are pinned with the rest of the
// filter's state: a re-attach (a daemon restart) finds them with their
// counters, and the SYN proxy slot too.
func TestFlowRulesReadopted(t *testing.T) {
	testutil.RequireRoot(t)
	const ns = "twt-frule"
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v %s", args, err, out)
		}
	}
	_ = exec.Command("ip", "netns", "del", ns).Run()
	run("ip", "netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	run("ip", "-n", ns, "link", "add", "twf0", "type", "veth", "peer", "name", "twf1")
	run("ip", "-n", ns, "link", "set", "twf0", "up")
	run("ip", "-n", ns, "link", "set", "twf1", "up")
	opts := Options{Mode: ModeGeneric, ExactCapacity4: 64, ExactCapacity6: 64, PrefixCapacity: 64, AllowCapacity: 64, FeatureCapacity: 64, KnownGoodCapacity: 128}
	rules := mustFlowRules(t, fixtureFlowRules[:4])
	good := mustAddrs(t, knownGood)
	frame := flowPkt{src: "10.9.9.9", dst: "198.18.0.1", proto: pkt.ProtoUDP, sport: 53, dport: 1}.build()
	err := netnsx.Do(ns, -1, func() error {
		d, err := Attach("twf0", opts)
		if err != nil {
			return err
		}
		defer func() { _ = Detach("twf0", "") }()
		if err := d.SetFlowRules(rules); err != nil {
			return err
		}
		if err := d.AddKnownGood(good); err != nil {
			return err
		}
		sendN(t, d, frame, 4)
		d.Close()

		d, err = Attach("twf0", Options{})
		if err != nil {
			return err
		}
		defer d.Close()
		got, err := d.FlowRules()
		if err != nil {
			return err
		}
		if !slices.Equal(got, rules) {
			t.Errorf("re-adopted rules %v, want %v", got, rules)
		}
		if c := flowCounters(t, d)[rules[0].String()]; c.Matched.Packets != 4 {
			t.Errorf("re-adopted counters %+v, want 4 matched", c)
		}
		as, err := d.KnownGood()
		if err != nil {
			return err
		}
		slices.SortFunc(as, netip.Addr.Compare)
		if !slices.Equal(as, good) {
			t.Errorf("re-adopted known good %v, want %v", as, good)
		}
		// And the re-adopted program applies them.
		if ret := sendN(t, d, frame, 1); ret != xdpDrop {
			t.Errorf("re-adopted filter returned %d for a flow-rule drop", ret)
		}
		o, err := Open("twf0", "")
		if err != nil {
			return err
		}
		defer o.Close()
		if got, err := o.FlowRules(); err != nil || len(got) != len(rules) {
			t.Errorf("Open sees %d rules (%v)", len(got), err)
		}
		if _, err := Attach("twf0", Options{KnownGoodCapacity: 64}); !errors.Is(err, ErrIncompatible) {
			t.Errorf("another known-good capacity: %v, want ErrIncompatible", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A bypass rule lets an answer to one of the host's connected UDP sockets
// pass whoever sent it (a resolver's, an NTP client's: their servers are
// never known-good members), and only the exact 4-tuple: the same server
// to another port, and anyone to an unconnected (server) socket, meet the
// rule. A reflection flood's source-port rule dropped the host's own DNS
// and NTP answers.
func TestUDPAnswerBypass(t *testing.T) {
	d := loadTestDatapath(t)
	for _, fam := range []struct{ network, host, spoof string }{{"udp4", "127.0.0.1", "127.0.0.9"}, {"udp6", "::1", "::9"}} {
		t.Run(fam.network, func(t *testing.T) {
			srvConn, err := net.ListenPacket(fam.network, net.JoinHostPort(fam.host, "0"))
			if err != nil {
				t.Skipf("no %s loopback: %v", fam.network, err)
			}
			defer srvConn.Close()
			srv := srvConn.LocalAddr().(*net.UDPAddr).AddrPort()
			conn, err := net.Dial(fam.network, srv.String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			cli := conn.LocalAddr().(*net.UDPAddr).AddrPort()
			rs := mustFlowRules(t, []string{fmt.Sprintf("dst %s proto udp drop bypass-known-good", netip.PrefixFrom(cli.Addr(), cli.Addr().BitLen()))})
			if err := d.SetFlowRules(rs); err != nil {
				t.Fatal(err)
			}
			answer := flowPkt{src: srv.Addr().String(), dst: cli.Addr().String(), proto: pkt.ProtoUDP, sport: srv.Port(), dport: cli.Port()}.build()
			otherPort := flowPkt{src: srv.Addr().String(), dst: cli.Addr().String(), proto: pkt.ProtoUDP, sport: srv.Port(), dport: cli.Port() ^ 0x5a5a}.build()
			toServer := flowPkt{src: fam.spoof, dst: srv.Addr().String(), proto: pkt.ProtoUDP, sport: 4444, dport: srv.Port()}.build()
			for _, c := range []struct {
				name       string
				frame      []byte
				pass, drop uint64
			}{
				{"the answer to the connected socket", answer, 50, 0},
				{"the server's address to another port", otherPort, 0, 50},
				{"anyone to the unconnected socket", toServer, 0, 50},
			} {
				before := observe(t, d)
				progtest.RunEach(t, d.Program(), c.frame, 50)
				after := observe(t, d)
				p := after.verdicts["pass_known_good"].Packets - before.verdicts["pass_known_good"].Packets
				dr := after.verdicts["drop_flow"].Packets - before.verdicts["drop_flow"].Packets
				if p != c.pass || dr != c.drop {
					t.Errorf("%s: %d passed as known-good, %d dropped; want %d, %d", c.name, p, dr, c.pass, c.drop)
				}
			}
		})
	}
}
