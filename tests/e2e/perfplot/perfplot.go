// Package perfplot draws the results of make e2e-perf as an SVG picture
// for the docs: for each burst of N claims (or pods) created at once, how
// many of them had become Bound (or Running) t seconds after the burst
// started, one line per storage driver.
//
// Each panel is a cumulative count over time: a step line per series that
// starts at (0, 0) and goes up by one at each object's completion time, so
// a line that rises early and steeply is a fast driver, the x at which it
// reaches its top is the time the whole burst took, and a line that ends
// below the others is a burst that did not finish. The series of a panel
// share its axes so they can be compared at a glance; panels do not share
// axes with each other, as their bursts can differ by orders of magnitude.
//
// Both axes end at a "nice" number, the smallest 1, 2 or 5 × 10^k at or
// above the data (362 s → 500 s, not 400 s: rounding up keeps every line
// inside the frame). The count axis ends at 5 or more so its ticks are
// whole objects. Lines differ in colour (a colour-blind-friendly palette)
// and in dash pattern, so the picture still reads printed in grey.
//
// The output depends only on the input, byte for byte, so a rerun with the
// same figures leaves the committed picture unchanged.
package perfplot

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Series is one line: the times, since its burst started, at which each
// object of the burst reached its state (order does not matter).
type Series struct {
	Name  string
	Times []time.Duration
}

// Panel is one chart: a title (e.g. "50 claims at once: Bound") and its
// series, drawn on shared axes.
type Panel struct {
	Title  string
	Series []Series
}

// The geometry of one panel, in SVG user units. Every panel has the same
// size whatever its data, so the picture's size depends only on the number
// of panels and a docs page can reserve its space.
const (
	width       = 960 // the whole picture's width
	panelHeight = 320 // each panel's height; the picture's is panels × this

	plotLeft   = 64  // room for the count labels and the "done" caption
	plotTop    = 40  // room for the panel's title
	plotWidth  = 560 // the frame the lines are drawn in
	plotHeight = 220 // leaves 60 below the frame for tick labels and "seconds"
	plotRight  = plotLeft + plotWidth
	plotBottom = plotTop + plotHeight

	legendLeft = plotRight + 24 // the legend sits right of the frame, never over a line
	legendRow  = 20
	legendKey  = 28 // the length of the line sample before each legend entry

	minCount = 5 // the count axis's least end, so that its ticks are whole objects
)

// palette is the Okabe–Ito colours without yellow (too pale on white) and
// black (reserved for the axes); they stay apart under the common forms of
// colour blindness.
var palette = []string{"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9"}

// dashes are stroke-dasharray values, "" for solid; they tell the lines
// apart where colour cannot (grey print) and show a line that another one
// exactly covers.
var dashes = []string{"", "8 4", "2 3", "10 3 2 3", "14 5", "4 2 1 2"}

// style is the colour and dash pattern of the i-th series of a panel. Past
// the palette's end the dash shifts, so the first 36 series all differ.
func style(i int) (colour, dash string) {
	return palette[i%len(palette)], dashes[(i+i/len(palette))%len(dashes)]
}

