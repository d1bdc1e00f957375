// SPDX-License-Identifier: Apache-2.0

package datapath

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/tierwall/tierwall/internal/pkt"
)

// TestSampleDrops: with sampling on, every dropped packet (N=1) reaches
// the ring with its bytes and reason, and passed packets never do; off,
// nothing does.
func TestSampleDrops(t *testing.T) {
	d := loadTestDatapath(t)
	s, err := d.Sampler()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	bad, good := netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("198.51.100.8")
	if err := d.Block(netip.PrefixFrom(bad, 32)); err != nil {
		t.Fatal(err)
	}
	frame := func(src netip.Addr, payload int) []byte {
		return pkt.Frame{Src: src, Dst: netip.MustParseAddr("192.0.2.1"), Proto: pkt.ProtoUDP, SrcPort: 4444, DstPort: 53,
			Payload: make([]byte, payload)}.Build()
	}
	send := func(f []byte) {
		t.Helper()
		if _, err := d.Program().Run(&ebpf.RunOptions{Data: f}); err != nil {
			t.Fatal(err)
		}
	}

	send(frame(bad, 10)) // sampling off
	if got, err := s.Drain(100); err != nil || len(got) != 0 {
		t.Fatalf("sampling off: %d samples (%v), want none", len(got), err)
	}

	if err := s.SetEvery(1); err != nil {
		t.Fatal(err)
	}
	small, big := frame(bad, 10), frame(bad, 600)
	send(small)
	send(frame(good, 10)) // passes: never sampled
	send(big)
	got, err := s.Drain(100)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("%d samples, want the 2 drops", len(got))
	}
	if !bytes.Equal(got[0].Data, small) || got[0].Len != len(small) || got[0].Reason != "drop_exact" {
		t.Errorf("first sample: len %d reason %q, %d bytes; want the %d-byte frame whole, drop_exact", got[0].Len, got[0].Reason, len(got[0].Data), len(small))
	}
	if got[1].Len != len(big) || !bytes.Equal(got[1].Data, big[:SampleSnap]) {
		t.Errorf("second sample: len %d, %d bytes; want %d cut to %d", got[1].Len, len(got[1].Data), len(big), SampleSnap)
	}

	// 1 in 4, at random: some of 400 drops, far from all of them.
	if err := s.SetEvery(4); err != nil {
		t.Fatal(err)
	}
	for range 400 {
		send(small)
	}
	if got, err = s.Drain(1000); err != nil || len(got) < 40 || len(got) > 200 {
		t.Errorf("1 in 4 of 400 drops: %d samples (%v)", len(got), err)
	}
	if err := s.SetEvery(0); err != nil {
		t.Fatal(err)
	}
	send(small)
	if got, _ := s.Drain(100); len(got) != 0 {
		t.Errorf("sampling off again: %d samples", len(got))
	}
}
