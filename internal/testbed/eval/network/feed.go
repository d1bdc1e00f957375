// SPDX-License-Identifier: Apache-2.0

package network

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"time"

	tt "github.com/tierwall/tierwall/internal/control/telemetry/telemetrytest"

	"github.com/tierwall/tierwall/internal/testbed/eval/evalkit"
)

// pick is the index whose cumulative share first reaches a uniform draw.
func pick(r *rand.Rand, cum []float64) int {
	i, _ := slices.BinarySearch(cum, r.Float64())
	return min(i, len(cum)-1)
}

// tee sends each datagram to tierwall and to FastNetMon's collector of
// its protocol.
type tee struct {
	conn                *net.UDPConn
	tw, fnmSFlow, fnmNF netip.AddrPort
	sent                uint64
}

func newTee(tw, sflow, nf netip.AddrPort) (*tee, error) {
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: evalkit.Loopback.AsSlice()})
	if err != nil {
		return nil, fmt.Errorf("opening the exporter's socket: %w", err)
	}
	return &tee{conn: c, tw: tw, fnmSFlow: sflow, fnmNF: nf}, nil
}

func (t *tee) send(b []byte, sflow bool) error {
	to := t.fnmNF
	if sflow {
		to = t.fnmSFlow
	}
	// Alternate who gets it first: a few microseconds, but the same for both.
	first, second := t.tw, to
	if t.sent%2 == 1 {
		first, second = to, t.tw
	}
	for _, a := range []netip.AddrPort{first, second} {
		if _, err := t.conn.WriteToUDPAddrPort(b, a); err != nil {
			return fmt.Errorf("sending telemetry to %v: %w", a, err)
		}
	}
	t.sent++
	return nil
}

func (t *tee) close() { t.conn.Close() }

// flood is one source of sampled packets.
type flood struct {
	pps    float64 // represented packets/s
	rate   int     // sampling rate
	packet func(r *rand.Rand) tt.Packet
}

// floodOf is a cell's flood at sampling rate.
func floodOf(c Cell) flood {
	v := netip.MustParsePrefix(c.Victim)
	f := flood{pps: c.PPS, rate: c.Sampling}
	switch c.Kind {
	case "udp":
		f.packet = func(r *rand.Rand) tt.Packet {
			return tt.Packet{Src: evalkit.RandSrc(r), Dst: v.Addr(), Proto: 17, SrcPort: uint16(1024 + r.IntN(60000)), DstPort: uint16(1 + r.IntN(65000)), Length: 512}
		}
	case "syn":
		f.packet = func(r *rand.Rand) tt.Packet {
			return tt.Packet{Src: evalkit.RandSrc(r), Dst: v.Addr(), Proto: 6, SrcPort: uint16(1024 + r.IntN(60000)), DstPort: 443, TCPFlags: 0x02, Length: 60}
		}
	case "reflection":
		ports := []struct{ port, length uint16 }{{123, 468}, {389, 1400}, {53, 1200}}
		f.packet = func(r *rand.Rand) tt.Packet {
			p := ports[r.IntN(len(ports))]
			return tt.Packet{Src: evalkit.RandSrc(r), Dst: v.Addr(), Proto: 17, SrcPort: p.port, DstPort: uint16(1024 + r.IntN(60000)), Length: p.length}
		}
	case "carpet":
		f.packet = func(r *rand.Rand) tt.Packet {
			return tt.Packet{Src: evalkit.RandSrc(r), Dst: evalkit.RandIn(r, v), Proto: 17, SrcPort: uint16(1024 + r.IntN(60000)), DstPort: 80, Length: 512}
		}
	}
	return f
}

// benignMix is the background: 200 destinations of 198.18.1.0/24 at
// rates falling as a power law from 60% of the threshold, web and QUIC
// responses, DNS, a little ICMP, sampled 1:100. Its total and the number
// of destinations go to res.
func benignMix(threshold float64) ([]flood, float64) {
	var fs []flood
	total := 0.0
	for i := range 200 {
		dst := netip.AddrFrom4([4]byte{198, 18, 1, byte(1 + i)})
		pps := 0.6 * threshold / math.Pow(float64(i+1), 0.8)
		total += pps
		fs = append(fs, flood{pps: pps, rate: 100, packet: func(r *rand.Rand) tt.Packet {
			src := netip.AddrFrom4([4]byte{93, 184, byte(r.IntN(8)), byte(1 + r.IntN(64))})
			switch x := r.IntN(100); {
			case x < 60:
				return tt.Packet{Src: src, Dst: dst, Proto: 6, SrcPort: 443, DstPort: uint16(32768 + r.IntN(28000)), TCPFlags: 0x10, Length: uint16(52 + r.IntN(1400))}
			case x < 88:
				return tt.Packet{Src: src, Dst: dst, Proto: 17, SrcPort: 443, DstPort: uint16(32768 + r.IntN(28000)), Length: uint16(80 + r.IntN(1270))}
			case x < 98:
				return tt.Packet{Src: src, Dst: dst, Proto: 17, SrcPort: 53, DstPort: uint16(32768 + r.IntN(28000)), Length: uint16(80 + r.IntN(400))}
			default:
				return tt.Packet{Src: src, Dst: dst, Proto: 1, Length: 84}
			}
		}})
	}
	return fs, total
}

