// SPDX-License-Identifier: Apache-2.0

package modes

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/tierwall/tierwall/internal/tier/nicstage"
)

// iptables -L -v -x's DROP rules are summed; other targets are not.
func TestSumDropCounters(t *testing.T) {
	out := `Chain PREROUTING (policy ACCEPT 10 packets, 600 bytes)
    pkts      bytes target     prot opt in     out     source               destination
     120     7200 DROP       all  --  *      *       10.0.0.1             0.0.0.0/0
       3      180 ACCEPT     all  --  *      *       10.0.0.2             0.0.0.0/0
       5      300 DROP       all  --  *      *       10.0.0.3             0.0.0.0/0
`
	if got := sumDropCounters(out); got != 125 {
		t.Errorf("sumDropCounters = %d, want 125", got)
	}
}

// The median run is the one reported, with the others' range; CPU takes
// its own median.
func TestPickMedian(t *testing.T) {
	rs := []Row{{DropMpps: 3, CPUPct: 90}, {DropMpps: 1, CPUPct: 50, Note: "x"}, {DropMpps: 2, CPUPct: 70}}
	m := pickMedian(rs, dropOf)
	if m.DropMpps != 2 || m.Lo != 1 || m.Hi != 3 || m.CPUPct != 70 || m.CPULo != 50 || m.CPUHi != 90 {
		t.Errorf("median %+v", m)
	}
	if !strings.Contains(m.Note, "median of 3 (1.000–3.000)") {
		t.Errorf("note %q", m.Note)
	}
	if rs[0].DropMpps != 3 {
		t.Error("pickMedian reordered its argument")
	}
	one := pickMedian(rs[:1], dropOf)
	if one.Note != "" || one.Lo != 3 || one.Hi != 3 {
		t.Errorf("one run: %+v", one)
	}
	calls := 0
	boom := errors.New("boom")
	if _, err := medianBy(3, dropOf, func() (Row, error) { calls++; return Row{}, boom }); !errors.Is(err, boom) || calls != 1 {
		t.Errorf("medianBy stops at the first error: %v after %d calls", err, calls)
	}
	calls = 0
	if _, err := medianBy(0, dropOf, func() (Row, error) { calls++; return Row{}, nil }); err != nil || calls != 1 {
		t.Errorf("medianBy(0) ran %d times", calls)
	}
}

func TestNames(t *testing.T) {
	if modeName(nicstage.Wire) != "lab-host" || modeName(nicstage.Hybrid) != "lab-"+string(nicstage.Hybrid) {
		t.Error("modeName")
	}
	ps := hostPrefixes([]netip.Addr{netip.MustParseAddr("10.0.0.1")})
	if len(ps) != 1 || ps[0].String() != "10.0.0.1/32" {
		t.Errorf("hostPrefixes = %v", ps)
	}
	if sizeName(16000) != "16K" || sizeName(1500) != "1500" || verdictOf(true) != "met" || verdictOf(false) != "**missed**" {
		t.Error("sizeName or verdictOf")
	}
	names := map[string]bool{}
	for _, m := range HostMechanisms() {
		if names[m.Name()] {
			t.Errorf("mechanism %s twice", m.Name())
		}
		names[m.Name()] = true
	}
	for _, want := range []string{"tierwall-host", "xdp-filter", "nft-netdev", "nft-prerouting", "ipset", "iptables"} {
		if !names[want] {
			t.Errorf("no %s among %v", want, names)
		}
	}
}
