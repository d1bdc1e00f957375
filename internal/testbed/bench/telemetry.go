// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"time"

	"github.com/tierwall/tierwall/internal/control/telemetry"
	tt "github.com/tierwall/tierwall/internal/control/telemetry/telemetrytest"
)

// DecodeCase is one kind of datagram the collector takes: its name, the
// datagrams (cycled), what must be decoded first (templates), and
// whether sFlow goes through goflow2 alone.
type DecodeCase struct {
	Name       string
	Datagrams  [][]byte
	Setup      [][]byte
	NoFastPath bool
}

// DecodeResult is a case's cost per datagram over the rounds: ns, the
// records each held, and heap allocations.
type DecodeResult struct {
	Case    string
	NsPerDg []float64
	Records float64
	Allocs  float64
}

var benchExporter = netip.MustParseAddr("192.0.2.1")

// DecodeCases are the datagrams routers send most: sFlow of six flow
// samples (the fast path, then goflow2 alone), NetFlow v5 of 30 flows,
// and NetFlow v9 and IPFIX of 24 flow records.
func DecodeCases() []DecodeCase {
	r := rand.New(rand.NewPCG(36, 9))
	dst := func() netip.Addr { return netip.AddrFrom4([4]byte{198, 18, byte(r.IntN(16)), byte(r.IntN(256))}) }
	src := func() netip.Addr {
		return netip.AddrFrom4([4]byte{byte(1 + r.IntN(220)), byte(r.IntN(256)), byte(r.IntN(256)), byte(r.IntN(256))})
	}
	var sf [][]byte
	for i := range 256 {
		s := tt.SFlow{Agent: benchExporter, Sequence: uint32(i + 1)}
		for range 6 {
			s.Flow(1000, tt.Packet{Src: src(), Dst: dst(), Proto: 17, SrcPort: 443, DstPort: uint16(1024 + r.IntN(60000)), Length: uint16(64 + r.IntN(1400))})
		}
		sf = append(sf, s.Bytes())
	}
	flow := func() tt.Flow {
		return tt.Flow{Src: src(), Dst: dst(), Proto: 17, SrcPort: 123, DstPort: uint16(1024 + r.IntN(60000)), Packets: 10, Bytes: 4680, Start: 1, End: 900}
	}
	var v5 [][]byte
	for i := range 256 {
		fs := make([]tt.Flow, 30)
		for j := range fs {
			fs[j] = flow()
		}
		v5 = append(v5, tt.NetFlow5(uint32(i*30), 0, fs...))
	}
	nf := func(v uint16) (setup, data [][]byte) {
		m := tt.NF{Version: v}
		m.Template(256, tt.FlowFields)
		setup = [][]byte{m.Bytes()}
		for range 256 {
			m := tt.NF{Version: v}
			recs := make([][]byte, 24)
			for j := range recs {
				recs[j] = tt.Record(flow())
			}
			m.Data(256, recs...)
			data = append(data, m.Bytes())
		}
		return setup, data
	}
	s9, d9 := nf(9)
	s10, d10 := nf(10)
	return []DecodeCase{
		{Name: "sFlow v5, 6 flow samples (fast path)", Datagrams: sf},
		{Name: "sFlow v5, 6 flow samples (goflow2 alone)", Datagrams: sf, NoFastPath: true},
		{Name: "NetFlow v5, 30 flows", Datagrams: v5},
		{Name: "NetFlow v9, 24 records", Datagrams: d9, Setup: s9},
		{Name: "IPFIX, 24 records", Datagrams: d10, Setup: s10},
	}
}

// BenchDecode runs each case for per in every round, the cases
// interleaved, through the decoder and the detector as the collector
// hands them on (one batch a datagram), on one goroutine.
func BenchDecode(cases []DecodeCase, rounds int, per time.Duration) ([]DecodeResult, error) {
	type state struct {
		dec *telemetry.Decoder
		det *telemetry.Detector
	}
	var th telemetry.Thresholds
	th[telemetry.KindAll].PPS = 1e15 // counted and judged, never an attack
	st := make([]state, len(cases))
	res := make([]DecodeResult, len(cases))
	now := time.Now()
	for i, c := range cases {
		dec, err := telemetry.NewDecoder(telemetry.DecoderConfig{Exporters: []telemetry.ExporterConfig{{Address: benchExporter}}, NoFastPath: c.NoFastPath}, nil)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.Name, err)
		}
		for _, b := range c.Setup {
			if err := dec.Decode(benchExporter, b, now, func(*telemetry.Record) {}); err != nil {
				return nil, fmt.Errorf("%s: setup: %w", c.Name, err)
			}
		}
		st[i] = state{dec, telemetry.NewDetector(telemetry.DetectorConfig{Host: th})}
		res[i].Case = c.Name
	}
	var batch []telemetry.Record
	emit := func(r *telemetry.Record) { batch = append(batch, *r) }
	for range rounds {
		for i, c := range cases {
			var ms0, ms1 runtime.MemStats
			runtime.ReadMemStats(&ms0)
			n, recs := 0, 0
			t0 := time.Now()
			for time.Since(t0) < per {
				for range 64 {
					b := c.Datagrams[n%len(c.Datagrams)]
					batch = batch[:0]
					if err := st[i].dec.Decode(benchExporter, b, t0, emit); err != nil {
						return nil, fmt.Errorf("%s: %w", c.Name, err)
					}
					st[i].det.Add(t0, batch)
					recs += len(batch)
					n++
				}
			}
			el := time.Since(t0)
			runtime.ReadMemStats(&ms1)
			res[i].NsPerDg = append(res[i].NsPerDg, float64(el.Nanoseconds())/float64(n))
			res[i].Records = float64(recs) / float64(n)
			res[i].Allocs = float64(ms1.Mallocs-ms0.Mallocs) / float64(n)
		}
	}
	return res, nil
}
