// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/tierwall/tierwall/internal/control/apiv1"
)

// An operator's unbans are all or nothing across every tier: a refused
// batch leaves a detector's ban as it was, in XDP and in hardware; an
// accepted one lifts it from both, with one event and the state saved.
func TestOperatorUnbansAllOrNothing(t *testing.T) {
	h := newHarness(t, testConfig(t), true)
	serve(h.d)
	ctx := context.Background()
	atk := netip.MustParseAddr("198.51.100.7")
	h.dp.send(5000, atk)
	h.step(t)
	for range 2 {
		h.dp.hit(pfx(atk), 5000)
		h.step(t)
	}
	before, ok := h.d.store.Get(pfx(atk))
	if !ok || before.Detector != "rate" || !h.hw.Has(atk) {
		t.Fatalf("setup: ban %+v %v, in hardware %v", before, ok, h.hw.Has(atk))
	}
	missing := netip.MustParsePrefix("203.0.113.0/24")
	_, err := h.d.OperatorUnbans(ctx, []netip.Prefix{pfx(atk), missing}, false)
	if !errors.Is(err, apiv1.ErrNotFound) {
		t.Fatalf("unban of a ban and a missing prefix: %v, want not found", err)
	}
	if b, _ := h.d.store.Get(pfx(atk)); b != before || !h.hw.Has(atk) || h.dp.blocked[pfx(atk)] == nil {
		t.Fatalf("after the refusal: ban %+v (was %+v), in hardware %v, in XDP %v", b, before, h.hw.Has(atk), h.dp.blocked[pfx(atk)] != nil)
	}
	unbans := promtest.ToFloat64(h.d.Metrics.unbans)
	r, err := h.d.OperatorUnbans(ctx, []netip.Prefix{pfx(atk), pfx(atk)}, false)
	if err != nil || r.Prefixes != 1 {
		t.Fatalf("unban: %+v %v", r, err)
	}
	if h.d.store.Len() != 0 || h.hw.Has(atk) || h.dp.blocked[pfx(atk)] != nil || promtest.ToFloat64(h.d.Metrics.unbans) != unbans+1 ||
		!hasEvent(h.d, "unban", "operator") {
		t.Fatalf("after the unban: %d bans, in hardware %v, in XDP %v", h.d.store.Len(), h.hw.Has(atk), h.dp.blocked[pfx(atk)] != nil)
	}
	if _, err := h.d.OperatorUnbans(ctx, []netip.Prefix{missing}, true); !errors.Is(err, apiv1.ErrBadRequest) {
		t.Errorf("all with prefixes: %v", err)
	}
	if r, err := h.d.OperatorUnbans(ctx, nil, true); err != nil || r.Prefixes != 0 {
		t.Errorf("flush of nothing: %+v %v", r, err)
	}
}
