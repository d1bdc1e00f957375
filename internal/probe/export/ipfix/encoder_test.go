// SPDX-License-Identifier: Apache-2.0

package ipfix

import (
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/probe/export/ipfix/ipfixtest"
)

var t0 = time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)

// clock is an injected clock.
type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

// The flowEndReason values (RFC 5102, IE 136) the fixtures use.
const (
	endIdle      uint8 = 1
	endActive    uint8 = 2
	endOfFlow    uint8 = 3
	endForced    uint8 = 4
	endResources uint8 = 5
)

// fixtures: every end reason, both families, both initiator directions,
// hardware, software and both tiers, one-way flows, records without
// packets.
func fixtures() []Record {
	st, en := t0.Add(-30*time.Second+123*time.Millisecond), t0.Add(-time.Second+456*time.Millisecond)
	return []Record{
		{Proto: 6, Lo: ap("10.0.0.1:40000"), Hi: ap("10.0.0.2:443"), App: "tls", Start: st, End: en, Reason: endOfFlow, Final: true,
			Packets: [2]uint64{10, 20}, Bytes: [2]uint64{1000, 20000}, HWPackets: [2]uint64{6, 20}, HWBytes: [2]uint64{600, 20000},
			TCPFlags: [2]uint8{0x1b, 0x12}},
		{Proto: 17, Lo: ap("[2001:db8::1]:53"), Hi: ap("[2001:db8::2]:5353"), InitDir: 1, App: "dns", Start: st, End: en,
			Reason: endIdle, Final: true, Packets: [2]uint64{3, 4}, Bytes: [2]uint64{300, 400}},
		{Proto: 6, Lo: ap("192.0.2.1:80"), Hi: ap("192.0.2.9:51000"), InitDir: 1, App: "http", Start: st, End: en, Reason: endActive,
			Packets: [2]uint64{1 << 40, 7}, Bytes: [2]uint64{1 << 50, 700}, HWPackets: [2]uint64{1 << 40, 7}, HWBytes: [2]uint64{1 << 50, 700},
			TCPFlags: [2]uint8{0x10, 0x18}},
		{Proto: 17, Lo: ap("[2001:db8::5]:4000"), Hi: ap("[2001:db8::6]:4001"), App: strings.Repeat("x", 100), Start: st, End: en,
			Reason: endForced, Final: true, Packets: [2]uint64{5, 0}, Bytes: [2]uint64{5000, 0}},
		{Proto: 17, Lo: ap("198.51.100.1:1"), Hi: ap("198.51.100.2:2"), App: "unknown", Start: st, End: en, Reason: endResources,
			Final: true}, // no packets since the last record: sent for its end reason
		{Proto: 6, Lo: ap("198.51.100.3:1"), Hi: ap("198.51.100.4:2"), App: "unknown", Start: st, End: en, Reason: endActive},
		// nothing new and not final: nothing sent
	}
}

