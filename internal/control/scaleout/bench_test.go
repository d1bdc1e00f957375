// SPDX-License-Identifier: Apache-2.0

package scaleout

import (
	"math/rand/v2"
	"net/netip"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/control/telemetry"
	tt "github.com/tierwall/tierwall/internal/control/telemetry/telemetrytest"
)

// benchFeed is eval-scaleout's feed: sFlow datagrams of six samples at
// 1:1 to the 4,096 addresses of a /20, from one agent.
func benchFeed(n int) [][]byte {
	r := rand.New(rand.NewPCG(36, 3))
	var out [][]byte
	for i := range n {
		s := tt.SFlow{Agent: netip.MustParseAddr("127.0.0.1"), Sequence: uint32(i + 1)}
		for range 6 {
			d := netip.AddrFrom4([4]byte{198, 18, byte(32 + r.IntN(16)), byte(r.IntN(256))})
			s.Flow(1, tt.Packet{Src: netip.AddrFrom4([4]byte{byte(20 + r.IntN(180)), byte(r.IntN(256)), 1, 1}), Dst: d, Proto: 17, SrcPort: 443, DstPort: uint16(1024 + r.IntN(60000)), Length: 512})
		}
		out = append(out, s.Bytes())
	}
	return out
}

// BenchmarkCollectors is a collector's work without its socket: decode,
// count per destination and tick, encode the tick's batches. Each
// goroutine is a collector of its own (its own decoder and Partial), so
// -cpu 1,2 compares one collector on one core with two on two: one op is
// one datagram, whoever took it.
func BenchmarkCollectors(b *testing.B) {
	feed := benchFeed(4096)
	var next atomic.Int64
	pt := Partitioner{N: 16}
	b.ReportAllocs()
	cpu0 := cpuTime()
	b.RunParallel(func(pb *testing.PB) {
		dec, err := telemetry.NewDecoder(telemetry.DecoderConfig{Exporters: []telemetry.ExporterConfig{{Address: netip.MustParseAddr("127.0.0.1")}}}, nil)
		if err != nil {
			b.Error(err)
			return
		}
		var out []byte
		part := telemetry.NewPartial(telemetry.DetectorConfig{}, func(tick int64, as []telemetry.Aggregate) {
			// The publisher's work up to the socket: split, encode.
			buckets := make([][]telemetry.Aggregate, pt.N)
			for i := range as {
				n := pt.Of(as[i].Dst)
				buckets[n] = append(buckets[n], as[i])
			}
			for p, bk := range buckets {
				out = AppendBatch(out[:0], &Batch{Partition: p, TickLen: 100 * time.Millisecond, Tick: tick, Aggregates: bk})
			}
		})
		lo := netip.MustParseAddr("127.0.0.1")
		var rs []telemetry.Record
		emit := func(r *telemetry.Record) { rs = append(rs, *r) }
		// Time advances a tick every 10,000 datagrams: 100K datagrams/s.
		now := time.Unix(1700000000, 0)
		i := int(next.Add(1)) * 1000
		for pb.Next() {
			i++
			if i%10_000 == 0 {
				now = now.Add(100 * time.Millisecond)
			}
			rs = rs[:0]
			_ = dec.Decode(lo, feed[i%len(feed)], now, emit)
			part.Add(now, rs)
		}
	})
	// CPU time per datagram, the GC's included: on a machine shared with
	// other jobs the wall time says how much CPU was left over, this
	// what a datagram costs, whichever core it ran on.
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
}

// cpuTime is this process's user and system time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkDetectorMerge is a detector's work per aggregate: decode a
// batch of 256 and merge it. The bus carries collectors × active
// destinations × 10 aggregates a second; this is what one detector core
// takes of them.
func BenchmarkDetectorMerge(b *testing.B) {
	var as []telemetry.Aggregate
	tick := time.Unix(1700000000, 0).UnixNano() / int64(100*time.Millisecond)
	for i := range 256 {
		a := telemetry.Aggregate{Dst: netip.AddrFrom4([4]byte{198, 18, 32, byte(i)}), Tick: tick, Records: 6, Samples: 6,
			Proto: [4]float64{6, 0, 0, 0}, SrcPorts: [4]telemetry.PortWeight{{Port: 443, Weight: 6}},
			DstPorts: [4]telemetry.PortWeight{{Port: 1024, Weight: 2}, {Port: 2048, Weight: 2}, {Port: 4096, Weight: 2}}, MinLen: 512, MaxLen: 512}
		a.Packets[telemetry.KindAll], a.Packets[telemetry.KindUDP] = 6, 6
		a.Bytes[telemetry.KindAll], a.Bytes[telemetry.KindUDP] = 6*512*8, 6*512*8
		as = append(as, a)
	}
	msg := AppendBatch(nil, &Batch{TickLen: 100 * time.Millisecond, Tick: tick, Aggregates: as})
	det := telemetry.NewDetector(telemetry.DetectorConfig{})
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		bt, err := DecodeBatch(msg)
		if err != nil {
			b.Fatal(err)
		}
		det.AddAggregates(bt.Aggregates)
	}
	b.ReportMetric(float64(b.N)*256/b.Elapsed().Seconds(), "aggregates/s")
}
