// SPDX-License-Identifier: Apache-2.0

package scaleout

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tierwall/tierwall/internal/control/telemetry"
)

// Uplink capacity across the bus. A host group's capacity may come from
// its uplinks' ifSpeed in the routers' sFlow counter samples
// (telemetry.Capacities), which only the collectors hear. Each collector
// therefore reports the interfaces its exporters describe, every
// InterfaceEvery, on a core NATS subject beside the stream's
// (InterfacesSubject): a state, not a flow of records, so nothing is
// stored or replayed, and a detector that starts learns the uplinks
// within one report. The detector keeps only the interfaces its host
// groups name as uplinks, so what comes over the bus cannot grow its
// memory, and an uplink is known only while its latest sample is younger
// than telemetry.UplinkFresh, as in one process.

// InterfacesSubject is where collectors report their exporters'
// interfaces: a subject the stream's (subject.*) does not take.
func InterfacesSubject(subject string) string { return subject + ".interfaces.state" }

// InterfaceReport is one message: some of one collector's interfaces.
// JSON: a few messages every few seconds, read by people debugging the
// bus (nats sub) as well as by detectors.
type InterfaceReport struct {
	Collector  string              `json:"collector"`
	Interfaces []ReportedInterface `json:"interfaces"`
}

// ReportedInterface is an interface as the collector's last counter
// sample showed it (UplinkState's fields; Known is the detector's to
// say). AgeMS is how long ago that sample arrived, so that a detector
// dates it on its own clock.
type ReportedInterface struct {
	telemetry.UplinkState
	AgeMS int64 `json:"age_ms"`
}

// maxReportInterfaces bounds one message's interfaces (about 250 bytes
// each in JSON: a message stays far under NATS's 1 MiB payload); a
// detector refuses a message with more.
const maxReportInterfaces = 1024

// reports builds a collector's messages from its decoder's exporters:
// every interface with a sample, in messages of at most per.
func reports(name string, exs []telemetry.ExporterStats, now time.Time, per int) []InterfaceReport {
	var out []InterfaceReport
	cur := InterfaceReport{Collector: name}
	for _, e := range exs {
		for _, x := range e.Interfaces {
			if x.Samples == 0 {
				continue
			}
			cur.Interfaces = append(cur.Interfaces, ReportedInterface{AgeMS: max(0, now.Sub(x.LastSample).Milliseconds()),
				UplinkState: telemetry.UplinkState{Uplink: telemetry.Uplink{Exporter: e.Address, IfIndex: x.IfIndex},
					Known: true, OperUp: x.OperUp, SpeedBPS: x.SpeedBPS, InBPS: x.InBPS, InUtilisation: x.InUtilisation,
					OutBPS: x.OutBPS, OutUtilisation: x.OutUtilisation}})
			if len(cur.Interfaces) == per {
				out = append(out, cur)
				cur = InterfaceReport{Collector: name}
			}
		}
	}
	if len(cur.Interfaces) > 0 {
		out = append(out, cur)
	}
	return out
}

// reportInterfaces publishes the collector's interfaces every `every`
// until stop.
func (c *Collector) reportInterfaces(nc *nats.Conn, name, subject string, every time.Duration, log *slog.Logger) {
	defer c.wg.Done()
	tk := time.NewTicker(every)
	defer tk.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-tk.C:
		}
		for _, r := range reports(name, c.dec.Exporters(), time.Now(), maxReportInterfaces) {
			b, err := json.Marshal(r)
			if err == nil {
				err = nc.Publish(subject, b)
			}
			if err != nil {
				if c.ifErrs.Add(1) == 1 {
					log.Warn("scaleout: reporting interfaces", "err", err)
				}
				continue
			}
			c.ifSent.Add(1)
		}
	}
}

// InterfaceReports are the interface messages the collector published,
// and those it could not.
func (c *Collector) InterfaceReports() (sent, failed uint64) { return c.ifSent.Load(), c.ifErrs.Load() }

// UplinkStats are a detector's counters of interface reports.
type UplinkStats struct {
	// Reports were read; Malformed did not decode or broke a bound (the
	// whole message is refused); Interfaces were uplinks and kept, Other
	// were not an uplink of any group and ignored.
	Reports, Malformed, Interfaces, Other uint64
}

// errReport: an interface report that is not one.
var errReport = errors.New("malformed interface report")

// heardUplink is an uplink as a collector last reported it.
type heardUplink struct {
	st   telemetry.UplinkState
	last time.Time // when its sample arrived, on the detector's clock
}

