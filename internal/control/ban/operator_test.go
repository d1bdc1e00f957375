// SPDX-License-Identifier: Apache-2.0

package ban

import (
	"errors"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/control/detect"
)

func dur(d time.Duration) *time.Duration { return &d }

// Re-adding a ban keeps it unless the operator asks to update it: a
// detector's one-hour ban stayed one hour, not permanent "operator".
func TestReAddKeepsOrUpdates(t *testing.T) {
	s := NewStore(Rails{}, time.Hour)
	p := netip.MustParsePrefix("192.0.2.50/32")
	added, _, _ := s.Propose(t0, []detect.Detection{det(p.String(), 1e5)}, nil)
	if len(added) != 1 {
		t.Fatal("no detector ban")
	}
	first := added[0]
	b, r, prev, err := s.AddOperator(t0.Add(time.Minute), p, Operator{})
	if err != nil || r != Exists || prev == nil {
		t.Fatalf("re-add: %v %v", r, err)
	}
	if got, _ := s.Get(p); got != first || got.Expires != t0.Add(time.Hour) || got.Detector != "rate" || b != first {
		t.Fatalf("re-add changed the ban: %+v", got)
	}
	// An update says what it sets; what it does not name is kept.
	b, r, _, err = s.AddOperator(t0.Add(time.Minute), p, Operator{Reason: "seen in the logs", Update: true})
	if err != nil || r != Updated || b.Reason != "seen in the logs" || !b.Expires.Equal(first.Expires) || !b.Manual || !b.FirstSeen.Equal(t0) {
		t.Fatalf("update of the reason: %v %v %+v", r, err, b)
	}
	b, r, _, _ = s.AddOperator(t0.Add(time.Minute), p, Operator{TTL: dur(0), Update: true})
	if r != Updated || !b.Expires.IsZero() {
		t.Fatalf("update to no expiry: %v %+v", r, b)
	}
	if _, r, _, _ = s.AddOperator(t0.Add(time.Minute), p, Operator{TTL: dur(0), Update: true}); r != Exists {
		t.Fatalf("an update that changes nothing: %v", r)
	}
	q := netip.MustParsePrefix("198.51.100.0/24")
	b, r, prev, _ = s.AddOperator(t0, q, Operator{TTL: dur(10 * time.Minute)})
	if r != Added || prev != nil || b.Reason != "operator" || !b.Expires.Equal(t0.Add(10*time.Minute)) {
		t.Fatalf("new ban: %v %+v", r, b)
	}
}

// Catastrophic bans: wider than the limit is refused unless forced; a
// ban covering the host's own address or gateway is refused even forced,
// for detections, operators and the state file alike.
func TestRailsRefuseWideAndManagement(t *testing.T) {
	gw := Managed{Addr: netip.MustParseAddr("203.0.113.1"), What: "default gateway via eth0"}
	s := NewStore(Rails{WidestBan4: 8, WidestBan6: 32, Management: []Managed{gw}}, time.Hour)
	all4, all6 := netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")
	for _, p := range []netip.Prefix{netip.MustParsePrefix("10.0.0.0/7"), all6, netip.MustParsePrefix("2001:db8::/31")} {
		if _, _, _, err := s.AddOperator(t0, p, Operator{}); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "force") {
			t.Errorf("unforced %s: %v", p, err)
		}
	}
	if _, r, _, err := s.AddOperator(t0, netip.MustParsePrefix("10.0.0.0/8"), Operator{}); err != nil || r != Added {
		t.Errorf("a /8 at the limit: %v %v", r, err)
	}
	b, r, _, err := s.AddOperator(t0, all6, Operator{Force: true})
	if err != nil || r != Added || !b.Forced {
		t.Fatalf("forced ::/0: %v %v %+v", r, err, b)
	}
	if why := s.Guarded(all6); why != "" {
		t.Fatalf("a forced ban fails its own rails on restore: %s", why)
	}
	for _, p := range []netip.Prefix{all4, netip.MustParsePrefix("203.0.113.0/24"), netip.MustParsePrefix("203.0.113.1/32")} {
		_, _, _, err := s.AddOperator(t0, p, Operator{Force: true})
		if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "gateway") {
			t.Errorf("forced %s over the gateway: %v", p, err)
		}
	}
	added, refused, _ := s.Propose(t0, []detect.Detection{det("203.0.113.1/32", 1e6), det("100.0.0.0/6", 1e6), det("198.51.100.9/32", 1e3)}, nil)
	if len(added) != 1 || len(refused) != 2 {
		t.Fatalf("detections: added %+v refused %+v", added, refused)
	}
	// The state file: an unforced wide ban (written before the rails, or
	// by hand) is named by Guarded for the daemon to lift; the forced one
	// stays.
	path := filepath.Join(t.TempDir(), "state.json")
	s.Put(Ban{Prefix: netip.MustParsePrefix("0.0.0.0/1"), Detector: "operator", Reason: "old", Manual: true})
	if err := s.Save(path, t0); err != nil {
		t.Fatal(err)
	}
	r2 := NewStore(s.Rails, time.Hour)
	if _, err := r2.Load(path, t0); err != nil {
		t.Fatal(err)
	}
	if r2.Guarded(netip.MustParsePrefix("0.0.0.0/1")) == "" || r2.Guarded(all6) != "" {
		t.Fatalf("after load: /1 %q, forced ::/0 %q", r2.Guarded(netip.MustParsePrefix("0.0.0.0/1")), r2.Guarded(all6))
	}
}
