package main

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ginlimit/ginlimit/ginlimit"
)

// simulate runs the default timeline and returns it with the results by
// algorithm.
func simulate(t *testing.T) (Timeline, []Result, map[ginlimit.AlgorithmKind]Result) {
	t.Helper()
	tl := NewTimeline(DefaultSeed)
	results, err := Simulate(t.Context(), tl)
	if err != nil {
		t.Fatalf("Simulate: %v", err)
	}
	by := make(map[ginlimit.AlgorithmKind]Result)
	for _, r := range results {
		by[r.Kind] = r
	}
	return tl, results, by
}

// admittedIn counts r's admissions in [from, to).
func admittedIn(r Result, from, to time.Duration) int {
	n := 0
	for _, o := range r.Outcomes {
		if o.Allowed && o.At >= from && o.At < to {
			n++
		}
	}
	return n
}

func TestTimeline(t *testing.T) {
	t.Parallel()
	tl := NewTimeline(DefaultSeed)
	if again := NewTimeline(DefaultSeed); !slices.Equal(tl.Requests, again.Requests) {
		t.Fatal("the same seed gave two timelines")
	}
	if !slices.IsSorted(tl.Requests) {
		t.Error("requests are not in order")
	}
	if tl.Requests[0] < 0 || tl.Requests[len(tl.Requests)-1] >= tl.Length {
		t.Errorf("requests from %v to %v, want within [0, %v)", tl.Requests[0], tl.Requests[len(tl.Requests)-1], tl.Length)
	}
	mid := (tl.Burst.Start + tl.Burst.End) / 2
	if mid%Window != 0 {
		t.Errorf("the burst is centred on %v, not on a window boundary", mid)
	}
	count := func(from, to time.Duration) int {
		n := 0
		for _, r := range tl.Requests {
			if r >= from && r < to {
				n++
			}
		}
		return n
	}
	if b, a := count(tl.Burst.Start, mid), count(mid, tl.Burst.End); b != Limit || a != Limit {
		t.Errorf("burst: %d requests before the boundary and %d after, want %d and %d", b, a, Limit, Limit)
	}
	if n := count(10*time.Second, 11*time.Second); n != 200 {
		t.Errorf("flood: %d requests, want 200", n)
	}
	for i, p := range tl.Phases {
		if i > 0 && p.Start != tl.Phases[i-1].End {
			t.Errorf("phase %d starts at %v, the previous ends at %v", i, p.Start, tl.Phases[i-1].End)
		}
	}
}

// TestSimulate checks the facts the chart exists to show.
func TestSimulate(t *testing.T) {
	t.Parallel()
	tl, results, by := simulate(t)
	if len(results) != 4 || len(by) != 4 {
		t.Fatalf("%d results for %d algorithms, want 4", len(results), len(by))
	}
	for _, r := range results {
		if len(r.Outcomes) != len(tl.Requests) || r.Admitted+r.Rejected != len(tl.Requests) {
			t.Errorf("%s: %d outcomes, %d admitted + %d rejected, want %d requests", r.Kind, len(r.Outcomes), r.Admitted, r.Rejected, len(tl.Requests))
		}
		if n, _ := maxInSpan(r.Admissions(), Window); n != r.MaxInWindow {
			t.Errorf("%s: MaxInWindow %d, recomputed %d", r.Kind, r.MaxInWindow, n)
		}
		t.Logf("%-16s admitted %3d, rejected %3d, max in any %v: %2d (from %v), in the burst: %2d",
			r.Kind, r.Admitted, r.Rejected, Window, r.MaxInWindow, r.MaxAt, admittedIn(r, tl.Burst.Start, tl.Burst.End))
	}

	// The sliding log never admits more than the limit in any window's
	// length, and the flood fills it.
	if got := by[ginlimit.SlidingLog].MaxInWindow; got != Limit {
		t.Errorf("sliding log: at most %d admitted in one window's length, want exactly the limit %d", got, Limit)
	}
	// The fixed window lets up to twice the limit through across the
	// boundary at the middle of the burst.
	fw := by[ginlimit.FixedWindow]
	if got := admittedIn(fw, tl.Burst.Start, tl.Burst.End); got <= Limit {
		t.Errorf("fixed window: %d admitted in the boundary burst, want more than the limit %d", got, Limit)
	}
	if fw.MaxInWindow <= Limit || fw.MaxInWindow > 2*Limit {
		t.Errorf("fixed window: at most %d in one window's length, want between %d and %d", fw.MaxInWindow, Limit+1, 2*Limit)
	}
	if fw.MaxAt < tl.Burst.Start || fw.MaxAt >= tl.Burst.End {
		t.Errorf("fixed window: its busiest window's length starts at %v, want in the burst [%v, %v)", fw.MaxAt, tl.Burst.Start, tl.Burst.End)
	}
	// The token bucket admits at most its burst in the burst: the burst
	// lasts one token's refill time (Window/Limit), too short for one more.
	if got := admittedIn(by[ginlimit.TokenBucket], tl.Burst.Start, tl.Burst.End); got > Limit {
		t.Errorf("token bucket: %d admitted in the burst, want at most its burst %d", got, Limit)
	}
	// And in any window's length at most burst + refill: twice the limit.
	if got := by[ginlimit.TokenBucket].MaxInWindow; got > 2*Limit {
		t.Errorf("token bucket: %d admitted in one window's length, want at most %d", got, 2*Limit)
	}
	// The sliding counter, like the log, sees the whole burst in its window.
	if got := admittedIn(by[ginlimit.SlidingCounter], tl.Burst.Start, tl.Burst.End); got > Limit {
		t.Errorf("sliding counter: %d admitted in the burst, want at most %d", got, Limit)
	}
}

