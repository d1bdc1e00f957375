// SPDX-License-Identifier: Apache-2.0

package telemetry

import (
	"net/netip"
	"time"
)

// ExporterStats is what the collector knows of one exporter: the
// operator's view (`tierwall telemetry exporters`, /v1/telemetry, the
// per-exporter metrics).
type ExporterStats struct {
	Address netip.Addr `json:"address"`
	Name    string     `json:"name,omitempty"`
	// Protocols seen from it.
	Protocols []Protocol `json:"protocols"`
	Datagrams uint64     `json:"datagrams"`
	Records   uint64     `json:"records"` // flow samples and flow records
	Counters  uint64     `json:"counter_samples"`
	// DecodeErrors are datagrams, or parts of one, that did not decode
	// (what decoded before the error is used).
	DecodeErrors uint64 `json:"decode_errors"`
	// SequenceGaps is how many datagrams (sFlow, NetFlow v9) or records
	// (NetFlow v5, IPFIX) the sequence numbers say were lost; Resets are
	// sequence numbers that went back (an exporter restart).
	SequenceGaps uint64 `json:"sequence_gaps"`
	Resets       uint64 `json:"sequence_resets"`
	// Reordered of the SequenceGaps came after all, behind a later
	// datagram (reorderWindow): late, not lost.
	Reordered uint64 `json:"sequence_reordered"`
	// LossScale is what its records are scaled by for the loss its
	// sequence numbers show lately (lossMeter): 1 with none.
	LossScale float64 `json:"loss_scale"`
	// Templates held and refused (past the cap, or unusable).
	Templates        int    `json:"templates"`
	TemplatesRefused uint64 `json:"templates_refused"`
	// NoTemplate counts data sets that arrived before their template.
	NoTemplate uint64 `json:"no_template"`
	// SamplingRate is the last rate applied; Configured the operator's;
	// RateMismatches the records whose datagram said otherwise.
	SamplingRate   uint32    `json:"sampling_rate"`
	Configured     uint32    `json:"configured_rate,omitempty"`
	RateMismatches uint64    `json:"rate_mismatches"`
	LastSeen       time.Time `json:"last_seen"`
	// Interfaces are what its sFlow counter samples say, by ifIndex (at
	// most DecoderConfig.MaxInterfaces); InterfacesRefused the samples of
	// interfaces past that bound, or past the bound over all exporters.
	Interfaces        []Interface `json:"interfaces"`
	InterfacesRefused uint64      `json:"interfaces_refused"`
}

// exporter is the decoder's state for one exporter.
type exporter struct {
	ExporterStats
	tmpl *templates
	// seq is the next sequence number expected per stream: sFlow
	// sub-agent, NetFlow source ID, IPFIX observation domain (bounded
	// with the templates' cap: a stream is what a template is per).
	seq, seqN, seqAlt map[uint64]uint32
	// seqGaps are a stream's recent gaps, which a late datagram may
	// still fill (reorderWindow).
	seqGaps map[uint64]*recentGaps
	// optRate is the sampling rate the v9/IPFIX options said, per
	// observation domain (0: none said).
	optRate map[uint64]uint32
	warned  bool // the mismatch with the configuration was logged
	clock   exporterClock
	loss    lossMeter
	// ifs is the interface table of its sFlow counter samples; ifScan
	// when it was last searched for an entry to evict.
	ifs    map[uint32]*ifState
	ifScan time.Time
}

// exporterClock maps an exporter's uptime to this host's clock. A
// datagram's arrival minus its uptime is the exporter's boot time plus
// the path's delay; the least of those seen (over the last one to two
// windows of clockWindow, so that drift between the two clocks follows)
// is the delay floor, and a datagram's own excess over it is how long it
// was held on the way: a sender that stalled, a queue, this collector
// starved of CPU. Measured on eval-network: a feed stalled 0.99 s, then
// sent a second's samples at once, and the 250 ms average read them as
// two floods.
type exporterClock struct {
	cur, prev int64 // the least offset (ns) of this window and the last
	since     time.Time
	set       bool
	last      time.Duration // the last datagram's uptime
}

