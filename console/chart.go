package console

import (
	"html/template"
	"strconv"
	"strings"
)

// chart dimensions, in SVG user units.
const (
	chartW = 720
	chartH = 160
	chartP = 4 // padding
)

// outcomeColors gives each outcome its stroke; others are grey.
var outcomeColors = map[string]string{
	"allowed": "#2a7", "limited": "#d33", "banned": "#a0a", "shadow_limited": "#e90",
	"error": "#555", "fallback": "#36c", "saturated": "#c60", "client_gone": "#999", "unauthorized": "#884",
}

// chart draws rates as one polyline per outcome over the span, scaled to
// the largest rate, as inline SVG. Every number is formatted here and the
// outcome names are ginlimit's constants, escaped all the same: nothing a
// client chose reaches it.
func chart(rates []rate) template.HTML {
	peak := 0.0
	for _, r := range rates {
		for _, v := range r.PerSec {
			peak = max(peak, v)
		}
	}
	var b strings.Builder
	b.WriteString(`<svg class="chart" role="img" viewBox="0 0 ` + strconv.Itoa(chartW) + ` ` + strconv.Itoa(chartH) + `" xmlns="http://www.w3.org/2000/svg">`)
	b.WriteString(`<title>decisions per second by outcome, last 15 minutes; peak ` + strconv.FormatFloat(peak, 'f', 1, 64) + `/s</title>`)
	b.WriteString(`<rect class="frame" x="0" y="0" width="` + strconv.Itoa(chartW) + `" height="` + strconv.Itoa(chartH) + `"/>`)
	if peak > 0 {
		for _, r := range rates {
			color, ok := outcomeColors[r.Outcome]
			if !ok {
				color = "#777"
			}
			b.WriteString(`<polyline fill="none" stroke="` + color + `" stroke-width="1.5" data-outcome="` + template.HTMLEscapeString(r.Outcome) + `" points="`)
			n := len(r.PerSec)
			for i, v := range r.PerSec {
				x := chartP + float64(i)*float64(chartW-2*chartP)/float64(max(n-1, 1))
				y := float64(chartH-chartP) - v/peak*float64(chartH-2*chartP)
				b.WriteString(strconv.FormatFloat(x, 'f', 1, 64) + "," + strconv.FormatFloat(y, 'f', 1, 64) + " ")
			}
			b.WriteString(`"/>`)
		}
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) //nolint:gosec // built above from numbers and escaped names only
}
