// SPDX-License-Identifier: Apache-2.0

package synproxy

import (
	"context"
	"errors"
	"maps"
	"net/netip"
	"regexp"
	"strings"
	"testing"

	"github.com/tierwall/tierwall/internal/rule"
)

// fakeHost keeps sysctls in a map and the table as nft would after a
// script: created with its comment, or deleted.
type fakeHost struct {
	sys     map[string]string
	comment string
	ok      bool
	failNft bool
	failSet string // a sysctl whose write fails
	scripts []string
}

var commentRE = regexp.MustCompile(`comment "([^"]*)"`)

func newFake() *fakeHost {
	return &fakeHost{sys: map[string]string{"net.netfilter.nf_conntrack_tcp_loose": "1", "net.ipv4.tcp_timestamps": "2"}}
}

func (f *fakeHost) nft(_ context.Context, script string) error {
	if f.failNft {
		return errors.New("nft failed")
	}
	f.scripts = append(f.scripts, script)
	f.ok = strings.Contains(script, "table inet "+Table+" {")
	f.comment = ""
	if m := commentRE.FindStringSubmatch(script); m != nil {
		f.comment = m[1]
	}
	return nil
}

func (f *fakeHost) table(context.Context) (string, bool, error) { return f.comment, f.ok, nil }

func (f *fakeHost) sysctl(key string) (string, error) {
	v, ok := f.sys[key]
	if !ok {
		return "", errors.New("no such sysctl")
	}
	return v, nil
}

func (f *fakeHost) setSysctl(key, value string) error {
	if key == f.failSet {
		return errors.New("write refused")
	}
	f.sys[key] = value
	return nil
}

var web = Config{Targets: []Target{
	{Dst: netip.MustParsePrefix("198.51.100.1/32"), Ports: rule.PortRange{Lo: 80, Hi: 80}},
	{Dst: netip.MustParsePrefix("2001:db8::/64"), Ports: rule.PortRange{Lo: 8000, Hi: 8080}},
	{Dst: netip.MustParsePrefix("203.0.113.0/24")},
}}

func TestRuleset(t *testing.T) {
	got, err := Ruleset(web, map[string]string{"net.netfilter.nf_conntrack_tcp_loose": "1", "net.ipv4.tcp_timestamps": "1"})
	if err != nil {
		t.Fatal(err)
	}
	want := `table inet tierwall_synproxy
delete table inet tierwall_synproxy
table inet tierwall_synproxy {
	comment "tierwall synproxy; saved net.netfilter.nf_conntrack_tcp_loose=1 net.ipv4.tcp_timestamps=1"
	set good4 {
		type ipv4_addr; size 131072;
	}
	set good6 {
		type ipv6_addr; size 131072;
	}
	chain raw {
		type filter hook prerouting priority raw; policy accept;
		ip saddr @good4 accept
		ip6 saddr @good6 accept
		ip daddr 198.51.100.1/32 tcp dport 80 tcp flags & (fin|syn|rst|ack) == syn notrack
		ip6 daddr 2001:db8::/64 tcp dport 8000-8080 tcp flags & (fin|syn|rst|ack) == syn notrack
		ip daddr 203.0.113.0/24 meta l4proto tcp tcp flags & (fin|syn|rst|ack) == syn notrack
	}
	chain input {
		type filter hook input priority filter; policy accept;
		ip saddr @good4 accept
		ip6 saddr @good6 accept
		ip daddr 198.51.100.1/32 tcp dport 80 ct state invalid,untracked synproxy mss 1460 wscale 7 timestamp sack-perm
		ip daddr 198.51.100.1/32 tcp dport 80 ct state invalid drop
		ip6 daddr 2001:db8::/64 tcp dport 8000-8080 ct state invalid,untracked synproxy mss 1460 wscale 7 timestamp sack-perm
		ip6 daddr 2001:db8::/64 tcp dport 8000-8080 ct state invalid drop
		ip daddr 203.0.113.0/24 meta l4proto tcp ct state invalid,untracked synproxy mss 1460 wscale 7 timestamp sack-perm
		ip daddr 203.0.113.0/24 meta l4proto tcp ct state invalid drop
	}
	chain forward {
		type filter hook forward priority filter; policy accept;
		ip saddr @good4 accept
		ip6 saddr @good6 accept
		ip daddr 198.51.100.1/32 tcp dport 80 ct state invalid,untracked synproxy mss 1460 wscale 7 timestamp sack-perm
		ip daddr 198.51.100.1/32 tcp dport 80 ct state invalid drop
		ip6 daddr 2001:db8::/64 tcp dport 8000-8080 ct state invalid,untracked synproxy mss 1460 wscale 7 timestamp sack-perm
		ip6 daddr 2001:db8::/64 tcp dport 8000-8080 ct state invalid drop
		ip daddr 203.0.113.0/24 meta l4proto tcp ct state invalid,untracked synproxy mss 1460 wscale 7 timestamp sack-perm
		ip daddr 203.0.113.0/24 meta l4proto tcp ct state invalid drop
	}
}
`
	if got != want {
		t.Errorf("ruleset:\n%s\nwant:\n%s", got, want)
	}
}