// WriteSVG writes the panels, stacked top to bottom, as one standalone SVG
// document. It checks every panel before writing, so on a bad input (no
// panels, a negative time) nothing is written; otherwise it returns w's
// error.
func WriteSVG(w io.Writer, panels []Panel) error {
	if len(panels) == 0 {
		return errors.New("perfplot: no panels")
	}
	for _, p := range panels {
		for _, s := range p.Series {
			for _, t := range s.Times {
				if t < 0 {
					return fmt.Errorf("perfplot: panel %q, series %q: negative time %v", p.Title, s.Name, t)
				}
			}
		}
	}
	var b bytes.Buffer
	height := len(panels) * panelHeight
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?>` + "\n")
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		width, height, width, height)
	fmt.Fprintf(&b, `<rect x="0" y="0" width="%d" height="%d" fill="#ffffff"/>`+"\n", width, height)
	for i, p := range panels {
		writePanel(&b, p, i*panelHeight)
	}
	b.WriteString("</svg>\n")
	_, err := w.Write(b.Bytes())
	return err
}

// writePanel draws one panel with its top edge at y = top.
func writePanel(b *bytes.Buffer, p Panel, top int) {
	var tmax time.Duration
	count := 0
	for _, s := range p.Series {
		count = max(count, len(s.Times))
		if len(s.Times) > 0 {
			tmax = max(tmax, slices.Max(s.Times))
		}
	}
	xs := niceCeil(tmax.Seconds())
	ys := niceCeil(float64(max(count, minCount)))
	xmax, ymax := xs.value(), ys.value()
	// x and y map data coordinates (seconds, objects) to the panel's.
	x := func(sec float64) float64 { return plotLeft + sec/xmax*plotWidth }
	y := func(n float64) float64 { return plotBottom - n/ymax*plotHeight }

	fmt.Fprintf(b, `<g transform="translate(0,%d)">`+"\n", top)
	fmt.Fprintf(b, `<text x="%d" y="24" font-size="15" font-weight="bold">%s</text>`+"\n", plotLeft, escape(p.Title))

	// The grid first, so that the lines are drawn over it.
	for _, tk := range xs.ticks() {
		px := coord(x(tk.v))
		fmt.Fprintf(b, `<line x1="%s" y1="%d" x2="%s" y2="%d" stroke="#e0e0e0"/>`+"\n", px, plotTop, px, plotBottom)
		fmt.Fprintf(b, `<text x="%s" y="%d" text-anchor="middle">%s</text>`+"\n", px, plotBottom+16, tk.label)
	}
	for _, tk := range ys.ticks() {
		py := coord(y(tk.v))
		fmt.Fprintf(b, `<line x1="%d" y1="%s" x2="%d" y2="%s" stroke="#e0e0e0"/>`+"\n", plotLeft, py, plotRight, py)
		fmt.Fprintf(b, `<text x="%d" y="%s" dy="0.32em" text-anchor="end">%s</text>`+"\n", plotLeft-6, py, tk.label)
	}
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#000000"/>`+"\n", plotLeft, plotTop, plotWidth, plotHeight)
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="middle">seconds</text>`+"\n", plotLeft+plotWidth/2, plotBottom+38)
	fmt.Fprintf(b, `<text x="0" y="0" transform="translate(18,%d) rotate(-90)" text-anchor="middle">done</text>`+"\n", plotTop+plotHeight/2)

	// The frame's end in time, rounded to the nanosecond: it is a nice
	// number of seconds, so it is exact but for a float's last bit.
	end := time.Duration(math.Round(xmax * float64(time.Second)))
	for i, s := range p.Series {
		colour, dash := style(i)
		var d strings.Builder
		for j, pt := range steps(s.Times, end) {
			cmd := "L"
			if j == 0 {
				cmd = "M"
			}
			fmt.Fprintf(&d, "%s%s %s ", cmd, coord(x(pt.t.Seconds())), coord(y(float64(pt.n))))
		}
		// The <title> names the line in a browser's tooltip.
		fmt.Fprintf(b, `<path class="series" d="%s" fill="none" stroke="%s" stroke-width="2"%s><title>%s</title></path>`+"\n",
			strings.TrimSpace(d.String()), colour, dashAttr(dash), escape(s.Name))

		ly := plotTop + 12 + i*legendRow
		fmt.Fprintf(b, `<line class="legend-key" x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"%s/>`+"\n",
			legendLeft, ly, legendLeft+legendKey, ly, colour, dashAttr(dash))
		fmt.Fprintf(b, `<text x="%d" y="%d" dy="0.32em">%s</text>`+"\n", legendLeft+legendKey+6, ly, escape(legend(s)))
	}
	b.WriteString("</g>\n")
}

// legend is a series' legend entry: its name, how many objects it counts
// and when the last of them was done, e.g. "pillar-csi (50 in 362.0 s)".
func legend(s Series) string {
	if len(s.Times) == 0 {
		return s.Name + " (0)"
	}
	return fmt.Sprintf("%s (%d in %.1f s)", s.Name, len(s.Times), slices.Max(s.Times).Seconds())
}

