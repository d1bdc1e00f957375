// SPDX-License-Identifier: Apache-2.0

package export

import (
	"errors"
	"net"
	"net/netip"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"gopkg.in/yaml.v3"

	"github.com/tierwall/tierwall/internal/probe/export/ipfix/ipfixtest"
	"github.com/tierwall/tierwall/internal/probe/flowprobe"
	"github.com/tierwall/tierwall/internal/tier"
)

// listener is a collector on loopback that keeps every datagram.
type listener struct {
	conn net.PacketConn
	mu   sync.Mutex
	msgs [][]byte
	done chan struct{}
}

func listen(t *testing.T) *listener {
	t.Helper()
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &listener{conn: c, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		buf := make([]byte, 65536)
		for {
			n, _, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			l.mu.Lock()
			l.msgs = append(l.msgs, append([]byte(nil), buf[:n]...))
			l.mu.Unlock()
		}
	}()
	t.Cleanup(func() { c.Close() })
	return l
}

func (l *listener) addr() string { return l.conn.LocalAddr().String() }

// flows decodes what arrived, waiting until want data records did (or 5 s).
func (l *listener) flows(t *testing.T, want int) ([]ipfixtest.Flow, []ipfixtest.Message) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		d := ipfixtest.NewDecoder(0)
		var fs []ipfixtest.Flow
		var ms []ipfixtest.Message
		l.mu.Lock()
		msgs := l.msgs
		l.mu.Unlock()
		for _, b := range msgs {
			m, err := d.Decode(b)
			if err != nil {
				t.Fatal(err)
			}
			if m.Raw != 0 {
				t.Fatalf("a set arrived before its template")
			}
			fs = append(fs, m.Flows...)
			ms = append(ms, m)
		}
		if len(fs) >= want || time.Now().After(deadline) {
			return fs, ms
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// recordTime is the records' start. NetFlow v9 carries times as the
// exporter's uptime, which cannot go below its start: a fixed date failed
// the test once the day's clock passed it. An hour ahead of the test's
// start is always after any exporter it makes.
var recordTime = time.Now().UTC().Truncate(time.Second).Add(time.Hour)

func record(i int) flowprobe.Record {
	t := recordTime
	lo := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), uint16(1024+i))
	if i%2 == 1 {
		lo = netip.AddrPortFrom(netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 14: byte(i >> 8), 15: byte(i)}), uint16(1024+i))
	}
	hi := netip.AddrPortFrom(netip.MustParseAddr("10.255.0.1"), 443)
	if i%2 == 1 {
		hi = netip.AddrPortFrom(netip.MustParseAddr("2001:db8:ffff::1"), 443)
	}
	return flowprobe.Record{Key: tier.FlowKey{Proto: 6, Lo: lo, Hi: hi}, App: "tls", Start: t, End: t.Add(time.Second),
		Packets: [2]uint64{uint64(i + 1), 0}, Bytes: [2]uint64{uint64(i+1) * 100, 0}, Reason: flowprobe.EndReason(1 + i%5), Final: true}
}

// check compares flows read back with records 0..n-1 (one direction each).
func check(t *testing.T, fs []ipfixtest.Flow, n int) {
	t.Helper()
	if len(fs) != n {
		t.Fatalf("%d flows, want %d", len(fs), n)
	}
	for i, f := range fs {
		r := record(i)
		if f.Src != r.Key.Lo || f.Dst != r.Key.Hi || f.Packets != r.Packets[0] || f.Bytes != r.Bytes[0] ||
			f.Reason != uint8(r.Reason) || f.App != r.App || !f.Start.Equal(r.Start) || !f.End.Equal(r.End) {
			t.Errorf("flow %d: got %+v, want %+v", i, f, r)
		}
	}
}