// Known-good sources come up with the table and are replaced whole, in
// one transaction; IPv4-mapped addresses land in the IPv4 set.
func TestKnownGoodSets(t *testing.T) {
	c := web
	c.KnownGood = []netip.Addr{netip.MustParseAddr("192.0.2.7"), netip.MustParseAddr("::ffff:192.0.2.8"), netip.MustParseAddr("2001:db8::9")}
	got, err := Ruleset(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got, "elements = { 192.0.2.7, 192.0.2.8 }") || !strings.Contains(got, "elements = { 2001:db8::9 }") {
		t.Errorf("ruleset without the known-good elements:\n%s", got)
	}
	f := newFake()
	if err := setKnownGood(context.Background(), f, c.KnownGood[:1]); err != nil {
		t.Fatal(err)
	}
	want := "flush set inet tierwall_synproxy good4\nadd element inet tierwall_synproxy good4 { 192.0.2.7 }\nflush set inet tierwall_synproxy good6\n"
	if len(f.scripts) != 1 || f.scripts[0] != want {
		t.Errorf("scripts %q, want %q", f.scripts, want)
	}
	if err := setKnownGood(context.Background(), f, []netip.Addr{{}}); !errors.Is(err, ErrInvalid) || len(f.scripts) != 1 {
		t.Errorf("an invalid address: %v after %d scripts, want ErrInvalid and nothing run", err, len(f.scripts))
	}
	many := make([]netip.Addr, MaxKnownGood+1)
	a := netip.MustParseAddr("10.0.0.0")
	for i := range many {
		many[i], a = a, a.Next()
	}
	if err := setKnownGood(context.Background(), f, many); !errors.Is(err, ErrInvalid) || len(f.scripts) != 1 {
		t.Errorf("more than a set holds: %v after %d scripts, want ErrInvalid and nothing run", err, len(f.scripts))
	}
}

func TestConfigChecked(t *testing.T) {
	p := netip.MustParsePrefix("198.51.100.1/32")
	for _, c := range []Config{
		{},
		{Targets: []Target{{Dst: netip.MustParsePrefix("198.51.100.1/24")}}},
		{Targets: []Target{{Dst: netip.MustParsePrefix("::ffff:198.51.100.1/128")}}},
		{Targets: []Target{{Dst: p, Ports: rule.PortRange{Lo: 90, Hi: 80}}}},
		{Targets: []Target{{Dst: p}}, MSS: 100},
		{Targets: []Target{{Dst: p}}, WScale: 15},
	} {
		if _, err := Ruleset(c, nil); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: error %v, want ErrInvalid", c, err)
		}
		if err := apply(context.Background(), newFake(), c); !errors.Is(err, ErrInvalid) {
			t.Errorf("apply %+v: error %v, want ErrInvalid", c, err)
		}
	}
}

