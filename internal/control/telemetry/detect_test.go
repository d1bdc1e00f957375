// SPDX-License-Identifier: Apache-2.0

package telemetry

import (
	"math"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/control/detect"
)

func hostLimits(pps float64) Thresholds {
	var th Thresholds
	th[KindAll].PPS = pps
	return th
}

// feedSFlow sends a flood of pps at 1:rate as an sFlow agent does: samples
// at random times, sent in datagrams of six (pmacct's sfprobe), and judges
// every tick from start until the detector names an attack or until end.
// It returns when the attack was detected, after the flood's start.
func feedSFlow(t *testing.T, d *Detector, start time.Time, dur time.Duration, pps float64, rate uint32, mk func(i int) Record) (time.Duration, bool) {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	sampleEvery := time.Duration(float64(time.Second) * float64(rate) / pps)
	var batch []Record
	nextTick := start.Add(d.cfg.Tick)
	for now, i := start, 0; now.Before(start.Add(dur)); i++ {
		now = now.Add(time.Duration(rng.ExpFloat64() * float64(sampleEvery)))
		for !nextTick.After(now) {
			if s, _ := d.Judge(nextTick); len(s) > 0 {
				return nextTick.Sub(start), true
			}
			nextTick = nextTick.Add(d.cfg.Tick)
		}
		r := mk(i)
		r.Rate, r.Packets = rate, 1
		r.Bytes = uint64(r.MinLen)
		batch = append(batch, r)
		if len(batch) == 6 {
			d.Add(now, batch)
			batch = batch[:0]
		}
	}
	return 0, false
}

func TestSFlowFloodDetectedFast(t *testing.T) {
	for _, c := range []struct {
		pps  float64
		rate uint32
	}{{100_000, 100}, {100_000, 1000}, {1_000_000, 1000}, {500_000, 1000}} {
		th := hostLimits(50_000)
		th[kindAmp].PPS = 20_000 // amp:53
		d := NewDetector(DetectorConfig{Host: th})
		start := time.Unix(1700000000, 0)
		at, ok := feedSFlow(t, d, start, 3*time.Second, c.pps, c.rate, func(i int) Record {
			return Record{Src: netip.AddrFrom4([4]byte{203, 0, 113, byte(i)}), Dst: victim, IPProto: 17, SrcPort: 53, DstPort: uint16(1024 + i%1000), MinLen: 1400 + uint16(i%60), MaxLen: 1400 + uint16(i%60)}
		})
		if !ok || at > 500*time.Millisecond {
			t.Errorf("%.0f pps at 1:%d: detected %v after %v, want ≤ 0.5 s", c.pps, c.rate, ok, at)
			continue
		}
		t.Logf("%.0f pps at 1:%d: detected %v after the flood's start", c.pps, c.rate, at)
		as := d.Attacks()
		if len(as) != 1 {
			t.Fatalf("%d attacks", len(as))
		}
		sig := as[0].Signature
		if sig.Proto != 17 || sig.SrcPort != 53 || sig.DstPort != 0 || sig.MinLen < 1400 || sig.MaxLen > 1459 || sig.MaxLen < sig.MinLen {
			t.Errorf("signature %+v", sig)
		}
	}
}

func TestBenignMixNoAttack(t *testing.T) {
	d := NewDetector(DetectorConfig{Host: hostLimits(50_000)})
	start := time.Unix(1700000000, 0)
	// 200 kpps spread over 100 destinations: 2 kpps each.
	if at, ok := feedSFlow(t, d, start, 5*time.Second, 200_000, 100, func(i int) Record {
		return Record{Src: reflector, Dst: netip.AddrFrom4([4]byte{198, 51, 100, byte(i % 100)}), IPProto: 6, TCPFlags: 0x18, SrcPort: 443, DstPort: 50000, MinLen: 1000, MaxLen: 1000}
	}); ok {
		t.Errorf("benign traffic detected as an attack after %v: %+v", at, d.Attacks())
	}
}

func TestNetFlowRecordDetectedNextTick(t *testing.T) {
	d := NewDetector(DetectorConfig{Host: hostLimits(50_000)})
	first := time.Unix(1700000000, 50_000_000)
	// softflowd's first record of a 200 kpps flood: a second of it.
	d.Add(first, []Record{{Dst: victim, IPProto: 6, TCPFlags: 0x02, Packets: 200_000, Bytes: 200_000 * 60, Rate: 1, Flow: true, Duration: time.Second, MinLen: 60, MaxLen: 60}})
	var at time.Duration
	for now := time.Unix(1700000000, 100_000_000); now.Sub(first) < time.Second; now = now.Add(100 * time.Millisecond) {
		if s, _ := d.Judge(now); len(s) > 0 {
			at = now.Sub(first)
			if s[0].FirstRecord != first || !s[0].Signature.SYNOnly || s[0].Signature.Proto != 6 {
				t.Errorf("attack %+v", s[0])
			}
			break
		}
	}
	if at == 0 || at > 300*time.Millisecond {
		t.Errorf("detected %v after the first record, want ≤ 0.3 s", at)
	}
}

