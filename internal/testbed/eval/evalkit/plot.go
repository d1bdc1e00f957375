// SPDX-License-Identifier: Apache-2.0

// Package evalkit is what the experiments share: their figures' look
// (Chart), report text, processes (Proc), CPU pinning and counters, the
// loopback UDP sockets' counters, and the flow collectors' configuration.
package evalkit

// One look for every evaluation figure: a mechanism keeps its colour and
// marker in every chart (so a reader who learnt "orange triangle is
// xdp-filter" in Fig. 2 can read Fig. 3 without the legend), the legend
// sits beside the data instead of over it, axis labels carry units and say
// when they are logarithmic, and the paper's values, where its text gives
// numbers, are drawn as hollow markers on dashed lines next to ours.

import (
	"fmt"
	"hash/fnv"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Palette is colour-blind safe (Okabe–Ito, then Tol's muted extras).
var Palette = []color.Color{
	color.RGBA{0, 114, 178, 255},   // blue
	color.RGBA{230, 159, 0, 255},   // orange
	color.RGBA{0, 158, 115, 255},   // green
	color.RGBA{204, 121, 167, 255}, // purple-pink
	color.RGBA{86, 180, 233, 255},  // sky
	color.RGBA{213, 94, 0, 255},    // vermilion
	color.RGBA{0, 0, 0, 255},       // black
	color.RGBA{136, 34, 85, 255},   // wine
	color.RGBA{153, 153, 51, 255},  // olive
	color.RGBA{68, 170, 153, 255},  // teal
}

// Filled shapes for measured series; the paper's get hollow ones.
var glyphs = []draw.GlyphDrawer{draw.CircleGlyph{}, draw.PyramidGlyph{}, draw.BoxGlyph{}, draw.CrossGlyph{}, draw.PlusGlyph{}}

// Style is a known series' look: its place in the legend, colour and marker.
type Style struct {
	Order int
	Color color.Color
	Glyph draw.GlyphDrawer
}

// Styles fixes each known mechanism's look; the order is the legend's.
var Styles = map[string]Style{
	"tierwall-host":                  {0, Palette[0], glyphs[0]},
	"xdp-filter":                     {1, Palette[1], glyphs[1]},
	"nft-netdev":                     {2, Palette[2], glyphs[2]},
	"nft-prerouting":                 {3, Palette[3], glyphs[3]},
	"ipset":                          {4, Palette[4], glyphs[4]},
	"iptables":                       {5, Palette[5], glyphs[0]},
	"lab-host":                       {6, Palette[6], glyphs[1]},
	"lab-hybrid":                     {7, Palette[7], glyphs[2]},
	"lab-nic-hw":                     {8, Palette[8], glyphs[3]},
	"lab-nic":                        {9, Palette[9], glyphs[4]},
	"model host XDP (4 cores)":       {10, Palette[0], glyphs[0]},
	"model hybrid (K=512 + 4 cores)": {11, Palette[7], glyphs[2]},
}

// hollow maps a filled glyph to its outline, for the paper's values.
func hollow(g draw.GlyphDrawer) draw.GlyphDrawer {
	switch g.(type) {
	case draw.CircleGlyph:
		return draw.RingGlyph{}
	case draw.PyramidGlyph:
		return draw.TriangleGlyph{}
	case draw.BoxGlyph:
		return draw.SquareGlyph{}
	}
	return g
}

// look is a series' colour and marker: fixed for known mechanisms, and for
// any other name (the flows lab's cells) picked from the name's hash so it
// is the same in every figure and every run.
func look(name string) (color.Color, draw.GlyphDrawer, int) {
	if s, ok := Styles[name]; ok {
		return s.Color, s.Glyph, s.Order
	}
	h := fnv.New32a()
	h.Write([]byte(name))
	v := int(h.Sum32())
	return Palette[v%len(Palette)], glyphs[(v/len(Palette))%len(glyphs)], len(Styles)
}

// Line is one series of a chart.
type Line struct {
	Name  string
	XYs   plotter.XYs
	Paper bool // a value read from the paper's text, not measured here
	// like names the measured series whose look a paper series takes.
	Like string
}

// Chart is one figure.
type Chart struct {
	Title, XLabel, YLabel string
	LogX, LogY            bool
	Lines                 []Line
	// yMin, when set, pins the bottom of a linear y axis (0 for shares).
	YMin *float64
	// yMax, when set, is the top of a linear y axis at least (100 for
	// CPU shares, so a busy CPU reads as one).
	YMax *float64
	// legendW widens the legend's column (long series names).
	LegendW vg.Length
}

// Zero pins an axis at 0 (Chart.YMin).
func Zero() *float64 { z := 0.0; return &z }

// Hundred is an axis top of 100 (Chart.YMax): a CPU share in percent.
func Hundred() *float64 { h := 100.0; return &h }

// Save draws the chart as name.png and name.svg in dir; a chart with no
// data writes nothing (a partial --only run).
func (c Chart) Save(dir, name string) error {
	var lines []Line
	for _, l := range c.Lines {
		var pts plotter.XYs
		for _, p := range l.XYs {
			if (c.LogX && p.X <= 0) || (c.LogY && p.Y <= 0) || math.IsNaN(p.Y) {
				continue // nothing to draw on a log axis; the tables keep it
			}
			pts = append(pts, p)
		}
		if len(pts) > 0 {
			l.XYs = pts
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		return nil
	}
	sort.SliceStable(lines, func(i, j int) bool {
		_, _, oi := look(key(lines[i]))
		_, _, oj := look(key(lines[j]))
		if oi != oj {
			return oi < oj
		}
		if key(lines[i]) != key(lines[j]) {
			return key(lines[i]) < key(lines[j])
		}
		return !lines[i].Paper && lines[j].Paper
	})

	p := plot.New()
	p.Title.Text = c.Title
	p.X.Label.Text = c.XLabel
	p.Y.Label.Text = c.YLabel
	if c.LogX {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = countTicks{}
	}
	if c.LogY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	p.Add(plotter.NewGrid())
	lo, hi := math.Inf(1), math.Inf(-1)
	ylo, yhi := math.Inf(1), math.Inf(-1)
	for _, l := range lines {
		col, g, _ := look(key(l))
		sort.Slice(l.XYs, func(i, j int) bool { return l.XYs[i].X < l.XYs[j].X })
		lp, sp, err := plotter.NewLinePoints(l.XYs)
		if err != nil {
			return fmt.Errorf("plotting %s: %w", l.Name, err)
		}
		lp.Color, lp.Width = col, vg.Points(1.5)
		sp.Color, sp.Shape, sp.Radius = col, g, vg.Points(4)
		if l.Paper {
			lp.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
			lp.Width = vg.Points(1)
			sp.Shape, sp.Radius = hollow(g), vg.Points(6)
		}
		p.Add(lp, sp)
		p.Legend.Add(l.Name, lp, sp)
		for _, pt := range l.XYs {
			lo, hi = math.Min(lo, pt.X), math.Max(hi, pt.X)
			ylo, yhi = math.Min(ylo, pt.Y), math.Max(yhi, pt.Y)
		}
	}
	// Room around the outermost markers; a log axis also needs a
	// positive range with a single point.
	if c.LogX {
		p.X.Min, p.X.Max = lo/2, hi*2
	} else {
		pad := math.Max((hi-lo)*0.05, 0.05)
		p.X.Min, p.X.Max = lo-pad, hi+pad
	}
	if c.LogY {
		// Whole decades, so both ends carry a labelled tick.
		p.Y.Min, p.Y.Max = math.Pow(10, math.Floor(math.Log10(ylo))), math.Pow(10, math.Ceil(math.Log10(yhi*1.1)))
	} else {
		pad := math.Max((yhi-ylo)*0.08, 0.5)
		p.Y.Min, p.Y.Max = ylo-pad, yhi+pad
		if c.YMin != nil {
			p.Y.Min = *c.YMin
		}
		if c.YMax != nil {
			p.Y.Max = math.Max(p.Y.Max, *c.YMax)
		}
	}

	// The legend gets its own column right of the plot.
	legend := p.Legend
	legend.Top, legend.Left = true, true
	legend.ThumbnailWidth = vg.Points(28)
	p.Legend = plot.NewLegend()
	w, h, lw := 11*vg.Inch, 5.5*vg.Inch, 2.9*vg.Inch
	if c.LegendW > lw {
		w, lw = w+c.LegendW-lw, c.LegendW
	}
	for _, ext := range []string{"png", "svg"} {
		cv, err := draw.NewFormattedCanvas(w, h, ext)
		if err != nil {
			return err
		}
		dc := draw.New(cv)
		p.Draw(draw.Crop(dc, vg.Points(4), -lw, vg.Points(4), -vg.Points(6)))
		legend.Draw(draw.Crop(dc, w-lw+vg.Points(4), 0, 0, -vg.Points(24)))
		if err := writeCanvas(filepath.Join(dir, name+"."+ext), cv); err != nil {
			return err
		}
	}
	return nil
}

func key(l Line) string {
	if l.Like != "" {
		return l.Like
	}
	return l.Name
}

func writeCanvas(path string, cv vg.CanvasWriterTo) (err error) {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("writing figure: %w", err)
	}
	defer func() {
		if e := f.Close(); err == nil {
			err = e
		}
	}()
	if _, err := cv.WriteTo(f); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// countTicks labels a log axis of counts as 1, 10, 100, 1K, 10K, 1M
// rather than 1e+06.
type countTicks struct{}

func (countTicks) Ticks(min, max float64) []plot.Tick {
	ts := plot.LogTicks{Prec: -1}.Ticks(min, max)
	for i, t := range ts {
		if t.Label == "" {
			continue
		}
		switch v := t.Value; {
		case v >= 1e6:
			ts[i].Label = strconv.FormatFloat(v/1e6, 'f', -1, 64) + "M"
		case v >= 1e3:
			ts[i].Label = strconv.FormatFloat(v/1e3, 'f', -1, 64) + "K"
		default:
			ts[i].Label = strconv.FormatFloat(v, 'f', -1, 64)
		}
	}
	return ts
}
