// SPDX-License-Identifier: Apache-2.0

package scaleout

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/control/telemetry"
	tt "github.com/tierwall/tierwall/internal/control/telemetry/telemetrytest"
)

// TestConsumerRefusesHostileMessages: what reaches a partition's subject
// without being a good batch of it is counted and dropped, and the good
// messages around it still count.
func TestConsumerRefusesHostileMessages(t *testing.T) {
	ctx := context.Background()
	nc := startNATS(t)
	cfg := detectorConfig(t)
	pt := Partitioner{N: partitions, Groups: cfg.Groups}
	stream := StreamConfig{Name: "HOSTILE", Subject: "hostile"}
	det := telemetry.NewDetector(cfg)
	c, err := Consume(ctx, nc, DetectorConfig{Partitioner: pt, Stream: stream}, det, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	good := sampleBatch()
	good.Aggregates = good.Aggregates[:1]
	good.Partition = pt.Of(good.Aggregates[0].Dst)
	subj := Subject(stream.Subject, good.Partition)
	wrongTick := good
	wrongTick.TickLen = time.Second
	elsewhere := good
	other := (good.Partition + 1) % partitions
	for _, m := range []struct {
		subj string
		data []byte
	}{
		{subj, []byte("not a batch")},
		{subj, AppendBatch(nil, &wrongTick)},
		{Subject(stream.Subject, other), AppendBatch(nil, &elsewhere)},
		{subj, AppendBatch(nil, &good)},
	} {
		if err := nc.Publish(m.subj, m.data); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for c.Stats().Messages == 0 || c.Stats().Misrouted == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("nothing merged: %+v", c.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	want := ConsumerStats{Messages: 1, Aggregates: 1, Malformed: 1, WrongTick: 1, Misrouted: 1}
	if got := c.Stats(); got != want {
		t.Errorf("counters %+v, want %+v", got, want)
	}
	if det.Rates(good.Aggregates[0].Dst) == nil {
		t.Error("the good message was not merged")
	}
}

// TestCollectorOverUDP: the whole collector (sockets, decoder, ticks,
// publisher) in real time; a flood it hears is named by a detector on
// the other side of the bus.
func TestCollectorOverUDP(t *testing.T) {
	ctx := context.Background()
	nc := startNATS(t)
	cfg := detectorConfig(t)
	pt := Partitioner{N: partitions, Groups: cfg.Groups}
	stream := StreamConfig{Name: "UDP", Subject: "udp"}
	det := telemetry.NewDetector(cfg)
	cons, err := Consume(ctx, nc, DetectorConfig{Partitioner: pt, Stream: stream}, det, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	lo := netip.MustParseAddr("127.0.0.1")
	col, err := StartCollector(ctx, nc, CollectorConfig{Listen: []string{"127.0.0.1:0"},
		Decoder:   telemetry.DecoderConfig{Exporters: []telemetry.ExporterConfig{{Address: lo}}},
		Detector:  cfg,
		Publisher: PublisherConfig{Name: "test", Partitioner: pt, Stream: stream}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(col.Addrs()[0]))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// 300 kpps of memcached reflection at 1:1000: 300 samples a second,
	// for up to 3 s, judged every tick.
	var attacks []telemetry.Attack
	for i := 0; i < 150 && len(attacks) == 0; i++ {
		s := tt.SFlow{Agent: lo, Sequence: uint32(i + 1)}
		for j := range 6 {
			s.Flow(1000, tt.Packet{Src: netip.AddrFrom4([4]byte{192, 0, 2, byte(j)}), Dst: victim, Proto: 17, SrcPort: 11211, DstPort: 80, Length: 1400})
		}
		if _, err := conn.Write(s.Bytes()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
		st, _ := det.Judge(time.Now())
		attacks = append(attacks, st...)
	}
	if err := col.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if len(attacks) != 1 || attacks[0].Dst[0].Addr() != victim {
		t.Fatalf("attacks %+v, want one on %v; publisher %+v, consumer %+v", attacks, victim, col.Publisher().Stats(), cons.Stats())
	}
	ps := col.Publisher().Stats()
	if ps.Dropped+ps.Errors > 0 || ps.Acked != ps.Messages {
		t.Errorf("publisher %+v: lost messages", ps)
	}
	t.Logf("detected %v after the first record; publisher %+v", attacks[0].Detected.Sub(attacks[0].FirstRecord), ps)
}

func TestOwnedPartitionsOnce(t *testing.T) {
	c := DetectorConfig{Partitioner: Partitioner{N: 8}, Owned: []int{3, 1, 3, 2, 1}}
	c.defaults()
	if want := []int{1, 2, 3}; !slices.Equal(c.Owned, want) {
		t.Errorf("owned %v, want %v", c.Owned, want)
	}
}
