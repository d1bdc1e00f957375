// SPDX-License-Identifier: Apache-2.0

package trafgen

import (
	"bytes"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"testing"

	"github.com/tierwall/tierwall/internal/pkt"
	"github.com/tierwall/tierwall/internal/testbed/gen"
	"github.com/tierwall/tierwall/internal/tier"
)

// schedule runs the flow model without the kernel: total frames in
// batches of random sizes, dropping frames with probability pDrop (the
// kernel's transmit failures), and returns the report and every frame
// that left, in order.
func schedule(t *testing.T, s Spec, total int, pDrop float64, seed uint64) (*Report, *flowPlan, []gen.FlowPkt) {
	t.Helper()
	if err := s.flowDefaults(); err != nil {
		t.Fatal(err)
	}
	p, err := newFlowPlan(&s)
	if err != nil {
		t.Fatal(err)
	}
	rep := &Report{Window: s.Flows}
	sch := newScheduler(p, s.Flows, s.BirthEvery, rep, true)
	rng := rand.New(rand.NewPCG(seed, 1))
	var sent []gen.FlowPkt
	mark := make([]bool, 4096)
	for done := 0; done < total; {
		n := min(1+rng.IntN(4096), total-done)
		batch := make([]gen.FlowPkt, n)
		if err := sch.fill(batch); err != nil {
			t.Fatal(err)
		}
		var dropped []uint32
		for k := range batch {
			if rng.Float64() < pDrop {
				dropped = append(dropped, uint32(k))
			} else {
				sent = append(sent, batch[k])
			}
		}
		rng.Shuffle(len(dropped), func(i, j int) { dropped[i], dropped[j] = dropped[j], dropped[i] })
		sch.account(batch, dropped, mark)
		done += n
	}
	rep.Flows = sch.stats()
	return rep, p, sent
}

func flowSpec() Spec {
	return Spec{
		Dst: netip.MustParseAddr("192.0.2.1"), Flows: 50, BirthEvery: 20, Proto: "mixed",
		Apps: []string{AppHTTP, AppTLS, AppDNS, AppGeneric}, PacketSize: 128, Packets: 1,
	}
}

// TestFlowScheduleLife checks each flow's life frame by frame: TCP
// handshake first and FIN sequence last, seq/ack numbers that follow the
// payloads, the application's messages in the first data frame each way,
// directions as tier.NewFlowKey numbers them, and the window at A.
func TestFlowScheduleLife(t *testing.T) {
	s := flowSpec()
	rep, p, sent := schedule(t, s, 40000, 0, 1)
	if rep.Scheduled != 40000 || rep.Sent != 40000 || rep.Dropped != 0 {
		t.Fatalf("scheduled %d sent %d dropped %d", rep.Scheduled, rep.Sent, rep.Dropped)
	}
	if rep.Born-rep.Ended != uint64(s.Flows) || rep.Ended < 100 {
		t.Fatalf("born %d ended %d: window %d, want %d", rep.Born, rep.Ended, rep.Born-rep.Ended, s.Flows)
	}
	if len(rep.Flows) != int(rep.Born) {
		t.Fatalf("%d flow stats for %d flows", len(rep.Flows), rep.Born)
	}
	per := make([][]gen.FlowPkt, rep.Born)
	for _, f := range sent {
		per[f.Flow] = append(per[f.Flow], f)
		st := rep.Flows[f.Flow]
		c, srv := p.addr.Endpoints(f.Flow)
		src, dst := c, netip.AddrPortFrom(srv, f.ServerPort)
		if f.S2C {
			src, dst = dst, src
		}
		proto := uint8(pkt.ProtoTCP)
		if f.UDP {
			proto = pkt.ProtoUDP
		}
		k, dir := tier.NewFlowKey(proto, src, dst)
		if k != st.Key || dir != st.ClientDir^b2i(f.S2C) {
			t.Fatalf("flow %d: frame key %v dir %d, stat key %v client dir %d s2c %v", f.Flow, k, dir, st.Key, st.ClientDir, f.S2C)
		}
	}
	var sumPk uint64
	for i, st := range rep.Flows {
		fr := per[i]
		sumPk += st.Packets[0] + st.Packets[1]
		if uint64(len(fr)) != st.Packets[0]+st.Packets[1] {
			t.Fatalf("flow %d: %d frames, stat %v", i, len(fr), st.Packets)
		}
		var bytesSum [2]uint64
		for _, f := range fr {
			bytesSum[st.ClientDir^b2i(f.S2C)] += uint64(f.IPLen)
		}
		if bytesSum != st.Bytes {
			t.Fatalf("flow %d: bytes %v, stat %v", i, bytesSum, st.Bytes)
		}
		app, udp := p.flowApp(uint64(i))
		if st.App != p.apps[app].name || fr[0].UDP != udp {
			t.Fatalf("flow %d: app %s udp %v", i, st.App, fr[0].UDP)
		}
		data := fr
		if !udp {
			if len(fr) < 3 || fr[0].TCPFlags != tcpSYN || fr[0].S2C || fr[1].TCPFlags != tcpSYN|tcpACK || !fr[1].S2C ||
				fr[2].TCPFlags != tcpACK || fr[2].S2C || fr[1].Ack != fr[0].Seq+1 || fr[2].Ack != fr[1].Seq+1 {
				t.Fatalf("flow %d: handshake %+v", i, fr[:min(3, len(fr))])
			}
			if !st.SYN {
				t.Fatalf("flow %d: SYN not reported", i)
			}
			data = fr[3:]
			if st.Ended {
				n := len(fr)
				if n < 6 || fr[n-3].TCPFlags != tcpFIN|tcpACK || fr[n-3].S2C || fr[n-2].TCPFlags != tcpFIN|tcpACK || !fr[n-2].S2C ||
					fr[n-1].TCPFlags != tcpACK || fr[n-1].S2C || !st.FIN {
					t.Fatalf("flow %d: ending %+v", i, fr[max(0, n-3):])
				}
				data = fr[3 : n-3]
			} else if st.FIN {
				t.Fatalf("flow %d: FIN on an active flow", i)
			}
			// Sequence numbers follow the payloads, each direction.
			next := [2]uint32{fr[2].Seq, fr[2].Ack}
			for _, f := range fr[3:] {
				d := b2i(f.S2C)
				if f.Seq != next[d] || f.Ack != next[1-d] {
					t.Fatalf("flow %d: seq %d ack %d, want %d %d", i, f.Seq, f.Ack, next[d], next[1-d])
				}
				next[d] += uint32(int(f.IPLen) - p.iphl - 20)
				if f.TCPFlags&tcpFIN != 0 {
					next[d]++
				}
			}
		}
		for j, f := range data {
			want := uint8(0)
			switch j {
			case 0:
				want = p.reqPL[app]
			case 1:
				want = p.respPL[app]
			}
			if f.Payload != want || f.S2C != (j%2 == 1) {
				t.Fatalf("flow %d data frame %d: payload %d s2c %v", i, j, f.Payload, f.S2C)
			}
		}
	}
	if sumPk != rep.Sent {
		t.Fatalf("flows sum to %d frames, %d sent", sumPk, rep.Sent)
	}
	// Reproducible: the same spec gives the same frames.
	if _, _, again := schedule(t, s, 40000, 0, 2); !reflect.DeepEqual(again, sent) {
		t.Fatal("two runs of one spec differ")
	}
}

