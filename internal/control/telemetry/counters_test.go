// SPDX-License-Identifier: Apache-2.0

package telemetry

import (
	"math"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/control/detect"
	tt "github.com/tierwall/tierwall/internal/control/telemetry/telemetrytest"
)

// counterAt decodes one sFlow datagram of counter samples sent at the
// agent's uptime (ms), arriving at t0 plus that uptime.
func counterAt(t *testing.T, d *Decoder, from netip.Addr, uptime uint32, ics ...tt.IfCounters) {
	t.Helper()
	s := tt.SFlow{Agent: from, Uptime: uptime}
	for _, ic := range ics {
		s.Interface(ic, &tt.EthCounters{FCS: 7, Alignment: 2})
	}
	if err := d.Decode(from, s.Bytes(), t0.Add(time.Duration(uptime)*time.Millisecond), func(*Record) { t.Fatal("a counter sample made a record") }); err != nil {
		t.Fatal(err)
	}
}

func iface(t *testing.T, d *Decoder, idx uint32) Interface {
	t.Helper()
	for _, x := range stats(t, d).Interfaces {
		if x.IfIndex == idx {
			return x
		}
	}
	t.Fatalf("no interface %d in %+v", idx, stats(t, d).Interfaces)
	return Interface{}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-6*math.Max(1, math.Abs(b)) }

// Counter samples as an agent sends them every 20 s: the table keeps
// each interface's counters and the rates between samples, the Ethernet
// record's errors beside them.
func TestSFlowCounterSamples(t *testing.T) {
	d := newTestDecoder(t, DecoderConfig{})
	ic := tt.IfCounters{Index: 3, Speed: 10e9, Status: 3, InOctets: 1e12, OutOctets: 2e12, InUcast: 1000, InMulticast: 10, InBroadcast: 1,
		OutUcast: 2000, InErrors: 5, OutDiscards: 6, OutMulticast: math.MaxUint32} // an agent without the counter sends all ones
	counterAt(t, d, router, 1000, ic, tt.IfCounters{Index: 4, Speed: 1e9, Status: 1})
	x := iface(t, d, 3)
	if x.SpeedBPS != 10e9 || !x.OperUp || !x.AdminUp || x.InOctets != 1e12 || x.InPackets != 1011 || x.OutPackets != 2000 ||
		x.InErrors != 5 || x.OutDiscards != 6 || x.Ethernet == nil || x.Ethernet.FCSErrors != 7 || x.Ethernet.AlignmentErrors != 2 ||
		x.Samples != 1 || x.InBPS != 0 || x.Type != 6 {
		t.Fatalf("after one sample: %+v", x)
	}
	if y := iface(t, d, 4); y.OperUp || !y.AdminUp || y.SpeedBPS != 1e9 {
		t.Errorf("interface 4: %+v", y)
	}
	// 20 s later: 5 GB in (2 Gbit/s, 20%), 1 GB out, 2 Mpackets in.
	ic.InOctets += 5e9
	ic.OutOctets += 1e9
	ic.InUcast += 2e6
	ic.OutUcast += 4e5
	counterAt(t, d, router, 21000, ic)
	x = iface(t, d, 3)
	if !near(x.InBPS, 2e9) || !near(x.OutBPS, 4e8) || !near(x.InPPS, 1e5) || !near(x.OutPPS, 2e4) ||
		!near(x.InUtilisation, 0.2) || !near(x.OutUtilisation, 0.04) || x.Samples != 2 || x.Resets != 0 {
		t.Errorf("rates: %+v", x)
	}
	if st := stats(t, d); st.Counters != 3 || st.Records != 0 {
		t.Errorf("exporter %+v", st)
	}
}