func TestCarpetBombing(t *testing.T) {
	groups := []detect.HostGroup{{Name: "customers", Prefixes: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}}}
	hg, err := detect.NewHostGroups(groups)
	if err != nil {
		t.Fatal(err)
	}
	d := NewDetector(DetectorConfig{Host: hostLimits(50_000), Groups: hg,
		Policies: map[string]GroupPolicy{"customers": {Total: hostLimits(100_000)}}, WithdrawAfter: time.Second})
	start := time.Unix(1700000000, 0)
	// 256 kpps over the /24: 1 kpps each, none over its 50 kpps.
	at, ok := feedSFlow(t, d, start, 3*time.Second, 256_000, 1000, func(i int) Record {
		return Record{Src: reflector, Dst: netip.AddrFrom4([4]byte{198, 51, 100, byte(i)}), IPProto: 17, SrcPort: 123, DstPort: 80, MinLen: 468, MaxLen: 468}
	})
	if !ok || at > 500*time.Millisecond {
		t.Fatalf("carpet bombing: detected %v after %v", ok, at)
	}
	as := d.Attacks()
	if len(as) != 1 || !as[0].Carpet || as[0].Group != "customers" || as[0].Dst[0] != groups[0].Prefixes[0] || as[0].Signature.SrcPort != 123 {
		t.Fatalf("attacks %+v", as)
	}
	// Quiet: over after WithdrawAfter.
	var ended []Attack
	for now := start.Add(4 * time.Second); now.Before(start.Add(20*time.Second)) && len(ended) == 0; now = now.Add(100 * time.Millisecond) {
		_, ended = d.Judge(now)
	}
	if len(ended) != 1 || ended[0].Ended.IsZero() {
		t.Errorf("not withdrawn: %+v", d.Attacks())
	}
}

func TestMaxDestsBounded(t *testing.T) {
	d := NewDetector(DetectorConfig{Host: hostLimits(50_000), MaxDests: 100})
	now := time.Unix(1700000000, 0)
	var rs []Record
	for i := 0; i < 1000; i++ {
		rs = append(rs, Record{Dst: netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), IPProto: 17, Packets: 1, Rate: 1})
	}
	d.Add(now, rs)
	if len(d.dests) != 100 || d.Untracked() != 900 {
		t.Errorf("%d dests, %d untracked", len(d.dests), d.Untracked())
	}
	// Destinations that fell quiet are forgotten.
	d.Judge(now.Add(10 * time.Second))
	if len(d.dests) != 0 {
		t.Errorf("%d dests kept after quiet", len(d.dests))
	}
}

// A feed held back on the way (a stalled exporter or path, a starved
// collector) and then delivered at once is no flood: its samples count
// when the exporter's uptime says they were sent. Counted on arrival, as
// before, a second of a 30 kpps host's samples in one burst read as a
// flood over the 50 kpps threshold.
func TestHeldBackFeedIsNoFlood(t *testing.T) {
	for _, useUptime := range []bool{true, false} {
		d := NewDetector(DetectorConfig{Host: hostLimits(50_000)})
		var clock exporterClock
		boot := time.Unix(1700000000, 0)
		start := boot.Add(time.Hour)
		const pps, rate = 30_000, 100
		every := time.Second * rate / pps
		stallFrom, stallTo := start.Add(3*time.Second), start.Add(4*time.Second)
		nextTick := start.Add(d.cfg.Tick)
		attacked := false
		var batch []Record
		for sent := start; sent.Before(start.Add(6 * time.Second)); sent = sent.Add(every) {
			arrive := sent
			if !sent.Before(stallFrom) && sent.Before(stallTo) {
				arrive = stallTo // held back, then all at once
			}
			for !nextTick.After(arrive) {
				if s, _ := d.Judge(nextTick); len(s) > 0 {
					attacked = true
				}
				nextTick = nextTick.Add(d.cfg.Tick)
			}
			r := Record{Src: netip.MustParseAddr("203.0.113.9"), Dst: victim, IPProto: 6, SrcPort: 443, DstPort: 40000,
				Packets: 1, Bytes: 600, Rate: rate, MinLen: 600, MaxLen: 600}
			if useUptime {
				r.At = clock.at(sent.Sub(boot), arrive)
			}
			batch = append(batch, r)
			if len(batch) == 6 {
				d.Add(arrive, batch)
				batch = batch[:0]
			}
		}
		if useUptime && attacked {
			t.Errorf("a 30 kpps host's feed held back 1 s was read as a flood over 50 kpps, with the uptime")
		}
		if !useUptime && !attacked {
			t.Logf("counted on arrival the burst was no flood either: the test no longer shows the defect")
		}
	}
}

