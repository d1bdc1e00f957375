// SPDX-License-Identifier: Apache-2.0

package export

import (
	"fmt"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/probe/flowprobe"
	"github.com/tierwall/tierwall/internal/testbed/collector"
	"github.com/tierwall/tierwall/internal/testutil"
	"github.com/tierwall/tierwall/internal/tier"
)

// End to end against a real collector: Debian's nfdump (nfcapd) on
// loopback receives the export; nfdump reads back the file it writes
// (internal/testbed/collector says what it shows of what we send).

func nfcapd(t *testing.T) (addr string, stop func() []string) {
	t.Helper()
	testutil.RequireCommand(t, "nfcapd", "nfdump")
	n, err := collector.Start(collector.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Kill)
	return n.Addr, func() []string {
		f, err := n.Stop(time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("nfcapd: %s", n.Log())
		return f
	}
}

type nfFlow = collector.Flow

func readBack(t *testing.T, files []string) []nfFlow {
	t.Helper()
	fs, err := collector.Read(files...)
	if err != nil {
		t.Fatal(err)
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
			f := nfFlow{Src: ends[i][0], Dst: ends[i][1], Proto: r.Key.Proto, Flags: nfFlags(r.TCPFlags[i]),
				Packets: r.Packets[i], Bytes: r.Bytes[i], OutPkts: r.Packets[o], OutBytes: r.Bytes[o],
				First: ms(r.Start), Last: ms(r.End), Reason: int(r.Reason)}
			want[f.Key()] = f
			continue
		}
		for _, d := range []uint8{i, o} {
			if r.Packets[d] == 0 {
				continue
			}
			f := nfFlow{Src: ends[d][0], Dst: ends[d][1], Proto: r.Key.Proto, Flags: nfFlags(r.TCPFlags[d]),
				Packets: r.Packets[d], Bytes: r.Bytes[d], First: ms(r.Start), Last: ms(r.End), Reason: int(r.Reason)}
			want[f.Key()] = f
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
				w, ok := want[g.Key()]
				if !ok {
					t.Errorf("unexpected flow %+v", g)
					continue
				}
				if tc.format == "netflow9" && g.Reason == 0 {
					g.Reason = w.Reason // nfdump 1.7 reads no flowEndReason in NetFlow v9
				}
				if g.Packets != w.Packets || g.Bytes != w.Bytes || g.OutPkts != w.OutPkts || g.OutBytes != w.OutBytes ||
					g.Flags != w.Flags || !g.First.Equal(w.First) || !g.Last.Equal(w.Last) || g.Reason != w.Reason {
					t.Errorf("flow %s:\n got %+v\nwant %+v", g.Key(), g, w)
				}
				delete(want, g.Key())
			}
			for k := range want {
				t.Errorf("flow %s not in nfdump's output", k)
			}
		})
	}
}
