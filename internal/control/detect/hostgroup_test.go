// SPDX-License-Identifier: Apache-2.0

package detect

import (
	"net/netip"
	"strings"
	"testing"
	"time"
)

func groups(t *testing.T, gs ...HostGroup) *HostGroups {
	t.Helper()
	h, err := NewHostGroups(gs)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func pfxs(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

func TestHostGroupsMostSpecificWins(t *testing.T) {
	h := groups(t,
		HostGroup{Name: "net", Prefixes: pfxs("10.0.0.0/8", "2001:db8::/32")},
		HostGroup{Name: "web", Prefixes: pfxs("10.1.0.0/16")},
		HostGroup{Name: "one", Prefixes: pfxs("10.1.2.3/32", "2001:db8:1::/48")},
	)
	for addr, want := range map[string]string{
		"10.9.9.9": "net", "10.1.9.9": "web", "10.1.2.3": "one", "::ffff:10.1.2.3": "one",
		"2001:db8:2::1": "net", "2001:db8:1::1": "one", "11.0.0.1": "", "::1": "",
	} {
		if got := h.Lookup(netip.MustParseAddr(addr)).name(); got != want {
			t.Errorf("%s: group %q, want %q", addr, got, want)
		}
	}
	// The same prefix twice, however written, is refused.
	_, err := NewHostGroups([]HostGroup{{Name: "a", Prefixes: pfxs("10.1.0.0/16")}, {Name: "b", Prefixes: pfxs("10.1.2.0/16")}})
	if err == nil || !strings.Contains(err.Error(), `"a" and "b"`) {
		t.Errorf("same prefix in two groups: %v", err)
	}
	var none *HostGroups
	if none.Lookup(netip.MustParseAddr("10.0.0.1")) != nil {
		t.Error("nil groups found a group")
	}
}

// flood is one interval: two sources at pps each to each victim.
func flood(pps uint64, victims ...string) *Traffic {
	t := NewTraffic(time.Second)
	for vi, v := range victims {
		for s := range 2 {
			t.Add(netip.AddrFrom4([4]byte{203, 0, byte(vi), byte(s + 1)}), netip.MustParseAddr(v), 17, pps, pps*100, 0)
		}
	}
	return t
}

// A destination in a host group is judged on the group's thresholds, not
// its learned or cold ones, and its action decides the mitigation.
func TestVictimHostGroups(t *testing.T) {
	v := NewVictims(VictimConfig{})
	v.Groups = groups(t,
		HostGroup{Name: "small", Prefixes: pfxs("192.0.2.0/28"), PPS: 500},
		HostGroup{Name: "big", Prefixes: pfxs("192.0.2.16/28"), PPS: 200000},
		HostGroup{Name: "watch", Prefixes: pfxs("192.0.2.32/28"), PPS: 500, Action: ActionMonitor},
		HostGroup{Name: "fr", Prefixes: pfxs("192.0.2.48/28"), PPS: 500, Action: ActionFlowRule},
	)
	const small, big, watch, fr, plain = "192.0.2.1", "192.0.2.17", "192.0.2.33", "192.0.2.49", "198.51.100.1"
	// 1200 pps to each: only the groups with a 500 pps threshold are
	// attacked (a cold victim needs 50000 by default).
	dec := v.Observe(Input{Traffic: flood(600, small, big, watch, fr, plain)})
	attacked := map[string]Judgement{}
	for _, j := range dec.Attacks {
		attacked[j.Victim.String()] = j
	}
	if len(attacked) != 3 || attacked[small].HostGroup != "small" || attacked[watch].Action != "monitor" || attacked[fr].HostGroup != "fr" {
		t.Fatalf("attacks %+v, want small, watch (monitor) and fr", dec.Attacks)
	}
	applied := map[string]Mitigation{}
	for _, m := range dec.Apply {
		applied[m.Victim.String()] = m
	}
	if len(applied) != 2 {
		t.Fatalf("mitigations %+v, want small and fr only (watch is monitored)", dec.Apply)
	}
	if m := applied[small]; m.Rung != RungSourceBans || m.HostGroup != "small" || len(m.Detections()) != 2 || m.Detections()[0].HostGroup != "small" {
		t.Errorf("small: %+v", m)
	}
	if m := applied[fr]; m.Rung != RungFlowRule || m.HostGroup != "fr" || !strings.Contains(m.Reason, "host group fr") {
		t.Errorf("fr: %+v", m)
	}
	// 60000 pps: over the cold threshold, under the big group's.
	dec = v.Observe(Input{Traffic: flood(30000, big, plain)})
	if len(dec.Attacks) != 1 || dec.Attacks[0].Victim.String() != plain {
		t.Fatalf("attacks %+v, want only %s (%s is in a group allowing 200000 pps)", dec.Attacks, plain, big)
	}
	// A big group's host at 250000 pps is attacked; the monitored one
	// stays unmitigated while its flood goes on (nothing to escalate).
	for range 4 {
		dec = v.Observe(Input{Traffic: flood(125000, big, watch)})
		for _, m := range dec.Apply {
			if m.Victim.String() == watch {
				t.Fatalf("monitored group mitigated: %+v", m)
			}
		}
	}
	if len(dec.Attacks) != 2 {
		t.Errorf("attacks %+v, want big and watch", dec.Attacks)
	}
}

// The rate detector names a source above its destination group's
// SourcePPS (summed over protocols), and none for a monitored group.
func TestRateHostGroupSourcePPS(t *testing.T) {
	r := &Rate{Groups: groups(t,
		HostGroup{Name: "api", Prefixes: pfxs("198.18.0.0/24"), SourcePPS: 100},
		HostGroup{Name: "watch", Prefixes: pfxs("198.18.1.0/24"), SourcePPS: 100, Action: ActionMonitor},
	)}
	tr := NewTraffic(time.Second)
	a, b, c := netip.MustParseAddr("203.0.113.1"), netip.MustParseAddr("203.0.113.2"), netip.MustParseAddr("203.0.113.3")
	tr.Add(a, netip.MustParseAddr("198.18.0.5"), 6, 80, 8000, 0)
	tr.Add(a, netip.MustParseAddr("198.18.0.5"), 17, 70, 7000, 0)
	tr.Add(b, netip.MustParseAddr("192.0.2.1"), 17, 150, 15000, 0)  // not in a group
	tr.Add(c, netip.MustParseAddr("198.18.1.5"), 17, 150, 15000, 0) // monitored
	ds := r.Detect(tr)
	if len(ds) != 1 || ds[0].Prefix.Addr() != a || ds[0].HostGroup != "api" || !strings.Contains(ds[0].Reason, "host group api") {
		t.Fatalf("detections %+v, want 203.0.113.1 for host group api", ds)
	}
}
