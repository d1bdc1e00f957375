// SPDX-License-Identifier: Apache-2.0

package datapath

import (
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/tierwall/tierwall/internal/pkt"
)

// fillSynGuard puts every CPU's guard window ahead of jiffies with its
// budget spent, so that the next SYN is over it whatever the clock does
// (the data plane goes on counting a window ahead of jiffies).
func fillSynGuard(t *testing.T, d *Datapath) {
	t.Helper()
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		t.Fatal(err)
	}
	full := make([]filterTwSg, ncpu)
	for i := range full {
		full[i] = filterTwSg{Jiffies: 1 << 62, Passed: 1 << 40}
	}
	if err := d.maps.TwSg.Put(uint32(0), full); err != nil {
		t.Fatal(err)
	}
}

// synGuardFixtures are last in TestFixtures: they leave the guard on,
// with a spent window.
func synGuardFixtures() []fixture {
	syn := func(src string) []byte {
		return flowPkt{src: src, dst: "192.168.77.1", proto: pkt.ProtoTCP, sport: 40000, dport: 80, flags: pkt.TCPFlagSYN}.build()
	}
	spent := func(t *testing.T, d *Datapath) {
		if err := d.SetSynGuard(1000); err != nil {
			t.Fatal(err)
		}
		fillSynGuard(t, d)
	}
	return []fixture{
		{name: "syn-guard/over-budget", frame: syn("10.66.1.1"), reason: "drop_syn_guard", before: spent},
		{name: "syn-guard/known-good", frame: syn(knownGood[0]), reason: "pass_known_good", before: spent},
		{name: "syn-guard/ack-not-guarded", frame: flowPkt{src: "10.66.1.1", dst: "192.168.77.1", proto: pkt.ProtoTCP, sport: 40000, dport: 80, flags: pkt.TCPFlagACK}.build(), reason: "pass", before: spent},
	}
}

// The guard passes its budget of SYNs a jiffy from sources with no proof
// and drops the rest, after the feature buffers counted them; other TCP,
// a known-good source and a guard turned off are not touched.
func TestSynGuard(t *testing.T) {
	d := loadTestDatapath(t)
	if got, err := d.SynGuard(); err != nil || got != 0 {
		t.Fatalf("guard at load %d (%v), want 0: off until the daemon sets it", got, err)
	}
	tick, err := kernelTick()
	if err != nil {
		t.Fatal(err)
	}
	perSec := uint32(time.Second / tick)
	// Rounded to whole SYNs a jiffy, at least one.
	for _, c := range []struct{ set, want uint32 }{{1, perSec}, {50000, 50000 / perSec * perSec}, {0, 0}} {
		if err := d.SetSynGuard(c.set); err != nil {
			t.Fatal(err)
		}
		if got, err := d.SynGuard(); err != nil || got != c.want {
			t.Errorf("SetSynGuard(%d): SynGuard %d (%v), want %d", c.set, got, err, c.want)
		}
	}
	if err := d.SetSynGuard(MaxSynGuardPPS + 1); err == nil {
		t.Error("a rate above MaxSynGuardPPS was taken")
	}

	syn := flowPkt{src: "10.66.2.2", dst: "192.168.77.1", proto: pkt.ProtoTCP, sport: 40000, dport: 80, flags: pkt.TCPFlagSYN}.build()
	syn6 := flowPkt{src: "2001:db8:bad::2", dst: "fd00:77::1", proto: pkt.ProtoTCP, sport: 40000, dport: 80, flags: pkt.TCPFlagSYN}.build()
	ack := flowPkt{src: "10.66.2.2", dst: "192.168.77.1", proto: pkt.ProtoTCP, sport: 40000, dport: 80, flags: pkt.TCPFlagACK}.build()
	verdicts := func() map[string]uint64 {
		t.Helper()
		s, err := d.Stats()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]uint64{}
		for name, c := range s.Verdicts {
			out[name] = c.Packets
		}
		return out
	}

	// Off: every SYN passes.
	before := verdicts()
	sendN(t, d, syn, 50)
	if got := verdicts(); got["pass"]-before["pass"] != 50 || got["drop_syn_guard"] != before["drop_syn_guard"] {
		t.Fatalf("guard off: %d passed, %d dropped; want 50 and 0", got["pass"]-before["pass"], got["drop_syn_guard"]-before["drop_syn_guard"])
	}

	// One SYN a jiffy: a burst in one test run spans a few jiffies at
	// most, and passes one SYN in each.
	if err := d.SetSynGuard(1); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Snapshot(); err != nil { // a clean feature interval
		t.Fatal(err)
	}
	const n = 2000
	for _, frame := range [][]byte{syn, syn6} {
		before = verdicts()
		start := time.Now()
		if _, err := d.Program().Run(&ebpf.RunOptions{Data: frame, Repeat: n}); err != nil {
			t.Fatal(err)
		}
		jiffies := uint64(time.Since(start)/tick) + 2
		got := verdicts()
		passed, dropped := got["pass"]-before["pass"], got["drop_syn_guard"]-before["drop_syn_guard"]
		if passed < 1 || passed > jiffies || passed+dropped != n {
			t.Errorf("%d SYNs over %d jiffies at most: %d passed, %d dropped; want 1 to %d passed, the rest dropped", n, jiffies, passed, dropped, jiffies)
		}
	}
	// The detector saw them all.
	s, err := d.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var syns uint64
	for _, f := range s.Flows {
		syns += f.SYNs
	}
	if syns != 2*n {
		t.Errorf("the feature buffers counted %d SYNs, want %d: the guard's drops are the detector's evidence", syns, 2*n)
	}

	// Over the budget: TCP that is not a SYN passes, and so does a
	// known-good source's SYN.
	fillSynGuard(t, d)
	before = verdicts()
	sendN(t, d, ack, 5)
	sendN(t, d, syn, 5)
	if got := verdicts(); got["pass"]-before["pass"] != 5 || got["drop_syn_guard"]-before["drop_syn_guard"] != 5 {
		t.Errorf("spent window: %d passed, %d dropped; want the 5 ACKs passed and the 5 SYNs dropped", got["pass"]-before["pass"], got["drop_syn_guard"]-before["drop_syn_guard"])
	}
	if err := d.AddKnownGood(mustAddrs(t, []string{"10.66.2.2"})); err != nil {
		t.Fatal(err)
	}
	before = verdicts()
	sendN(t, d, syn, 5)
	if got := verdicts(); got["pass_known_good"]-before["pass_known_good"] != 5 {
		t.Errorf("a known-good source's SYNs over the budget: %d of 5 passed", got["pass_known_good"]-before["pass_known_good"])
	}
}
