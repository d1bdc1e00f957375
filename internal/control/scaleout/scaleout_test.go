// SPDX-License-Identifier: Apache-2.0

package scaleout

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tierwall/tierwall/internal/control/detect"
	"github.com/tierwall/tierwall/internal/control/telemetry"
	tt "github.com/tierwall/tierwall/internal/control/telemetry/telemetrytest"
)

var (
	victim  = netip.MustParseAddr("198.51.100.7")
	carpet  = netip.MustParsePrefix("203.0.113.0/24")
	benign  = netip.MustParsePrefix("2001:db8:1::/48")
	routers = []netip.Addr{netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2"),
		netip.MustParseAddr("192.0.2.3"), netip.MustParseAddr("192.0.2.4")}
)

const (
	sampling   = 100
	ticks      = 15
	partitions = 8
)

func detectorConfig(t *testing.T) telemetry.DetectorConfig {
	hg, err := detect.NewHostGroups([]detect.HostGroup{{Name: "carpet", Prefixes: []netip.Prefix{carpet}}})
	if err != nil {
		t.Fatal(err)
	}
	var host, total telemetry.Thresholds
	host[telemetry.KindAll].PPS = 100_000
	amp, _ := telemetry.ParseKind("amp:11211")
	host[amp].PPS = 50_000
	total[telemetry.KindAll].PPS = 200_000
	return telemetry.DetectorConfig{Host: host, Groups: hg, Policies: map[string]telemetry.GroupPolicy{"carpet": {Total: total}}}
}

// datagram is one router's sFlow datagram and when it arrives.
type datagram struct {
	router int
	at     time.Time
	b      []byte
}

// feed is 1.5 s of a memcached reflection flood (400 kpps to victim), a
// carpet bombing of a /24 (256 × 1.5 kpps) and benign TCP to 20 IPv6
// hosts (5 kpps each), sampled 1:100, every flow spread over the four
// routers (ECMP), in datagrams of six samples, per tick in time order.
func feed(start time.Time) [][]datagram {
	rng := rand.New(rand.NewPCG(36, 36))
	tick := 100 * time.Millisecond
	seq := make([]uint32, len(routers))
	var out [][]datagram
	for k := range ticks {
		var pk []tt.Packet
		for range 400_000 / sampling / 10 {
			pk = append(pk, tt.Packet{Src: netip.AddrFrom4([4]byte{192, 0, byte(rng.IntN(256)), byte(rng.IntN(256))}), Dst: victim, Proto: 17, SrcPort: 11211, DstPort: uint16(1024 + rng.IntN(60000)), Length: 1400})
		}
		for range 256 * 1500 / sampling / 10 {
			pk = append(pk, tt.Packet{Src: netip.AddrFrom4([4]byte{100, 64, byte(rng.IntN(256)), 1}), Dst: netip.AddrFrom4([4]byte{203, 0, 113, byte(rng.IntN(256))}), Proto: 17, SrcPort: 123, DstPort: 80, Length: 468})
		}
		for range 20 * 5000 / sampling / 10 {
			d := benign.Addr().As16()
			d[15] = byte(1 + rng.IntN(20))
			pk = append(pk, tt.Packet{Src: netip.MustParseAddr("2001:db8:ffff::1"), Dst: netip.AddrFrom16(d), Proto: 6, SrcPort: uint16(1024 + rng.IntN(60000)), DstPort: 443, TCPFlags: 0x10, Length: 1500})
		}
		rng.Shuffle(len(pk), func(i, j int) { pk[i], pk[j] = pk[j], pk[i] })
		var dgs []datagram
		for i := 0; i < len(pk); i += 6 {
			r := rng.IntN(len(routers))
			seq[r]++
			s := tt.SFlow{Agent: routers[r], Sequence: seq[r]}
			for _, p := range pk[i:min(i+6, len(pk))] {
				s.Flow(sampling, p)
			}
			at := start.Add(time.Duration(k)*tick + time.Duration(float64(tick)*float64(i)/float64(len(pk))))
			dgs = append(dgs, datagram{router: r, at: at, b: s.Bytes()})
		}
		out = append(out, dgs)
	}
	return out
}

