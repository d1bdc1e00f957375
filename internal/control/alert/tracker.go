// SPDX-License-Identifier: Apache-2.0

package alert

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"time"
)

// Observation is one detection of an interval, as the tracker needs it.
type Observation struct {
	Victim   netip.Addr // zero: the detection named sources only
	Detector string
	// Rung and Level are the ladder's rung (Level orders them: a higher
	// one is an escalation); empty and 0 for no rung.
	Rung      string
	Level     int
	PPS, BPS  float64
	Sources   []Source
	Bans      []netip.Prefix
	FlowRules []string
	Reason    string
}

// Tracker follows attacks from start to end. It is not safe for
// concurrent use: the daemon's loop owns it.
type Tracker struct {
	// EndAfter is how many intervals without a detection end an attack
	// whose mitigations are withdrawn (at least 1).
	EndAfter int
	// MaxSources bounds TopSources; MaxBans bounds Report.Bans.
	MaxSources int
	MaxBans    int
	// GroupOf names a victim's host group for its report (nil, or "":
	// none). It is asked when the attack starts, and again while its
	// report has none (the groups are reloaded with the configuration).
	GroupOf func(netip.Addr) string

	attacks map[netip.Addr]*tracked
	lastID  string
}

type tracked struct {
	r     Report
	level int
	quiet int
	bans  map[netip.Prefix]struct{} // every ban, for the end test
}

// Active lists the attacks in progress.
func (t *Tracker) Active() []*Report {
	out := make([]*Report, 0, len(t.attacks))
	for _, a := range t.attacks {
		out = append(out, &a.r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Restore takes an attack the log holds as active (the daemon restarted
// during it) back under tracking, so it ends with a report.
func (t *Tracker) Restore(r Report) {
	if t.attacks == nil {
		t.attacks = map[netip.Addr]*tracked{}
	}
	if _, ok := t.attacks[r.Victim]; !ok {
		a := &tracked{r: r, level: rungLevel(r.Rung), bans: map[netip.Prefix]struct{}{}}
		for _, p := range r.Bans {
			a.bans[p] = struct{}{}
		}
		t.attacks[r.Victim] = a
	}
	t.lastID = max(t.lastID, r.ID)
}

func rungLevel(s string) int {
	return map[string]int{"source-bans": 1, "prefix": 2, "flow-rule": 3}[s]
}

// Observe folds one interval's observations in and returns the reports
// to send: a start, an escalation or an end per attack, at most one each.
// mitigated says whether an attack still has mitigations in force (bans
// is every ban it led to; its flow rules are the caller's to know); it
// ends only once it has none.
func (t *Tracker) Observe(now time.Time, obs []Observation, mitigated func(r *Report, bans map[netip.Prefix]struct{}) bool) []Report {
	if t.attacks == nil {
		t.attacks = map[netip.Addr]*tracked{}
	}
	var out []Report
	seen := map[netip.Addr]Event{}
	for _, o := range obs {
		a, ok := t.attacks[o.Victim]
		ev := Event("")
		if !ok {
			a = &tracked{r: Report{ID: t.newID(now), Victim: o.Victim, Started: now, Detectors: []string{},
				TopSources: []Source{}, Bans: []netip.Prefix{}, FlowRules: []string{}}, bans: map[netip.Prefix]struct{}{}}
			t.attacks[o.Victim] = a
			ev = EventStart
		}
		a.quiet = 0
		if a.r.Group == "" && t.GroupOf != nil && o.Victim.IsValid() {
			a.r.Group = t.GroupOf(o.Victim)
		}
		if !slices.Contains(a.r.Detectors, o.Detector) {
			a.r.Detectors = append(a.r.Detectors, o.Detector)
			ev = escalate(ev)
		}
		if o.Level > a.level {
			a.level, a.r.Rung = o.Level, o.Rung
			ev = escalate(ev)
		}
		a.r.PeakPPS, a.r.PeakBPS = max(a.r.PeakPPS, o.PPS), max(a.r.PeakBPS, o.BPS)
		a.r.TopSources = mergeSources(a.r.TopSources, o.Sources, t.maxSources())
		for _, p := range o.Bans {
			if _, ok := a.bans[p]; ok {
				continue
			}
			a.bans[p] = struct{}{}
			if len(a.r.Bans) < t.maxBans() {
				a.r.Bans = append(a.r.Bans, p)
			}
		}
		a.r.BanCount = len(a.bans)
		for _, s := range o.FlowRules {
			if !slices.Contains(a.r.FlowRules, s) {
				a.r.FlowRules = append(a.r.FlowRules, s)
			}
		}
		if o.Reason != "" {
			a.r.Reason = o.Reason
		}
		// A start says everything the attack has so far; an escalation
		// outranks an interval that brought nothing new.
		if prev, ok := seen[o.Victim]; !ok || prev == "" {
			seen[o.Victim] = ev
		}
	}
	for v, a := range t.attacks {
		a.r.Updated = now
		a.r.Duration = now.Sub(a.r.Started).Seconds()
		if ev, ok := seen[v]; ok {
			if ev != "" {
				a.r.Event = ev // the live report says the latest
				out = append(out, a.r)
			}
			continue
		}
		a.quiet++
		if a.quiet >= max(t.EndAfter, 1) && (mitigated == nil || !mitigated(&a.r, a.bans)) {
			a.r.Ended, a.r.Event = now, EventEnd
			out = append(out, a.r)
			delete(t.attacks, v)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// escalate keeps a start a start: the first report of an attack says
// everything it has.
func escalate(ev Event) Event {
	if ev == EventStart {
		return ev
	}
	return EventEscalation
}

func (t *Tracker) maxSources() int {
	if t.MaxSources > 0 {
		return t.MaxSources
	}
	return 10
}

func (t *Tracker) maxBans() int {
	if t.MaxBans > 0 {
		return t.MaxBans
	}
	return 100
}

// newID names an attack by its start, in a form that sorts by time and is
// safe as a file name; two starting in one interval get a suffix.
func (t *Tracker) newID(now time.Time) string {
	base := now.UTC().Format("20060102T150405.000Z")
	id := base
	for n := 1; id <= t.lastID; n++ {
		id = fmt.Sprintf("%s-%d", base, n)
	}
	t.lastID = id
	return id
}

// mergeSources keeps each source's highest rate, the n heaviest.
func mergeSources(have, add []Source, n int) []Source {
	for _, s := range add {
		i := slices.IndexFunc(have, func(h Source) bool { return h.Addr == s.Addr })
		if i < 0 {
			have = append(have, s)
		} else if s.PPS > have[i].PPS {
			have[i].PPS = s.PPS
		}
	}
	sort.Slice(have, func(i, j int) bool {
		if have[i].PPS != have[j].PPS {
			return have[i].PPS > have[j].PPS
		}
		return have[i].Addr.Less(have[j].Addr)
	})
	if len(have) > n {
		have = have[:n]
	}
	return have
}
