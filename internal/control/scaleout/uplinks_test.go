// SPDX-License-Identifier: Apache-2.0

package scaleout

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/control/telemetry"
	tt "github.com/tierwall/tierwall/internal/control/telemetry/telemetrytest"
)

var (
	t0       = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	upA      = telemetry.Uplink{Exporter: routers[0], IfIndex: 3}
	upB      = telemetry.Uplink{Exporter: routers[1], IfIndex: 7}
	twoLinks = telemetry.ActionConfig{Policies: map[string]telemetry.GroupPolicy{"dc": {Uplinks: []telemetry.Uplink{upA, upB}}}}
)

func report(t *testing.T, tab *UplinkTable, at time.Time, r InterfaceReport) error {
	t.Helper()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return tab.Handle(b, at)
}

func up(u telemetry.Uplink, speed uint64, ageMS int64) ReportedInterface {
	return ReportedInterface{UplinkState: telemetry.UplinkState{Uplink: u, OperUp: true, SpeedBPS: speed, InBPS: 1e8, InUtilisation: 0.1}, AgeMS: ageMS}
}

// The table keeps the groups' uplinks only, the newest sample of each
// whichever collector reports it, and knows a capacity only while every
// uplink's sample is fresh.
func TestUplinkTable(t *testing.T) {
	tab := NewUplinkTable(twoLinks)
	ups := twoLinks.Policies["dc"].Uplinks
	if c, st := tab.Uplinks(ups, t0); c != 0 || st[0].Known || st[1].Known {
		t.Fatalf("before any report: %v %+v", c, st)
	}
	other := up(telemetry.Uplink{Exporter: routers[2], IfIndex: 1}, 1e9, 0)
	if err := report(t, tab, t0, InterfaceReport{Collector: "col-a", Interfaces: []ReportedInterface{up(upA, 10e9, 2000), other}}); err != nil {
		t.Fatal(err)
	}
	// One of two known: no capacity.
	if c, st := tab.Uplinks(ups, t0); c != 0 || !st[0].Known || st[1].Known || st[0].SpeedBPS != 10e9 || st[0].InBPS != 1e8 {
		t.Fatalf("one uplink known: %v %+v", c, st)
	}
	// An IPv4-mapped exporter is the same router.
	mapped := up(upB, 10e9, 0)
	mapped.Exporter = netip.AddrFrom16(upB.Exporter.As16())
	if err := report(t, tab, t0, InterfaceReport{Collector: "col-b", Interfaces: []ReportedInterface{mapped}}); err != nil {
		t.Fatal(err)
	}
	if c, _ := tab.Uplinks(ups, t0); c != 20e9 {
		t.Fatalf("both known: %v", c)
	}
	// A second collector with an older sample of A does not win over the
	// newer; a newer one does.
	if err := report(t, tab, t0, InterfaceReport{Collector: "col-c", Interfaces: []ReportedInterface{up(upA, 1e9, 9000)}}); err != nil {
		t.Fatal(err)
	}
	if c, _ := tab.Uplinks(ups, t0); c != 20e9 {
		t.Fatalf("an older sample won: %v", c)
	}
	down := up(upA, 10e9, 0)
	down.OperUp = false
	if err := report(t, tab, t0.Add(time.Second), InterfaceReport{Collector: "col-c", Interfaces: []ReportedInterface{down}}); err != nil {
		t.Fatal(err)
	}
	if c, _ := tab.Uplinks(ups, t0.Add(time.Second)); c != 10e9 {
		t.Fatalf("A down: %v", c)
	}
	// Stale: B's sample is older than UplinkFresh.
	if c, st := tab.Uplinks(ups, t0.Add(telemetry.UplinkFresh)); c != 0 || st[1].Known {
		t.Fatalf("stale: %v %+v", c, st)
	}
	if s := tab.Stats(); s.Reports != 4 || s.Interfaces != 4 || s.Other != 1 || s.Malformed != 0 {
		t.Errorf("stats %+v", s)
	}
	// A reload that names A alone forgets B.
	tab.SetUplinks(telemetry.ActionConfig{Policies: map[string]telemetry.GroupPolicy{"dc": {Uplinks: []telemetry.Uplink{upA}}}})
	if _, st := tab.Uplinks([]telemetry.Uplink{upB}, t0); st[0].Known {
		t.Errorf("B kept after the reload: %+v", st)
	}
}

