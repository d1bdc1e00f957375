// SPDX-License-Identifier: Apache-2.0

package scaleout

import (
	"slices"
	"strings"
	"testing"
)

// A detector's partitions, as the configuration and --owned write them:
// ranges and single ones, each once; anything out of 0…n-1, or not a
// number, is refused naming it.
func TestParseOwned(t *testing.T) {
	got, err := ParseOwned("0-3, 6,2,6", 8)
	if err != nil || !slices.Equal(got, []int{0, 1, 2, 3, 6}) {
		t.Errorf("got %v %v", got, err)
	}
	if got, err := ParseOwned("", 8); got != nil || err != nil {
		t.Errorf("empty: %v %v, want all (nil)", got, err)
	}
	for _, s := range []string{"8", "-1", "3-1", "x", "1-", "0-7,", strings.Repeat("1,", 3000)} {
		if _, err := ParseOwned(s, 8); err == nil {
			t.Errorf("%q: no error", s)
		}
	}
}
