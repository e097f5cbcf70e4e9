package main

import (
	"fmt"
	"html"
	"strings"
	"time"
)

// The chart's geometry, in SVG user units (pixels at 100 %).
const (
	chartWidth = 900
	plotLeft   = 196 // the time axis runs from plotLeft to plotRight
	plotRight  = 884
	labelLeft  = 16 // lane labels start here

	phaseTop   = 92  // the phase labels and backgrounds start here
	lanesTop   = 132 // the first lane starts here
	barsHeight = 54  // requests per bin
	lineGap    = 6   // between the bars and the trailing-count strip
	lineHeight = 38  // admitted in the last window
	laneGap    = 20  // between lanes

	binWidth = 100 * time.Millisecond
)

// The chart's colours.
const (
	colAdmitted = "#2f9e57"
	colRejected = "#d9463e"
	colText     = "#1f2328"
	colMuted    = "#656d76"
	colGrid     = "#c6ccd4"
	colBand     = "#f3f5f8"
)

// RenderSVG draws results of the timeline tl as a standalone SVG document,
// about 900 px wide: one lane per algorithm with its requests per 100 ms
// (admitted and rejected stacked) and how many it admitted in the last
// window, against the limit; a shared time axis with the window boundaries;
// a legend; and each algorithm's totals.
func RenderSVG(tl Timeline, results []Result) []byte {
	c := &canvas{length: tl.Length}
	laneHeight := barsHeight + lineGap + lineHeight
	axisY := lanesTop + len(results)*(laneHeight+laneGap) - laneGap + 6
	zoomTop := axisY + 50
	footerY := zoomTop + zoomHeight(len(results)) + 22
	height := footerY + 16

	binMax, lineMax := scales(tl, results)
	c.f(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, 'DejaVu Sans', sans-serif" fill="%s">`+"\n",
		chartWidth, height, chartWidth, height, colText)
	c.f(`<title>ginlimit algorithms: one bursty timeline, limit %d per %v</title>`+"\n", Limit, Window)
	c.f(`<rect width="100%%" height="100%%" fill="#ffffff"/>` + "\n")

	// Title and legend.
	c.text(labelLeft, 30, "start", `font-size="19" font-weight="bold"`, "One bursty timeline through ginlimit's four algorithms")
	c.text(labelLeft, 51, "start", `font-size="12.5" fill="`+colMuted+`"`,
		fmt.Sprintf("Rule: %d requests per %s, one client. %d requests over %s; the Redis clock is moved to each arrival (miniredis SetTime).",
			Limit, seconds(Window), len(tl.Requests), seconds(tl.Length)))
	c.legend(labelLeft, 74)

	c.phases(tl, axisY)
	c.axis(tl, axisY, footerY)

	for i, r := range results {
		c.lane(i, lanesTop+i*(laneHeight+laneGap), r, tl, binMax, lineMax)
	}
	c.zoom(zoomTop, tl, results)
	c.f("</svg>\n")
	return []byte(c.b.String())
}

// scales returns the bars' scale, shared by every lane (the busiest bin,
// rounded up to tens), and the trailing counts' (up to twice the limit, or
// more if needed).
func scales(tl Timeline, results []Result) (binMax, lineMax int) {
	binMax = 10
	for _, r := range results {
		for _, b := range bins(r.Outcomes, binWidth, tl.Length) {
			binMax = max(binMax, (b.Admitted+b.Rejected+9)/10*10)
		}
	}
	lineMax = 2 * Limit
	for _, r := range results {
		lineMax = max(lineMax, r.MaxInWindow)
	}
	return binMax, lineMax
}

