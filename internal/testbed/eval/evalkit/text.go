// SPDX-License-Identifier: Apache-2.0

package evalkit

import (
	"strconv"

	"gonum.org/v1/plot/plotter"
)

// FF formats a value for a CSV cell: four decimals.
func FF(v float64) string { return strconv.FormatFloat(v, 'f', 4, 64) }

// Lines turns measured series into chart lines.
func Lines(s map[string]plotter.XYs) []Line {
	var out []Line
	for n, xys := range s {
		out = append(out, Line{Name: n, XYs: xys})
	}
	return out
}