func decoder(t *testing.T, rs ...int) *telemetry.Decoder {
	var ex []telemetry.ExporterConfig
	for _, r := range rs {
		ex = append(ex, telemetry.ExporterConfig{Address: routers[r], Name: fmt.Sprint("edge", r)})
	}
	d, err := telemetry.NewDecoder(telemetry.DecoderConfig{Exporters: ex}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// side is one deployment: collectors (each a decoder of some routers and
// a Partial) publishing to a stream, and two detectors owning the even
// and the odd partitions.
type side struct {
	name      string
	routerOf  map[int]int // router → collector
	decs      []*telemetry.Decoder
	parts     []*telemetry.Partial
	pubs      []*Publisher
	dets      []*telemetry.Detector
	consumers []*Consumer
}

func newSide(ctx context.Context, t *testing.T, nc *nats.Conn, name string, groups [][]int) *side {
	cfg := detectorConfig(t)
	pt := Partitioner{N: partitions, Groups: cfg.Groups}
	stream := StreamConfig{Name: "AGG_" + name, Subject: "agg." + name}
	s := &side{name: name, routerOf: map[int]int{}}
	for i, rs := range groups {
		for _, r := range rs {
			s.routerOf[r] = i
		}
		s.decs = append(s.decs, decoder(t, rs...))
		pub, err := NewPublisher(ctx, nc, PublisherConfig{Name: fmt.Sprint(name, i), Partitioner: pt, Stream: stream}, nil)
		if err != nil {
			t.Fatal(err)
		}
		s.pubs = append(s.pubs, pub)
		s.parts = append(s.parts, telemetry.NewPartial(cfg, pub.Emit))
	}
	for _, owned := range [][]int{{0, 2, 4, 6}, {1, 3, 5, 7}} {
		d := telemetry.NewDetector(cfg)
		c, err := Consume(ctx, nc, DetectorConfig{Partitioner: pt, Stream: stream, Owned: owned}, d, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		s.dets, s.consumers = append(s.dets, d), append(s.consumers, c)
	}
	return s
}

// waitDelivered waits until the detectors merged every aggregate the
// collectors queued.
func (s *side) waitDelivered(t *testing.T) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		var sent, got uint64
		for _, p := range s.pubs {
			st := p.Stats()
			sent += st.Aggregates
			if st.Dropped > 0 || st.Errors > 0 {
				t.Fatalf("%s: publisher lost aggregates: %+v", s.name, st)
			}
		}
		for _, c := range s.consumers {
			st := c.Stats()
			got += st.Aggregates
			if st.Malformed+st.Misrouted+st.WrongTick+st.Invalid > 0 {
				t.Fatalf("%s: consumer refused messages: %+v", s.name, st)
			}
		}
		if got == sent {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d of %d aggregates delivered", s.name, got, sent)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

type attackKey struct {
	dst           string
	kinds         string
	carpet        bool
	first, detect time.Time
}

func keyOf(a telemetry.Attack) attackKey {
	return attackKey{fmt.Sprint(a.Dst), fmt.Sprint(a.Kinds), a.Carpet, a.FirstRecord, a.Detected}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b)) }

// TestTwoCollectorsSameAsOne: a flood whose routers are split across two
// collectors is judged from the bus exactly as one collector seeing every
// router judges it, and as the single-process detector fed the records.
func TestTwoCollectorsSameAsOne(t *testing.T) {
	ctx := context.Background()
	start := time.Unix(1700000000, 0)
	dgs := feed(start)
	nc := startNATS(t)
	one := newSide(ctx, t, nc, "one", [][]int{{0, 1, 2, 3}})
	two := newSide(ctx, t, nc, "two", [][]int{{0, 1}, {2, 3}})
	ref := telemetry.NewDetector(detectorConfig(t))
	refDec := decoder(t, 0, 1, 2, 3)
	tick := 100 * time.Millisecond
	var refAttacks []telemetry.Attack
	attacks := map[string][]telemetry.Attack{}
	for k, tickDgs := range dgs {
		for _, dg := range tickDgs {
			var rs []telemetry.Record
			emit := func(r *telemetry.Record) { rs = append(rs, *r) }
			if err := refDec.Decode(routers[dg.router], dg.b, dg.at, emit); err != nil {
				t.Fatal(err)
			}
			ref.Add(dg.at, rs)
			for _, s := range []*side{one, two} {
				c := s.routerOf[dg.router]
				rs = rs[:0]
				if err := s.decs[c].Decode(routers[dg.router], dg.b, dg.at, emit); err != nil {
					t.Fatal(err)
				}
				s.parts[c].Add(dg.at, rs)
			}
		}
		end := start.Add(time.Duration(k+1) * tick)
		st, _ := ref.Judge(end)
		refAttacks = append(refAttacks, st...)
		for _, s := range []*side{one, two} {
			for _, p := range s.parts {
				p.Flush(end)
			}
			s.waitDelivered(t)
			for _, d := range s.dets {
				st, _ := d.Judge(end)
				attacks[s.name] = append(attacks[s.name], st...)
			}
		}
	}
	if len(refAttacks) != 2 {
		t.Fatalf("single process: %d attacks, want the flood and the carpet bombing: %+v", len(refAttacks), refAttacks)
	}
	for _, s := range []*side{one, two} {
		got := attacks[s.name]
		if len(got) != len(refAttacks) {
			t.Fatalf("%s: %d attacks, want %d: %+v", s.name, len(got), len(refAttacks), got)
		}
		for _, want := range refAttacks {
			i := slices.IndexFunc(got, func(a telemetry.Attack) bool { return keyOf(a) == keyOf(want) })
			if i < 0 {
				t.Errorf("%s: no attack like %+v in %+v", s.name, keyOf(want), got)
				continue
			}
			g := got[i]
			if !near(g.PPS, want.PPS) || !near(g.BPS, want.BPS) || g.Signature != want.Signature {
				t.Errorf("%s: %v read %.0f pps %.0f bps %+v, single process %.0f pps %.0f bps %+v",
					s.name, g.Dst, g.PPS, g.BPS, g.Signature, want.PPS, want.BPS, want.Signature)
			}
			t.Logf("%s: %v %v detected %v after the first record, %.0f pps", s.name, g.Dst, g.Kinds, g.Detected.Sub(g.FirstRecord), g.PPS)
		}
		// Every destination's rates, benign ones included, are the
		// single process's.
		dsts := []netip.Addr{victim, netip.MustParseAddr("203.0.113.9"), netip.MustParseAddr("2001:db8:1::7")}
		for _, dst := range dsts {
			want := ref.Rates(dst)
			var got map[telemetry.Kind]telemetry.Limits
			for _, d := range s.dets {
				if r := d.Rates(dst); r != nil {
					if got != nil {
						t.Errorf("%s: %v has state in both detectors", s.name, dst)
					}
					got = r
				}
			}
			if len(got) != len(want) || len(want) == 0 {
				t.Errorf("%s: %v kinds %v, single process %v", s.name, dst, got, want)
			}
			for k, w := range want {
				if g := got[k]; !near(g.PPS, w.PPS) || !near(g.BPS, w.BPS) {
					t.Errorf("%s: %v %v at %.3f pps, single process %.3f", s.name, dst, k, g.PPS, w.PPS)
				}
			}
		}
	}
	// Both detectors had work: the partitions spread the destinations.
	for _, c := range two.consumers {
		if c.Stats().Aggregates == 0 {
			t.Errorf("a detector received nothing: %+v", c.Stats())
		}
	}
}
