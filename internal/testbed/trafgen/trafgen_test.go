// SPDX-License-Identifier: Apache-2.0

package trafgen

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/tierwall/tierwall/internal/datapath"
	"github.com/tierwall/tierwall/internal/rule"
	"github.com/tierwall/tierwall/internal/testbed/harness"
	"github.com/tierwall/tierwall/internal/testutil"
	"github.com/tierwall/tierwall/internal/tier"
	"github.com/tierwall/tierwall/internal/tier/nicstage"
)

const (
	nsTx, nsRx = "twgen-tx", "twgen-rx"
	ifTx, ifRx = "twg-tx", "twg-rx"
)

func sh(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
}

func inNS(t testing.TB, name string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: dies with the goroutine
		ns, err := netns.GetFromName(name)
		if err != nil {
			t.Error(err)
			return
		}
		defer ns.Close()
		if err := netns.Set(ns); err != nil {
			t.Error(err)
			return
		}
		f()
	}()
	<-done
}

// lab: the generator's veth end in one namespace, a receiver running the
// tierwall filter (features on, nothing blocked) in the other.
func lab(t *testing.T) (*datapath.Datapath, [6]byte, [6]byte) {
	testutil.RequireRoot(t)
	clean, err := harness.VethPair(nsTx, ifTx, nsRx, ifRx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(clean)
	// Nothing but generated frames leaves the generator's side.
	sh(t, "ip", "netns", "exec", nsTx, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")
	var d *datapath.Datapath
	var src, dst [6]byte
	inNS(t, nsRx, func() {
		d, err = datapath.Attach(ifRx, datapath.Options{ExactCapacity4: 64, ExactCapacity6: 64, PrefixCapacity: 16, AllowCapacity: 16, FeatureCapacity: 1 << 14})
		if ifc, e := net.InterfaceByName(ifRx); e == nil {
			dst = [6]byte(ifc.HardwareAddr)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	inNS(t, nsTx, func() {
		if ifc, e := net.InterfaceByName(ifTx); e == nil {
			src = [6]byte(ifc.HardwareAddr)
		}
	})
	if _, err := d.Snapshot(); err != nil { // start counting now
		t.Fatal(err)
	}
	return d, src, dst
}

// received sums, per source, what the receiver's filter counted, taking
// snapshots until want frames arrived or nothing more arrives (frames in
// flight land within a few ms; a quiet second ends the wait, bounded).
func received(t *testing.T, d *datapath.Datapath, want uint64) (map[netip.Addr]uint64, uint64) {
	got := map[netip.Addr]uint64{}
	var total uint64
	quiet := 0
	for i := 0; i < 100 && total < want && quiet < 10; i++ {
		time.Sleep(100 * time.Millisecond)
		s, err := d.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		var n uint64
		for _, f := range s.Flows {
			got[f.Src] += f.Packets
			n += f.Packets
		}
		total += n
		if n == 0 {
			quiet++
		} else {
			quiet = 0
		}
	}
	return got, total
}

func TestGeneratorSendsWhatItReports(t *testing.T) {
	d, src, dst := lab(t)
	for _, tc := range []struct {
		name string
		spec Spec
	}{
		{"udp4-uniform", Spec{Dst: netip.MustParseAddr("10.9.0.2"), Sources: 100, Dist: Uniform, Rate: 20000, Duration: 500 * time.Millisecond}},
		{"syn6-zipf", Spec{Dst: netip.MustParseAddr("fd00:9::2"), SYN: true, Sources: 50, Dist: Zipf, Rate: 20000, Duration: 400 * time.Millisecond}},
		{"udp4-gaussian-reshuffled", Spec{Dst: netip.MustParseAddr("10.9.0.2"), Sources: 200, Dist: Gaussian, Rate: 30000, Duration: 600 * time.Millisecond, Reshuffle: 200 * time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.spec
			s.Iface, s.SrcMAC, s.DstMAC, s.Seed = ifTx, src, dst, 1
			var rep *Report
			var err error
			inNS(t, nsTx, func() { rep, err = Run(context.Background(), s) })
			if err != nil {
				t.Fatal(err)
			}
			want := s.Rate * uint64(s.Duration) / uint64(time.Second)
			if rep.Sent != want {
				t.Errorf("sent %d, want rate x duration = %d", rep.Sent, want)
			}
			got, total := received(t, d, rep.Sent)
			if total != rep.Sent {
				t.Errorf("receiver counted %d frames, generator reports %d", total, rep.Sent)
			}
			for a, n := range rep.PerSource {
				if got[a] != n {
					t.Errorf("%s: received %d, reported %d", a, got[a], n)
				}
			}
			if len(got) != len(rep.PerSource) {
				t.Errorf("%d sources received, %d reported", len(got), len(rep.PerSource))
			}
			if tc.spec.Reshuffle > 0 && rep.Epochs < 2 {
				t.Errorf("%d epochs, want the ranking to have changed", rep.Epochs)
			}
			// The distribution: the heaviest reported source's share is
			// close to the top weight.
			ws := Weights(s.Dist, s.Sources, 1, 1.0/6)
			var top uint64
			for _, n := range rep.PerSource {
				top = max(top, n)
			}
			maxW := 0.0
			for _, w := range ws {
				maxW = max(maxW, w)
			}
			if share := float64(top) / float64(rep.Sent); share < 0.5*maxW || share > 2*maxW+0.01 {
				t.Errorf("top source share %.4f, distribution's top weight %.4f", share, maxW)
			}
		})
	}
}

func TestSpoofedSourcesStayInPrefix(t *testing.T) {
	d, src, dst := lab(t)
	s := Spec{Iface: ifTx, SrcMAC: src, DstMAC: dst, Dst: netip.MustParseAddr("10.9.0.2"), Spoof: netip.MustParsePrefix("172.20.0.0/16"),
		Rate: 10000, Duration: 300 * time.Millisecond}
	var rep *Report
	var err error
	inNS(t, nsTx, func() { rep, err = Run(context.Background(), s) })
	if err != nil {
		t.Fatal(err)
	}
	got, total := received(t, d, rep.Sent)
	if total != rep.Sent || rep.Sent != 3000 {
		t.Fatalf("sent %d, received %d", rep.Sent, total)
	}
	for a := range got {
		if !s.Spoof.Contains(a) {
			t.Fatalf("spoofed source %s outside %s", a, s.Spoof)
		}
	}
	if len(got) < 2500 {
		t.Errorf("only %d distinct spoofed sources in 3000 frames", len(got))
	}
}

// The card's table in the generator (Spec.Card): what its drop rules match
// is dropped before the wire, counted on the rule and as the card's drops,
// and nothing else is: not a forward rule, not a flow rule for another
// port, and nothing at all when the stage's mode has no table.
func TestCardDropsWhatItsTableHolds(t *testing.T) {
	d, src, dst := lab(t)
	srcs, err := Addresses(netip.MustParsePrefix("10.128.0.0/9"), 20)
	if err != nil {
		t.Fatal(err)
	}
	vic := netip.MustParseAddr("10.9.0.2")
	flow := func(a netip.Addr, dport uint16) tier.Match {
		return tier.Match{Src: a, Dst: vic, Proto: 17, SrcPort: 40000, DstPort: dport}
	}
	rules := []tier.Rule{
		{Match: tier.SourceMatch(srcs[0]), Action: tier.Drop},
		{Match: tier.SourceMatch(srcs[1]), Action: tier.Drop},
		{Match: flow(srcs[2], 9), Action: tier.Drop},  // the frames' own 5-tuple
		{Match: flow(srcs[3], 10), Action: tier.Drop}, // another port: no match
		{Match: tier.SourceMatch(srcs[4]), Action: tier.Forward},
	}
	dropped := map[netip.Addr]bool{srcs[0]: true, srcs[1]: true, srcs[2]: true}
	for _, mode := range []nicstage.Mode{nicstage.Hybrid, nicstage.Wire} {
		t.Run(string(mode), func(t *testing.T) {
			st, err := nicstage.LoadDetached(nicstage.Options{Mode: mode, UpdateLatency: time.Microsecond})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			for _, r := range rules {
				if _, err := st.Insert(r); err != nil {
					t.Fatal(err)
				}
			}
			s := Spec{Iface: ifTx, SrcMAC: src, DstMAC: dst, Dst: vic, Sources: len(srcs), Rate: 20000, Duration: 500 * time.Millisecond, Seed: 1, Card: st.MatchTable()}
			var rep *Report
			inNS(t, nsTx, func() { rep, err = Run(context.Background(), s) })
			if err != nil {
				t.Fatal(err)
			}
			var want uint64
			if mode == nicstage.Hybrid {
				for a := range dropped {
					if rep.PerSource[a] == 0 {
						t.Errorf("no frames from blocked source %s", a)
					}
				}
				for a := range dropped {
					want += rep.PerSource[a]
				}
			}
			if rep.Sent != 10000 {
				t.Errorf("sent %d, want rate x duration = 10000 with the card's drops", rep.Sent)
			}
			if rep.CardDropped != want {
				t.Errorf("card dropped %d, the blocked sources sent %d", rep.CardDropped, want)
			}
			got, total := received(t, d, rep.Sent-want)
			if total != rep.Sent-want {
				t.Errorf("receiver counted %d, want sent %d - card drops %d", total, rep.Sent, want)
			}
			for _, a := range srcs {
				w := rep.PerSource[a]
				if mode == nicstage.Hybrid && dropped[a] {
					w = 0
				}
				if got[a] != w {
					t.Errorf("%s: received %d, want %d", a, got[a], w)
				}
			}
			stats, err := st.Stats()
			if err != nil {
				t.Fatal(err)
			}
			if hd := stats["hit_drop"]; hd.Packets != want || hd.Bytes != 46*want {
				t.Errorf("card's hit_drop counter %+v, want %d frames of 46 IP bytes", hd, want)
			}
			es, err := st.Rules()
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range es {
				w := uint64(0)
				if mode == nicstage.Hybrid && dropped[e.Rule.Match.Src] {
					w = rep.PerSource[e.Rule.Match.Src]
				}
				if e.Counters.Packets != w {
					t.Errorf("rule %+v counted %d, want %d", e.Rule.Match, e.Counters.Packets, w)
				}
			}
		})
	}
}

// cardDropping is a card (the NIC stage, hybrid, not attached) whose
// table drops every frame from srcs.
func cardDropping(t *testing.T, srcs ...netip.Addr) *nicstage.Stage {
	st, err := nicstage.LoadDetached(nicstage.Options{Mode: nicstage.Hybrid, UpdateLatency: time.Microsecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	for _, a := range srcs {
		if _, err := st.Insert(tier.Rule{Match: tier.SourceMatch(a), Action: tier.Drop}); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

// A flood the card drops whole: runs of consecutive card drops end the
// repetition with an XDP_DROP, and still every frame is counted once.
func TestCardDropsAWholeFlood(t *testing.T) {
	d, src, dst := lab(t)
	srcs, err := Addresses(netip.MustParsePrefix("10.128.0.0/9"), 4)
	if err != nil {
		t.Fatal(err)
	}
	st := cardDropping(t, srcs...)
	s := Spec{Iface: ifTx, SrcMAC: src, DstMAC: dst, Dst: netip.MustParseAddr("10.9.0.2"), Sources: len(srcs), Rate: 20000, Duration: 300 * time.Millisecond, Seed: 1, Card: st.MatchTable()}
	var rep *Report
	inNS(t, nsTx, func() { rep, err = Run(context.Background(), s) })
	if err != nil {
		t.Fatal(err)
	}
	if rep.Sent != 6000 || rep.CardDropped != 6000 {
		t.Errorf("sent %d, card dropped %d, want 6000 and 6000", rep.Sent, rep.CardDropped)
	}
	if _, total := received(t, d, 1); total != 0 {
		t.Errorf("receiver counted %d frames of a flood the card drops whole", total)
	}
	stats, err := st.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if hd := stats["hit_drop"]; hd.Packets != 6000 {
		t.Errorf("card's hit_drop counted %d, want 6000", hd.Packets)
	}
}

// Half of a flood's frames the card drops: the runs, whose repetitions
// put out two frames on average, are sized so that few repetitions find
// their run's frames all out (each an XDP_DROP, which on the lab costs
// the sending CPU), and the flood still sends exactly its count.
func TestCardRunsLeaveFewSpareRepetitions(t *testing.T) {
	_, src, dst := lab(t)
	srcs, err := Addresses(netip.MustParsePrefix("10.128.0.0/9"), 16)
	if err != nil {
		t.Fatal(err)
	}
	st := cardDropping(t, srcs[:8]...)
	const rate, chunk = 200_000, 20_000 // 100 ms of the rate per call
	s := Spec{Iface: ifTx, SrcMAC: src, DstMAC: dst, Dst: netip.MustParseAddr("10.9.0.2"), Sources: len(srcs), Rate: rate, Duration: time.Second, Seed: 1, Card: st.MatchTable()}
	var rep *Report
	inNS(t, nsTx, func() { rep, err = Run(context.Background(), s) })
	if err != nil {
		t.Fatal(err)
	}
	if rep.Sent != rate {
		t.Errorf("sent %d, want rate x duration = %d", rep.Sent, rate)
	}
	if rep.CardDropped < rate*45/100 || rep.CardDropped > rate*55/100 {
		t.Errorf("card dropped %d of %d, want about half", rep.CardDropped, rep.Sent)
	}
	// The first call knows nothing of the card's share and may leave
	// half its repetitions over; the later ones hardly any. Runs sized
	// for one frame each would leave half of all (100,000).
	if limit := uint64(chunk/2 + rate/100); rep.Spare > limit {
		t.Errorf("%d spare repetitions in a flood of %d frames, want at most %d", rep.Spare, rep.Sent, limit)
	}
	t.Logf("sent %d, card dropped %d, spare repetitions %d", rep.Sent, rep.CardDropped, rep.Spare)
}

func TestBadSpecs(t *testing.T) {
	for _, s := range []Spec{
		{Dst: netip.MustParseAddr("10.0.0.1"), Sources: 1},                                                                      // no duration
		{Dst: netip.MustParseAddr("10.0.0.1"), Sources: 1, Duration: 2 * MaxDuration},                                           // too long
		{Dst: netip.MustParseAddr("10.0.0.1"), Sources: 0, Duration: time.Second},                                               // no sources
		{Dst: netip.MustParseAddr("10.0.0.1"), Sources: 5, Duration: time.Second, Dist: "pareto"},                               // bad distribution
		{Dst: netip.MustParseAddr("10.0.0.1"), Spoof: netip.MustParsePrefix("2001:db8::/32"), Duration: time.Second},            // family mix
		{Dst: netip.MustParseAddr("10.0.0.1"), Sources: 300, Base: netip.MustParsePrefix("10.1.1.0/24"), Duration: time.Second}, // does not fit
		{Dst: netip.MustParseAddr("10.0.0.1"), Sources: 5, Duration: time.Second, Slots: 3000},                                  // not a power of two
		{Dst: netip.MustParseAddr("10.0.0.1"), Sources: 5000, Duration: time.Second, Slots: 4096},                               // fewer slots than sources
		{Dst: netip.MustParseAddr("10.0.0.1"), Sources: 5, Duration: time.Second, Slots: 1 << 22},                               // beyond 2^21
	} {
		if _, err := Run(context.Background(), s); !errors.Is(err, rule.ErrInvalid) {
			t.Errorf("%+v: %v, want an invalid-spec error", s, err)
		}
	}
}
