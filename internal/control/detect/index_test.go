// SPDX-License-Identifier: Apache-2.0

package detect

import (
	"net/netip"
	"testing"
	"time"
)

// Keys convert back to the address they were made from; an IPv4-mapped
// address gets its IPv4 address's key, and keys order as addresses do.
func TestKeyRoundTrip(t *testing.T) {
	for _, s := range []string{"0.0.0.0", "10.1.2.3", "255.255.255.255", "::", "::1", "2001:db8::1", "::fffe:1.2.3.4", "ffff::"} {
		a := netip.MustParseAddr(s)
		if got := KeyOf(a).Addr(); got != a {
			t.Errorf("%s came back as %s", a, got)
		}
	}
	if got := KeyOf(netip.MustParseAddr("::ffff:10.1.2.3")).Addr(); got != netip.MustParseAddr("10.1.2.3") {
		t.Errorf("mapped address came back as %s, want the IPv4 address", got)
	}
	addrs := []string{"1.2.3.4", "1.2.3.5", "255.0.0.0", "::", "::1", "::ffff:0:0:1", "2001:db8::1"}
	for i := range addrs {
		for j := range addrs {
			a, b := netip.MustParseAddr(addrs[i]), netip.MustParseAddr(addrs[j])
			if KeyOf(a).less(KeyOf(b)) != a.Less(b) {
				t.Errorf("%s < %s: keys say %v", a, b, KeyOf(a).less(KeyOf(b)))
			}
		}
	}
}

// The index numbers keys in order through growth, and a key whose run is
// too long goes to the spill map and is still found.
func TestIndexGrowAndSpill(t *testing.T) {
	var x index
	x.reset(0)
	const n = 100_000
	for i := range n {
		k := KeyOf(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}))
		if j, isNew := x.put(k); !isNew || j != int32(i) {
			t.Fatalf("key %d numbered %d (new %v)", i, j, isNew)
		}
	}
	for i := range n {
		k := KeyOf(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}))
		if j := x.get(k); j != int32(i) {
			t.Fatalf("key %d found as %d", i, j)
		}
		if j, isNew := x.put(k); isNew || j != int32(i) {
			t.Fatalf("key %d put again: %d, new %v", i, j, isNew)
		}
	}
	if x.get(KeyOf(netip.MustParseAddr("10.200.0.0"))) != -1 {
		t.Fatal("absent key found")
	}

	// Every slot taken by another key: a worst case no hash should allow.
	x.reset(100)
	other := KeyOf(netip.MustParseAddr("192.0.2.1"))
	x.keys = append(x.keys, other)
	for i := range x.tbl {
		x.tbl[i] = 0
	}
	k := KeyOf(netip.MustParseAddr("192.0.2.2"))
	if j, isNew := x.put(k); !isNew || j != 1 || len(x.spill) != 1 {
		t.Fatalf("crowded out key numbered %d (new %v, spill %d)", j, isNew, len(x.spill))
	}
	if x.get(k) != 1 {
		t.Fatal("spilled key not found")
	}
	if j, isNew := x.put(k); isNew || j != 1 {
		t.Fatal("spilled key numbered twice")
	}
}

// Per-source aggregation: destinations and protocols counted once each,
// mapped sources unmapped, and a reset Traffic holds nothing of the last
// interval.
func TestTrafficAggregatesPerSource(t *testing.T) {
	tr := NewTrafficSized(time.Second, 4)
	src, mapped := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("::ffff:10.0.0.1")
	d1, d2 := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	tr.Add(src, d1, 17, 10, 640, 0)
	tr.Add(mapped, d1, 6, 5, 320, 5)
	tr.Add(src, d2, 17, 1, 64, 0)
	tr.Add(netip.MustParseAddr("10.0.0.2"), d2, 1, 3, 192, 0)
	if len(tr.Sources) != 2 || len(tr.Dests) != 2 || len(tr.Pairs) != 4 {
		t.Fatalf("%d sources, %d destinations, %d pairs", len(tr.Sources), len(tr.Dests), len(tr.Pairs))
	}
	i := tr.SourceIndex(KeyOf(src))
	s := tr.Source(mapped)
	if i != 0 || s != &tr.Sources[0] || tr.SourceAddr(i) != src {
		t.Fatalf("source at %d, address %s", i, tr.SourceAddr(i))
	}
	if s.Packets != 16 || s.SYNs != 5 || s.Dests != 2 || tr.Proto(i, 17) != 11 || tr.Proto(i, 6) != 5 || tr.Proto(i, 1) != 0 {
		t.Fatalf("source %+v, udp %d tcp %d", *s, tr.Proto(i, 17), tr.Proto(i, 6))
	}
	if tr.Proto(1, 1) != 3 || tr.Proto(1, 17) != 0 || tr.Dests[1].Packets != 4 || tr.DestAddr(1) != d2 {
		t.Fatalf("second source or destination wrong: %+v %+v", tr.Sources[1], tr.Dests)
	}
	tr.Reset(time.Second, 4)
	tr.Add(netip.MustParseAddr("10.0.0.2"), d1, 17, 1, 64, 0)
	if len(tr.Sources) != 1 || tr.Sources[0].Dests != 1 || tr.Source(src) != nil || tr.Proto(0, 17) != 1 || tr.Total.Packets != 1 {
		t.Fatalf("after reset: %+v", tr.Sources)
	}
}
