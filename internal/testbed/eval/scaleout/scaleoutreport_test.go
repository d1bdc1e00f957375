// SPDX-License-Identifier: Apache-2.0

package scaleout

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestScaleoutNoLoss: a round's no-loss rate stops at its first lossy
// step, whatever kind of loss (socket, queue, bus), and a lossless step
// above a lossy one does not count.
func TestScaleoutNoLoss(t *testing.T) {
	ok := func(r int, rate float64) Step {
		return Step{Round: r, Offered: rate, Sent: uint64(rate), Secs: 1, Decoded: uint64(rate), Queued: 10, Delivered: 10}
	}
	s := Setup{Name: "x", Collectors: 2}
	s.Steps = append(s.Steps, ok(0, 20e3), ok(0, 40e3))
	lost := ok(0, 60e3)
	lost.Dropped = 1
	s.Steps = append(s.Steps, lost, ok(0, 80e3))
	s.Steps = append(s.Steps, ok(1, 20e3))
	undelivered := ok(1, 40e3)
	undelivered.Delivered = 9
	s.Steps = append(s.Steps, undelivered)
	s.Steps = append(s.Steps, ok(2, 20e3))
	queue := ok(2, 40e3)
	queue.QueueDrops = 1
	s.Steps = append(s.Steps, queue)
	if got, want := s.NoLoss(), []float64{40e3, 20e3, 20e3}; !slices.Equal(got, want) {
		t.Errorf("no-loss %v, want %v", got, want)
	}
	res := Result{Setups: []Setup{{Name: "one collector", Collectors: 1, Steps: []Step{ok(0, 20e3)}}, s}}
	doc := Render(res, time.Minute, time.Unix(1700000000, 0))
	for _, want := range []string{"make eval-scaleout", "load average", "| 20,000 (20,000–20,000) |"} {
		if !strings.Contains(doc, want) {
			t.Errorf("the document lacks %q", want)
		}
	}
}
