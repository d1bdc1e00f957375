// SPDX-License-Identifier: Apache-2.0

package telemetry

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	tt "github.com/tierwall/tierwall/internal/control/telemetry/telemetrytest"
)

var (
	router    = netip.MustParseAddr("192.0.2.1")
	victim    = netip.MustParseAddr("198.51.100.7")
	reflector = netip.MustParseAddr("203.0.113.9")
	t0        = time.Unix(1700000000, 0)
)

func newTestDecoder(t testing.TB, cfg DecoderConfig) *Decoder {
	t.Helper()
	if cfg.Exporters == nil {
		cfg.Exporters = []ExporterConfig{{Address: router, Name: "r1"}}
	}
	d, err := NewDecoder(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func decodeAll(t testing.TB, d *Decoder, b []byte) ([]Record, error) {
	t.Helper()
	var out []Record
	err := d.Decode(router, b, t0, func(r *Record) { out = append(out, *r) })
	return out, err
}

func stats(t testing.TB, d *Decoder) ExporterStats {
	t.Helper()
	es := d.Exporters()
	if len(es) != 1 {
		t.Fatalf("%d exporters", len(es))
	}
	return es[0]
}

func TestSFlowSamples(t *testing.T) {
	d := newTestDecoder(t, DecoderConfig{})
	s := tt.SFlow{Agent: router, Sequence: 1}
	s.Flow(1000, tt.Packet{Src: reflector, Dst: victim, Proto: 17, SrcPort: 53, DstPort: 4444, Length: 1400})
	s.Flow(1000, tt.Packet{Src: reflector, Dst: victim, Proto: 6, SrcPort: 5555, DstPort: 80, TCPFlags: 0x02, Length: 60})
	s.Flow(1000, tt.Packet{Src: reflector, Dst: victim, Proto: 17, Length: 1500, FragOffset: 185})
	s.Flow(1000, tt.Packet{Src: netip.MustParseAddr("2001:db8::1"), Dst: netip.MustParseAddr("2001:db8::2"), Proto: 17, SrcPort: 123, DstPort: 9, Length: 468})
	s.Counter(3, 1e9, 2e9)
	rs, err := decodeAll(t, d, s.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 4 {
		t.Fatalf("%d records, want 4", len(rs))
	}
	want := []Record{
		{IPProto: 17, SrcPort: 53, DstPort: 4444, MinLen: 1400},
		{IPProto: 6, SrcPort: 5555, DstPort: 80, TCPFlags: 2, MinLen: 60},
		{IPProto: 17, Fragment: true, MinLen: 1500},
		{IPProto: 17, SrcPort: 123, DstPort: 9, MinLen: 468},
	}
	for i, r := range rs {
		w := want[i]
		if r.IPProto != w.IPProto || r.SrcPort != w.SrcPort || r.DstPort != w.DstPort || r.TCPFlags != w.TCPFlags ||
			r.Fragment != w.Fragment || r.MinLen != w.MinLen || r.Rate != 1000 || r.Packets != 1 || r.Flow {
			t.Errorf("record %d: %+v, want %+v at rate 1000", i, r, w)
		}
	}
	if rs[0].Dst != victim || rs[0].Src != reflector || rs[3].Dst != netip.MustParseAddr("2001:db8::2") {
		t.Errorf("addresses: %v→%v, %v", rs[0].Src, rs[0].Dst, rs[3].Dst)
	}
	st := stats(t, d)
	if st.Counters != 1 || st.Records != 4 || st.Datagrams != 1 || st.SamplingRate != 1000 || st.Protocols[0] != SFlow5 {
		t.Errorf("stats %+v", st)
	}
}

func TestSequenceGapsAndResets(t *testing.T) {
	d := newTestDecoder(t, DecoderConfig{})
	for _, seq := range []uint32{1, 2, 5, 6, 1, 2} {
		s := tt.SFlow{Agent: router, Sequence: seq}
		s.Flow(100, tt.Packet{Src: reflector, Dst: victim, Proto: 17, Length: 100})
		if _, err := decodeAll(t, d, s.Bytes()); err != nil {
			t.Fatal(err)
		}
	}
	if st := stats(t, d); st.SequenceGaps != 2 || st.Resets != 1 {
		t.Errorf("gaps %d resets %d, want 2 and 1", st.SequenceGaps, st.Resets)
	}
}

func TestNetFlow5RateMismatch(t *testing.T) {
	d := newTestDecoder(t, DecoderConfig{Exporters: []ExporterConfig{{Address: router, SamplingRate: 1000}}})
	f := tt.Flow{Src: reflector, Dst: victim, Proto: 17, SrcPort: 123, DstPort: 80, Packets: 10, Bytes: 4680, Start: 1000, End: 3000}
	rs, err := decodeAll(t, d, tt.NetFlow5(0, 0x4000|100, f, f))
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 || rs[0].Rate != 100 || rs[0].Packets != 10 || rs[0].MinLen != 468 || rs[0].Duration != 2*time.Second || !rs[0].Flow {
		t.Fatalf("records %+v", rs)
	}
	// The next datagram's flow sequence is 2; one that says 5 lost 3.
	if _, err := decodeAll(t, d, tt.NetFlow5(5, 0, f)); err != nil {
		t.Fatal(err)
	}
	st := stats(t, d)
	if st.RateMismatches != 2 || st.SequenceGaps != 3 || st.SamplingRate != 1000 {
		t.Errorf("mismatches %d gaps %d rate %d, want 2, 3 and the configured 1000 once none is said", st.RateMismatches, st.SequenceGaps, st.SamplingRate)
	}
	// A datagram that says more than the configured rate (spoofed from the
	// router's address, say) is read at the configured one: it cannot
	// multiply the router's records.
	rs, err = decodeAll(t, d, tt.NetFlow5(6, 0x4000|16000, f))
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 || rs[0].Rate != 1000 {
		t.Fatalf("a datagram saying 1:16000 against the configured 1:1000: records %+v, want rate 1000", rs)
	}
}

func TestNetFlow9AndIPFIX(t *testing.T) {
	for _, v := range []uint16{9, 10} {
		d := newTestDecoder(t, DecoderConfig{})
		f := tt.Flow{Src: reflector, Dst: victim, Proto: 6, SrcPort: 1234, DstPort: 443, TCPFlags: 0x02, Packets: 3, Bytes: 180, Start: 5000, End: 5500}
		// Data before its template: counted, not an error.
		m := tt.NF{Version: v, Domain: 7, Sequence: 0}
		m.Data(256, tt.Record(f))
		rs, err := decodeAll(t, d, m.Bytes())
		if err != nil || len(rs) != 0 {
			t.Fatalf("v%d: data before template: %v, %d records", v, err, len(rs))
		}
		// The template, a sampling option, and data.
		m = tt.NF{Version: v, Domain: 7, Sequence: 1}
		m.Template(256, tt.FlowFields)
		m.OptionsTemplate(257, []tt.Field{{Type: 1, Length: 4}}, []tt.Field{{Type: 34, Length: 4}})
		m.Data(257, []byte{0, 0, 0, 1, 0, 0, 0, 200})
		m.Data(256, tt.Record(f), tt.Record(f))
		rs, err = decodeAll(t, d, m.Bytes())
		if err != nil {
			t.Fatalf("v%d: %v", v, err)
		}
		if len(rs) != 2 || rs[0].Rate != 200 || rs[0].Dst != victim || rs[0].TCPFlags != 2 || rs[0].Packets != 3 ||
			rs[0].Duration != 500*time.Millisecond || rs[0].MinLen != 60 {
			t.Fatalf("v%d: records %+v", v, rs)
		}
		// v9 counts datagrams (next 2), IPFIX records (next 1+3 = 4).
		next := uint32(2)
		if v == 10 {
			next = 4
		}
		m = tt.NF{Version: v, Domain: 7, Sequence: next + 10}
		m.Data(256, tt.Record(f))
		if _, err := decodeAll(t, d, m.Bytes()); err != nil {
			t.Fatal(err)
		}
		st := stats(t, d)
		if st.SequenceGaps != 10 || st.NoTemplate != 1 || st.Templates != 2 {
			t.Errorf("v%d: gaps %d no-template %d templates %d, want 10, 1, 2", v, st.SequenceGaps, st.NoTemplate, st.Templates)
		}
	}
}

func TestTemplateFloodIsBounded(t *testing.T) {
	d := newTestDecoder(t, DecoderConfig{MaxTemplates: 8})
	for i := 0; i < 100; i++ {
		m := tt.NF{Version: 10, Domain: uint32(i), Sequence: 0}
		m.Template(uint16(256+i), tt.FlowFields)
		_, _ = decodeAll(t, d, m.Bytes())
	}
	// A template redefined when full is still accepted.
	m := tt.NF{Version: 10, Domain: 0}
	m.Template(256, tt.FlowFields)
	if _, err := decodeAll(t, d, m.Bytes()); err != nil {
		t.Errorf("redefinition refused: %v", err)
	}
	st := stats(t, d)
	if st.Templates != 8 || st.TemplatesRefused != 92 || st.DecodeErrors != 92 {
		t.Errorf("templates %d refused %d errors %d, want 8, 92, 92", st.Templates, st.TemplatesRefused, st.DecodeErrors)
	}
}

func TestZeroLengthTemplateRefused(t *testing.T) {
	d := newTestDecoder(t, DecoderConfig{})
	m := tt.NF{Version: 9}
	m.Template(300, []tt.Field{{Type: 8, Length: 0}})
	m.Data(300, []byte{1, 2, 3, 4})
	done := make(chan error, 1)
	go func() { _, err := decodeAll(t, d, m.Bytes()); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("err %v, want ErrMalformed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("decoding a zero-length template's data did not return")
	}
	if st := stats(t, d); st.TemplatesRefused != 1 || st.Templates != 0 {
		t.Errorf("%+v", st)
	}
}

func TestUnknownExporterIgnored(t *testing.T) {
	d := newTestDecoder(t, DecoderConfig{})
	err := d.Decode(netip.MustParseAddr("192.0.2.66"), tt.NetFlow5(0, 0), t0, func(*Record) { t.Error("emitted") })
	if !errors.Is(err, ErrUnknownExporter) {
		t.Errorf("err %v", err)
	}
	if n, a := d.Unknown(); n != 1 || a != netip.MustParseAddr("192.0.2.66") {
		t.Errorf("unknown %d %v", n, a)
	}
	if st := stats(t, d); st.Datagrams != 0 {
		t.Errorf("counted on the configured exporter: %+v", st)
	}
}

func TestMalformedCounted(t *testing.T) {
	d := newTestDecoder(t, DecoderConfig{})
	s := tt.SFlow{Agent: router}
	s.Flow(10, tt.Packet{Src: reflector, Dst: victim, Proto: 17, Length: 100})
	good := s.Bytes()
	// An expanded flow sample claiming 2^32-1 records.
	exp := u32s(5, 1, 0x01020304, 0, 1, 0, 1)
	body := u32s(1, 0, 3, 10, 10, 0, 0, 0, 0, 0, 0xffffffff)
	exp = append(append(exp, u32s(3, uint32(len(body)))...), body...)
	bad := [][]byte{nil, {0}, {0, 5, 0, 1}, good[:len(good)-9], tt.NetFlow5(0, 0, tt.Flow{Src: reflector, Dst: victim})[:30], {0, 9, 0, 1, 0, 0, 0, 0}, {0, 10, 0, 5}, exp,
		append(tt.NetFlow5(0, 0), 0xff)} // a v5 count of 0 with trailing garbage is fine
	var errs int
	for _, b := range bad {
		if err := d.Decode(router, b, t0, func(*Record) {}); err != nil {
			t.Logf("%x: %v", b, err)
			errs++
			if !errors.Is(err, ErrMalformed) {
				t.Errorf("%x: %v, want ErrMalformed", b, err)
			}
		}
	}
	if st := stats(t, d); st.DecodeErrors != uint64(errs) || errs != len(bad)-1 {
		t.Errorf("decode errors %d, returned %d", st.DecodeErrors, errs)
	}
	// And the collector decodes the next good datagram.
	if rs, err := decodeAll(t, d, good); err != nil || len(rs) != 1 {
		t.Errorf("after malformed: %v, %d records", err, len(rs))
	}
}

func u32s(vs ...uint32) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.BigEndian.AppendUint32(b, v)
	}
	return b
}

// FuzzDecode feeds arbitrary datagrams through one decoder (its
// templates kept across inputs, as a collector's are): it must never
// panic, hang or emit a record without a destination.
func FuzzDecode(f *testing.F) {
	s := tt.SFlow{Agent: router, Sequence: 1}
	s.Flow(1000, tt.Packet{Src: reflector, Dst: victim, Proto: 6, SrcPort: 1, DstPort: 80, TCPFlags: 2, Length: 60})
	s.Counter(1, 1, 2)
	f.Add(s.Bytes())
	c := tt.SFlow{Agent: router, Sequence: 2, Uptime: 5000}
	c.Interface(tt.IfCounters{Index: 7, Speed: 1e9, Status: 3, InOctets: 1 << 33, InUcast: 5}, &tt.EthCounters{FCS: 1})
	f.Add(c.Bytes())
	fl := tt.Flow{Src: reflector, Dst: victim, Proto: 17, SrcPort: 53, DstPort: 53, Packets: 1, Bytes: 512}
	f.Add(tt.NetFlow5(1, 100, fl))
	for _, v := range []uint16{9, 10} {
		m := tt.NF{Version: v, Domain: 1}
		m.Template(256, tt.FlowFields)
		m.OptionsTemplate(257, []tt.Field{{Type: 1, Length: 4}}, []tt.Field{{Type: 34, Length: 4}})
		m.Data(257, []byte{0, 0, 0, 1, 0, 0, 0, 200})
		m.Data(256, tt.Record(fl))
		f.Add(m.Bytes())
	}
	if b, err := os.ReadFile("testdata/softflowd-1.1-v9.bin"); err == nil {
		f.Add(b)
	}
	d, err := NewDecoder(DecoderConfig{Exporters: []ExporterConfig{{Address: router}}, MaxTemplates: 64, MaxInterfaces: 16}, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		b = slices.Clone(b) // Decode may rewrite a v9 header
		_ = d.Decode(router, b, t0, func(r *Record) {
			if !r.Dst.IsValid() || r.Rate == 0 {
				t.Fatalf("record %+v", r)
			}
		})
		st := d.Exporters()[0]
		if st.Templates > 64 {
			t.Fatalf("%d templates held, cap 64", st.Templates)
		}
		if len(st.Interfaces) > 16 {
			t.Fatalf("%d interfaces held, cap 16", len(st.Interfaces))
		}
		for _, x := range st.Interfaces {
			if x.InBPS < 0 || x.OutBPS < 0 || x.SpeedBPS > 0 && x.InBPS > 1.5*float64(x.SpeedBPS) {
				t.Fatalf("interface %+v", x)
			}
		}
	})
}

func TestCollectorOverUDP(t *testing.T) {
	lo := netip.MustParseAddr("127.0.0.1")
	d, err := NewDecoder(DecoderConfig{Exporters: []ExporterConfig{{Address: lo}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan Record, 16)
	c, err := Listen([]string{"127.0.0.1:0"}, d, func(_ time.Time, rs []Record) {
		for _, r := range rs {
			got <- r
		}
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	conn, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(c.Addrs()[0]))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	s := tt.SFlow{Agent: lo}
	s.Flow(512, tt.Packet{Src: reflector, Dst: victim, Proto: 17, SrcPort: 123, Length: 468})
	for _, b := range [][]byte{{1, 2, 3}, s.Bytes()} {
		if _, err := conn.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case r := <-got:
		if r.Dst != victim || r.Rate != 512 {
			t.Errorf("%+v", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no record")
	}
	if st := d.Exporters()[0]; st.Datagrams != 2 || st.DecodeErrors != 1 {
		t.Errorf("%+v", st)
	}
}

// An exporter configured but silent is listed with no protocols, as an
// empty list: /v1/telemetry's schema says an array (a poll that came
// before the first datagram read null).
func TestSilentExporterListsNoProtocols(t *testing.T) {
	d := newTestDecoder(t, DecoderConfig{})
	b, err := json.Marshal(d.Exporters()[0])
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(`"protocols":[]`)) || !bytes.Contains(b, []byte(`"interfaces":[]`)) {
		t.Errorf("%s", b)
	}
}

// Bursts are read in batches (recvmmsg) on sockets of both families:
// every datagram is decoded once, from the exporter that sent it, and a
// jumbo datagram whole.
func TestCollectorReadsBursts(t *testing.T) {
	lo4, lo6 := netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1")
	d, err := NewDecoder(DecoderConfig{Exporters: []ExporterConfig{{Address: lo4}, {Address: lo6}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	per := map[netip.Addr]int{}
	c, err := Listen([]string{"127.0.0.1:0", "[::1]:0"}, d, func(_ time.Time, rs []Record) {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range rs {
			per[r.Exporter]++
		}
	}, nil)
	if err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	}
	defer c.Close()
	if os.Geteuid() == 0 {
		for _, conn := range c.conns {
			if got, err := setReadBuffer(conn, readBuffer); err != nil || got < readBuffer {
				t.Errorf("receive buffer %d (%v), want %d: root forces it past rmem_max", got, err, readBuffer)
			}
		}
	}
	const burst, jumboSamples = 400, 100
	for i, agent := range []netip.Addr{lo4, lo6} {
		conn, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(c.Addrs()[i]))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		s := tt.SFlow{Agent: agent}
		s.Flow(512, tt.Packet{Src: reflector, Dst: victim, Proto: 17, SrcPort: 123, Length: 468})
		for j := 0; j < burst; j++ {
			if _, err := conn.Write(s.Bytes()); err != nil {
				t.Fatal(err)
			}
		}
		jumbo := tt.SFlow{Agent: agent}
		for j := 0; j < jumboSamples; j++ {
			jumbo.Flow(512, tt.Packet{Src: reflector, Dst: victim, Proto: 17, SrcPort: 123, Length: 468})
		}
		if b := jumbo.Bytes(); len(b) < 9000 {
			t.Fatalf("jumbo datagram of %d bytes", len(b))
		}
		if _, err := conn.Write(jumbo.Bytes()); err != nil {
			t.Fatal(err)
		}
	}
	want := burst + jumboSamples
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		a, b := per[lo4], per[lo6]
		mu.Unlock()
		if a == want && b == want {
			break
		}
		if a > want || b > want || time.Now().After(deadline) {
			t.Fatalf("records from 127.0.0.1 %d, from ::1 %d; want %d each", a, b, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, st := range d.Exporters() {
		if st.Datagrams != burst+1 || st.DecodeErrors != 0 {
			t.Errorf("%v: %d datagrams, %d decode errors; want %d, 0", st.Address, st.Datagrams, st.DecodeErrors, burst+1)
		}
	}
}

// A datagram softflowd 1.1 sent (captured on the lab): its v9 header
// counts 2 records after 5 flowsets (templates, an options template and
// its data, two data sets); goflow2 alone stops after the first two.
func TestSoftflowdCountIsNotFlowsets(t *testing.T) {
	b, err := os.ReadFile("testdata/softflowd-1.1-v9.bin")
	if err != nil {
		t.Fatal(err)
	}
	d := newTestDecoder(t, DecoderConfig{})
	rs, err := decodeAll(t, d, b)
	if err != nil || len(rs) != 2 {
		t.Fatalf("%v, %d records", err, len(rs))
	}
	r := rs[0]
	if r.Dst != netip.MustParseAddr("10.231.0.2") || r.SrcPort != 5353 || r.Packets != 39670 || r.Bytes != 19835000 || r.MinLen != 500 || r.Rate != 1 {
		t.Errorf("%+v", r)
	}
}
