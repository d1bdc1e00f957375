// SPDX-License-Identifier: Apache-2.0

package ban

import (
	"fmt"
	"net/netip"
	"time"
)

// Operator is an operator's ban request. Banning a prefix that is already
// banned keeps the ban as it is unless Update asks to change it: a re-add
// once turned a detector's one-hour ban into a permanent "operator" one
// without a word.
type Operator struct {
	Reason string         // "": "operator" for a new ban, kept by Update
	TTL    *time.Duration // nil: no expiry for a new ban, kept by Update; 0: no expiry
	Force  bool           // past the width limit (never past the management addresses)
	Update bool           // replace the reason and expiry of an existing ban
}

// Result says what an operator's ban did.
type Result string

const (
	Added   Result = "added"   // a new ban
	Exists  Result = "exists"  // already banned, left unchanged
	Updated Result = "updated" // already banned, reason or expiry changed
)

// AddOperator bans p for the operator through the rails (force lifts the
// width limit only). It returns the ban as it now is, what happened, and
// the ban it replaced (for the caller to undo with Put when the data plane
// refuses).
func (s *Store) AddOperator(now time.Time, p netip.Prefix, o Operator) (Ban, Result, *Ban, error) {
	old := s.at(p)
	force := o.Force || old != nil && old.Forced
	if why := s.guard(p, force); why != "" {
		return Ban{}, "", nil, fmt.Errorf("%w: %s is %s", ErrRefused, p, why)
	}
	if old != nil {
		prev := *old
		if !o.Update {
			return prev, Exists, &prev, nil
		}
		b := prev
		b.Detector, b.Manual, b.LastSeen = "operator", true, now
		b.Forced = b.Forced || o.Force && s.guard(p, false) != ""
		if o.Reason != "" {
			b.Reason = o.Reason
		}
		if o.TTL != nil {
			b.Expires = time.Time{}
			if *o.TTL > 0 {
				b.Expires = now.Add(*o.TTL)
			}
		}
		if b.Reason == prev.Reason && b.Expires.Equal(prev.Expires) && b.Detector == prev.Detector && b.Manual == prev.Manual && b.Forced == prev.Forced {
			return prev, Exists, &prev, nil
		}
		s.put(b)
		return b, Updated, &prev, nil
	}
	b := Ban{Prefix: p, Detector: "operator", Reason: o.Reason, FirstSeen: now, LastSeen: now, Manual: true,
		Forced: o.Force && s.guard(p, false) != ""}
	if b.Reason == "" {
		b.Reason = "operator"
	}
	if o.TTL != nil && *o.TTL > 0 {
		b.Expires = now.Add(*o.TTL)
	}
	s.put(b)
	return b, Added, nil, nil
}