// What comes over the bus is hostile until checked: a report that breaks
// a bound is refused whole and changes nothing.
func TestUplinkReportsRefused(t *testing.T) {
	many := InterfaceReport{Collector: "col-a"}
	for i := range maxReportInterfaces + 1 {
		many.Interfaces = append(many.Interfaces, up(telemetry.Uplink{Exporter: routers[0], IfIndex: uint32(i + 1)}, 1e9, 0))
	}
	bad := func(f func(*ReportedInterface)) InterfaceReport {
		x := up(upA, 1e9, 0)
		f(&x)
		return InterfaceReport{Collector: "col-a", Interfaces: []ReportedInterface{up(upB, 1e9, 0), x}}
	}
	for name, r := range map[string]InterfaceReport{
		"no collector":     {Interfaces: []ReportedInterface{up(upA, 1e9, 0)}},
		"long name":        {Collector: strings.Repeat("x", maxName+1), Interfaces: []ReportedInterface{up(upA, 1e9, 0)}},
		"too many":         many,
		"no exporter":      bad(func(x *ReportedInterface) { x.Exporter = netip.Addr{} }),
		"ifIndex 0":        bad(func(x *ReportedInterface) { x.IfIndex = 0 }),
		"from the future":  bad(func(x *ReportedInterface) { x.AgeMS = -1 }),
		"older than fresh": bad(func(x *ReportedInterface) { x.AgeMS = int64(telemetry.UplinkFresh/time.Millisecond) + 1 }),
		"negative rate":    bad(func(x *ReportedInterface) { x.OutBPS = -1 }),
		"negative use":     bad(func(x *ReportedInterface) { x.InUtilisation = -0.5 }),
	} {
		t.Run(name, func(t *testing.T) {
			tab := NewUplinkTable(twoLinks)
			if err := report(t, tab, t0, r); !errors.Is(err, errReport) {
				t.Fatalf("%v, want errReport", err)
			}
			if _, st := tab.Uplinks([]telemetry.Uplink{upA, upB}, t0); st[0].Known || st[1].Known {
				t.Errorf("a refused report changed the table: %+v", st)
			}
			if s := tab.Stats(); s.Malformed != 1 || s.Reports != 0 {
				t.Errorf("stats %+v", s)
			}
		})
	}
	for i, b := range []string{"", "{", "[]", `{"collector":"a","interfaces":[{"exporter":"300.1.1.1","if_index":3}]}`,
		`{"collector":"a","interfaces":[{"exporter":"192.0.2.1","if_index":3,"in_bps":1e999}]}`} {
		tab := NewUplinkTable(twoLinks)
		if err := tab.Handle([]byte(b), t0); !errors.Is(err, errReport) {
			t.Errorf("%d %q: %v", i, b, err)
		}
	}
}

// A collector reports what its decoder learnt from counter samples, in
// messages of at most the bound, and no interface it has no sample of.
func TestReportsFromTheDecoder(t *testing.T) {
	d := decoder(t, 0, 1)
	for r := range 2 {
		s := tt.SFlow{Agent: routers[r], Uptime: 1000}
		for i := range 5 {
			s.Interface(tt.IfCounters{Index: uint32(10*r + i + 1), Speed: 1e9, Status: 3}, nil)
		}
		if err := d.Decode(routers[r], s.Bytes(), t0, func(*telemetry.Record) {}); err != nil {
			t.Fatal(err)
		}
	}
	rs := reports("col-a", d.Exporters(), t0.Add(1500*time.Millisecond), 4)
	var got []string
	for _, r := range rs {
		if len(r.Interfaces) > 4 || r.Collector != "col-a" {
			t.Fatalf("report %+v", r)
		}
		for _, x := range r.Interfaces {
			if x.AgeMS != 1500 || !x.OperUp || x.SpeedBPS != 1e9 {
				t.Errorf("interface %+v", x)
			}
			got = append(got, fmt.Sprint(x.Exporter, "/", x.IfIndex))
		}
	}
	if len(rs) != 3 || len(got) != 10 || got[0] != "192.0.2.1/1" || got[9] != "192.0.2.2/15" {
		t.Fatalf("%d reports: %v", len(rs), got)
	}
	// What a collector sends, a detector reads.
	tab := NewUplinkTable(telemetry.ActionConfig{Policies: map[string]telemetry.GroupPolicy{"dc": {Uplinks: []telemetry.Uplink{{Exporter: routers[1], IfIndex: 15}}}}})
	for _, r := range rs {
		if err := report(t, tab, t0.Add(2*time.Second), r); err != nil {
			t.Fatal(err)
		}
	}
	if c, _ := tab.Uplinks([]telemetry.Uplink{{Exporter: routers[1], IfIndex: 15}}, t0.Add(2*time.Second)); c != 1e9 {
		t.Errorf("capacity %v", c)
	}
}
