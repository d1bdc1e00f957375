// SPDX-License-Identifier: Apache-2.0

package flowprobe

import (
	"maps"
	"sort"
	"sync"
	"time"

	"github.com/tierwall/tierwall/internal/tier"
)

// LatencyBuckets are the upper bounds of the learn-latency histogram.
var LatencyBuckets = []time.Duration{
	100 * time.Microsecond, 250 * time.Microsecond, 500 * time.Microsecond,
	time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond,
	10 * time.Millisecond, 25 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond, time.Second,
}

// Stats are the probe's counters since it started.
type Stats struct {
	Samples          uint64 // DPI samples read
	SamplesLate      uint64 // samples of flows already decided
	DPISkipped       uint64 // flows decided without DPI: MaxDPI flows in DPI
	DPIGiveups       uint64 // flows DPI gave up on
	Classified       map[string]uint64
	StateErrors      uint64 // state updates of flows gone from software
	BatchErrors      uint64 // batches of software-table operations that failed as a whole
	LearnRequests    uint64
	LearnQueueFull   uint64 // learns the firmware queue refused: kept in software
	LearnDone        uint64
	LearnFailed      uint64
	LearnTableFull   uint64 // of the failed, for lack of room
	LearnIgnored     uint64
	LearnStale       uint64 // learned after the flow ended in software
	UnlearnQueueFull uint64
	Unlearned        map[tier.Cause]uint64
	OrphanEvents     uint64 // unlearn events of flows no longer in software
	Orphans          uint64 // flows let go of because their software entry was gone (late samples)
	Records          uint64
	RecordsByReason  map[EndReason]uint64
	SoftwareFlows    int // at the last sweep
	InDPI            int
	Offloaded        int      // flows in the NIC
	LearnLatency     []uint64 // per LatencyBuckets, then +Inf
	LearnLatencySum  time.Duration
	LearnLatencyN    uint64
}

func newStats() Stats {
	return Stats{
		Classified:      map[string]uint64{},
		Unlearned:       map[tier.Cause]uint64{},
		RecordsByReason: map[EndReason]uint64{},
		LearnLatency:    make([]uint64, len(LatencyBuckets)+1),
	}
}

func (s Stats) clone() Stats {
	s.Classified = maps.Clone(s.Classified)
	s.Unlearned = maps.Clone(s.Unlearned)
	s.RecordsByReason = maps.Clone(s.RecordsByReason)
	s.LearnLatency = append([]uint64(nil), s.LearnLatency...)
	return s
}

func (p *Probe) observeLearn(d time.Duration) {
	i := sort.Search(len(LatencyBuckets), func(i int) bool { return d <= LatencyBuckets[i] })
	p.stats.LearnLatency[i]++
	p.stats.LearnLatencySum += d
	p.stats.LearnLatencyN++
}

// AppTotals are the records of one application.
type AppTotals struct {
	App     string `json:"app"`
	Flows   uint64 `json:"flows"` // final records
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
	HWBytes uint64 `json:"hw_bytes"` // of those, counted by the NIC
}

// topN bounds the largest flows kept for Top.
const topN = 100

// view is what the API shows: totals per application and the largest
// flows reported, both bounded (applications are the classifier's names).
type view struct {
	apps map[string]*AppTotals
	top  []Record // by bytes, descending, at most topN
}

func newView() view { return view{apps: map[string]*AppTotals{}} }

// RecentRecords bounds the records kept for GET /v1/flows/records.
const RecentRecords = 1 << 16

// recent is a ring of the last RecentRecords records, numbered from 1.
type recent struct {
	mu   sync.Mutex
	ring []Record
	next uint64 // number of the next record
}

func (r *recent) add(rec *Record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ring == nil {
		r.ring = make([]Record, 0, 1024)
	}
	if len(r.ring) < RecentRecords {
		r.ring = append(r.ring, *rec)
	} else {
		r.ring[r.next%RecentRecords] = *rec
	}
	r.next++
}

// Records returns up to max records numbered since and later, and the
// number to ask for next. Records older than the ring holds are gone:
// the first one returned then has a later number than since.
func (p *Probe) Records(since uint64, max int) ([]Record, uint64) {
	r := &p.recent
	r.mu.Lock()
	defer r.mu.Unlock()
	oldest := uint64(0)
	if r.next > RecentRecords {
		oldest = r.next - RecentRecords
	}
	if since < oldest {
		since = oldest
	}
	var out []Record
	for n := since; n < r.next && len(out) < max; n++ {
		if len(r.ring) < RecentRecords {
			out = append(out, r.ring[n])
		} else {
			out = append(out, r.ring[n%RecentRecords])
		}
	}
	return out, since + uint64(len(out))
}

func (v *view) add(r *Record) {
	a := v.apps[r.App]
	if a == nil {
		a = &AppTotals{App: r.App}
		v.apps[r.App] = a
	}
	if r.Final {
		a.Flows++
	}
	a.Packets += r.Packets[0] + r.Packets[1]
	a.Bytes += r.Bytes[0] + r.Bytes[1]
	a.HWBytes += r.HWBytes[0] + r.HWBytes[1]
	b := r.Bytes[0] + r.Bytes[1]
	if len(v.top) == topN && b <= v.top[topN-1].Bytes[0]+v.top[topN-1].Bytes[1] {
		return
	}
	i := sort.Search(len(v.top), func(i int) bool { return v.top[i].Bytes[0]+v.top[i].Bytes[1] < b })
	v.top = append(v.top, Record{})
	copy(v.top[i+1:], v.top[i:])
	v.top[i] = *r
	if len(v.top) > topN {
		v.top = v.top[:topN]
	}
}

type published struct {
	stats Stats
	apps  []AppTotals
	top   []Record
}

func (p *Probe) publish() {
	p.stats.InDPI = len(p.dpi)
	if p.hw != nil {
		p.stats.Offloaded = p.hw.Occupancy()
	}
	apps := make([]AppTotals, 0, len(p.view.apps))
	for _, a := range p.view.apps {
		apps = append(apps, *a)
	}
	sort.Slice(apps, func(i, j int) bool { return apps[i].Bytes > apps[j].Bytes })
	p.mu.Lock()
	p.pub = published{stats: p.stats.clone(), apps: apps, top: append([]Record(nil), p.view.top...)}
	p.mu.Unlock()
}

// Stats returns the counters as of the probe's last step.
func (p *Probe) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pub.stats
}

// Apps returns the totals per application, largest first.
func (p *Probe) Apps() []AppTotals {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pub.apps
}

// Top returns the largest flows reported so far, at most n.
func (p *Probe) Top(n int) []Record {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n > len(p.pub.top) || n <= 0 {
		n = len(p.pub.top)
	}
	return p.pub.top[:n]
}