// phases draws the phase bands and labels, behind everything else, down
// to axisY.
func (c *canvas) phases(tl Timeline, axisY int) {
	for i, p := range tl.Phases {
		x0, x1 := c.x(p.Start), c.x(p.End)
		if i%2 == 0 {
			c.f(`<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", x0, phaseTop, x1-x0, axisY-phaseTop, colBand)
		}
		mid := (x0 + x1) / 2
		c.text(mid, phaseTop+15, "middle", `font-size="12" font-weight="bold"`, p.Name)
		c.text(mid, phaseTop+29, "middle", `font-size="10.5" fill="`+colMuted+`"`, p.Detail)
	}
}

// axis draws the window boundaries, the time axis at axisY and the
// footnote at footerY.
func (c *canvas) axis(tl Timeline, axisY, footerY int) {
	c.f(`<g stroke="%s" stroke-width="1">`+"\n", colGrid)
	for t := time.Duration(0); t <= tl.Length; t += Window {
		c.f(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d"/>`+"\n", c.x(t), lanesTop-6, c.x(t), axisY+4)
	}
	c.f("</g>\n")
	c.f(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s"/>`+"\n", plotLeft, axisY, plotRight, axisY, colMuted)
	for t := time.Duration(0); t <= tl.Length; t += Window {
		c.text(c.x(t), float64(axisY+16), "middle", `font-size="11" fill="`+colMuted+`"`, seconds(t))
	}
	c.text(labelLeft, float64(axisY+16), "start", `font-size="11" fill="`+colMuted+`"`, "time")
	c.text(labelLeft, float64(footerY), "start", `font-size="11" fill="`+colMuted+`"`,
		"Gray lines: window boundaries, where each fixed window starts. Dots: the first moment of each algorithm's most admitted in 1 s.")
}

// canvas accumulates an SVG document.
type canvas struct {
	b      strings.Builder
	length time.Duration
}

func (c *canvas) f(format string, args ...any) { fmt.Fprintf(&c.b, format, args...) }

// x maps a time of the timeline to its horizontal position.
func (c *canvas) x(t time.Duration) float64 {
	return plotLeft + float64(t)/float64(c.length)*(plotRight-plotLeft)
}

// text writes s at (x, y) with the given anchor and extra attributes.
func (c *canvas) text(x, y float64, anchor, attrs, s string) {
	c.f(`<text x="%.1f" y="%.1f" text-anchor="%s" %s>%s</text>`+"\n", x, y, anchor, attrs, esc(s))
}

// legend draws the key to the marks, starting at (x, y).
func (c *canvas) legend(x, y float64) {
	muted := `font-size="11.5" fill="` + colMuted + `"`
	c.f(`<rect x="%.1f" y="%.1f" width="10" height="10" fill="%s"/>`+"\n", x, y-9, colAdmitted)
	c.text(x+14, y, "start", muted, "admitted")
	x += 76
	c.f(`<rect x="%.1f" y="%.1f" width="10" height="10" fill="%s"/>`+"\n", x, y-9, colRejected)
	c.text(x+14, y, "start", muted, "rejected (bars: requests per 100 ms)")
	x += 236
	c.f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"/>`+"\n", x, y-4, x+18, y-4, colAdmitted)
	c.f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"/>`+"\n", x+18, y-4, x+28, y-4, colRejected)
	c.text(x+34, y, "start", muted, "admitted in the last 1 s (red above the limit)")
	x += 300
	c.f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1.2" stroke-dasharray="4 3"/>`+"\n", x, y-4, x+24, y-4, colText)
	c.text(x+30, y, "start", muted, fmt.Sprintf("limit (%d)", Limit))
}

// lane draws result r as lane i, whose top is at y.
func (c *canvas) lane(i, y int, r Result, tl Timeline, binMax, lineMax int) {
	fy := float64(y)
	c.laneLabel(fy, r)
	base := c.bars(fy, bins(r.Outcomes, binWidth, tl.Length), binMax)
	c.trailingCount(i, base+lineGap, r, tl, lineMax)
}

// laneLabel draws the label column of r's lane, whose top is at fy: name,
// setting, totals.
func (c *canvas) laneLabel(fy float64, r Result) {
	c.text(labelLeft, fy+13, "start", `font-size="14" font-weight="bold"`, r.Title)
	c.text(labelLeft, fy+28, "start", `font-size="11" fill="`+colMuted+`"`, r.Note)
	maxCol := colAdmitted
	if r.MaxInWindow > Limit {
		maxCol = colRejected
	}
	for j, row := range []struct {
		n          int
		col, label string
	}{
		{r.Admitted, colAdmitted, " admitted"},
		{r.Rejected, colRejected, " rejected"},
		{r.MaxInWindow, maxCol, " max in any 1 s"},
	} {
		c.f(`<text x="%d" y="%.1f" font-size="12" fill="%s"><tspan font-weight="bold" fill="%s">%d</tspan>%s</text>`+"\n",
			labelLeft, fy+50+float64(j)*16, colMuted, row.col, row.n, esc(row.label))
	}
}

// bars draws the bins bs of a lane whose top is at fy, admitted at the
// bottom and rejected stacked on top, and returns the bars' base line.
func (c *canvas) bars(fy float64, bs []bin, binMax int) float64 {
	scale := float64(barsHeight) / float64(binMax)
	base := fy + barsHeight
	w := c.x(binWidth) - c.x(0)
	c.f(`<g shape-rendering="crispEdges">` + "\n")
	for j, b := range bs {
		x := c.x(time.Duration(j)*binWidth) + 0.5
		ha, hr := float64(b.Admitted)*scale, float64(b.Rejected)*scale
		if b.Admitted > 0 {
			c.f(`<rect x="%.2f" y="%.2f" width="%.2f" height="%.2f" fill="%s"/>`+"\n", x, base-ha, w-1, ha, colAdmitted)
		}
		if b.Rejected > 0 {
			c.f(`<rect x="%.2f" y="%.2f" width="%.2f" height="%.2f" fill="%s"/>`+"\n", x, base-ha-hr, w-1, hr, colRejected)
		}
	}
	c.f(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s"/>`+"\n", plotLeft, base, plotRight, base, colMuted)
	c.f("</g>\n")
	c.text(plotLeft-5, fy+8, "end", `font-size="10" fill="`+colMuted+`"`, fmt.Sprintf("%d", binMax))
	return base
}

// trailingCount draws r's admitted in the last window, in lane i from top
// down: green up to the limit and red above it, with a dot at the first
// moment the count peaked.
func (c *canvas) trailingCount(i int, top float64, r Result, tl Timeline, lineMax int) {
	bottom := top + lineHeight
	ly := func(v int) float64 { return bottom - float64(v)/float64(lineMax)*lineHeight }
	limitY := ly(Limit)
	c.f(`<rect x="%d" y="%.1f" width="%d" height="%d" fill="#ffffff" fill-opacity="0.7"/>`+"\n", plotLeft, top, plotRight-plotLeft, lineHeight)
	c.f(`<clipPath id="below%d"><rect x="%d" y="%.1f" width="%d" height="%.1f"/></clipPath>`+"\n", i, plotLeft-2, limitY-1, plotRight-plotLeft+4, bottom-limitY+3)
	c.f(`<clipPath id="above%d"><rect x="%d" y="%.1f" width="%d" height="%.1f"/></clipPath>`+"\n", i, plotLeft-2, top-3, plotRight-plotLeft+4, limitY-1-(top-3))
	path := c.stepPath(trailing(r.Admissions(), Window), tl.Length, ly)
	c.f(`<path d="%s V%.1f H%d Z" fill="%s" fill-opacity="0.14" stroke="none"/>`+"\n", path, bottom, plotLeft, colAdmitted)
	c.f(`<path d="%s" fill="none" stroke="%s" stroke-width="1.6" stroke-linejoin="round" clip-path="url(#below%d)"/>`+"\n", path, colAdmitted, i)
	c.f(`<path d="%s" fill="none" stroke="%s" stroke-width="1.6" stroke-linejoin="round" clip-path="url(#above%d)"/>`+"\n", path, colRejected, i)
	c.f(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s" stroke-width="1.2" stroke-dasharray="4 3"/>`+"\n", plotLeft, limitY, plotRight, limitY, colText)
	c.f(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s"/>`+"\n", plotLeft, bottom, plotRight, bottom, colMuted)
	c.text(plotLeft-5, limitY+3.5, "end", `font-size="10" fill="`+colMuted+`"`, fmt.Sprintf("%d", Limit))
	c.text(plotLeft-5, top+7, "end", `font-size="10" fill="`+colMuted+`"`, fmt.Sprintf("%d", lineMax))
	for _, s := range trailing(r.Admissions(), Window) {
		if s.Value == r.MaxInWindow {
			col := colAdmitted
			if s.Value > Limit {
				col = colRejected
			}
			c.f(`<circle cx="%.1f" cy="%.1f" r="3" fill="%s" stroke="#ffffff" stroke-width="1"/>`+"\n", c.x(s.At), ly(s.Value), col)
			break
		}
	}
}

// stepPath returns the SVG path data of the step function steps over
// [0, length], with values mapped by ly.
func (c *canvas) stepPath(steps []step, length time.Duration, ly func(int) float64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "M%.1f %.1f", c.x(0), ly(0))
	for _, s := range steps {
		if s.At > length {
			break
		}
		fmt.Fprintf(&b, " H%.1f V%.1f", c.x(s.At), ly(s.Value))
	}
	fmt.Fprintf(&b, " H%.1f", c.x(length))
	return b.String()
}

// seconds formats d as "5 s" or "4.5 s".
func seconds(d time.Duration) string {
	return strings.TrimSuffix(fmt.Sprintf("%.1f", d.Seconds()), ".0") + " s"
}

// esc escapes s for XML text and attribute values.
func esc(s string) string { return html.EscapeString(s) }

// The zoom on the burst: one row of ticks per algorithm.
const (
	zoomRow    = 21 // between rows
	zoomMargin = 20 * time.Millisecond
)

// zoomHeight is the height of the zoom panel for n algorithms, heading and
// axis included.
func zoomHeight(n int) int { return 26 + n*zoomRow + 22 }

// zoom draws every request of the burst at the window boundary, and a
// little around it, as one tick per request and algorithm: green when
// admitted, red when rejected. Its top is at y.
func (c *canvas) zoom(y int, tl Timeline, results []Result) {
	from, to := tl.Burst.Start-zoomMargin, tl.Burst.End+zoomMargin
	x := func(t time.Duration) float64 {
		return plotLeft + float64(t-from)/float64(to-from)*(plotRight-plotLeft)
	}
	muted := `font-size="11" fill="` + colMuted + `"`
	fy := float64(y)
	c.text(labelLeft, fy, "start", `font-size="14" font-weight="bold"`, "Zoom on the burst")
	c.text(labelLeft, fy+17, "start", muted,
		fmt.Sprintf("%s to %s, one tick per request: %d requests in the 50 ms before the window boundary at 5 s, %d in the 50 ms after. Left: how many each admitted.",
			secondsMs(from), secondsMs(to), Limit, Limit))

	rowsTop := fy + 26
	bottom := rowsTop + float64(len(results)*zoomRow)
	// The window boundary in the middle of the burst.
	mid := (tl.Burst.Start + tl.Burst.End) / 2
	c.f(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n", x(tl.Burst.Start), rowsTop, x(mid)-x(tl.Burst.Start), bottom-rowsTop, colBand)
	c.f(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n", x(mid), rowsTop, x(tl.Burst.End)-x(mid), bottom-rowsTop, "#e9edf2")
	c.f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1.5"/>`+"\n", x(mid), rowsTop-2, x(mid), bottom+4, colMuted)

	for i, r := range results {
		c.zoomRow(rowsTop+float64(i*zoomRow), r, tl, from, to, x)
	}
	c.zoomAxis(bottom, from, to, x)
}

// zoomRow draws r's row of the zoom, whose top is at ry: a tick per
// request from from to to, placed by x, and how many of the burst's it
// admitted.
func (c *canvas) zoomRow(ry float64, r Result, tl Timeline, from, to time.Duration, x func(time.Duration) float64) {
	admitted, total := 0, 0
	c.f(`<g stroke-width="2.2">` + "\n")
	for _, o := range r.Outcomes {
		if o.At < from || o.At >= to {
			continue
		}
		col := colRejected
		if o.Allowed {
			col = colAdmitted
		}
		if o.At >= tl.Burst.Start && o.At < tl.Burst.End {
			total++
			if o.Allowed {
				admitted++
			}
		}
		c.f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`+"\n", x(o.At), ry+4, x(o.At), ry+zoomRow-3, col)
	}
	c.f("</g>\n")
	c.text(labelLeft, ry+15, "start", `font-size="12"`, r.Title)
	col := colAdmitted
	if admitted > Limit {
		col = colRejected
	}
	c.f(`<text x="%d" y="%.1f" font-size="12" fill="%s" text-anchor="end"><tspan font-weight="bold" fill="%s">%d</tspan> of %d</text>`+"\n",
		plotLeft-8, ry+15, colMuted, col, admitted, total)
}

// zoomAxis draws the zoom's time axis at bottom, from from to to, placed
// by x: a tick each 10 ms, labelled each 50 ms.
func (c *canvas) zoomAxis(bottom float64, from, to time.Duration, x func(time.Duration) float64) {
	muted := `font-size="11" fill="` + colMuted + `"`
	c.f(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s"/>`+"\n", plotLeft, bottom, plotRight, bottom, colMuted)
	for t := from.Truncate(10 * time.Millisecond); t <= to; t += 10 * time.Millisecond {
		if t < from {
			continue
		}
		tick := 3.0
		if t%(50*time.Millisecond) == 0 {
			tick = 6
			c.text(x(t), bottom+18, "middle", muted, secondsMs(t))
		}
		c.f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`+"\n", x(t), bottom, x(t), bottom+tick, colMuted)
	}
}

// secondsMs formats d as "4.950 s".
func secondsMs(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }
