// SPDX-License-Identifier: Apache-2.0

package ban

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/control/detect"
)

// Automatic bans stop at /16 and /48 (the defaults the daemon sets); the
// operator's width limit (/8) still governs operator bans and threat
// lists. (Before: a spoofed flood over 172.0.0.0/8 got a /8 ban.)
func TestAutomaticBanWidth(t *testing.T) {
	s := NewStore(Rails{WidestBan4: 8, WidestBan6: 32, WidestAuto4: 16, WidestAuto6: 48}, time.Hour)
	list := det("100.64.0.0/10", 1e5)
	list.Detector = "list"
	added, refused, _ := s.Propose(t0, []detect.Detection{det("172.0.0.0/8", 2e4), det("172.16.0.0/16", 2e4),
		det("2001:db8::/32", 1e4), det("2001:db8:1::/48", 1e4), list}, nil)
	got := map[string]bool{}
	for _, b := range added {
		got[b.Prefix.String()] = true
	}
	if len(added) != 3 || !got["172.16.0.0/16"] || !got["2001:db8:1::/48"] || !got["100.64.0.0/10"] {
		t.Fatalf("added %v", got)
	}
	if len(refused) != 2 || !strings.Contains(refused[0].Why, "widest automatic ban") {
		t.Fatalf("refused %+v", refused)
	}
	if _, err := s.Add(t0, netip.MustParsePrefix("10.0.0.0/8"), "operator", 0); err != nil {
		t.Fatalf("operator /8: %v", err)
	}
}

// A prefix ban lifts on its own attack's rate: a 20 kpps flood's /16 ban
// is not held up by a legitimate /24's 3,000 pps inside it, although that
// is over the per-source threshold (2,386 pps). A single source at that
// rate is still held.
func TestPrefixBanLiftsOnItsOwnRate(t *testing.T) {
	s := NewStore(Rails{}, time.Hour)
	s.PrefixLift = 0.25
	s.Propose(t0, []detect.Detection{det("172.16.0.0/16", 20000), det("198.51.100.7/32", 20000)}, nil)
	rates := map[netip.Prefix]float64{netip.MustParsePrefix("172.16.0.0/16"): 3000, netip.MustParsePrefix("198.51.100.7/32"): 3000}
	var lifted []Unban
	for i := range 40 {
		lifted = append(lifted, s.Monitor(t0.Add(time.Duration(i+1)*time.Second), rates, 2386, 30*time.Second)...)
	}
	if len(lifted) != 1 || lifted[0].Ban.Prefix.String() != "172.16.0.0/16" {
		t.Fatalf("lifted %+v, want the /16 only", lifted)
	}
	if !strings.Contains(lifted[0].Why, "below 5000 pps") {
		t.Fatalf("why %q", lifted[0].Why)
	}
}

// The breaker counts every automatic ban in force against the verified
// clients, not one interval's: waves of bans that each cover less than
// the limit are refused once together they would pass it; bans covering
// no client still go in. (Before: each interval's bans were judged alone,
// so repeated waves could each take half of what was left.)
func TestBreakerOverAllActiveBans(t *testing.T) {
	s := NewStore(Rails{MaxEstablishedShare: 0.5}, time.Hour)
	var clients []netip.Addr
	for n := range 4 {
		for h := range 5 {
			clients = append(clients, netip.AddrFrom4([4]byte{172, 16, byte(n), byte(h + 1)}))
		}
	}
	s.SetClients(clients) // 20 clients, 5 in each of four /24s
	wave := func(i int, ds ...detect.Detection) ([]Ban, []Refusal, bool) {
		return s.Propose(t0.Add(time.Duration(i)*time.Second), ds, nil)
	}
	if added, _, open := wave(1, det("172.16.0.0/24", 1e4)); len(added) != 1 || open {
		t.Fatalf("wave 1 (25%%): added %d, breaker %v", len(added), open)
	}
	if added, _, open := wave(2, det("172.16.1.0/24", 1e4)); len(added) != 1 || open {
		t.Fatalf("wave 2 (50%%): added %d, breaker %v", len(added), open)
	}
	added, refused, open := wave(3, det("172.16.2.0/24", 1e4), det("203.0.113.0/24", 1e4))
	if !open || len(refused) != 1 || refused[0].Detection.Prefix.String() != "172.16.2.0/24" ||
		len(added) != 1 || added[0].Prefix.String() != "203.0.113.0/24" {
		t.Fatalf("wave 3 (75%%): added %+v, refused %+v, breaker %v", added, refused, open)
	}
	// Operator bans are the operator's: not counted.
	s.Remove(netip.MustParsePrefix("172.16.1.0/24"))
	if _, err := s.Add(t0, netip.MustParsePrefix("172.16.3.0/24"), "operator", 0); err != nil {
		t.Fatal(err)
	}
	if added, _, open := wave(4, det("172.16.2.0/24", 1e4)); len(added) != 1 || open {
		t.Fatalf("after a lift: added %d, breaker %v", len(added), open)
	}
}
