// SPDX-License-Identifier: Apache-2.0

package telemetry

import (
	"net/netip"
	"testing"
	"time"

	tt "github.com/tierwall/tierwall/internal/control/telemetry/telemetrytest"
)

// The decoder and detector on one core: datagrams like pmacctd's (six
// samples) and softflowd's IPFIX (20 records), to many destinations.
func BenchmarkDecodeSFlow(b *testing.B) {
	s := tt.SFlow{Agent: router}
	for i := 0; i < 6; i++ {
		s.Flow(1000, tt.Packet{Src: reflector, Dst: netip.AddrFrom4([4]byte{198, 51, 100, byte(i)}), Proto: 17, SrcPort: 53, DstPort: 4444, Length: 1400})
	}
	benchDecode(b, s.Bytes(), 6)
}

func BenchmarkDecodeIPFIX(b *testing.B) {
	d := newTestDecoder(b, DecoderConfig{})
	m := tt.NF{Version: 10}
	m.Template(256, tt.FlowFields)
	if _, err := decodeAll(b, d, m.Bytes()); err != nil {
		b.Fatal(err)
	}
	var recs [][]byte
	for i := 0; i < 20; i++ {
		recs = append(recs, tt.Record(tt.Flow{Src: reflector, Dst: netip.AddrFrom4([4]byte{198, 51, 100, byte(i)}), Proto: 17, SrcPort: 123, DstPort: 80, Packets: 10, Bytes: 4680, Start: 1, End: 900}))
	}
	m = tt.NF{Version: 10}
	m.Data(256, recs...)
	benchDecodeWith(b, d, m.Bytes(), 20)
}

func benchDecode(b *testing.B, dgram []byte, n int) {
	benchDecodeWith(b, newTestDecoder(b, DecoderConfig{}), dgram, n)
}

func benchDecodeWith(b *testing.B, d *Decoder, dgram []byte, n int) {
	det := NewDetector(DetectorConfig{Host: hostLimits(1e9)})
	var batch []Record
	emit := func(r *Record) { batch = append(batch, *r) }
	now := time.Unix(1700000000, 0)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		batch = batch[:0]
		if err := d.Decode(router, dgram, now, emit); err != nil {
			b.Fatal(err)
		}
		det.Add(now, batch)
	}
	b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "datagrams/s")
}
