package detect

import (
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"
)

var server = netip.MustParseAddr("192.0.2.10")

// normal is one interval of benign traffic: 200 clients to 20 servers,
// a few packets each, deterministic.
func normal(i int) *Traffic {
	t := NewTraffic(time.Second)
	for c := 0; c < 200; c++ {
		src := netip.AddrFrom4([4]byte{172, 16, byte(c / 250), byte(c%250 + 1)})
		dst := netip.AddrFrom4([4]byte{192, 0, 2, byte(c%20 + 1)})
		n := uint64(5 + (c*7+i*3)%11)
		t.Add(src, dst, 6, n, n*100, 1)
	}
	return t
}

func TestRateStaticThresholds(t *testing.T) {
	tr := normal(0)
	tr.Add(netip.MustParseAddr("203.0.113.1"), server, 17, 5000, 5000*64, 0)
	tr.Add(netip.MustParseAddr("203.0.113.2"), server, 6, 900, 900*64, 800) // SYN flood
	r := &Rate{Static: Thresholds{PPS: 1000, SYNPPS: 500}}
	ds := r.Detect(tr)
	if len(ds) != 2 || ds[0].Prefix.String() != "203.0.113.1/32" || ds[1].Prefix.String() != "203.0.113.2/32" {
		t.Fatalf("detections %+v", ds)
	}
	r = &Rate{Static: Thresholds{PerProto: map[uint8]float64{17: 100}}}
	if ds := r.Detect(tr); len(ds) != 1 || ds[0].Prefix.Addr().String() != "203.0.113.1" {
		t.Fatalf("per-protocol: %+v", ds)
	}
}

func TestRateLearnsBaseline(t *testing.T) {
	r := &Rate{LearnIntervals: 5, Margin: 2, MinPPS: 10}
	for i := 0; i < 5; i++ {
		if ds := r.Detect(normal(i)); len(ds) != 0 {
			t.Fatalf("flagged while learning: %+v", ds)
		}
	}
	l, ok := r.Learned()
	if !ok || l != 2*15 { // busiest normal source: 15 packets/s
		t.Fatalf("learned %v %v, want 30", l, ok)
	}
	tr := normal(6)
	tr.Add(netip.MustParseAddr("203.0.113.9"), server, 17, 31, 31*64, 0)
	tr.Add(netip.MustParseAddr("203.0.113.8"), server, 17, 29, 29*64, 0)
	ds := r.Detect(tr)
	if len(ds) != 1 || ds[0].Prefix.Addr().String() != "203.0.113.9" {
		t.Fatalf("after learning: %+v", ds)
	}
}

func learnedEntropy(t *testing.T) *Entropy {
	e := &Entropy{History: 8, MinPPS: 100}
	for i := 0; i < 8; i++ {
		if ds := e.Detect(normal(i)); ds != nil {
			t.Fatalf("flagged while learning")
		}
	}
	return e
}

func TestEntropyConcentratedAttack(t *testing.T) {
	e := learnedEntropy(t)
	// Normal traffic again: nothing.
	if ds := e.Detect(normal(9)); len(ds) != 0 {
		t.Fatalf("normal flagged: %+v", ds)
	}
	// 30 bots flood one server: dst entropy falls, volume jumps.
	tr := normal(10)
	for b := 0; b < 30; b++ {
		tr.Add(netip.AddrFrom4([4]byte{198, 51, 100, byte(b + 1)}), server, 17, 2000, 2000*64, 0)
	}
	ds := e.Detect(tr)
	bots := 0
	for _, d := range ds {
		if d.Prefix.Bits() != 32 {
			t.Errorf("concentrated attack escalated to %s", d.Prefix)
		}
		if d.Prefix.Addr().As4()[0] == 198 {
			bots++
		} else {
			t.Errorf("named a legitimate source: %+v", d)
		}
	}
	if bots != 30 {
		t.Fatalf("named %d of 30 bots: %+v", bots, ds)
	}
}

func TestEntropySpoofedEscalatesToPrefixes(t *testing.T) {
	e := learnedEntropy(t)
	// Every address of 20 IPv4 /24s sends one packet, and 40K random-ish
	// addresses of two IPv6 /48s one each: spoofed sources.
	tr := normal(11)
	for n := 0; n < 20; n++ {
		for h := 0; h < 256; h++ {
			tr.Add(netip.AddrFrom4([4]byte{10, 1, byte(n), byte(h)}), server, 17, 1, 64, 0)
		}
	}
	v6 := netip.MustParseAddr("2001:db8:77::10")
	for i := 0; i < 40000; i++ {
		b := [16]byte{0x20, 0x01, 0x0d, 0xb8, 0, byte(0x77 + i%2), 0, 0, byte(i >> 16), byte(i >> 8), byte(i), 1, 2, 3, 4, 5}
		tr.Add(netip.AddrFrom16(b), v6, 17, 1, 64, 0)
	}
	ds := e.Detect(tr)
	got := map[string]bool{}
	for _, d := range ds {
		got[d.Prefix.String()] = true
		if d.Prefix.Addr().Is4() && (d.Prefix.Bits() != 24 || !netip.MustParsePrefix("10.1.0.0/19").Contains(d.Prefix.Addr())) {
			t.Errorf("unexpected detection %+v", d)
		}
		if d.Prefix.Addr().Is6() && d.Prefix.Bits() != 48 {
			t.Errorf("unexpected detection %+v", d)
		}
	}
	if !got["2001:db8:77::/48"] || !got["2001:db8:78::/48"] || len(ds) != 22 {
		t.Errorf("%d prefixes (%v), want the 20 /24s and 2 /48s carrying the flood", len(ds), got)
	}
}

func TestEntropyUniformGrowthIsNotAnAttack(t *testing.T) {
	// Twice the usual traffic spread like usual traffic (a busy hour):
	// volume rises but neither entropy moves, so nothing is flagged.
	e := learnedEntropy(t)
	tr := NewTraffic(time.Second)
	for _, half := range []*Traffic{normal(12), normal(13)} {
		for p, n := range half.Pairs {
			tr.Add(p.Src, p.Dst, 6, n, n*100, 0)
		}
	}
	if ds := e.Detect(tr); len(ds) != 0 {
		t.Fatalf("busy hour flagged: %d detections", len(ds))
	}
}

func TestListReloads(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "feed.txt")
	if err := os.WriteFile(p, []byte("# feed\n192.0.2.0/24\n2001:db8::1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	l := &List{Paths: []string{p}}
	if ds := l.Detect(nil); len(ds) != 2 {
		t.Fatalf("%+v", ds)
	}
	// A broken update keeps the last good contents and reports the error.
	if err := os.WriteFile(p, []byte("not-an-address\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, time.Now().Add(time.Minute), time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if ds := l.Detect(nil); len(ds) != 2 || l.Err() == nil {
		t.Fatalf("bad reload: %d detections, err %v", len(ds), l.Err())
	}
	if err := os.WriteFile(p, []byte("198.51.100.7\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, time.Now().Add(2*time.Minute), time.Now().Add(2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if ds := l.Detect(nil); len(ds) != 1 || ds[0].Prefix.String() != "198.51.100.7/32" || l.Err() != nil {
		t.Fatalf("good reload: %+v %v", ds, l.Err())
	}
}
