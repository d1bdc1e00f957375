// SPDX-License-Identifier: Apache-2.0

package telemetry

import (
	"math"
	"testing"
	"time"

	tt "github.com/tierwall/tierwall/internal/control/telemetry/telemetrytest"
)

// sflowAt decodes one sFlow datagram (sequence seq, one sample of a
// 100-byte UDP packet at 1:100) arriving at now, and returns its record.
func sflowAt(t *testing.T, d *Decoder, seq uint32, now time.Time) Record {
	t.Helper()
	s := tt.SFlow{Agent: router, Sequence: seq}
	s.Flow(100, tt.Packet{Src: reflector, Dst: victim, Proto: 17, Length: 100})
	var out []Record
	if err := d.Decode(router, s.Bytes(), now, func(r *Record) { out = append(out, *r) }); err != nil {
		t.Fatal(err)
	}
	if len(out) != 1 {
		t.Fatalf("%d records", len(out))
	}
	return out[0]
}

// The records of an exporter that loses datagrams on the way are scaled
// by what its sequence numbers show lost: a fifth lost reads 1.25, more
// than half lost is capped at 2, a restart is no loss, and the scale goes
// back to 1 once the loss has been over for two windows.
func TestLossCorrection(t *testing.T) {
	d := newTestDecoder(t, DecoderConfig{})
	at := t0
	var r Record
	seq := uint32(0)
	// 100 datagrams sent over 0.5 s, every fifth lost.
	for i := range 100 {
		seq++
		if i%5 == 4 {
			continue
		}
		at = at.Add(5 * time.Millisecond)
		r = sflowAt(t, d, seq, at)
	}
	if math.Abs(r.LossScale-1.25) > 0.02 {
		t.Fatalf("a fifth lost: scale %v, want 1.25", r.LossScale)
	}
	// After two quiet windows, two of every three lost: capped.
	at = at.Add(2 * lossWindow)
	for i := range 90 {
		seq++
		if i%3 != 0 {
			continue
		}
		at = at.Add(5 * time.Millisecond)
		r = sflowAt(t, d, seq, at)
	}
	if r.LossScale != maxLossScale {
		t.Fatalf("two thirds lost: scale %v, want the cap %v", r.LossScale, maxLossScale)
	}
	// Two quiet windows, then the exporter restarts (its sequence goes
	// back): no loss.
	at = at.Add(2 * lossWindow)
	for i := range 20 {
		at = at.Add(5 * time.Millisecond)
		r = sflowAt(t, d, uint32(i+1), at)
	}
	if r.LossScale != 1 {
		t.Fatalf("after a restart with nothing lost: scale %v", r.LossScale)
	}
	// 19 lost in the first phase (the 20th, seq 100, shows with the
	// second's first datagram), 1 + 29·2 in the second.
	if st := stats(t, d); st.Resets != 1 || st.SequenceGaps != 19+1+58 {
		t.Errorf("resets %d gaps %d", st.Resets, st.SequenceGaps)
	}
}

// What the correction is for: a 60 kpps flood whose exporter loses 30%
// of its datagrams on the way reads 42 kpps uncorrected, under a 50 kpps
// threshold; corrected by the sequence numbers it is detected.
func TestLossCorrectedFloodDetected(t *testing.T) {
	for _, corrected := range []bool{true, false} {
		dec := newTestDecoder(t, DecoderConfig{})
		det := NewDetector(DetectorConfig{Host: hostLimits(50_000)})
		// 60 kpps at 1:100, six samples a datagram: 100 datagrams/s.
		start := t0
		next := start.Add(det.cfg.Tick)
		detected := false
		for i := range 300 {
			now := start.Add(time.Duration(i) * 10 * time.Millisecond)
			for !next.After(now) {
				if s, _ := det.Judge(next); len(s) > 0 {
					detected = true
				}
				next = next.Add(det.cfg.Tick)
			}
			if i%10 < 3 {
				continue // lost on the way
			}
			s := tt.SFlow{Agent: router, Sequence: uint32(i + 1)}
			for range 6 {
				s.Flow(100, tt.Packet{Src: reflector, Dst: victim, Proto: 17, SrcPort: 53, DstPort: 4444, Length: 1400})
			}
			var rs []Record
			if err := dec.Decode(router, s.Bytes(), now, func(r *Record) {
				if !corrected {
					r.LossScale = 0
				}
				rs = append(rs, *r)
			}); err != nil {
				t.Fatal(err)
			}
			det.Add(now, rs)
		}
		if detected != corrected {
			t.Errorf("corrected %v: detected %v", corrected, detected)
		}
	}
}

// Datagrams that overtake one another on the way are late, not lost:
// every tenth swapped with the next reads no loss (it read as twice its
// rate before: a gap, a reset, a gap again), and a restart a few
// datagrams behind, with nothing missing, is still a reset.
func TestReorderedIsNotLoss(t *testing.T) {
	d := newTestDecoder(t, DecoderConfig{})
	at := t0
	var r Record
	swaps := 0
	for seq := uint32(1); seq <= 200; seq++ {
		order := []uint32{seq}
		if seq%10 == 0 && seq < 200 {
			order = []uint32{seq + 1, seq}
			seq++
			swaps++
		}
		for _, s := range order {
			at = at.Add(5 * time.Millisecond)
			r = sflowAt(t, d, s, at)
		}
	}
	if r.LossScale != 1 {
		t.Errorf("reordered only: scale %v, want 1", r.LossScale)
	}
	st := stats(t, d)
	if st.Resets != 0 || st.SequenceGaps != uint64(swaps) || st.Reordered != uint64(swaps) {
		t.Errorf("%d swaps: resets %d, gaps %d, reordered %d; want 0 and %d late", swaps, st.Resets, st.SequenceGaps, st.Reordered, swaps)
	}
	// The exporter restarts: 20 datagrams behind, nothing missing.
	for s := uint32(180); s < 190; s++ {
		at = at.Add(5 * time.Millisecond)
		r = sflowAt(t, d, s, at)
	}
	if st := stats(t, d); st.Resets != 1 || st.Reordered != uint64(swaps) {
		t.Errorf("a restart 20 behind: resets %d, reordered %d", st.Resets, st.Reordered)
	}
}

// A gap filled from its middle keeps both ends; a number filled once,
// or outside every gap, fills nothing; a message longer than what is
// left of its gap fills only that.
func TestRecentGapsFill(t *testing.T) {
	var g recentGaps
	g.add(10, 20)
	for _, c := range []struct{ seq, n, want uint32 }{
		{15, 2, 2}, // the middle: [10,15) and [17,20) left
		{15, 1, 0}, // filled already
		{10, 5, 5}, // the first part whole
		{19, 5, 1}, // the last number, of five asked
		{17, 2, 2},
		{18, 1, 0},
		{30, 1, 0},
	} {
		if got := g.fill(c.seq, c.n); got != c.want {
			t.Errorf("fill(%d, %d) = %d, want %d", c.seq, c.n, got, c.want)
		}
	}
	var none *recentGaps
	if none.fill(1, 1) != 0 {
		t.Error("a stream without gaps filled one")
	}
}