// A 32-bit counter wraps between two samples: read modulo 2^32, not as
// a reset. A counter going back is an agent restart (its uptime went
// back) or a clear: no rate across it, counted, and the next sample
// rates from there.
func TestSFlowCounterWrapAndReset(t *testing.T) {
	d := newTestDecoder(t, DecoderConfig{})
	ic := tt.IfCounters{Index: 1, Speed: 1e9, Status: 3, InOctets: 1 << 40, InUcast: math.MaxUint32 - 99,
		OutOctets: math.MaxUint32 - 999} // an agent that fills the 64-bit field from a 32-bit counter
	counterAt(t, d, router, 10_000, ic)
	ic.InOctets += 1e9
	ic.InUcast = 900 // wrapped: 1000 packets
	ic.OutOctets = 9000
	counterAt(t, d, router, 20_000, ic)
	x := iface(t, d, 1)
	if !near(x.InPPS, 100) || !near(x.InBPS, 8e8) || !near(x.OutBPS, 8e3) || x.Resets != 0 {
		t.Fatalf("across a wrap: %+v", x)
	}
	// The agent restarted: uptime and counters from zero.
	ic.InOctets, ic.InUcast, ic.OutOctets = 1000, 10, 0
	counterAt(t, d, router, 5000, ic)
	x = iface(t, d, 1)
	if x.Resets != 1 || x.InBPS != 0 || x.InPPS != 0 || x.InOctets != 1000 {
		t.Fatalf("after a restart: %+v", x)
	}
	ic.InOctets += 1e8
	counterAt(t, d, router, 15_000, ic)
	if x = iface(t, d, 1); !near(x.InBPS, 8e7) || x.Resets != 1 {
		t.Fatalf("after the restart: %+v", x)
	}
	// Counters cleared, the agent up all along: a 64-bit counter back.
	ic.InOctets = 5
	counterAt(t, d, router, 25_000, ic)
	if x = iface(t, d, 1); x.Resets != 2 || x.InBPS != 0 {
		t.Fatalf("after a clear: %+v", x)
	}
	// A jump no 1 Gbit/s link carries (a clear read as a 32-bit wrap, or
	// garbage) is a reset too.
	ic.InOctets = 5
	ic.OutOctets = 1 << 40
	counterAt(t, d, router, 35_000, ic)
	if x = iface(t, d, 1); x.Resets != 3 || x.OutBPS != 0 {
		t.Fatalf("after an impossible rate: %+v", x)
	}
}

// A spoofed exporter inventing ifIndexes fills its table, then every
// new one is refused and counted; the bound over all exporters holds
// too; an interface quiet for ifEvictAfter makes room.
func TestSFlowInterfaceTableBounded(t *testing.T) {
	other := netip.MustParseAddr("192.0.2.2")
	d := newTestDecoder(t, DecoderConfig{Exporters: []ExporterConfig{{Address: router}, {Address: other}}, MaxInterfaces: 4, MaxInterfacesTotal: 6})
	for i := range uint32(100) {
		counterAt(t, d, router, 1000+i, tt.IfCounters{Index: i + 1, Speed: 1e9, Status: 3})
	}
	for i := range uint32(10) {
		counterAt(t, d, other, 1000+i, tt.IfCounters{Index: i + 1, Speed: 1e9, Status: 3})
	}
	es := d.Exporters()
	if len(es[0].Interfaces) != 4 || es[0].InterfacesRefused != 96 || len(es[1].Interfaces) != 2 || es[1].InterfacesRefused != 8 {
		t.Fatalf("tables: %d (refused %d), %d (refused %d)", len(es[0].Interfaces), es[0].InterfacesRefused, len(es[1].Interfaces), es[1].InterfacesRefused)
	}
	// The known interfaces still update.
	counterAt(t, d, router, 30_000, tt.IfCounters{Index: 1, Speed: 1e9, Status: 3, InOctets: 1e6})
	if x := d.Exporters()[0].Interfaces[0]; x.IfIndex != 1 || x.Samples != 2 {
		t.Fatalf("interface 1: %+v", x)
	}
	// Eleven minutes on, interface 2-4 quiet: a new one takes a place.
	counterAt(t, d, router, 11*60_000, tt.IfCounters{Index: 500, Speed: 1e9, Status: 3})
	if es = d.Exporters(); len(es[0].Interfaces) != 4 || es[0].Interfaces[3].IfIndex != 500 || es[0].InterfacesRefused != 96 {
		t.Fatalf("after eviction: %+v (refused %d)", es[0].Interfaces, es[0].InterfacesRefused)
	}
}

