// SPDX-License-Identifier: Apache-2.0

package fastnetmon

import (
	"net/netip"
	"strings"
	"testing"
	"time"
)

// The notify script's log: bans only, whatever else FastNetMon passes.
func TestParseNotify(t *testing.T) {
	got := ParseNotify("1764340000.123456789 198.18.0.10 incoming 62074 ban\n" +
		"1764340001.5 198.18.0.10 incoming 62074 attack_details\n" +
		"garbage\n1764340002.000000001 not-an-ip incoming 1 ban\n" +
		"1764340003.25 198.18.0.11 incoming 158662 ban\n")
	if len(got) != 2 {
		t.Fatalf("%d bans, want 2: %+v", len(got), got)
	}
	if got[0].IP != netip.MustParseAddr("198.18.0.10") || got[0].At != time.Unix(1764340000, 123456789) || got[0].PPS != "62074" {
		t.Errorf("first ban %+v", got[0])
	}
	if got[1].At != time.Unix(1764340003, 250000000) {
		t.Errorf("second ban at %v, want .25 s", got[1].At)
	}
}

// Each capture mode's configuration: the ban trigger and the notify
// script always, the capture's own options only in its mode.
func TestConfigModes(t *testing.T) {
	af := Config{Dir: "/d", ThresholdPPS: 20000, Average: 5, Interface: "veth0"}.Render()
	col := Config{Dir: "/d", ThresholdPPS: 50000, Average: 1, SFlow: netip.MustParseAddrPort("127.0.0.1:6343"),
		NetFlow: netip.MustParseAddrPort("127.0.0.1:2055")}.Render()
	for _, want := range []string{"threshold_pps = 20000\n", "average_calculation_time = 5\n", "mirror_afpacket = on\n",
		"interfaces = veth0\n", "sflow = off\n", "notify_script_path = /d/notify.sh\n"} {
		if !strings.Contains(af, want) {
			t.Errorf("AF_PACKET configuration lacks %q:\n%s", want, af)
		}
	}
	for _, want := range []string{"threshold_pps = 50000\n", "mirror_afpacket = off\n", "sflow = on\n", "sflow_host = 127.0.0.1\n",
		"sflow_port = 6343\n", "netflow_port = 2055\n", "speed_calculation_delay = 1\n"} {
		if !strings.Contains(col, want) {
			t.Errorf("collector configuration lacks %q:\n%s", want, col)
		}
	}
	for _, conf := range []string{af, col} {
		seen := map[string]bool{}
		for _, l := range strings.Split(strings.TrimSpace(conf), "\n") {
			k, _, _ := strings.Cut(l, " = ")
			if seen[k] {
				t.Errorf("option %s twice", k)
			}
			seen[k] = true
		}
	}
}
