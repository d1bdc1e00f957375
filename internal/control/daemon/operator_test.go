// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tierwall/tierwall/internal/control/apiv1"
	"github.com/tierwall/tierwall/internal/control/ban"
	"github.com/tierwall/tierwall/internal/datapath"
)

// The unit tests must not depend on the addresses of the machine they
// run on (a build host's 192.0.2.2 refused a test's 192.0.2.0/24).
func TestMain(m *testing.M) {
	hostManagement = func() ([]ban.Managed, error) { return nil, nil }
	os.Exit(m.Run())
}

// fixedManagement makes the daemon's management addresses gw and own.
func fixedManagement(t *testing.T, ms ...ban.Managed) {
	old := hostManagement
	t.Cleanup(func() { hostManagement = old })
	hostManagement = func() ([]ban.Managed, error) { return ms, nil }
}

var (
	ownAddr = ban.Managed{Addr: netip.MustParseAddr("203.0.113.10"), What: "address of eth0"}
	gwAddr  = ban.Managed{Addr: netip.MustParseAddr("203.0.113.1"), What: "default gateway via eth0"}
)

func ttl(d time.Duration) *time.Duration { return &d }

// Re-adding a ban through the API keeps it and says so; an update says
// what changed. The TTL'd ban no longer turns permanent.
func TestOperatorReAddKeepsTheBan(t *testing.T) {
	fixedManagement(t)
	h := newHarness(t, testConfig(t), false)
	serve(h.d)
	ctx := context.Background()
	p := netip.MustParsePrefix("192.0.2.50/32")
	r, err := h.d.OperatorBan(ctx, p, ban.Operator{Reason: "abuse", TTL: ttl(10 * time.Minute)})
	if err != nil || r.Result != ban.Added || r.Expires.IsZero() || h.dp.blocked[p] == nil {
		t.Fatalf("first add: %+v %v", r, err)
	}
	if n := promtest.ToFloat64(h.d.Metrics.bans); n != 1 {
		t.Errorf("tierwall_bans_total %v after an API ban, want 1", n)
	}
	r2, err := h.d.OperatorBan(ctx, p, ban.Operator{})
	if err != nil || r2.Result != ban.Exists || r2.Reason != "abuse" || !r2.Expires.Equal(r.Expires) {
		t.Fatalf("re-add: %+v %v", r2, err)
	}
	if b, _ := h.d.store.Get(p); b.Reason != "abuse" || b.Expires.IsZero() {
		t.Fatalf("re-add changed the ban: %+v", b)
	}
	if n := promtest.ToFloat64(h.d.Metrics.bans); n != 1 {
		t.Errorf("tierwall_bans_total %v after a re-add, want 1", n)
	}
	r3, err := h.d.OperatorBan(ctx, p, ban.Operator{TTL: ttl(0), Update: true})
	if err != nil || r3.Result != ban.Updated || !r3.Expires.IsZero() || r3.Reason != "abuse" {
		t.Fatalf("update: %+v %v", r3, err)
	}
}

