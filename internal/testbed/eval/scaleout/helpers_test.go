// SPDX-License-Identifier: Apache-2.0

package scaleout

import (
	"bytes"
	"testing"

	"github.com/tierwall/tierwall/internal/testbed/eval/evalkit"
)

func TestMedianAndNumbers(t *testing.T) {
	if median(nil) != 0 || median([]float64{3, 1, 2}) != 2 || median([]float64{4, 1, 3, 2}) != 2.5 {
		t.Error("median")
	}
	xs := []float64{3, 1, 2}
	if got := medianRange(xs, thousands); got != "2 (1–3)" {
		t.Errorf("medianRange = %q", got)
	}
	if xs[0] != 3 {
		t.Error("medianRange sorted its argument")
	}
	if got := medianRange(nil, thousands); got != "—" {
		t.Errorf("medianRange(nil) = %q", got)
	}
	for n, want := range map[uint64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567"} {
		if got := commas(n); got != want {
			t.Errorf("commas(%d) = %q", n, got)
		}
	}
	if got := thousands(1499.6); got != "1,500" {
		t.Errorf("thousands = %q", got)
	}
}

func TestStep(t *testing.T) {
	s := Step{Sent: 1000, Secs: 2, Queued: 5, Delivered: 5}
	if s.Lost() || s.Rate() != 500 {
		t.Errorf("lost %v rate %v", s.Lost(), s.Rate())
	}
	for _, lossy := range []Step{{Dropped: 1}, {QueueDrops: 1}, {PublishErrors: 1}, {Queued: 2, Delivered: 1}} {
		if !lossy.Lost() {
			t.Errorf("%+v not lost", lossy)
		}
	}
	if (Step{Sent: 5}).Rate() != 0 {
		t.Error("a step of no time has no rate")
	}
	su := Setup{Steps: []Step{{Offered: 1e5, Secs: 1, Decoded: 9}, {Offered: evalkit.FlatOut, Secs: 2, Decoded: 10}, {Offered: evalkit.FlatOut}}}
	if o := su.Overload(); len(o) != 1 || o[0] != 5 {
		t.Errorf("Overload = %v", o)
	}
}

// The feed is the same every run: two sub-agents, six samples each, from
// the ingest prefix.
func TestFeedIsReproducible(t *testing.T) {
	a, b := scaleoutFeed(4), scaleoutFeed(4)
	if len(a) != 4 {
		t.Fatalf("%d datagrams", len(a))
	}
	for i := range a {
		if !bytes.Equal(a[i], b[i]) || len(a[i]) == 0 {
			t.Fatalf("datagram %d differs between runs", i)
		}
	}
	if bytes.Equal(a[0], a[1]) {
		t.Error("two datagrams alike")
	}
}