func TestApplyRemove(t *testing.T) {
	ctx := context.Background()
	h := newFake()
	orig := maps.Clone(h.sys)
	if err := apply(ctx, h, web); err != nil {
		t.Fatal(err)
	}
	if h.sys["net.netfilter.nf_conntrack_tcp_loose"] != "0" || h.sys["net.ipv4.tcp_timestamps"] != "1" {
		t.Fatalf("sysctls after apply: %v", h.sys)
	}
	// Applying again (another target list) keeps the values from before
	// the first apply, not the ones the first apply set.
	again := web
	again.Targets = web.Targets[:1]
	if err := apply(ctx, h, again); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(h.comment, "nf_conntrack_tcp_loose=1") || !strings.Contains(h.comment, "tcp_timestamps=2") {
		t.Errorf("comment %q lost the original values", h.comment)
	}
	if strings.Contains(h.scripts[len(h.scripts)-1], "2001:db8::") {
		t.Error("second apply did not replace the ruleset")
	}
	if err := remove(ctx, h); err != nil {
		t.Fatal(err)
	}
	if h.ok || !maps.Equal(h.sys, orig) {
		t.Errorf("after remove: table %v, sysctls %v, want none and %v", h.ok, h.sys, orig)
	}
	// Idempotent: nothing to do, nothing run.
	n := len(h.scripts)
	if err := remove(ctx, h); err != nil || len(h.scripts) != n {
		t.Errorf("second remove: %v, %d scripts run", err, len(h.scripts)-n)
	}
}

// A failed apply changes nothing: not the sysctls, not the ruleset.
func TestApplyFailureChangesNothing(t *testing.T) {
	ctx := context.Background()
	t.Run("nft refuses", func(t *testing.T) {
		h := newFake()
		orig := maps.Clone(h.sys)
		h.failNft = true
		if err := apply(ctx, h, web); err == nil {
			t.Fatal("apply succeeded")
		}
		if h.ok || !maps.Equal(h.sys, orig) {
			t.Errorf("after failed apply: table %v, sysctls %v, want none and %v", h.ok, h.sys, orig)
		}
	})
	t.Run("sysctl refused", func(t *testing.T) {
		h := newFake()
		orig := maps.Clone(h.sys)
		h.failSet = "net.ipv4.tcp_timestamps"
		if err := apply(ctx, h, web); err == nil {
			t.Fatal("apply succeeded")
		}
		if h.ok || !maps.Equal(h.sys, orig) {
			t.Errorf("after failed apply: table %v, sysctls %v, want none and %v", h.ok, h.sys, orig)
		}
	})
	t.Run("previous setup kept", func(t *testing.T) {
		h := newFake()
		if err := apply(ctx, h, web); err != nil {
			t.Fatal(err)
		}
		script, sys := h.scripts[len(h.scripts)-1], maps.Clone(h.sys)
		h.failNft = true
		if err := apply(ctx, h, Config{Targets: web.Targets[:1]}); err == nil {
			t.Fatal("apply succeeded")
		}
		if !h.ok || h.scripts[len(h.scripts)-1] != script || !maps.Equal(h.sys, sys) {
			t.Error("failed apply changed the previous setup")
		}
	})
}

func TestForeignComment(t *testing.T) {
	h := newFake()
	h.ok, h.comment = true, "someone else's"
	if err := remove(context.Background(), h); err == nil {
		t.Error("remove took down a table it cannot read")
	}
}

func TestTargetsOf(t *testing.T) {
	rs := []rule.FlowRule{
		{Dst: netip.MustParsePrefix("198.51.100.0/24"), Proto: 6, DstPorts: rule.PortRange{Lo: 443, Hi: 443}, Action: rule.FlowSYNCookie},
		{Dst: netip.MustParsePrefix("198.51.100.0/24"), Proto: 17, Action: rule.FlowDrop},
	}
	got := TargetsOf(rs)
	if len(got) != 1 || got[0].Dst != rs[0].Dst || got[0].Ports != rs[0].DstPorts {
		t.Errorf("TargetsOf: %v", got)
	}
}