func TestExportToCollectors(t *testing.T) {
	lf, l9 := listen(t), listen(t)
	x, err := New(Config{Collectors: []Collector{{Address: lf.addr()}, {Address: l9.addr(), Format: "netflow9"}},
		ObservationDomain: 9, FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	const n = 500
	for i := 0; i < n; i++ {
		x.Export(record(i))
	}
	x.Close() // flushes
	for _, l := range []*listener{lf, l9} {
		fs, ms := l.flows(t, n)
		check(t, fs, n)
		for _, m := range ms {
			if m.Domain != 9 || m.Length > 1400 {
				t.Errorf("message: domain %d, %d bytes", m.Domain, m.Length)
			}
		}
	}
	st := x.Stats()
	if st.Queued != n || st.Dropped != 0 || len(st.Collectors) != 2 {
		t.Fatalf("stats %+v", st)
	}
	for i, c := range st.Collectors {
		l := []*listener{lf, l9}[i]
		if c.Records != n || c.SendErrors != 0 || c.Lost != 0 || c.Messages != uint64(len(l.msgs)) {
			t.Errorf("collector %d: %+v, %d messages arrived", i, c, len(l.msgs))
		}
	}
	if st.Collectors[0].Format != "ipfix" || st.Collectors[1].Format != "netflow9" {
		t.Errorf("formats: %+v", st.Collectors)
	}
}

func TestQueueFullDropsAndCounts(t *testing.T) {
	l := listen(t)
	x, err := newExporter(Config{Collectors: []Collector{{Address: l.addr()}}, QueueLen: 16, FlushInterval: time.Hour}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Not started: nothing drains the queue.
	for i := 0; i < 16+10; i++ {
		x.Export(record(i))
	}
	if st := x.Stats(); st.Queued != 16 || st.Dropped != 10 {
		t.Fatalf("queued %d, dropped %d; want 16, 10", st.Queued, st.Dropped)
	}
	go x.run()
	x.Close()
	x.Export(record(0)) // after Close: dropped
	fs, _ := l.flows(t, 16)
	check(t, fs, 16)
	if st := x.Stats(); st.Dropped != 11 || st.Collectors[0].Records != 16 {
		t.Errorf("stats %+v", st)
	}
}

// deadAddr is a loopback UDP port with nothing behind it: sends to it are
// answered with ICMP port unreachable.
func deadAddr(t *testing.T) string {
	t.Helper()
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := c.LocalAddr().String()
	c.Close()
	return a
}

func TestDeadCollectorNeverBlocks(t *testing.T) {
	live := listen(t)
	x, err := New(Config{Collectors: []Collector{{Address: deadAddr(t)}, {Address: live.addr()}},
		FlushInterval: 5 * time.Millisecond, MTU: 512})
	if err != nil {
		t.Fatal(err)
	}
	const n = 400
	var slowest time.Duration
	for i := 0; i < n; i++ {
		t0 := time.Now()
		x.Export(record(i))
		slowest = max(slowest, time.Since(t0))
		if i%50 == 0 {
			time.Sleep(20 * time.Millisecond) // several flushes, so several sends to the dead one
		}
	}
	if slowest > time.Second { // generous: a shared CI machine; Export itself never waits
		t.Errorf("Export took %v", slowest)
	}
	x.Close()
	check(t, func() []ipfixtest.Flow { fs, _ := live.flows(t, n); return fs }(), n)
	st := x.Stats()
	dead, ok := st.Collectors[0], st.Collectors[1]
	if dead.SendErrors == 0 || !strings.Contains(dead.LastError, "refused") {
		t.Errorf("dead collector: %+v", dead)
	}
	if dead.Records+dead.Lost != n {
		t.Errorf("dead collector: %d records sent + %d lost, want %d", dead.Records, dead.Lost, n)
	}
	if ok.SendErrors != 0 || ok.Records != n {
		t.Errorf("live collector: %+v", ok)
	}
	t.Logf("dead: %+v", dead)
}

func TestConfigInvalid(t *testing.T) {
	for _, c := range []Config{
		{},
		{Collectors: []Collector{{Address: "127.0.0.1:4739", Format: "sflow"}}},
		{Collectors: []Collector{{Address: "no-port"}}},
		{Collectors: []Collector{{Address: "127.0.0.1:4739"}}, MTU: 100},
		{Collectors: []Collector{{Address: "127.0.0.1:4739"}}, QueueLen: -1},
	} {
		x, err := New(c)
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: error %v", c, err)
		}
		if x != nil {
			x.Close()
		}
	}
}

func TestMetrics(t *testing.T) {
	l := listen(t)
	x, err := New(Config{Collectors: []Collector{{Address: l.addr()}, {Address: deadAddr(t), Format: "netflow9"}}})
	if err != nil {
		t.Fatal(err)
	}
	x.Export(record(0))
	x.Close()
	x.Export(record(1))
	if err := promtest.CollectAndCompare(x.Collector(), strings.NewReader(`
# HELP tierwall_export_records_dropped_total Flow records dropped before export: queue full or exporter closed.
# TYPE tierwall_export_records_dropped_total counter
tierwall_export_records_dropped_total 1
# HELP tierwall_export_records_queued_total Flow records accepted for export.
# TYPE tierwall_export_records_queued_total counter
tierwall_export_records_queued_total 1
`), "tierwall_export_records_dropped_total", "tierwall_export_records_queued_total"); err != nil {
		t.Error(err)
	}
	if n := promtest.CollectAndCount(x.Collector(), "tierwall_export_messages_total"); n != 2 {
		t.Errorf("%d message counters, want one per collector", n)
	}
}

func TestConfigYAML(t *testing.T) {
	var c Config
	err := yaml.Unmarshal([]byte(`
collectors:
  - {address: "127.0.0.1:4739", format: ipfix}
  - {address: "127.0.0.1:2055", format: netflow9}
observation_domain: 7
biflow: true
mtu: 1200
template_refresh: 30s
template_refresh_messages: 50
enterprise_number: 4242
queue_len: 100
flush_interval: 250ms
`), &c)
	if err != nil {
		t.Fatal(err)
	}
	want := Config{Collectors: []Collector{{"127.0.0.1:4739", "ipfix"}, {"127.0.0.1:2055", "netflow9"}}, ObservationDomain: 7,
		Biflow: true, MTU: 1200, TemplateRefresh: 30 * time.Second, TemplateRefreshMessages: 50, EnterpriseNumber: 4242,
		QueueLen: 100, FlushInterval: 250 * time.Millisecond}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("got %+v\nwant %+v", c, want)
	}
}
