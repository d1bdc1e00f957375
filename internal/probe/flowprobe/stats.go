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
	Samples          uint64                `json:"samples"`      // DPI samples read
	SamplesLate      uint64                `json:"samples_late"` // samples of flows already decided
	DPISkipped       uint64                `json:"dpi_skipped"`  // flows decided without DPI: MaxDPI flows in DPI
	DPIGiveups       uint64                `json:"dpi_giveups"`  // flows DPI gave up on
	Classified       map[string]uint64     `json:"classified"`
	StateErrors      uint64                `json:"state_errors"` // state updates of flows gone from software
	BatchErrors      uint64                `json:"batch_errors"` // batches of software-table operations that failed as a whole
	LearnRequests    uint64                `json:"learn_requests"`
	LearnQueueFull   uint64                `json:"learn_queue_full"` // learns the firmware queue refused: kept in software
	LearnDone        uint64                `json:"learn_done"`
	LearnFailed      uint64                `json:"learn_failed"`
	LearnTableFull   uint64                `json:"learn_table_full"` // of the failed, for lack of room
	LearnIgnored     uint64                `json:"learn_ignored"`
	LearnStale       uint64                `json:"learn_stale"` // learned after the flow ended in software
	UnlearnQueueFull uint64                `json:"unlearn_queue_full"`
	Unlearned        map[tier.Cause]uint64 `json:"unlearned"`
	OrphanEvents     uint64                `json:"orphan_events"`     // unlearn events of flows no longer in software
	Orphans          uint64                `json:"orphans"`           // flows let go of because their software entry was gone (late samples)
	UntrackedFlows   uint64                `json:"untracked_flows"`   // flows left to the software tier alone: MaxFlows tracked already (no DPI, no offload)
	SamplesUntracked uint64                `json:"samples_untracked"` // DPI samples of those flows, passed over
	Records          uint64                `json:"records"`
	RecordsByReason  map[EndReason]uint64  `json:"records_by_reason"`
	SoftwareFlows    int                   `json:"software_flows"` // at the last sweep
	InDPI            int                   `json:"in_dpi"`
	Offloaded        int                   `json:"offloaded"`     // flows in the NIC
	LearnLatency     []uint64              `json:"learn_latency"` // per LatencyBuckets, then +Inf
	LearnLatencySum  time.Duration         `json:"learn_latency_sum_ns"`
	LearnLatencyN    uint64                `json:"learn_latency_count"`
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
