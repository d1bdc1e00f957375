// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"cmp"
	"container/heap"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tierwall/tierwall/internal/control/apiv1"
	"github.com/tierwall/tierwall/internal/control/detect"
)

// maxEvents bounds the events kept for the API.
const maxEvents = 1000

// journal is what the loop has done and seen, for the API: the recent
// events and the heaviest detections. The loop writes it; API handlers
// read it without waiting for the loop, under its own lock.
type journal struct {
	mu         sync.Mutex
	events     []apiv1.Event
	detections []apiv1.Detection // the last intervals' heaviest detections
}

// add appends an event, dropping the oldest past maxEvents.
func (j *journal) add(e apiv1.Event) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.events = append(j.events, e)
	if len(j.events) > maxEvents {
		j.events = j.events[len(j.events)-maxEvents:]
	}
}

// Events returns the recent events, oldest first; kinds filters (empty:
// all), and an unknown kind is the caller's mistake, not an empty list.
func (j *journal) Events(kinds []string, q apiv1.ListQuery) ([]apiv1.Event, error) {
	want := map[string]bool{}
	for _, k := range kinds {
		if !slices.Contains(apiv1.EventKinds, k) {
			return nil, fmt.Errorf("%w: unknown event kind %q (kinds: %s)", apiv1.ErrBadRequest, k, strings.Join(apiv1.EventKinds, ", "))
		}
		want[k] = true
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	out := []apiv1.Event{}
	for _, e := range apply(apiv1.ListQuery{Since: q.Since}, j.events, func(e *apiv1.Event) time.Time { return e.Time }) {
		if len(want) == 0 || want[e.Kind] {
			out = append(out, e)
		}
	}
	return apply(apiv1.ListQuery{Limit: q.Limit}, out, func(e *apiv1.Event) time.Time { return e.Time }), nil
}

const (
	// maxDetections bounds the detections kept for the API.
	maxDetections = 1000
	// detectionsPerInterval is how many of an interval's detections are
	// kept, the heaviest: a flood can name a million sources, and the
	// record of it must not cost as much as the bans.
	detectionsPerInterval = 100
)

// byRate is a min-heap of detections by rate: the heaviest n survive.
type byRate []detect.Detection

func (h byRate) Len() int           { return len(h) }
func (h byRate) Less(i, j int) bool { return h[i].Rate < h[j].Rate }
func (h byRate) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *byRate) Push(x any)        { *h = append(*h, x.(detect.Detection)) }
func (h *byRate) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// recordDetections keeps the interval's heaviest detections for the API.
func (j *journal) recordDetections(now time.Time, ds []detect.Detection) {
	if len(ds) == 0 {
		return
	}
	keep := ds
	if len(ds) > detectionsPerInterval {
		h := make(byRate, 0, detectionsPerInterval)
		for _, x := range ds {
			switch {
			case len(h) < detectionsPerInterval:
				heap.Push(&h, x)
			case x.Rate > h[0].Rate:
				h[0] = x
				heap.Fix(&h, 0)
			}
		}
		keep = h
	}
	recs := make([]apiv1.Detection, len(keep))
	for i, x := range keep {
		recs[i] = apiv1.Detection{Time: now, Prefix: x.Prefix, Detector: x.Detector, Reason: x.Reason, Rate: apiv1.RoundRate(x.Rate)}
	}
	slices.SortStableFunc(recs, func(a, b apiv1.Detection) int { return cmp.Compare(b.Rate, a.Rate) })
	j.mu.Lock()
	j.detections = append(j.detections, recs...)
	if len(j.detections) > maxDetections {
		j.detections = slices.Clone(j.detections[len(j.detections)-maxDetections:])
	}
	j.mu.Unlock()
}

// Detections returns the recent detections, oldest first.
func (j *journal) Detections(q apiv1.ListQuery) []apiv1.Detection {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := slices.Clone(apply(q, j.detections, func(x *apiv1.Detection) time.Time { return x.Time }))
	if out == nil {
		out = []apiv1.Detection{}
	}
	return out
}
