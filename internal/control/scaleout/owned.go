// SPDX-License-Identifier: Apache-2.0

package scaleout

import (
	"fmt"
	"strconv"
	"strings"
)

// maxOwnedText bounds what ParseOwned reads: it comes from a file or a
// flag, and a range list longer than this names no real deployment.
const maxOwnedText = 4096

// ParseOwned reads the partitions a detector owns, written "0-7,9", out
// of n: empty is all of them (nil, DetectorConfig's default).
func ParseOwned(s string, n int) ([]int, error) {
	if s == "" {
		return nil, nil
	}
	if len(s) > maxOwnedText {
		return nil, fmt.Errorf("%d bytes: longer than %d", len(s), maxOwnedText)
	}
	var out []int
	seen := make([]bool, n)
	for _, f := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(f), "-")
		a, err := strconv.Atoi(lo)
		b := a
		if err == nil && isRange {
			b, err = strconv.Atoi(hi)
		}
		if err != nil || a < 0 || b < a || b >= n {
			return nil, fmt.Errorf("%q is not a partition or range in 0…%d", f, n-1)
		}
		for i := a; i <= b; i++ {
			// Named twice, a partition would be consumed twice; the set
			// is kept, not the writing.
			if !seen[i] {
				seen[i] = true
				out = append(out, i)
			}
		}
	}
	return out, nil
}