// The exporter clock: the least delay seen is the floor, a held datagram
// is placed when it was sent (at most clockMaxLag back), and a reboot
// (uptime back to zero) starts the floor again.
func TestExporterClock(t *testing.T) {
	var c exporterClock
	now := time.Unix(1700000000, 0)
	up := time.Hour
	for i := 0; i < 10; i++ {
		delay := time.Duration(5+i%3) * time.Millisecond
		if got := c.at(up, now.Add(delay)); !got.Equal(now.Add(5 * time.Millisecond)) {
			t.Fatalf("datagram %d sent at %v: placed at %v, want the 5 ms floor", i, now, got)
		}
		up += 100 * time.Millisecond
		now = now.Add(100 * time.Millisecond)
	}
	// Held 800 ms: placed 800 ms back.
	if got := c.at(up, now.Add(805*time.Millisecond)); !got.Equal(now.Add(5 * time.Millisecond)) {
		t.Errorf("a held datagram placed at %v, want %v", got, now.Add(5*time.Millisecond))
	}
	// Held 5 s: at most clockMaxLag back.
	up += 100 * time.Millisecond
	now = now.Add(100 * time.Millisecond)
	if got, arrive := c.at(up, now.Add(5*time.Second)), now.Add(5*time.Second); !got.Equal(arrive.Add(-clockMaxLag)) {
		t.Errorf("held 5 s: placed at %v, want %v", got, arrive.Add(-clockMaxLag))
	}
	// An uptime that stays put says nothing: on arrival, whatever the
	// floor.
	for i := 1; i <= 3; i++ {
		arrive := now.Add(time.Duration(i) * time.Second)
		if got := c.at(up, arrive); !got.Equal(arrive) {
			t.Errorf("the same uptime %d s later: placed at %v, want its arrival %v", i, got, arrive)
		}
	}
	// A reboot: uptime 0 a minute later; the floor starts again.
	now = now.Add(time.Minute)
	if got := c.at(0, now); !got.Equal(now) {
		t.Errorf("after a reboot: %v, want %v", got, now)
	}
	if got := c.at(time.Second, now.Add(time.Second+3*time.Millisecond)); !got.Equal(now.Add(time.Second)) {
		t.Errorf("after a reboot, the next datagram: %v, want %v", got, now.Add(time.Second))
	}
}

// A steady flood a fifth over its threshold is detected, and benign
// traffic a fifth under it is not: judged just after a tick begins, the
// decayed sum holds only a decay's share of the last window (the new
// tick has had no time to fill), and read as it was, a 60 kpps flood
// against 50 kpps read 40 kpps and was never detected. The rate is read
// for the part of the tick elapsed.
func TestSteadyRateReadAtItsValue(t *testing.T) {
	for _, c := range []struct {
		pps  float64
		want bool
	}{{60_000, true}, {40_000, false}} {
		d := NewDetector(DetectorConfig{Host: hostLimits(50_000)})
		_, ok := feedSFlow(t, d, time.Unix(1700000000, 0), 5*time.Second, c.pps, 100, func(i int) Record {
			return Record{Src: reflector, Dst: victim, IPProto: 17, SrcPort: 53, DstPort: 4444, MinLen: 1400, MaxLen: 1400}
		})
		if ok != c.want {
			t.Errorf("%.0f pps against 50000: detected %v", c.pps, ok)
		}
		if r := d.Rates(victim)[KindAll].PPS; math.Abs(r-c.pps) > 0.15*c.pps {
			t.Errorf("%.0f pps read %.0f", c.pps, r)
		}
	}
}

// Spoofed SYNs "from" a client outside the network to its servers come
// back through the routers as SYN-ACKs to the client: a flood on the
// client as the feed reads it. With the network it protects (Protects,
// from telemetry.networks or the host groups) the client is never judged;
// the same SYN-ACKs to an address inside it are.
func TestOutsideDestinationNeverJudged(t *testing.T) {
	inside := netip.MustParsePrefix("198.51.100.0/24")
	cfg := DetectorConfig{Host: hostLimits(50_000), Protects: inside.Contains}
	client := netip.MustParseAddr("203.0.113.50")
	for _, c := range []struct {
		dst  netip.Addr
		want bool
	}{{client, false}, {victim, true}} {
		d := NewDetector(cfg)
		at, ok := feedSFlow(t, d, time.Unix(1700000000, 0), 3*time.Second, 300_000, 1000, func(i int) Record {
			return Record{Src: netip.AddrFrom4([4]byte{198, 51, 100, byte(1 + i%200)}), Dst: c.dst, IPProto: 6, TCPFlags: 0x12, SrcPort: 443, DstPort: uint16(1024 + i%60000), MinLen: 60, MaxLen: 60}
		})
		if ok != c.want {
			t.Errorf("300 kpps of SYN-ACKs to %s: detected %v (after %v), want %v", c.dst, ok, at, c.want)
		}
		if n := d.Outside(); (n > 0) == c.want {
			t.Errorf("to %s: %d records counted outside the network", c.dst, n)
		}
	}
}