// poisson draws the number of events of mean l.
func poisson(r *rand.Rand, l float64) int {
	if l > 30 {
		return max(0, int(math.Round(l+math.Sqrt(l)*r.NormFloat64())))
	}
	k, p, e := 0, 1.0, math.Exp(-l)
	for {
		p *= r.Float64()
		if p <= e {
			return k
		}
		k++
	}
}

// sflowAgent batches samples as pmacctd's sfprobe does: a datagram when
// it holds six, or when the oldest has waited a second.
type sflowAgent struct {
	tx  *tee
	seq uint32
	// boot and due: the agent's uptime in a datagram is due - boot, due
	// being when the feed's schedule sends it. A sender that fell behind
	// (this machine's other jobs) is then a path that held the datagram,
	// as the collector sees one, not an exporter that sent it late.
	boot, due time.Time
	pending   []pendingSample
	oldest    time.Time
	// onSend is told which floods' samples went out, when.
	onSend func(ids []int, at time.Time)
}

type pendingSample struct {
	rate int
	p    tt.Packet
	id   int
}

func (a *sflowAgent) add(now time.Time, rate int, p tt.Packet, id int) error {
	if len(a.pending) == 0 {
		a.oldest = now
	}
	a.pending = append(a.pending, pendingSample{rate, p, id})
	if len(a.pending) >= 6 {
		return a.flush(now)
	}
	return nil
}

func (a *sflowAgent) tick(now time.Time) error {
	if len(a.pending) > 0 && now.Sub(a.oldest) >= time.Second {
		return a.flush(now)
	}
	return nil
}

func (a *sflowAgent) flush(now time.Time) error {
	a.seq++
	s := tt.SFlow{Agent: evalkit.Loopback, Sequence: a.seq, Uptime: uint32(a.due.Sub(a.boot).Milliseconds())}
	var ids []int
	for _, x := range a.pending {
		s.Flow(uint32(x.rate), x.p)
		ids = append(ids, x.id)
	}
	a.pending = a.pending[:0]
	if err := a.tx.send(s.Bytes(), true); err != nil {
		return err
	}
	if a.onSend != nil {
		a.onSend(ids, now)
	}
	return nil
}

// nfExporter exports a flood as an unsampled NetFlow v9 or IPFIX exporter
// with a one-second active timeout would: every second, a record per
// source for the packets of that second, 24 records a datagram, the
// template before them.
type nfExporter struct {
	tx      *tee
	version uint16
	seq     uint32 // datagrams (v9) or data records (IPFIX)
}

const nfSources = 64

func (e *nfExporter) export(c Cell, r *rand.Rand) error {
	v := netip.MustParsePrefix(c.Victim).Addr()
	per := uint32(c.PPS / nfSources)
	var recs [][]byte
	for range nfSources {
		recs = append(recs, tt.Record(tt.Flow{Src: evalkit.RandSrc(r), Dst: v, Proto: 17, SrcPort: uint16(1024 + r.IntN(60000)), DstPort: 80,
			Packets: per, Bytes: per * 512, Start: 99000, End: 100000}))
	}
	for i := 0; i < len(recs); i += 24 {
		chunk := recs[i:min(i+24, len(recs))]
		m := tt.NF{Version: e.version, Sequence: e.seq}
		if i == 0 {
			m.Template(256, tt.FlowFields)
		}
		m.Data(256, chunk...)
		if e.version == 10 {
			e.seq += uint32(len(chunk))
		} else {
			e.seq++
		}
		if err := e.tx.send(m.Bytes(), false); err != nil {
			return err
		}
	}
	return nil
}

// sendTemplates has n exporters (127.0.0.2 on) send per NetFlow v9
// templates each to both tools, 100 to a datagram.
func sendTemplates(tw, fnm netip.AddrPort, n, per int) error {
	for e := range n {
		src := netip.AddrFrom4([4]byte{127, 0, 0, byte(2 + e)})
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: src.AsSlice()})
		if err != nil {
			return fmt.Errorf("opening exporter %v: %w", src, err)
		}
		for i := 0; i < per; i += 100 {
			m := tt.NF{Version: 9, Domain: 1, Sequence: uint32(i / 100)}
			for id := i; id < min(i+100, per); id++ {
				m.Template(uint16(256+id), tt.FlowFields)
			}
			b := m.Bytes()
			for _, a := range []netip.AddrPort{tw, fnm} {
				if _, err := c.WriteToUDPAddrPort(b, a); err != nil {
					c.Close()
					return fmt.Errorf("sending templates from %v: %w", src, err)
				}
			}
			time.Sleep(200 * time.Microsecond)
		}
		c.Close()
	}
	return nil
}

// ingestFeed is n sFlow datagrams of six samples each (sampling 1: the
// rates they stand for stay under the thresholds), to 4,096 destinations.
func ingestFeed(n int) [][]byte {
	r := rand.New(rand.NewPCG(36, 2))
	var out [][]byte
	for i := range n {
		s := tt.SFlow{Agent: evalkit.Loopback, Sequence: uint32(i + 1)}
		for range 6 {
			s.Flow(1, tt.Packet{Src: evalkit.RandSrc(r), Dst: evalkit.RandIn(r, evalkit.IngestPrefix), Proto: 17, SrcPort: 443, DstPort: uint16(1024 + r.IntN(60000)), Length: uint16(64 + r.IntN(1400))})
		}
		out = append(out, s.Bytes())
	}
	return out
}
