package export

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/flowprobe"
	"github.com/tierwall/tierwall/internal/testutil"
	"github.com/tierwall/tierwall/internal/tier"
)

// End to end against a real collector: Debian's nfdump 1.7 (nfcapd)
// on loopback receives the export; nfdump reads back the file it writes.
//
// What nfdump 1.7.1 shows of what we send: addresses, ports, protocol,
// TCP flags, packets, bytes, first/last (ms), and for RFC 5103 biflows
// the reverse packets and bytes (out_packets, out_bytes). flowEndReason
// is kept for IPFIX but printed only by -o raw and the %end format
// element, not by -o json; nfdump reads no flowEndReason in NetFlow v9,
// nor applicationName (it knows NBAR's applicationId only), nor
// enterprise elements other than reverse ones and yaf's.

// nfcapd runs a collector on a free loopback port until stop, which
// makes it write its file and returns the file's path.
func nfcapd(t *testing.T) (addr string, stop func() string) {
	t.Helper()
	testutil.RequireCommand(t, "nfcapd", "nfdump")
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := c.LocalAddr().(*net.UDPAddr).Port
	c.Close()
	dir := t.TempDir()
	cmd := exec.Command("nfcapd", "-C", "none", "-b", "127.0.0.1", "-p", strconv.Itoa(port), "-w", dir, "-t", "3600")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	ready, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			log.WriteString(sc.Text() + "\n")
			if strings.Contains(sc.Text(), "Startup nfcapd") {
				close(ready)
			}
		}
	}()
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	select {
	case <-ready:
	case <-exited:
		t.Fatalf("nfcapd exited: %s", log.String())
	case <-time.After(10 * time.Second):
		t.Fatalf("nfcapd not ready: %s", log.String())
	}
	return fmt.Sprintf("127.0.0.1:%d", port), func() string {
		time.Sleep(time.Second) // nfcapd reads no more after SIGTERM: let it read the last datagrams
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			t.Fatalf("nfcapd did not stop: %s", log.String())
		}
		cmd.Wait()
		t.Logf("nfcapd: %s", strings.TrimSpace(log.String()))
		files, _ := filepath.Glob(filepath.Join(dir, "nfcapd.2*"))
		if len(files) != 1 {
			t.Fatalf("nfcapd files %v", files)
		}
		return files[0]
	}
}

// nfFlow is what nfdump shows of a flow.
type nfFlow struct {
	src, dst          netip.AddrPort
	proto             uint8
	flags             string
	pkts, bytes       uint64
	outPkts, outBytes uint64
	first, last       time.Time
	reason            int
}

func (f nfFlow) key() string { return fmt.Sprintf("%d %v %v", f.proto, f.src, f.dst) }

// readBack reads an nfcapd file: -o json for the flows, and the %end
// format element, in the same order, for the end reasons json lacks.
func readBack(t *testing.T, file string) []nfFlow {
	t.Helper()
	out, err := exec.Command("nfdump", "-r", file, "-o", "json").Output()
	if err != nil {
		t.Fatalf("nfdump -o json: %v", err)
	}
	var rows []map[string]any
	if err := json.Unmarshal(out, &rows); err != nil {
		t.Fatalf("nfdump json: %v\n%s", err, out)
	}
	ends, err := exec.Command("nfdump", "-q", "-N", "-r", file, "-o", "fmt:%end").Output()
	if err != nil {
		t.Fatalf("nfdump -o fmt:%%end: %v", err)
	}
	reasons := strings.Fields(string(ends))
	if len(reasons) != len(rows) {
		t.Fatalf("%d end reasons for %d flows", len(reasons), len(rows))
	}
	num := func(r map[string]any, k string) uint64 {
		v, _ := r[k].(float64)
		return uint64(v)
	}
	str := func(r map[string]any, k string) string { s, _ := r[k].(string); return s }
	ts := func(s string) time.Time {
		tm, err := time.ParseInLocation("2006-01-02T15:04:05.000", s, time.Local)
		if err != nil {
			t.Fatalf("time %q: %v", s, err)
		}
		return tm
	}
	var fs []nfFlow
	for i, r := range rows {
		if str(r, "type") != "FLOW" {
			continue
		}
		sa, da := str(r, "src4_addr"), str(r, "dst4_addr")
		if sa == "" {
			sa, da = str(r, "src6_addr"), str(r, "dst6_addr")
		}
		f := nfFlow{
			src:   netip.AddrPortFrom(netip.MustParseAddr(sa), uint16(num(r, "src_port"))),
			dst:   netip.AddrPortFrom(netip.MustParseAddr(da), uint16(num(r, "dst_port"))),
			proto: uint8(num(r, "proto")), flags: str(r, "tcp_flags"),
			pkts: num(r, "in_packets"), bytes: num(r, "in_bytes"), outPkts: num(r, "out_packets"), outBytes: num(r, "out_bytes"),
			first: ts(str(r, "first")), last: ts(str(r, "last")),
		}
		f.reason, _ = strconv.Atoi(reasons[i])
		fs = append(fs, f)
	}
	return fs
}

// nfFlags writes TCP flags as nfdump does.
func nfFlags(b uint8) string {
	s := []byte("CEUAPRSF")
	for i := range s {
		if b&(0x80>>i) == 0 {
			s[i] = '.'
		}
	}
	return string(s)
}

