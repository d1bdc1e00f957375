// SPDX-License-Identifier: Apache-2.0

package telemetry

import (
	"errors"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"testing"

	tt "github.com/tierwall/tierwall/internal/control/telemetry/telemetrytest"
)

// sflowOutcome is everything a datagram changes: what was emitted,
// whether it was an error, and the exporter's counters after it.
type sflowOutcome struct {
	recs  []Record
	err   bool
	stats ExporterStats
}

// agreeOn decodes b with the fast path and with goflow2 alone, each on
// a decoder that has seen prev first, and fails unless both give the
// same. It says whether the fast path took b.
func agreeOn(t *testing.T, prev, b []byte) bool {
	t.Helper()
	var out [2]sflowOutcome
	for i, slow := range []bool{false, true} {
		d := newTestDecoder(t, DecoderConfig{Exporters: []ExporterConfig{{Address: router, SamplingRate: 100}}, NoFastPath: slow})
		if prev != nil {
			_ = d.Decode(router, slices.Clone(prev), t0, func(*Record) {})
		}
		err := d.Decode(router, slices.Clone(b), t0, func(r *Record) { out[i].recs = append(out[i].recs, *r) })
		if err != nil && !errors.Is(err, ErrMalformed) {
			t.Fatalf("error %v is not ErrMalformed", err)
		}
		out[i].err = err != nil
		out[i].stats = stats(t, d)
	}
	if !reflect.DeepEqual(out[0], out[1]) {
		t.Fatalf("fast path and goflow2 disagree on % x:\nfast    %+v\ngoflow2 %+v", b, out[0], out[1])
	}
	_, took := walkSFlow(b, nil)
	return took
}

// randomSFlow is a datagram of flow samples as routers send them, with
// the records the fast path reads and those it skips or leaves to
// goflow2, sometimes a counter sample.
func randomSFlow(r *rand.Rand) []byte {
	s := tt.SFlow{Agent: router, SubAgent: uint32(r.IntN(2)), Sequence: r.Uint32N(5), Uptime: 1000 + r.Uint32N(1000)}
	if r.IntN(4) == 0 {
		s.Agent = netip.MustParseAddr("2001:db8::1")
	}
	for range 1 + r.IntN(8) {
		if r.IntN(20) == 0 {
			s.Counter(uint32(r.IntN(4)), r.Uint64(), r.Uint64())
			continue
		}
		var recs [][]byte
		for range r.IntN(4) {
			p := tt.Packet{Src: reflector, Dst: victim, Proto: []uint8{6, 17, 1}[r.IntN(3)], SrcPort: uint16(r.IntN(2000)), DstPort: 80,
				TCPFlags: uint8(r.IntN(64)), Length: uint16(40 + r.IntN(1500))}
			if r.IntN(4) == 0 {
				p.Src, p.Dst = netip.MustParseAddr("2001:db8::9"), netip.MustParseAddr("2001:db8:1::7")
			}
			if r.IntN(8) == 0 {
				p.FragOffset = 100
			}
			switch r.IntN(20) {
			case 0, 1, 2, 3, 4, 5, 6, 7, 8:
				recs = append(recs, tt.HeaderRecord(p))
			case 9, 10, 11:
				recs = append(recs, tt.IPRecord(p))
			case 12, 13:
				recs = append(recs, tt.FlowRecord(1001, make([]byte, 16)))
			case 14, 15:
				ver := uint32(1 + r.IntN(3))
				recs = append(recs, tt.FlowRecord(1002, append([]byte{0, 0, 0, byte(ver)}, make([]byte, 24)...)))
			case 16:
				recs = append(recs, tt.FlowRecord(1003, make([]byte, 32)))
			case 17:
				recs = append(recs, tt.FlowRecord(2, make([]byte, 20)))
			default:
				recs = append(recs, tt.FlowRecord(uint32(2000+r.IntN(10)), make([]byte, r.IntN(12))))
			}
		}
		s.Sample(r.IntN(3) == 0, []uint32{0, 1, 100, 1000, 1 << 21}[r.IntN(5)], recs...)
	}
	return s.Bytes()
}

// mutate cuts, overwrites or lengthens a word of b.
func mutate(r *rand.Rand, b []byte) []byte {
	b = slices.Clone(b)
	switch r.IntN(4) {
	case 0:
		return b[:r.IntN(len(b)+1)]
	case 1:
		b[r.IntN(len(b))] = byte(r.Uint32())
	case 2:
		if len(b) >= 4 {
			i := r.IntN(len(b)/4) * 4
			b[i], b[i+1], b[i+2], b[i+3] = 0, 0, byte(r.IntN(4)), byte(r.Uint32())
		}
	default:
		b = append(b, make([]byte, r.IntN(16))...)
	}
	return b
}

// TestSFlowFastPathAgrees holds the fast path to goflow2 on datagrams of
// every kind it takes and declines, whole and damaged.
func TestSFlowFastPathAgrees(t *testing.T) {
	r := rand.New(rand.NewPCG(36, 7))
	took, declined := 0, 0
	var prev []byte
	for range 20000 {
		b := randomSFlow(r)
		if r.IntN(2) == 0 {
			b = mutate(r, b)
		}
		if agreeOn(t, prev, b) {
			took++
		} else {
			declined++
		}
		prev = b
	}
	// Both sides are exercised: a generator that stopped making what
	// the fast path takes would make this test hold nothing.
	if took < 5000 || declined < 5000 {
		t.Fatalf("fast path took %d, declined %d", took, declined)
	}
	t.Logf("fast path took %d datagrams, left %d to goflow2", took, declined)
}

// FuzzSFlowFastPath: on any bytes the fast path and goflow2 agree.
func FuzzSFlowFastPath(f *testing.F) {
	r := rand.New(rand.NewPCG(36, 8))
	for range 16 {
		f.Add(randomSFlow(r))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		agreeOn(t, nil, b)
	})
}