// TestSubWindowBoundaries replays the sliding counter's worst case: the
// limit at the end of one sub-window and the limit again at the start of the
// sub-window one window later. The counter's window then no longer holds the
// first group, so it admits both, twice the limit within 0.9 of a window;
// the sliding log admits the limit.
func TestSubWindowBoundaries(t *testing.T) {
	t.Parallel()
	tl := Timeline{Length: 2 * Window}
	for range Limit {
		tl.Requests = append(tl.Requests, Window/10-time.Millisecond)
	}
	for range Limit {
		tl.Requests = append(tl.Requests, Window)
	}
	results, err := Simulate(t.Context(), tl)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		t.Logf("%-16s max admitted in one window's length: %d", r.Kind, r.MaxInWindow)
		switch r.Kind {
		case ginlimit.SlidingLog:
			if r.MaxInWindow != Limit {
				t.Errorf("sliding log: %d in one window's length, want %d", r.MaxInWindow, Limit)
			}
		default:
			if r.MaxInWindow > 2*Limit {
				t.Errorf("%s: %d in one window's length, want at most %d", r.Kind, r.MaxInWindow, 2*Limit)
			}
		}
	}
}

func TestMaxInSpan(t *testing.T) {
	t.Parallel()
	ms := func(v ...int) []time.Duration {
		var d []time.Duration
		for _, x := range v {
			d = append(d, time.Duration(x)*time.Millisecond)
		}
		return d
	}
	for _, tt := range []struct {
		at    []time.Duration
		n     int
		start time.Duration
	}{
		{nil, 0, 0},
		{ms(5), 1, 5 * time.Millisecond},
		{ms(0, 999, 1000), 2, 0}, // 1000 is outside [0, 1000)
		{ms(0, 500, 999, 1200, 1300), 4, 500 * time.Millisecond},
		{ms(10, 10, 10), 3, 10 * time.Millisecond},
	} {
		n, start := maxInSpan(tt.at, time.Second)
		if n != tt.n || start != tt.start {
			t.Errorf("maxInSpan(%v) = %d at %v, want %d at %v", tt.at, n, start, tt.n, tt.start)
		}
		// The trailing count peaks at the same number.
		peak := 0
		for _, s := range trailing(tt.at, time.Second) {
			peak = max(peak, s.Value)
		}
		if peak != tt.n {
			t.Errorf("trailing(%v) peaks at %d, want %d", tt.at, peak, tt.n)
		}
	}
}

// TestSVG checks that the chart is well-formed XML with an svg root, one
// lane per algorithm, and the totals.
func TestSVG(t *testing.T) {
	t.Parallel()
	tl, results, _ := simulate(t)
	svg := RenderSVG(tl, results)

	dec := xml.NewDecoder(bytes.NewReader(svg))
	var root string
	var texts strings.Builder
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("the SVG is not well-formed XML: %v", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			if root == "" {
				root = tok.Name.Local
				if tok.Name.Space != "http://www.w3.org/2000/svg" {
					t.Errorf("root namespace %q, want the SVG one", tok.Name.Space)
				}
			}
		case xml.CharData:
			texts.Write(tok)
			texts.WriteByte('\n')
		}
	}
	if root != "svg" {
		t.Errorf("root element %q, want svg", root)
	}
	text := texts.String()
	for _, r := range results {
		for _, want := range []string{r.Title, r.Note} {
			if strings.Count(text, want) < 1 {
				t.Errorf("no %q in the chart's text", want)
			}
		}
	}
	if !strings.Contains(text, "Zoom on the burst") || !strings.Contains(text, "max in any 1 s") {
		t.Errorf("the chart lacks the zoom or the totals; its text:\n%s", text)
	}
}

// TestRun runs the command's work: the chart lands in a folder it creates
// and the table names every algorithm.
func TestRun(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "docs", "sub", "algorithms.svg")
	var stdout bytes.Buffer
	if err := run(t.Context(), out, DefaultSeed, &stdout); err != nil {
		t.Fatalf("run: %v", err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte("<svg ")) {
		t.Errorf("%s starts with %.40q, want <svg", out, b)
	}
	for _, a := range Algorithms() {
		if !strings.Contains(stdout.String(), string(a.Kind)) {
			t.Errorf("the table lacks %s:\n%s", a.Kind, stdout.String())
		}
	}
}
