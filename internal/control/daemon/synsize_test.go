// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/tierwall/tierwall/internal/control/detect"
	"github.com/tierwall/tierwall/internal/control/mitigate"
	"github.com/tierwall/tierwall/internal/datapath"
	"github.com/tierwall/tierwall/internal/rule"
)

// The daemon hands the data plane's port profile to the detector as it
// is (observe.go converts the pointer): the SYN-length columns must mean
// the same on both sides.
func TestSYNLenColumnsAgree(t *testing.T) {
	if datapath.SYNLenV6 != detect.SYNLenV6 || datapath.SYNLenMax != detect.SYNLenMax {
		t.Fatalf("SYN-length columns: data plane v6 %#x max %#x, detector v6 %#x max %#x",
			datapath.SYNLenV6, datapath.SYNLenMax, detect.SYNLenV6, detect.SYNLenMax)
	}
	if got := detect.SYNLenIndex(6, 60); got != datapath.SYNLenV6|60 {
		t.Errorf("SYNLenIndex(6, 60) = %#x", got)
	}
	if got := detect.SYNLenIndex(4, 70000); got != datapath.SYNLenMax {
		t.Errorf("SYNLenIndex(4, 70000) = %#x, want the last column", got)
	}
}

// The drop of a SYN flood's size is optional beside its cookies: it goes
// in with its rung while the flow rules are under half full, and is
// refused past that, where the cookie rule still goes in (a carpet SYN
// flood's size rules must not take other victims' cookies' slots).
func TestSYNSizeRuleLeavesSlotsForCookies(t *testing.T) {
	cookie := rule.FlowRule{Dst: netip.PrefixFrom(flowVictim, 32), Proto: 6, DstPorts: rule.PortRange{Lo: 80, Hi: 80},
		Action: rule.FlowSYNCookie, KnownGoodBypass: true}
	size := cookie
	size.Action = rule.FlowDrop
	size.TCPFlags = rule.TCPFlagMatch{Mask: rule.TCPSyn | rule.TCPAck, Value: rule.TCPSyn}
	size.Length = rule.Range16{Lo: 40, Hi: 40}
	if !detect.IsSYNSizeRule(size) || detect.IsSYNSizeRule(cookie) {
		t.Fatal("IsSYNSizeRule does not tell the size rule from the cookie rule")
	}
	apply := func(h *harness) map[rule.FlowRule]string {
		h.d.flow.dec = detect.Decision{Apply: []detect.Mitigation{{ID: 1, Victim: flowVictim, Rung: detect.RungFlowRule,
			Rules: []rule.FlowRule{cookie, size}, Reason: "a SYN flood"}}}
		h.d.flow.mitigate(h.now)
		got := map[rule.FlowRule]string{}
		for _, r := range h.d.flow.set.Rules() {
			got[r.FlowRule] = r.Rung
		}
		return got
	}

	h, fdp := newFlowHarness(t, false)
	got := apply(h)
	if got[cookie] != "syn-cookie" || got[size] != mitigate.RungSYNSize {
		t.Fatalf("rules in force %v, want the cookie and the size rule (rung %s)", got, mitigate.RungSYNSize)
	}
	if i, j := slices.Index(fdp.rules, size), slices.Index(fdp.rules, cookie); i < 0 || j < 0 || i > j {
		t.Fatalf("data plane order %v: the size rule must come before the cookie rule", fdp.rules)
	}

	h, _ = newFlowHarness(t, false)
	capacity := h.d.flow.set.Cap()
	for i := range capacity / 2 {
		fr := rule.FlowRule{Dst: netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 51, 100, byte(i)}), 32), Action: rule.FlowDrop}
		if _, err := h.d.AddFlowRule(t.Context(), fr, "local", 0, false); err != nil {
			t.Fatalf("operator rule %d: %v", i, err)
		}
	}
	got = apply(h)
	if _, ok := got[cookie]; !ok {
		t.Fatalf("the cookie rule is not in force with the table half full: %v", got)
	}
	if _, ok := got[size]; ok {
		t.Fatalf("the size rule took a slot of the second half of the %d", capacity)
	}
}
