// SPDX-License-Identifier: Apache-2.0

package datapath

import (
	"net/netip"
	"sync/atomic"
	"testing"

	"github.com/tierwall/tierwall/internal/pkt"
)

// sieveHas reads a's bit as the data plane would.
func sieveHas(t *testing.T, d *Datapath, a netip.Addr) bool {
	t.Helper()
	sieve, err := d.goodSieve()
	if err != nil {
		t.Fatal(err)
	}
	b := d.sieveBit(a.Unmap())
	return atomic.LoadUint64(&sieve[b/64])&(1<<(b%64)) != 0
}

// setSieveBit sets or clears a's bit behind the list's back.
func setSieveBit(t *testing.T, d *Datapath, a netip.Addr, on bool) {
	t.Helper()
	sieve, err := d.goodSieve()
	if err != nil {
		t.Fatal(err)
	}
	b := d.sieveBit(a.Unmap())
	if on {
		atomic.OrUint64(&sieve[b/64], 1<<(b%64))
	} else {
		atomic.AndUint64(&sieve[b/64], ^uint64(1<<(b%64)))
	}
}

// sieveTestDatapath has a drop rule with the bypass on 198.18.2.0/24 and
// the members' own rate out of the way (TestKnownGoodSpoofedMember tests
// it).
func sieveTestDatapath(t *testing.T) *Datapath {
	t.Helper()
	d := loadTestDatapathWith(t, Options{ExactCapacity4: 64, ExactCapacity6: 64, PrefixCapacity: 64, AllowCapacity: 64, FeatureCapacity: 4096, KnownGoodCapacity: 256})
	if err := d.SetFlowRules(mustFlowRules(t, []string{"dst 198.18.2.0/24 proto udp drop bypass-known-good"})); err != nil {
		t.Fatal(err)
	}
	if err := d.SetKnownGoodRate(1 << 31); err != nil {
		t.Fatal(err)
	}
	return d
}

// The data plane reads the bit user space computes for a member (same
// hash, salt and size), and a clear bit is taken as proof: with its bit
// cleared behind the list's back a member meets the bypass rule as a
// stranger does, and passes again once it is set. Both families, and a
// member sending as an IPv4-mapped IPv6 source.
func TestGoodSieveGatesTheLookup(t *testing.T) {
	d := sieveTestDatapath(t)
	v4, v6 := netip.MustParseAddr("10.7.7.7"), netip.MustParseAddr("2001:db8:600d::7")
	if err := d.AddKnownGood([]netip.Addr{netip.MustParseAddr("::ffff:10.7.7.7"), v6}); err != nil {
		t.Fatal(err)
	}
	const n = 100
	for _, c := range []struct {
		member   netip.Addr
		src, dst string
	}{
		{v4, "10.7.7.7", "198.18.2.1"},
		{v4, "::ffff:10.7.7.7", "::ffff:198.18.2.1"},
		{v6, "2001:db8:600d::7", "::ffff:198.18.2.1"},
	} {
		frame := flowPkt{src: c.src, dst: c.dst, proto: pkt.ProtoUDP, sport: 1, dport: 2}.build()
		verdict := func(want string) {
			t.Helper()
			before := observe(t, d)
			sendN(t, d, frame, n)
			if got := observe(t, d).verdicts[want].Packets - before.verdicts[want].Packets; got != n {
				t.Errorf("%s (bit set: %v): %d of %d packets %s", c.src, sieveHas(t, d, c.member), got, n, want)
			}
		}
		if !sieveHas(t, d, c.member) {
			t.Fatalf("member %s added without its sieve bit", c.member)
		}
		verdict("pass_known_good")
		setSieveBit(t, d, c.member, false)
		verdict("drop_flow")
		setSieveBit(t, d, c.member, true)
		verdict("pass_known_good")
	}
}

// Removing members rewrites the sieve to exactly the bits of the members
// left: theirs all set (they keep passing), the removed ones' cleared
// unless a remaining member shares them (they meet the rule).
func TestGoodSieveRemoveKeepsTheRest(t *testing.T) {
	d := sieveTestDatapath(t)
	var members []netip.Addr
	for i := range 200 {
		members = append(members, netip.AddrFrom4([4]byte{10, 7, byte(i >> 8), byte(i)}))
		members = append(members, netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0x60, 0x0d, 14: byte(i >> 8), 15: byte(i)}))
	}
	if err := d.AddKnownGood(members); err != nil {
		t.Fatal(err)
	}
	var gone, kept []netip.Addr
	for i, a := range members {
		if i%4 < 2 {
			gone = append(gone, a)
		} else {
			kept = append(kept, a)
		}
	}
	if err := d.RemoveKnownGood(gone); err != nil {
		t.Fatal(err)
	}
	want := make([]uint64, d.sizes.sieveBits/64)
	for _, a := range kept {
		b := d.sieveBit(a)
		want[b/64] |= 1 << (b % 64)
	}
	sieve, err := d.goodSieve()
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if got := atomic.LoadUint64(&sieve[i]); got != want[i] {
			t.Fatalf("sieve word %d %#x, want the kept members' %#x", i, got, want[i])
		}
	}
	cleared := 0
	for _, a := range gone {
		if !sieveHas(t, d, a) {
			cleared++
		}
	}
	if cleared < len(gone)*3/4 {
		t.Errorf("%d of %d removed members' bits cleared; %d bits for %d members left should share few", cleared, len(gone), d.sizes.sieveBits, len(kept))
	}
	for i, a := range []netip.Addr{kept[0], kept[1], gone[0], gone[1]} {
		src := a.String()
		want := "pass_known_good"
		if i >= 2 {
			want = "drop_flow"
		}
		before := observe(t, d)
		sendN(t, d, flowPkt{src: src, dst: "::ffff:198.18.2.1", proto: pkt.ProtoUDP, sport: 1, dport: 2}.build(), 10)
		if got := observe(t, d).verdicts[want].Packets - before.verdicts[want].Packets; got != 10 {
			t.Errorf("%s: %d of 10 packets %s", src, got, want)
		}
	}
}
