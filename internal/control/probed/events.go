// SPDX-License-Identifier: Apache-2.0

package probed

import (
	"fmt"
	"slices"
	"sync"
	"time"
)

// A probe's events, as the daemon keeps its own: what an operator asks
// GET /v1/events for after a SIGHUP (did the reload take? what waits for a
// restart?) without reading the journal. The probe had no /v1/events.

// Event is one thing the probe did, in the daemon's event shape.
type Event struct {
	Time   time.Time `json:"time"`
	Kind   string    `json:"kind"`   // one of EventKinds
	Prefix string    `json:"prefix"` // always "": a probe's events name no prefix
	Detail string    `json:"detail"`
}

// EventKinds are the kinds of event a probe records.
var EventKinds = []string{"error", "reload"}

const maxEvents = 1000

type eventLog struct {
	mu     sync.Mutex
	events []Event
}

func (p *Probed) event(kind, format string, args ...any) {
	p.events.mu.Lock()
	defer p.events.mu.Unlock()
	p.events.events = append(p.events.events, Event{Time: time.Now(), Kind: kind, Detail: fmt.Sprintf(format, args...)})
	if n := len(p.events.events); n > maxEvents {
		p.events.events = p.events.events[n-maxEvents:]
	}
}

// Events returns the probe's recent events, oldest first, of the given
// kinds (all when none is given); an unknown kind is an error.
func (p *Probed) Events(kinds []string) ([]Event, error) {
	for _, k := range kinds {
		if !slices.Contains(EventKinds, k) {
			return nil, fmt.Errorf("unknown event kind %q (a probe's kinds: error, reload)", k)
		}
	}
	p.events.mu.Lock()
	defer p.events.mu.Unlock()
	out := []Event{}
	for _, e := range p.events.events {
		if len(kinds) == 0 || slices.Contains(kinds, e.Kind) {
			out = append(out, e)
		}
	}
	return out, nil
}
