// SPDX-License-Identifier: Apache-2.0

package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/rule"
)

// A refused multi-prefix delete changes nothing: `block del <ban>
// <missing>` deleted the ban, was refused on the missing prefix and
// "undid" by re-adding the ban as the operator's, permanent and without
// its reason (its source unbanned in between).
func TestDeleteIsAllOrNothing(t *testing.T) {
	c, dp := daemonServer(t)
	ctx := context.Background()
	banned, missing := netip.MustParsePrefix("198.51.100.50/32"), netip.MustParsePrefix("198.51.100.51/32")
	code, b := postRule(t, c, "/v1/rules", `{"prefix":"198.51.100.50","reason":"entropy-like","ttl":"1h"}`)
	if code != http.StatusCreated {
		t.Fatalf("add: %d %v", code, b)
	}
	before, err := c.Rules(ctx)
	if err != nil || len(before) != 1 {
		t.Fatalf("rules: %v %v", before, err)
	}
	dp.mu.Lock()
	dp.unblocks = 0
	dp.mu.Unlock()
	err = c.Change(ctx, Block, []netip.Prefix{banned, missing}, false, "")
	if err == nil || !strings.Contains(err.Error(), "nothing changed") || !strings.Contains(err.Error(), missing.String()) {
		t.Fatalf("del of a ban and a missing prefix: %v, want a refusal naming %s that changed nothing", err, missing)
	}
	after, err := c.Rules(ctx)
	if err != nil || len(after) != 1 {
		t.Fatalf("rules after: %v %v", after, err)
	}
	if a, w := after[0], before[0]; a.Reason != w.Reason || a.Detector != w.Detector || !a.Expires.Equal(w.Expires) || a.Expires.IsZero() {
		t.Errorf("the ban became %s/%s expiring %v, was %s/%s expiring %v", a.Detector, a.Reason, a.Expires, w.Detector, w.Reason, w.Expires)
	}
	dp.mu.Lock()
	defer dp.mu.Unlock()
	if !dp.blocked[banned] || dp.unblocks != 0 {
		t.Errorf("data plane: blocked %v after %d unblock calls; the refused delete must not touch it", dp.blocked[banned], dp.unblocks)
	}
}

// Many prefixes go in one request, all or nothing, and fast: 199K one
// request each took five minutes. Allowlist changes are all or nothing
// too.
func TestBatchDeleteAndAllow(t *testing.T) {
	c, dp := daemonServer(t)
	ctx := context.Background()
	const n = 50_000
	ps := make([]netip.Prefix, n)
	for i := range ps {
		ps[i] = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 32)
	}
	if err := c.Change(ctx, Block, ps, true, ""); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	r, err := c.DeleteRules(ctx, ps)
	if err != nil || r.Prefixes != n {
		t.Fatalf("delete: %+v %v", r, err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("deleting %d bans took %v", n, took)
	}
	if rs, _ := c.Rules(ctx); len(rs) != 0 || len(dp.blocked) != 0 {
		t.Fatalf("left %d bans, %d rules", len(rs), len(dp.blocked))
	}
	if err := c.Change(ctx, Block, ps[:3], true, ""); err != nil {
		t.Fatal(err)
	}
	if r, err := c.FlushRules(ctx); err != nil || r.Prefixes != 3 || len(dp.blocked) != 0 {
		t.Fatalf("flush: %+v %v, %d rules left", r, err, len(dp.blocked))
	}
	a, b := netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("198.51.100.0/24")
	if err := c.Change(ctx, Allow, []netip.Prefix{a}, true, ""); err != nil {
		t.Fatal(err)
	}
	if err := c.Change(ctx, Allow, []netip.Prefix{a, b}, false, ""); err == nil || !strings.Contains(err.Error(), "nothing changed") {
		t.Fatalf("allow del of a missing prefix: %v", err)
	}
	if !dp.allowed[a] {
		t.Fatal("a refused allow del removed an entry")
	}
	if err := c.Change(ctx, Allow, []netip.Prefix{b, netip.MustParsePrefix("0.0.0.0/1")}, true, ""); err == nil || dp.allowed[b] {
		t.Fatalf("allow add with a too-wide prefix: %v, %v", err, dp.allowed)
	}
}

// The CLI reaches a daemon's TCP API with its bearer token, as gobgp's
// CLI reaches gobgpd; a wrong token is the caller's to fix.
func TestDialURL(t *testing.T) {
	c, _ := daemonServer(t)
	_ = c
	s := &Server{Token: "s3cret"}
	srv := httptest.NewServer(s.Authenticated(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"interface": "eth9"})
	})))
	t.Cleanup(srv.Close)
	ctx := context.Background()
	rc, err := DialURL(srv.URL, "s3cret")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rc.Status(ctx); err != nil {
		t.Errorf("status with the token: %v", err)
	}
	bad, err := DialURL(srv.URL, "wrong")
	if err != nil {
		t.Fatal(err)
	}
	var se *StatusError
	if _, err := bad.Status(ctx); !errors.As(err, &se) || se.Code != http.StatusUnauthorized || !errors.Is(err, rule.ErrInvalid) {
		t.Errorf("status with a wrong token: %v", err)
	}
	for _, u := range []string{"tcp://x:1", "http://", "http://127.0.0.1:1/v1"} {
		if _, err := DialURL(u, ""); !errors.Is(err, rule.ErrInvalid) {
			t.Errorf("DialURL(%q): %v, want invalid", u, err)
		}
	}
	if _, err := DialURL(fmt.Sprintf("http://127.0.0.1:%d", 1), ""); !errors.Is(err, ErrNoDaemon) {
		t.Errorf("nothing listening: %v", err)
	}
}