// e2eRecords: IPv4 and IPv6, TCP and UDP, every end reason, both
// initiator directions, one-way flows.
func e2eRecords(base time.Time) []flowprobe.Record {
	var rs []flowprobe.Record
	for i := 0; i < 10; i++ {
		reason := flowprobe.EndReason(1 + i%5)
		var k tier.FlowKey
		if i < 5 {
			k = tier.FlowKey{Proto: 6, Lo: netip.MustParseAddrPort(fmt.Sprintf("192.0.2.%d:%d", 10+i, 40000+i)),
				Hi: netip.MustParseAddrPort("198.51.100.1:443")}
		} else {
			k = tier.FlowKey{Proto: 17, Lo: netip.MustParseAddrPort(fmt.Sprintf("[2001:db8::%d]:53", i)),
				Hi: netip.MustParseAddrPort(fmt.Sprintf("[2001:db8:1::%d]:%d", i, 50000+i))}
		}
		r := flowprobe.Record{Key: k, InitDir: uint8(i % 2), App: "app" + strconv.Itoa(i),
			Start: base.Add(time.Duration(i)*time.Second + 123*time.Millisecond), End: base.Add(time.Duration(i)*time.Second + 5*time.Second + 456*time.Millisecond),
			Packets: [2]uint64{uint64(10 + i), uint64(20 + 3*i)}, Bytes: [2]uint64{uint64(1000 + 7*i), uint64(30000 + 11*i)},
			HWPackets: [2]uint64{uint64(i), 0}, HWBytes: [2]uint64{uint64(100 * i), 0},
			Reason: reason, Final: reason != flowprobe.EndActive}
		if k.Proto == 6 {
			r.TCPFlags = [2]uint8{0x1b, 0x12}
		}
		if i == 4 || i == 9 {
			r.Packets[1-r.InitDir], r.Bytes[1-r.InitDir] = 0, 0 // one-way
		}
		rs = append(rs, r)
	}
	return rs
}

// expectNF is what nfdump must show of rs.
func expectNF(rs []flowprobe.Record, biflow bool) map[string]nfFlow {
	want := map[string]nfFlow{}
	ms := func(t time.Time) time.Time { return time.UnixMilli(t.UnixMilli()) }
	for _, r := range rs {
		ends := [2][2]netip.AddrPort{{r.Key.Lo, r.Key.Hi}, {r.Key.Hi, r.Key.Lo}}
		i, o := r.InitDir, 1-r.InitDir
		if biflow {
			f := nfFlow{src: ends[i][0], dst: ends[i][1], proto: r.Key.Proto, flags: nfFlags(r.TCPFlags[i]),
				pkts: r.Packets[i], bytes: r.Bytes[i], outPkts: r.Packets[o], outBytes: r.Bytes[o],
				first: ms(r.Start), last: ms(r.End), reason: int(r.Reason)}
			want[f.key()] = f
			continue
		}
		for _, d := range []uint8{i, o} {
			if r.Packets[d] == 0 {
				continue
			}
			f := nfFlow{src: ends[d][0], dst: ends[d][1], proto: r.Key.Proto, flags: nfFlags(r.TCPFlags[d]),
				pkts: r.Packets[d], bytes: r.Bytes[d], first: ms(r.Start), last: ms(r.End), reason: int(r.Reason)}
			want[f.key()] = f
		}
	}
	return want
}

func TestNfcapdEndToEnd(t *testing.T) {
	for _, tc := range []struct {
		name   string
		format string
		biflow bool
	}{
		{"ipfix", "ipfix", false},
		{"ipfix biflow", "ipfix", true},
		{"netflow9", "netflow9", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, stop := nfcapd(t)
			x, err := New(Config{Collectors: []Collector{{Address: addr, Format: tc.format}}, Biflow: tc.biflow,
				FlushInterval: 20 * time.Millisecond, MTU: 600})
			if err != nil {
				t.Fatal(err)
			}
			// NetFlow v9 times are uptimes: the flows start after the
			// exporter, as a probe's do.
			rs := e2eRecords(time.Now().Add(time.Second))
			for _, r := range rs {
				x.Export(r)
			}
			x.Close()
			st := x.Stats()
			if st.Dropped != 0 || st.Collectors[0].SendErrors != 0 {
				t.Fatalf("stats %+v", st)
			}
			got := readBack(t, stop())
			want := expectNF(rs, tc.biflow)
			if len(got) != len(want) {
				t.Errorf("nfdump shows %d flows, want %d", len(got), len(want))
			}
			for _, g := range got {
				w, ok := want[g.key()]
				if !ok {
					t.Errorf("unexpected flow %+v", g)
					continue
				}
				if tc.format == "netflow9" && g.reason == 0 {
					g.reason = w.reason // nfdump 1.7 reads no flowEndReason in NetFlow v9
				}
				if g.pkts != w.pkts || g.bytes != w.bytes || g.outPkts != w.outPkts || g.outBytes != w.outBytes ||
					g.flags != w.flags || !g.first.Equal(w.first) || !g.last.Equal(w.last) || g.reason != w.reason {
					t.Errorf("flow %s:\n got %+v\nwant %+v", g.key(), g, w)
				}
				delete(want, g.key())
			}
			for k := range want {
				t.Errorf("flow %s not in nfdump's output", k)
			}
		})
	}
}
