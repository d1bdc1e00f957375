// SPDX-License-Identifier: Apache-2.0

package mitigate

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/rule"
)

func fr(t *testing.T, s string) rule.FlowRule {
	t.Helper()
	r, err := rule.ParseFlowRule(strings.Fields(s))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

var t0 = time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)

func TestOrderOperatorFirstThenNarrowest(t *testing.T) {
	s := New(8, "")
	whole := fr(t, "dst 198.51.100.7/32 proto udp rate-limit 1000 bypass-known-good")
	port := fr(t, "dst 198.51.100.7/32 proto udp sport 53 drop")
	op := fr(t, "dst 198.51.100.0/24 proto 47 drop")
	for _, r := range []Rule{{FlowRule: whole, Origin: Ladder}, {FlowRule: port, Origin: Ladder}, {FlowRule: op, Origin: Operator}} {
		if _, err := s.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	got := s.FlowRules()
	if len(got) != 3 || got[0] != op || got[1] != port || got[2] != whole {
		t.Fatalf("order %v, want operator's, port rule, whole-victim rule", got)
	}
}

// SYN cookies added on top of an equally narrow rate limit (a SYN flood
// after a TCP surge) come before it, or they would never see a packet.
func TestOrderSYNCookiesBeforeAnEquallyNarrowLimit(t *testing.T) {
	s := New(8, "")
	limit := fr(t, "dst 198.51.100.7/32 proto tcp dport 443 rate-limit 8000 bypass-known-good")
	cookies := fr(t, "dst 198.51.100.7/32 proto tcp dport 443 syn-cookie bypass-known-good")
	for _, r := range []Rule{{FlowRule: limit, Origin: Ladder}, {FlowRule: cookies, Origin: Ladder}} {
		if _, err := s.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.FlowRules(); len(got) != 2 || got[0] != cookies || got[1] != limit {
		t.Fatalf("order %v, want the syn-cookie rule first", got)
	}
}

func TestAddRefusesOverCapacityAndBadRules(t *testing.T) {
	s := New(1, "")
	if _, err := s.Add(Rule{FlowRule: fr(t, "dst 198.51.100.7/32 drop"), Origin: Operator}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Add(Rule{FlowRule: fr(t, "dst 198.51.100.8/32 drop"), Origin: Operator}); !errors.Is(err, ErrFull) {
		t.Fatalf("over capacity: %v, want ErrFull", err)
	}
	if _, err := s.Add(Rule{FlowRule: rule.FlowRule{Action: rule.FlowDrop}}); !errors.Is(err, rule.ErrInvalid) {
		t.Fatalf("bad rule: %v, want ErrInvalid", err)
	}
	// The same rule again is an update, not a second entry.
	if added, err := s.Add(Rule{FlowRule: fr(t, "dst 198.51.100.7/32 drop"), Origin: Operator, Reason: "again"}); added || err != nil {
		t.Fatalf("re-add: %v %v", added, err)
	}
	if s.Len() != 1 || s.Rules()[0].Reason != "again" {
		t.Fatalf("rules %+v", s.Rules())
	}
}

func TestLadderDoesNotOverrideOperator(t *testing.T) {
	s := New(4, "")
	r := fr(t, "dst 198.51.100.7/32 proto udp rate-limit 1000")
	if _, err := s.Add(Rule{FlowRule: r, Origin: Operator, Reason: "mine"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Add(Rule{FlowRule: r, Origin: Ladder, Reason: "ladder"}); err != nil {
		t.Fatal(err)
	}
	if got := s.Rules()[0]; got.Origin != Operator || got.Reason != "mine" {
		t.Fatalf("rule %+v: the operator's must stand", got)
	}
	s.Observe(s.FlowRules(), []Counters{{}}, time.Second, 10)
	if gone := s.WithdrawIf(func(r Rule) bool { return r.Origin == Ladder && r.Quiet >= 1 }); len(gone) != 0 {
		t.Fatalf("withdrew the operator's rule: %+v", gone)
	}
}

func TestObserveQuietAndWithdraw(t *testing.T) {
	s := New(4, "")
	r := fr(t, "dst 198.51.100.7/32 proto udp rate-limit 1000 bypass-known-good")
	if _, err := s.Add(Rule{FlowRule: r, Origin: Ladder}); err != nil {
		t.Fatal(err)
	}
	frs := s.FlowRules()
	s.Observe(frs, []Counters{{Packets: 50000, Dropped: 40000}}, time.Second, 100)
	if got := s.Rules()[0]; got.MatchedPPS != 50000 || got.DroppedPPS != 40000 || got.Quiet != 0 {
		t.Fatalf("after a busy interval: %+v", got)
	}
	for i := 0; i < 3; i++ {
		if gone := s.WithdrawIf(func(r Rule) bool { return r.Origin == Ladder && r.Quiet >= 3 }); len(gone) != 0 {
			t.Fatalf("withdrawn after %d quiet intervals", i)
		}
		s.Observe(frs, []Counters{{Packets: 50010 + uint64(i), Dropped: 40000}}, time.Second, 100)
	}
	if gone := s.WithdrawIf(func(r Rule) bool { return r.Origin == Ladder && r.Quiet >= 3 }); len(gone) != 1 || s.Len() != 0 {
		t.Fatalf("withdraw after 3 quiet intervals: %v, %d left", gone, s.Len())
	}
}

func TestSaveLoadAndExpire(t *testing.T) {
	path := filepath.Join(t.TempDir(), "flowrules.json")
	s := New(4, path)
	keep := fr(t, "dst 2001:db8::/64 proto tcp dport 80 syn-cookie")
	ttl := fr(t, "dst 198.51.100.7/32 proto udp sport 123 drop")
	if _, err := s.Add(Rule{FlowRule: keep, Origin: Operator, Added: t0}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Add(Rule{FlowRule: ttl, Origin: Operator, Added: t0, Expires: t0.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Save(t0); err != nil {
		t.Fatal(err)
	}
	l, warns, err := Load(4, path)
	if err != nil || len(warns) != 0 || l.Len() != 2 {
		t.Fatalf("load: %d rules, %v, %v", l.Len(), warns, err)
	}
	if gone := l.Expire(t0.Add(time.Minute)); len(gone) != 1 || gone[0].FlowRule != ttl || l.Len() != 1 {
		t.Fatalf("expire: %+v, %d left", gone, l.Len())
	}
	// A file from a bigger table loads what fits, and says so.
	small, warns, err := Load(1, path)
	if err != nil || small.Len() != 1 || len(warns) != 1 {
		t.Fatalf("load into 1: %d rules, %v, %v", small.Len(), warns, err)
	}
	// A torn or foreign file is an error, not an empty set.
	if err := os.WriteFile(path, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Load(4, path); err == nil {
		t.Fatal("a torn file loaded")
	}
}