// expect writes, from a record, the flows a collector must read back,
// independently of the encoder's views.
func expect(r Record, f Format, biflow bool) []ipfixtest.Flow {
	app := r.App
	if len(app) > 64 {
		app = app[:64]
	}
	if f == NetFlow9 && len(app) > 32 {
		app = app[:32]
	}
	ms := func(t time.Time) time.Time { return time.UnixMilli(t.UnixMilli()) }
	tierOf := func(p, hw uint64) uint8 {
		switch {
		case hw > 0 && p > hw:
			return 3
		case hw > 0:
			return 2
		}
		return 1
	}
	ends := func(d int) (netip.AddrPort, netip.AddrPort) {
		if d == 0 {
			return r.Lo, r.Hi
		}
		return r.Hi, r.Lo
	}
	v6 := !r.Lo.Addr().Is4()
	var out []ipfixtest.Flow
	if r.Packets[0]+r.Packets[1] == 0 && !r.Final {
		return nil
	}
	i, o := int(r.InitDir), 1-int(r.InitDir)
	if biflow && f == IPFIX {
		src, dst := ends(i)
		tid := uint16(TemplateIPv4Biflow)
		if v6 {
			tid = TemplateIPv6Biflow
		}
		return []ipfixtest.Flow{{TemplateID: tid, Src: src, Dst: dst, Proto: r.Proto,
			TCPFlags: uint16(r.TCPFlags[i]), Packets: r.Packets[i], Bytes: r.Bytes[i], HWPackets: r.HWPackets[i], HWBytes: r.HWBytes[i],
			RevTCPFlags: uint16(r.TCPFlags[o]), RevPackets: r.Packets[o], RevBytes: r.Bytes[o], RevHWPackets: r.HWPackets[o], RevHWBytes: r.HWBytes[o],
			Start: ms(r.Start), End: ms(r.End), Reason: r.Reason, App: app,
			Tier: tierOf(r.Packets[0]+r.Packets[1], r.HWPackets[0]+r.HWPackets[1]), HasRev: true, HasTimes: true}}
	}
	for _, d := range []int{i, o} {
		if r.Packets[d] == 0 && (d != i || r.Packets[o] != 0) {
			continue
		}
		src, dst := ends(d)
		tid := uint16(TemplateIPv4)
		if v6 {
			tid = TemplateIPv6
		}
		out = append(out, ipfixtest.Flow{TemplateID: tid, Src: src, Dst: dst, Proto: r.Proto, TCPFlags: uint16(r.TCPFlags[d]),
			Packets: r.Packets[d], Bytes: r.Bytes[d], HWPackets: r.HWPackets[d], HWBytes: r.HWBytes[d],
			Start: ms(r.Start), End: ms(r.End), Reason: r.Reason, App: app, Tier: tierOf(r.Packets[d], r.HWPackets[d]),
			HasTimes: f == IPFIX, HasV9Times: f == NetFlow9})
	}
	return out
}