// The rails through the API and the batch: too wide needs force, the
// host's own addresses never; one bad entry does not sink the batch
// unless all or nothing is asked for.
func TestOperatorRails(t *testing.T) {
	fixedManagement(t, ownAddr, gwAddr)
	h := newHarness(t, testConfig(t), false)
	serve(h.d)
	ctx := context.Background()
	all := netip.MustParsePrefix("0.0.0.0/0")
	if _, err := h.d.OperatorBan(ctx, netip.MustParsePrefix("::/0"), ban.Operator{}); !errors.Is(err, apiv1.ErrBadRequest) || !strings.Contains(err.Error(), "force") {
		t.Fatalf("::/0: %v", err)
	}
	if _, err := h.d.OperatorBan(ctx, all, ban.Operator{Force: true}); !errors.Is(err, apiv1.ErrBadRequest) || !strings.Contains(err.Error(), "never banned") {
		t.Fatalf("forced 0.0.0.0/0 over the gateway: %v", err)
	}
	if r, err := h.d.OperatorBan(ctx, netip.MustParsePrefix("2001::/16"), ban.Operator{Force: true}); err != nil || r.Result != ban.Added {
		t.Fatalf("forced wide IPv6: %+v %v", r, err)
	}
	if len(h.dp.blocked) != 1 {
		t.Fatalf("data plane holds %v", h.dp.blocked)
	}
	ps := []netip.Prefix{netip.MustParsePrefix("198.51.100.1/32"), netip.MustParsePrefix("203.0.113.0/24"),
		netip.MustParsePrefix("64.0.0.0/4"), netip.MustParsePrefix("198.51.100.2/32")}
	res, err := h.d.OperatorBans(ctx, ps, ban.Operator{Reason: "feed"}, false)
	if err != nil || res.New != 2 || len(res.Refused) != 2 || res.Refused[0].Prefix != ps[1] || !strings.Contains(res.Refused[0].Reason, "203.0.113.") ||
		res.Refused[1].Prefix != ps[2] || !strings.Contains(res.Refused[1].Reason, "wider than /8") {
		t.Fatalf("batch: %+v %v", res, err)
	}
	if h.dp.blocked[ps[0]] == nil || h.dp.blocked[ps[3]] == nil || h.dp.blocked[ps[1]] != nil {
		t.Fatalf("data plane after the batch: %v", h.dp.blocked)
	}
	// Re-sent: the two are there, unchanged.
	res, _ = h.d.OperatorBans(ctx, []netip.Prefix{ps[0], ps[3]}, ban.Operator{Reason: "other"}, false)
	if res.Exists != 2 || res.New != 0 {
		t.Fatalf("re-sent batch: %+v", res)
	}
	// All or nothing (the CLI): one refused entry, nothing changes.
	q := netip.MustParsePrefix("198.51.100.3/32")
	if _, err := h.d.OperatorBans(ctx, []netip.Prefix{q, ps[1]}, ban.Operator{}, true); !errors.Is(err, apiv1.ErrBadRequest) {
		t.Fatalf("all or nothing: %v", err)
	}
	if _, ok := h.d.store.Get(q); ok || h.dp.blocked[q] != nil {
		t.Fatal("an all-or-nothing batch left part of itself behind")
	}
	// A data plane that refuses one entry of the batch: the others apply.
	h.dp.Refuse = map[netip.Prefix]bool{netip.MustParsePrefix("198.51.100.5/32"): true}
	res, err = h.d.OperatorBans(ctx, []netip.Prefix{netip.MustParsePrefix("198.51.100.4/32"), netip.MustParsePrefix("198.51.100.5/32")}, ban.Operator{}, false)
	if err != nil || res.New != 1 || len(res.Refused) != 1 || !strings.Contains(res.Refused[0].Reason, "full") {
		t.Fatalf("data-plane refusal: %+v %v", res, err)
	}
	if _, ok := h.d.store.Get(netip.MustParsePrefix("198.51.100.5/32")); ok {
		t.Fatal("the refused entry stayed in the store")
	}
	// Allowlist: ::/0 needs force.
	if err := h.d.AllowRule(ctx, netip.MustParsePrefix("::/0"), false); !errors.Is(err, apiv1.ErrBadRequest) {
		t.Fatalf("allow ::/0: %v", err)
	}
	if h.dp.allowed[netip.MustParsePrefix("::/0")] {
		t.Fatal("::/0 allowlisted")
	}
	if err := h.d.AllowRule(ctx, netip.MustParsePrefix("198.18.0.0/15"), false); err != nil {
		t.Fatal(err)
	}
}

// Detections and the state file meet the same rails: a detector never
// bans the gateway, and a wide or management ban found at start (state
// file or data plane) is lifted with an event.
func TestRailsOnDetectionsAndRestart(t *testing.T) {
	fixedManagement(t, ownAddr, gwAddr)
	cfg := testConfig(t)
	h := newHarness(t, cfg, false)
	h.dp.send(5000, gwAddr.Addr, netip.MustParseAddr("198.51.100.77"))
	h.step(t)
	if _, ok := h.d.store.Get(pfx(gwAddr.Addr)); ok || h.dp.blocked[pfx(gwAddr.Addr)] != nil {
		t.Fatal("the gateway was banned by a detector")
	}
	if _, ok := h.d.store.Get(netip.MustParsePrefix("198.51.100.77/32")); !ok {
		t.Fatal("the attacker beside it was not banned")
	}
	if !hasEvent(h.d, "refused", "gateway") {
		t.Fatalf("no refusal event: %+v", h.d.events)
	}
	// Rules the old CLI wrote straight into the data plane, and a ban in
	// the state file from before the rails (or edited by hand).
	wide, own, saved := netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("203.0.113.0/24"), netip.MustParsePrefix("0.0.0.0/2")
	h.dp.blocked[wide] = &datapath.Counter{}
	h.dp.blocked[own] = &datapath.Counter{}
	h.d.store.Put(ban.Ban{Prefix: saved, Detector: "operator", Reason: "old", Manual: true})
	h.dp.blocked[saved] = &datapath.Counter{}
	if err := h.d.store.Save(cfg.StateFile, h.now); err != nil {
		t.Fatal(err)
	}
	h2, err := newDaemon(cfg, "", quietLog(), h.dp, nil, t0.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []netip.Prefix{wide, own, saved} {
		if _, ok := h2.store.Get(p); ok || h.dp.blocked[p] != nil {
			t.Errorf("%s kept at start", p)
		}
	}
	if !hasEvent(h2, "refused", "ban from the state file is wider than /8") {
		t.Errorf("no event for the state file's ban: %+v", h2.events)
	}
	if _, ok := h2.store.Get(netip.MustParsePrefix("198.51.100.77/32")); !ok {
		t.Error("the good ban was lost")
	}
}