const (
	clockWindow = time.Minute
	// clockJump: an offset this far above the floor is a new boot (or
	// a clock that jumped), not a delay: the floor starts again.
	clockJump = 10 * time.Second
	// clockMaxLag bounds how far back a record may be placed.
	clockMaxLag = 2 * time.Second
)

// at is when a datagram with this uptime left the exporter, on this
// host's clock, at most clockMaxLag before now.
func (c *exporterClock) at(uptime time.Duration, now time.Time) time.Time {
	off := now.UnixNano() - int64(uptime)
	stuck := c.set && uptime <= c.last
	c.last = uptime
	if stuck && off <= min(c.cur, c.prev)+int64(clockJump) {
		// An uptime that does not advance (a constant, or datagrams out
		// of order) says nothing of when this one was sent: on arrival.
		// Else every later datagram would look held back, and a flood
		// be counted seconds into the past.
		return now
	}
	switch {
	case !c.set || off > min(c.cur, c.prev)+int64(clockJump):
		c.cur, c.prev, c.since, c.set = off, off, now, true
	case now.Sub(c.since) >= clockWindow:
		c.prev, c.cur, c.since = c.cur, off, now
	case off < c.cur:
		c.cur = off
	}
	sent := time.Unix(0, min(c.cur, c.prev)+int64(uptime))
	if sent.After(now) {
		return now
	}
	if now.Sub(sent) > clockMaxLag {
		return now.Add(-clockMaxLag)
	}
	return sent
}

// maxGap is the largest forward jump counted as loss; a larger one is an
// exporter that restarted with another counter (or garbage), counted as a
// reset so that one datagram cannot add billions of lost records.
const maxGap = 1 << 20

// reorderWindow is how many messages behind the newest a datagram may
// arrive and count as late rather than as a restart: one that overtook
// another on the way (a router's ECMP, a collector's socket per CPU)
// would else count as a gap and then a reset, and the next in-order
// datagram as a gap again, reading reordering as twice its rate of loss.
// A late datagram must fall in a gap counted lost (recentGaps), so a
// restarted exporter, or a duplicate, is not taken for one.
const reorderWindow = 64

// seqRange is sequence numbers [from, to), modulo 2^32; empty when
// from == to.
type seqRange struct{ from, to uint32 }

// recentGaps are the last gaps of a stream, oldest overwritten first.
type recentGaps struct {
	r    [4]seqRange
	next int
}

// add records a gap.
func (g *recentGaps) add(from, to uint32) {
	g.r[g.next] = seqRange{from, to}
	g.next = (g.next + 1) % len(g.r)
}

// fill takes [seq, seq+n) out of the gap holding seq and says how many
// of its units the gap held (0: none; seq is no gap's, or g is nil).
func (g *recentGaps) fill(seq, n uint32) uint32 {
	if g == nil {
		return 0
	}
	for i := range g.r {
		x := &g.r[i]
		if seq-x.from >= x.to-x.from { // outside, or an empty range
			continue
		}
		k := min(n, x.to-seq)
		switch {
		case seq == x.from:
			x.from += k
		case seq+k == x.to:
			x.to = seq
		default: // the middle: the part after it is kept if a slot is free
			after := seqRange{seq + k, x.to}
			x.to = seq
			for j := range g.r {
				if g.r[j].from == g.r[j].to {
					g.r[j] = after
					break
				}
			}
		}
		return k
	}
	return 0
}

