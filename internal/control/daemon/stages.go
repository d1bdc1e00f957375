// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// stageClock times the stages of one interval. An interval that takes
// longer than the interval itself delays every rule the loop decides in
// it (a flood's flow rule reached XDP 4–6 intervals after the deciding
// snapshot under a 0.6 Mpps spoofed flood, issue 32), and the total alone
// does not say which stage to blame: the operator sees each stage's time
// as a metric and a "slow" event names the largest.
type stageClock struct {
	last  time.Time
	names []string
	took  []time.Duration
}

func (c *stageClock) start(now time.Time) {
	c.last = now
	c.names, c.took = c.names[:0], c.took[:0]
}

// mark ends the stage called name at the current time.
func (c *stageClock) mark(name string) {
	now := time.Now()
	c.names = append(c.names, name)
	c.took = append(c.took, now.Sub(c.last))
	c.last = now
}

// largest names the n longest stages, longest first ("ban 1.2s, observe 80ms").
func (c *stageClock) largest(n int) string {
	idx := make([]int, len(c.took))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return int(c.took[b] - c.took[a]) })
	var parts []string
	for _, i := range idx[:min(n, len(idx))] {
		parts = append(parts, fmt.Sprintf("%s %s", c.names[i], c.took[i].Round(time.Millisecond)))
	}
	return strings.Join(parts, ", ")
}