// With no uplink_bps, a group's capacity is its uplinks' ifSpeed from
// the counter samples: a flood over it is blackholed, one under it is
// not, and without the samples (or with only some uplinks known) it
// never is.
func TestRTBHOnDerivedCapacity(t *testing.T) {
	lo := netip.MustParseAddr("127.0.0.1")
	hg, err := detect.NewHostGroups([]detect.HostGroup{{Name: "dc", Prefixes: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		speeds []uint64 // per uplink; none: no counter samples
		rtbh   bool
		source string
	}{
		{"1G uplinks", []uint64{5e8, 5e8}, true, "ifspeed"},
		{"100G uplinks", []uint64{50e9, 50e9}, false, "ifspeed"},
		{"no samples", nil, false, "unknown"},
		{"one uplink unknown", []uint64{5e8}, false, "unknown"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ups := []Uplink{{Exporter: lo, IfIndex: 7}, {Exporter: lo, IfIndex: 8}}
			pol := map[string]GroupPolicy{"dc": {Uplinks: ups}}
			s, err := Start(Config{Listen: []string{"127.0.0.1:0"},
				Decoder:  DecoderConfig{Exporters: []ExporterConfig{{Address: lo}}},
				Detector: DetectorConfig{Host: hostLimits(50_000), Groups: hg, Policies: pol},
				Action:   ActionConfig{Mode: DryRun, Policies: pol}}, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			conn, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(s.Addrs()[0]))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if len(c.speeds) > 0 {
				cs := tt.SFlow{Agent: lo}
				for i, sp := range c.speeds {
					cs.Interface(tt.IfCounters{Index: 7 + uint32(i), Speed: sp, Status: 3}, nil)
				}
				if _, err := conn.Write(cs.Bytes()); err != nil {
					t.Fatal(err)
				}
				waitCounters(t, s, len(c.speeds))
			}
			// 300k packets of 1400 bytes in an instant: gigabits.
			sf := tt.SFlow{Agent: lo}
			for range 30 {
				sf.Flow(10000, tt.Packet{Src: reflector, Dst: victim, Proto: 17, SrcPort: 11211, DstPort: 80, Length: 1400})
			}
			if _, err := conn.Write(sf.Bytes()); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(5 * time.Second)
			for time.Now().Before(deadline) && len(s.Status(1).Plan) == 0 {
				time.Sleep(20 * time.Millisecond)
			}
			time.Sleep(300 * time.Millisecond) // the peak grows over the window
			st := s.Status(1)
			rtbh := false
			for _, u := range st.Plan {
				rtbh = rtbh || u.Kind == UpRTBH
			}
			if len(st.Plan) == 0 || rtbh != c.rtbh {
				t.Errorf("plan %+v (attacks %+v), want RTBH %v", st.Plan, st.Attacks, c.rtbh)
			}
			if len(st.Capacities) != 1 || st.Capacities[0].Source != c.source || len(st.Capacities[0].Uplinks) != 2 {
				t.Fatalf("capacities %+v", st.Capacities)
			}
			var want float64
			if c.source == "ifspeed" {
				want = float64(c.speeds[0] + c.speeds[1])
			}
			if st.Capacities[0].CapacityBPS != want {
				t.Errorf("capacity %v, want %v", st.Capacities[0].CapacityBPS, want)
			}
		})
	}
}

func waitCounters(t *testing.T, s *Service, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if es := s.Decoder().Exporters(); len(es) == 1 && len(es[0].Interfaces) == n {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("counter samples not in: %+v", s.Decoder().Exporters())
}

// A configured uplink_bps wins over the uplinks' ifSpeed.
func TestConfiguredCapacityWins(t *testing.T) {
	d := newTestDecoder(t, DecoderConfig{})
	counterAt(t, d, router, 1000, tt.IfCounters{Index: 7, Speed: 100e9, Status: 3})
	s := &Service{dec: d}
	ups := []Uplink{{Exporter: router, IfIndex: 7}}
	act := ActionConfig{Policies: map[string]GroupPolicy{"dc": {UplinkBPS: 1e9, Uplinks: ups}, "derived": {Uplinks: ups}}}
	eff, caps := s.capacities(act, t0.Add(2*time.Second))
	if eff.Policies["dc"].UplinkBPS != 1e9 || eff.Policies["derived"].UplinkBPS != 100e9 || act.Policies["derived"].UplinkBPS != 0 {
		t.Fatalf("policies %+v (configured map %+v)", eff.Policies, act.Policies)
	}
	if len(caps) != 2 || caps[0].Source != "configured" || caps[0].DerivedBPS != 100e9 || caps[1].Source != "ifspeed" {
		t.Fatalf("capacities %+v", caps)
	}
	a := Attack{ID: "a1", Dst: []netip.Prefix{netip.PrefixFrom(victim, 32)}, Group: "dc", PeakBPS: 5e9, Signature: Signature{Proto: 17}}
	if ups := Plan([]Attack{a}, eff); len(ups) != 2 || ups[1].Kind != UpRTBH {
		t.Errorf("5 Gbit/s over the configured 1: %+v", ups)
	}
	// Stale samples: the derived capacity is unknown again.
	if _, caps = s.capacities(act, t0.Add(UplinkFresh+time.Minute)); caps[1].Source != "unknown" || caps[1].CapacityBPS != 0 {
		t.Errorf("stale: %+v", caps[1])
	}
}