func TestEncodeDecodeEveryField(t *testing.T) {
	for _, tc := range []struct {
		name   string
		format Format
		biflow bool
		pen    uint32
	}{
		{"ipfix uniflow", IPFIX, false, 0},
		{"ipfix biflow", IPFIX, true, 0},
		{"ipfix other PEN", IPFIX, false, 4242},
		{"netflow9", NetFlow9, false, 0},
		{"netflow9 ignores biflow", NetFlow9, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &clock{t: t0}
			e, err := NewEncoder(Options{Format: tc.format, Biflow: tc.biflow, ObservationDomain: 77, EnterpriseNumber: tc.pen,
				Now: c.now, Boot: t0.Add(-time.Hour)})
			if err != nil {
				t.Fatal(err)
			}
			rs := fixtures()
			var want []ipfixtest.Flow
			for _, r := range rs {
				want = append(want, expect(r, tc.format, tc.biflow)...)
			}
			msgs := e.Encode(rs)
			if len(msgs) != 1 {
				t.Fatalf("%d messages, want 1", len(msgs))
			}
			m := msgs[0]
			d := ipfixtest.NewDecoder(tc.pen)
			got, err := d.Decode(m.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			if got.Version != uint16(tc.format) || got.Domain != 77 || got.Sequence != 0 || !got.ExportTime.Equal(t0) || got.Raw != 0 {
				t.Errorf("header: %+v", got)
			}
			if tc.format == IPFIX && got.Length != len(m.Bytes) {
				t.Errorf("IPFIX length %d, message %d bytes", got.Length, len(m.Bytes))
			}
			if tc.format == NetFlow9 {
				if int(got.Count) != 2+len(want) {
					t.Errorf("v9 count %d, want %d (2 templates + %d records)", got.Count, 2+len(want), len(want))
				}
				if got.Uptime != uint32(time.Hour/time.Millisecond) {
					t.Errorf("v9 sysUptime %d", got.Uptime)
				}
			}
			if !m.Templates || len(got.Templates) != 2 || m.Records != len(want) {
				t.Errorf("templates %v (%v), records %d, want %d", got.Templates, m.Templates, m.Records, len(want))
			}
			if len(got.Flows) != len(want) {
				t.Fatalf("%d flows, want %d", len(got.Flows), len(want))
			}
			for i := range want {
				if !reflect.DeepEqual(got.Flows[i], want[i]) {
					t.Errorf("flow %d:\n got %+v\nwant %+v", i, got.Flows[i], want[i])
				}
			}
			sets, err := ipfixtest.SetLengths(m.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range sets {
				if tc.format == NetFlow9 && s[1]%4 != 0 {
					t.Errorf("v9 flowset %d length %d not padded to 4", s[0], s[1])
				}
			}
		})
	}
}

func TestSequenceNumbers(t *testing.T) {
	for _, f := range []Format{IPFIX, NetFlow9} {
		t.Run(f.String(), func(t *testing.T) {
			e, err := NewEncoder(Options{Format: f})
			if err != nil {
				t.Fatal(err)
			}
			d := ipfixtest.NewDecoder(0)
			var records, messages uint32
			for batch := 1; batch <= 4; batch++ {
				rs := make([]Record, batch*20)
				for i := range rs {
					rs[i] = Record{Proto: 17, Lo: ap(fmt.Sprintf("10.0.%d.%d:1", batch, i)), Hi: ap("10.9.9.9:2"), App: "dns",
						Start: t0, End: t0, Packets: [2]uint64{1, 0}, Bytes: [2]uint64{64, 0}, Reason: endIdle}
				}
				for _, m := range e.Encode(rs) {
					got, err := d.Decode(m.Bytes)
					if err != nil {
						t.Fatal(err)
					}
					want := records // RFC 7011: data records before this message
					if f == NetFlow9 {
						want = messages // RFC 3954: export packets before this one
					}
					if got.Sequence != want {
						t.Errorf("message %d: sequence %d, want %d", messages, got.Sequence, want)
					}
					records += uint32(len(got.Flows))
					messages++
				}
			}
			if records != 20+40+60+80 {
				t.Errorf("%d records decoded", records)
			}
		})
	}
}

func TestTemplateRefresh(t *testing.T) {
	for _, f := range []Format{IPFIX, NetFlow9} {
		t.Run(f.String(), func(t *testing.T) {
			c := &clock{t: t0}
			e, err := NewEncoder(Options{Format: f, Now: c.now, TemplateRefresh: 30 * time.Second, TemplateRefreshMessages: 3})
			if err != nil {
				t.Fatal(err)
			}
			d := ipfixtest.NewDecoder(0)
			one := []Record{{Proto: 17, Lo: ap("10.0.0.1:1"), Hi: ap("10.0.0.2:2"), Start: t0, End: t0,
				Packets: [2]uint64{1, 0}, Bytes: [2]uint64{64, 0}, Reason: endIdle}}
			step := func(rs []Record, wantMsg, wantTpl bool) {
				t.Helper()
				ms := e.Encode(rs)
				if !wantMsg {
					if len(ms) != 0 {
						t.Fatalf("at %v: %d messages, want none", c.t.Sub(t0), len(ms))
					}
					return
				}
				if len(ms) != 1 {
					t.Fatalf("at %v: %d messages, want 1", c.t.Sub(t0), len(ms))
				}
				got, err := d.Decode(ms[0].Bytes)
				if err != nil {
					t.Fatal(err)
				}
				if has := len(got.Templates) == 2; has != wantTpl || ms[0].Templates != wantTpl {
					t.Fatalf("at %v: templates %v, want %v", c.t.Sub(t0), got.Templates, wantTpl)
				}
				if len(got.Flows) != len(rs) || got.Raw != 0 {
					t.Fatalf("at %v: %d flows, %d undecodable sets", c.t.Sub(t0), len(got.Flows), got.Raw)
				}
			}
			step(nil, true, true) // an idle exporter's first message: templates alone
			step(nil, false, false)
			step(one, true, false)
			step(one, true, false)
			step(one, true, true) // every 3 messages
			c.advance(29 * time.Second)
			step(one, true, false)
			c.advance(time.Second)
			step(one, true, true) // every 30 s
			c.advance(30 * time.Second)
			step(nil, true, true) // idle, refresh due: templates alone
			step(nil, false, false)
		})
	}
}

func TestPackToMTU(t *testing.T) {
	for _, tc := range []struct {
		format Format
		biflow bool
		mtu    int
	}{{IPFIX, false, 512}, {IPFIX, false, 1400}, {IPFIX, true, 600}, {NetFlow9, false, 512}, {NetFlow9, false, 1400}} {
		t.Run(fmt.Sprintf("%v biflow=%v %d", tc.format, tc.biflow, tc.mtu), func(t *testing.T) {
			c := &clock{t: t0}
			e, err := NewEncoder(Options{Format: tc.format, Biflow: tc.biflow, MaxMessageSize: tc.mtu, Now: c.now, Boot: t0.Add(-time.Hour)})
			if err != nil {
				t.Fatal(err)
			}
			var rs []Record
			var want []ipfixtest.Flow
			for i := 0; i < 300; i++ {
				lo, hi := fmt.Sprintf("10.1.%d.%d:%d", i/256, i%256, 1000+i), "10.2.0.1:443"
				if i%3 == 0 { // interleave the families: a set per run
					lo, hi = fmt.Sprintf("[2001:db8::%x]:%d", i, 1000+i), "[2001:db8:1::1]:443"
				}
				r := Record{Proto: 6, Lo: ap(lo), Hi: ap(hi), App: strings.Repeat("a", i%70), Start: t0, End: t0,
					Packets: [2]uint64{uint64(i), uint64(i % 2)}, Bytes: [2]uint64{uint64(i) * 100, uint64(i%2) * 60},
					Reason: uint8(1 + i%5), Final: true}
				rs = append(rs, r)
				want = append(want, expect(r, tc.format, tc.biflow)...)
			}
			d := ipfixtest.NewDecoder(0)
			var got []ipfixtest.Flow
			msgs := e.Encode(rs)
			for i, m := range msgs {
				if len(m.Bytes) > tc.mtu {
					t.Errorf("message %d: %d bytes > %d", i, len(m.Bytes), tc.mtu)
				}
				// Full: all but the last message leave less room than the
				// smallest record the next one started with.
				if i < len(msgs)-1 && len(m.Bytes) < tc.mtu-200 {
					t.Errorf("message %d: %d bytes, not full", i, len(m.Bytes))
				}
				if _, err := ipfixtest.SetLengths(m.Bytes); err != nil {
					t.Errorf("message %d: %v", i, err)
				}
				dm, err := d.Decode(m.Bytes)
				if err != nil {
					t.Fatal(err)
				}
				if dm.Raw != 0 || len(dm.Flows) != m.Records {
					t.Errorf("message %d: %d flows, says %d, %d undecodable sets", i, len(dm.Flows), m.Records, dm.Raw)
				}
				got = append(got, dm.Flows...)
			}
			if len(got) != len(want) {
				t.Fatalf("%d flows over %d messages, want %d", len(got), len(msgs), len(want))
			}
			for i := range want {
				if !reflect.DeepEqual(got[i], want[i]) {
					t.Fatalf("flow %d:\n got %+v\nwant %+v", i, got[i], want[i])
				}
			}
			t.Logf("%d records in %d messages", len(got), len(msgs))
		})
	}
}

func TestOptionsInvalid(t *testing.T) {
	for _, o := range []Options{{Format: 5}, {MaxMessageSize: 100}, {MaxMessageSize: 70000}} {
		if _, err := NewEncoder(o); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
	if _, err := ParseFormat("sflow"); err == nil {
		t.Error("ParseFormat(sflow): no error")
	}
}