// dashAttr is the stroke-dasharray attribute for dash, none for solid.
func dashAttr(dash string) string {
	if dash == "" {
		return ""
	}
	return ` stroke-dasharray="` + dash + `"`
}

// coord formats an SVG coordinate: two decimals are finer than a pixel at
// any sensible zoom, and a fixed format keeps the output deterministic.
func coord(v float64) string {
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// escape makes s safe as XML character data or attribute value. Unlike
// html.EscapeString it also replaces characters XML forbids (e.g. NUL),
// which would otherwise make the whole picture unreadable.
func escape(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s)) // a strings.Builder does not fail
	return b.String()
}

// point is a corner of a step line in data coordinates: n objects done at
// time t.
type point struct {
	t time.Duration
	n int
}

// steps is the corners of the step line of times: from (0, 0), for each
// distinct time in order a horizontal run to it and then a rise by the
// number of objects done at that time (several at once rise once, not in
// zero-length steps), then flat on to xmax if that is later than the last
// time. times is not modified.
func steps(times []time.Duration, xmax time.Duration) []point {
	sorted := slices.Sorted(slices.Values(times))
	pts := []point{{0, 0}}
	for i, t := range sorted {
		if i+1 < len(sorted) && sorted[i+1] == t {
			continue // the last of equal times makes the whole rise
		}
		if last := pts[len(pts)-1]; t > last.t {
			pts = append(pts, point{t, last.n})
		}
		pts = append(pts, point{t, i + 1})
	}
	if last := pts[len(pts)-1]; xmax > last.t {
		pts = append(pts, point{xmax, last.n})
	}
	return pts
}

// nice is a number mant × 10^exp with mant in {1, 2, 5}. Keeping it as
// integers, not a float, lets the ticks be computed and labelled without
// drift (0.6, not 0.6000000000000001).
type nice struct {
	mant, exp int
}

// niceCeil is the smallest nice number at or above v; 1 for v ≤ 0, so
// that an empty or instant panel still has an axis to draw. It rounds up
// rather than to the nearest so that no line leaves the frame.
func niceCeil(v float64) nice {
	if !(v > 0) || math.IsInf(v, 0) {
		return nice{1, 0}
	}
	// Log10 can be off by one ulp near powers of ten; the loops set it right
	// so that 10^e ≤ v < 10^(e+1).
	e := int(math.Floor(math.Log10(v)))
	for (nice{1, e}).value() > v {
		e--
	}
	for (nice{1, e + 1}).value() <= v {
		e++
	}
	for _, m := range []int{1, 2, 5} {
		if (nice{m, e}).value() >= v {
			return nice{m, e}
		}
	}
	return nice{1, e + 1}
}

// value is n as a float: mant × 10^exp, correctly rounded.
func (n nice) value() float64 {
	return scaled(n.mant, n.exp)
}

// scaled is m × 10^e correctly rounded, as strconv would parse it;
// dividing for a negative e, rather than multiplying by 10^e, which is
// itself inexact, gives 0.6 for (6, -1) and not 0.6000000000000001.
func scaled(m, e int) float64 {
	if e >= 0 {
		return float64(m) * math.Pow10(e)
	}
	return float64(m) / math.Pow10(-e)
}

// tick is an axis tick: its value and its label.
type tick struct {
	v     float64
	label string
}

// ticks divides the axis from 0 to n into equal steps of 0.2, 0.5 or
// 1 × 10^exp for mant 1, 2 or 5: 6, 5 or 6 ticks, each a short round
// number.
func (n nice) ticks() []tick {
	// The step is stepMant × 10^(n.exp-1), so the axis is intervals steps.
	var stepMant, intervals int
	switch n.mant {
	case 1:
		stepMant, intervals = 2, 5
	case 2:
		stepMant, intervals = 5, 4
	default:
		stepMant, intervals = 10, 5
	}
	ts := make([]tick, 0, intervals+1)
	for i := range intervals + 1 {
		v := scaled(i*stepMant, n.exp-1)
		ts = append(ts, tick{v, strconv.FormatFloat(v, 'f', -1, 64)})
	}
	return ts
}