// UplinkTable is a detector's view of its host groups' uplinks, from the
// collectors' interface reports. It implements telemetry.UplinkSource.
type UplinkTable struct {
	mu    sync.Mutex
	want  map[telemetry.Uplink]bool
	heard map[telemetry.Uplink]heardUplink

	reports, malformed, kept, other atomic.Uint64
}

// NewUplinkTable keeps the uplinks of act's host groups.
func NewUplinkTable(act telemetry.ActionConfig) *UplinkTable {
	t := &UplinkTable{heard: map[telemetry.Uplink]heardUplink{}}
	t.SetUplinks(act)
	return t
}

// SetUplinks keeps the uplinks of act's host groups (a reload), and
// forgets the state of those no group names any more.
func (t *UplinkTable) SetUplinks(act telemetry.ActionConfig) {
	want := map[telemetry.Uplink]bool{}
	for _, p := range act.Policies {
		for _, u := range p.Uplinks {
			want[telemetry.Uplink{Exporter: u.Exporter.Unmap(), IfIndex: u.IfIndex}] = true
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.want = want
	for u := range t.heard {
		if !want[u] {
			delete(t.heard, u)
		}
	}
}

// Handle reads one report that arrived at now. A message that breaks
// any rule is refused whole: it comes over the network, and a collector
// that sends one broken interface may have sent others wrong.
func (t *UplinkTable) Handle(data []byte, now time.Time) error {
	var r InterfaceReport
	if err := json.Unmarshal(data, &r); err != nil {
		t.malformed.Add(1)
		return fmt.Errorf("%w: %w", errReport, err)
	}
	if err := r.check(); err != nil {
		t.malformed.Add(1)
		return err
	}
	t.reports.Add(1)
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, x := range r.Interfaces {
		u := telemetry.Uplink{Exporter: x.Exporter.Unmap(), IfIndex: x.IfIndex}
		if !t.want[u] {
			t.other.Add(1)
			continue
		}
		t.kept.Add(1)
		last := now.Add(-time.Duration(x.AgeMS) * time.Millisecond)
		// Two collectors may hear one exporter (a redundant pair): the
		// newer sample wins.
		if h, ok := t.heard[u]; ok && !last.After(h.last) {
			continue
		}
		st := x.UplinkState
		st.Uplink, st.Known = u, true
		t.heard[u] = heardUplink{last: last, st: st}
	}
	return nil
}

// check applies the bounds a report must keep.
func (r *InterfaceReport) check() error {
	if len(r.Collector) == 0 || len(r.Collector) > maxName {
		return fmt.Errorf("%w: collector name of %d bytes", errReport, len(r.Collector))
	}
	if len(r.Interfaces) > maxReportInterfaces {
		return fmt.Errorf("%w: %d interfaces, more than %d", errReport, len(r.Interfaces), maxReportInterfaces)
	}
	for i, x := range r.Interfaces {
		ok := x.Exporter.IsValid() && x.IfIndex != 0 && x.AgeMS >= 0 && x.AgeMS <= int64(telemetry.UplinkFresh/time.Millisecond)
		for _, v := range []float64{x.InBPS, x.InUtilisation, x.OutBPS, x.OutUtilisation} {
			ok = ok && v >= 0 && !math.IsInf(v, 0) && !math.IsNaN(v)
		}
		if !ok {
			return fmt.Errorf("%w: interface %d: %+v", errReport, i, x)
		}
	}
	return nil
}

// Uplinks implements telemetry.UplinkSource.
func (t *UplinkTable) Uplinks(ups []telemetry.Uplink, now time.Time) (float64, []telemetry.UplinkState) {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]telemetry.UplinkState, 0, len(ups))
	for _, u := range ups {
		st := telemetry.UplinkState{Uplink: u}
		if h, ok := t.heard[telemetry.Uplink{Exporter: u.Exporter.Unmap(), IfIndex: u.IfIndex}]; ok && now.Sub(h.last) < telemetry.UplinkFresh {
			st = h.st
			st.Uplink = u
		}
		out = append(out, st)
	}
	return telemetry.SumUplinks(out), out
}

// Stats reads the counters.
func (t *UplinkTable) Stats() UplinkStats {
	return UplinkStats{Reports: t.reports.Load(), Malformed: t.malformed.Load(), Interfaces: t.kept.Load(), Other: t.other.Load()}
}