// sequence checks a stream's sequence number, seq, of a message of n
// data records (alt of them not options records), and remembers it;
// unit is what the protocol's numbers count in this message (1: a
// datagram; n: records), for the loss meter.
// RFC 7011 makes an IPFIX sequence number the data records sent before
// the message, options records included; exporters differ: softflowd 1.1
// counts flow records only, and counts the message's own. A number that
// follows the last message under any of these readings is no loss.
func (e *exporter) sequence(stream uint64, seq, n, alt, unit uint32, maxStreams int, now time.Time) {
	last, ok := e.seq[stream]
	if !ok && len(e.seq) >= maxStreams {
		return
	}
	lastN, lastAlt := e.seqN[stream], e.seqAlt[stream]
	if !ok {
		e.seq[stream], e.seqN[stream], e.seqAlt[stream] = seq, n, alt
		e.loss.add(uint64(unit), 0, now)
		return
	}
	d, behind, from := uint32(maxGap), uint32(maxGap), last
	for _, want := range [...]uint32{last + lastN, last + lastAlt, last + alt, last + n} {
		if seq-want < d { // modulo 2^32: behind is a huge distance
			d, from = seq-want, want
		}
		behind = min(behind, want-seq) // and ahead is
	}
	gaps := e.seqGaps[stream]
	if d >= maxGap && behind <= reorderWindow*max(unit, 1) {
		if unit == 0 {
			// A late message without data records (templates only)
			// fills nothing and says nothing of a restart.
			return
		}
		if k := gaps.fill(seq, unit); k > 0 {
			// Late: it fills a gap already counted lost. The stream's
			// newest number stays.
			e.Reordered += uint64(k)
			e.loss.late(uint64(unit), uint64(k), now)
			return
		}
	}
	e.seq[stream], e.seqN[stream], e.seqAlt[stream] = seq, n, alt
	lost := uint32(0)
	switch {
	case d == 0:
	case d < maxGap:
		e.SequenceGaps += uint64(d)
		lost = d
		if gaps == nil {
			gaps = &recentGaps{}
			e.seqGaps[stream] = gaps
		}
		gaps.add(from, seq)
	default:
		e.Resets++
		delete(e.seqGaps, stream)
	}
	e.loss.add(uint64(unit), uint64(lost), now)
}

// Loss correction. Datagrams lost between an exporter and this
// collector (a congested path, the socket's queue full during the very
// flood to be detected) make every rate read low, by the share lost. The
// sequence numbers say how many: the records of an exporter are scaled
// up by what its sequence numbers show lost over the current and the
// last lossWindow, once maxLossScale would not be passed: past half lost
// the loss is counted and shown, and the rates are read as at half.
// Whoever can forge the exporter's sequence numbers can forge its samples
// too, which say more: the cap only bounds what a broken exporter does.
const (
	lossWindow   = time.Second
	maxLossScale = 2.0
	// lossMinUnits: fewer units than this over the two windows say
	// nothing reliable of a share (one datagram lost of three is not a
	// third of the traffic lost).
	lossMinUnits = 16
)

// lossMeter counts an exporter's units (datagrams or records, as its
// protocol's sequence numbers count) received and lost, over two windows.
type lossMeter struct {
	got, lost         uint64 // this window's
	prevGot, prevLost uint64 // the last window's
	since             time.Time
}

func (m *lossMeter) add(got, lost uint64, now time.Time) {
	switch {
	case now.Sub(m.since) >= 2*lossWindow:
		// Quiet for a window or more: the last one held nothing.
		m.prevGot, m.prevLost, m.got, m.lost, m.since = 0, 0, 0, 0, now
	case now.Sub(m.since) >= lossWindow:
		m.prevGot, m.prevLost, m.got, m.lost, m.since = m.got, m.lost, 0, 0, now
	}
	m.got += got
	m.lost += lost
}

// late counts got units received, back of which a gap had counted lost:
// taken from this window's loss first, then the last one's.
func (m *lossMeter) late(got, back uint64, now time.Time) {
	m.add(got, 0, now)
	cur := min(back, m.lost)
	m.lost -= cur
	m.prevLost -= min(back-cur, m.prevLost)
}

// scale is what a record's rate is multiplied by at now: sent over
// received over the two windows, at most maxLossScale; 1 with too little
// to say, or when they are over.
func (m *lossMeter) scale(now time.Time) float64 {
	got, lost := m.got+m.prevGot, m.lost+m.prevLost
	if now.Sub(m.since) >= 2*lossWindow {
		return 1
	}
	if got+lost < lossMinUnits || lost == 0 || got == 0 {
		return 1
	}
	return min(float64(got+lost)/float64(got), maxLossScale)
}

func (e *exporter) sawProtocol(p Protocol) {
	for _, q := range e.Protocols {
		if q == p {
			return
		}
	}
	e.Protocols = append(e.Protocols, p)
}