// TestFlowScheduleDrops: frames the kernel failed to send are not counted.
func TestFlowScheduleDrops(t *testing.T) {
	rep, _, sent := schedule(t, flowSpec(), 30000, 0.1, 3)
	if rep.Sent+rep.Dropped != rep.Scheduled || rep.Dropped == 0 || rep.Sent != uint64(len(sent)) {
		t.Fatalf("scheduled %d sent %d dropped %d, %d frames left", rep.Scheduled, rep.Sent, rep.Dropped, len(sent))
	}
	var pk [2]uint64
	per := make(map[uint32]uint64)
	for _, f := range sent {
		per[f.Flow]++
	}
	for i, st := range rep.Flows {
		pk[0] += st.Packets[0]
		pk[1] += st.Packets[1]
		if per[uint32(i)] != st.Packets[0]+st.Packets[1] {
			t.Fatalf("flow %d: %d frames left, stat %v", i, per[uint32(i)], st.Packets)
		}
	}
	if pk[0]+pk[1] != rep.Sent {
		t.Fatalf("flows sum to %v, %d sent", pk, rep.Sent)
	}
}

// TestFlowApps: the application messages are what classifiers look for.
func TestFlowApps(t *testing.T) {
	for _, c := range []struct {
		app  string
		port uint16
		req  []byte
	}{
		{AppHTTP, 80, []byte("GET / HTTP/1.1\r\nHost: www.example.com\r\n")},
		{AppTLS, 443, []byte{0x16, 0x03}},
		{AppDNS, 53, []byte("\x03www\x07example\x03com\x00\x00\x01\x00\x01")},
	} {
		a, err := buildApp(c.app, "www.example.com")
		if err != nil {
			t.Fatal(err)
		}
		if a.port != c.port || !bytes.Contains(a.req, c.req) || len(a.resp) == 0 || len(a.req) > gen.MaxPayload {
			t.Errorf("%s: port %d request %q (%d bytes)", c.app, a.port, a.req, len(a.req))
		}
	}
	ch, err := clientHello("sni.example.org")
	if err != nil {
		t.Fatal(err)
	}
	if ch[5] != 1 || !bytes.Contains(ch, []byte("sni.example.org")) {
		t.Errorf("ClientHello % x", ch)
	}
}

// BenchmarkFlowSchedule is the user-space cost per frame: scheduling and
// accounting (the kernel's is BenchmarkFlowGen's).
func BenchmarkFlowSchedule(b *testing.B) {
	for _, c := range []struct {
		name  string
		flows int
		apps  []string
	}{{"1K-generic", 1000, nil}, {"1M-generic", 1 << 20, nil}, {"1K-apps", 1000, []string{AppHTTP, AppTLS, AppDNS, AppGeneric}}} {
		b.Run(c.name, func(b *testing.B) {
			s := Spec{Dst: netip.MustParseAddr("192.0.2.1"), Flows: c.flows, BirthEvery: 10, Apps: c.apps, Packets: 1}
			if err := s.flowDefaults(); err != nil {
				b.Fatal(err)
			}
			p, err := newFlowPlan(&s)
			if err != nil {
				b.Fatal(err)
			}
			rep := &Report{}
			sch := newScheduler(p, s.Flows, s.BirthEvery, rep, true)
			batch := make([]gen.FlowPkt, 1<<16)
			mark := make([]bool, len(batch))
			if err := sch.fill(make([]gen.FlowPkt, 4*c.flows)); err != nil { // the window fills
				b.Fatal(err)
			}
			b.ResetTimer()
			for done := 0; done < b.N; done += len(batch) {
				n := min(len(batch), b.N-done)
				if err := sch.fill(batch[:n]); err != nil {
					b.Fatal(err)
				}
				sch.account(batch[:n], nil, mark)
			}
		})
	}
}
