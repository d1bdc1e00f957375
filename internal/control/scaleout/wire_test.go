// SPDX-License-Identifier: Apache-2.0

package scaleout

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/control/telemetry"
)

func sampleBatch() Batch {
	a := telemetry.Aggregate{Dst: netip.MustParseAddr("198.51.100.7"), Tick: 17000000000, Records: 42,
		First: time.Unix(1700000000, 5), Samples: 42, Proto: [4]float64{4200, 0, 0, 0},
		SrcPorts: [4]telemetry.PortWeight{{Port: 11211, Weight: 4200}}, DstPorts: [4]telemetry.PortWeight{{Port: 80, Weight: 4000}, {Port: 81, Weight: 200}},
		MinLen: 1400, MaxLen: 1400}
	a.Packets[telemetry.KindAll], a.Bytes[telemetry.KindAll] = 4200, 4200*1400*8
	a.Packets[telemetry.KindUDP], a.Bytes[telemetry.KindUDP] = 4200, 4200*1400*8
	b := telemetry.Aggregate{Dst: netip.MustParseAddr("2001:db8::1"), Tick: 17000000000, Records: 1, Samples: 1,
		FlagsOR: 0x12, FlagsAND: 0x02, HaveFlags: true}
	b.Packets[telemetry.KindSYN], b.Flows[telemetry.KindSYN] = 100, 100
	return Batch{Collector: "edge-collector-1", Partition: 3, TickLen: 100 * time.Millisecond, Tick: 17000000000,
		Aggregates: []telemetry.Aggregate{a, b}}
}

func TestBatchRoundTrip(t *testing.T) {
	want := sampleBatch()
	got, err := DecodeBatch(AppendBatch(nil, &want))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded\n%+v\nwant\n%+v", got, want)
	}
}

// TestBatchHostile: every message a broken or hostile sender can put on
// the bus is refused with ErrWire, never a panic nor a poisoned sum.
func TestBatchHostile(t *testing.T) {
	good := sampleBatch()
	enc := AppendBatch(nil, &good)
	nan := sampleBatch()
	nan.Aggregates[0].Packets[telemetry.KindAll] = math.NaN()
	// The encoder sends only weighed ports: flip one's sign on the wire.
	neg := sampleBatch()
	neg.Aggregates[1].SrcPorts[0] = telemetry.PortWeight{Port: 1, Weight: 1.5}
	negEnc := AppendBatch(nil, &neg)
	w := binary.BigEndian.AppendUint64(nil, math.Float64bits(1.5))
	i := bytes.Index(negEnc, w)
	negEnc[i] |= 0x80
	inf := sampleBatch()
	inf.Aggregates[0].Samples = math.Inf(1)
	zeroTick := sampleBatch()
	zeroTick.TickLen = 0
	for name, msg := range map[string][]byte{
		"empty":         nil,
		"no magic":      []byte("XXXX\x01"),
		"version 2":     append([]byte("TWAG\x02"), enc[5:]...),
		"truncated":     enc[:len(enc)-1],
		"trailing":      append(append([]byte(nil), enc...), 0),
		"count lies":    append(append(append([]byte(nil), enc[:23]...), 0xff, 0xff), enc[25:]...),
		"bad family":    append(append(append([]byte(nil), enc[:26+len(good.Collector)]...), 5), enc[27+len(good.Collector):]...),
		"NaN":           AppendBatch(nil, &nan),
		"negative port": negEnc,
		"Inf":           AppendBatch(nil, &inf),
		"tick length 0": AppendBatch(nil, &zeroTick),
	} {
		if _, err := DecodeBatch(msg); !errors.Is(err, ErrWire) {
			t.Errorf("%s: %v, want ErrWire", name, err)
		}
	}
	// Every prefix of a good message is refused.
	for n := range len(enc) {
		if _, err := DecodeBatch(enc[:n]); err == nil {
			t.Fatalf("a %d-byte prefix of a %d-byte message decoded", n, len(enc))
		}
	}
}

func FuzzDecodeBatch(f *testing.F) {
	b := sampleBatch()
	f.Add(AppendBatch(nil, &b))
	f.Add([]byte("TWAG\x01"))
	f.Fuzz(func(t *testing.T, msg []byte) {
		got, err := DecodeBatch(msg)
		if err != nil {
			return
		}
		if len(got.Aggregates) > MaxBatch {
			t.Fatalf("%d aggregates", len(got.Aggregates))
		}
		for i := range got.Aggregates {
			if err := got.Aggregates[i].Valid(); err != nil {
				t.Fatal(err)
			}
		}
		// What decodes survives encoding: the collectors' side reads
		// what the detectors' side writes.
		again, err := DecodeBatch(AppendBatch(nil, &got))
		if err != nil || !reflect.DeepEqual(again, got) {
			t.Fatalf("re-encoded: %v\n%+v\n%+v", err, again, got)
		}
	})
}

func TestPartitionerKeepsGroupsAndPrefixesTogether(t *testing.T) {
	cfg := detectorConfig(t)
	p := Partitioner{N: 64, Groups: cfg.Groups}
	// A group's addresses share a partition whatever their /24.
	if p.Of(netip.MustParseAddr("203.0.113.1")) != p.Of(netip.MustParseAddr("203.0.113.200")) {
		t.Error("a group is split")
	}
	if p.Of(netip.MustParseAddr("198.51.100.1")) != p.Of(netip.MustParseAddr("198.51.100.254")) {
		t.Error("a /24 is split")
	}
	if p.Of(netip.MustParseAddr("2001:db8:1::1")) != p.Of(netip.MustParseAddr("2001:db8:1:ffff::1")) {
		t.Error("a /48 is split")
	}
	if p.Of(netip.MustParseAddr("::ffff:198.51.100.1")) != p.Of(netip.MustParseAddr("198.51.100.1")) {
		t.Error("a mapped IPv4 address goes elsewhere")
	}
	seen := map[int]bool{}
	for i := range 256 {
		seen[p.Of(netip.AddrFrom4([4]byte{10, byte(i), 0, 1}))] = true
	}
	if len(seen) < 48 {
		t.Errorf("256 /24s reach %d of 64 partitions", len(seen))
	}
}
