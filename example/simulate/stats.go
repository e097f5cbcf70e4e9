package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// maxInSpan returns the most times, of the sorted times at, that fall in one
// half-open span [x, x+span), and the x of the first span that holds them.
// It is the largest number the window (t-span, t] held at any moment t.
func maxInSpan(at []time.Duration, span time.Duration) (n int, start time.Duration) {
	lo := 0
	for hi, t := range at {
		for at[lo] <= t-span {
			lo++
		}
		if hi-lo+1 > n {
			n, start = hi-lo+1, at[lo]
		}
	}
	return n, start
}

// step is one point of a step function: its value from At on.
type step struct {
	At    time.Duration
	Value int
}

// trailing returns, as a step function starting at 0, how many of the sorted
// times at fall in the window (t-span, t] at each moment t: each time adds
// one at t and removes it at t+span.
func trailing(at []time.Duration, span time.Duration) []step {
	type change struct {
		at    time.Duration
		delta int
	}
	changes := make([]change, 0, 2*len(at))
	for _, t := range at {
		changes = append(changes, change{t, +1}, change{t + span, -1})
	}
	slices.SortStableFunc(changes, func(a, b change) int { return int(a.at - b.at) })
	steps := []step{{At: 0, Value: 0}}
	v := 0
	for _, c := range changes {
		v += c.delta
		if last := &steps[len(steps)-1]; last.At == c.at {
			last.Value = v
		} else {
			steps = append(steps, step{At: c.at, Value: v})
		}
	}
	return steps
}

// bin is the outcomes of one slice of a timeline.
type bin struct {
	Admitted, Rejected int
}

// bins counts outcomes per slice of width each over [0, length).
func bins(outcomes []Outcome, width, length time.Duration) []bin {
	bs := make([]bin, (length+width-1)/width)
	for _, o := range outcomes {
		i := int(o.At / width)
		if i < 0 || i >= len(bs) {
			continue
		}
		if o.Allowed {
			bs[i].Admitted++
		} else {
			bs[i].Rejected++
		}
	}
	return bs
}

// WriteTable prints the totals of results as an aligned text table.
func WriteTable(w io.Writer, tl Timeline, results []Result) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%d requests over %v; rule: %d per %v\n\n", len(tl.Requests), tl.Length, Limit, Window)
	fmt.Fprintf(&b, "%-16s %8s %8s %14s %9s\n", "algorithm", "admitted", "rejected", "max in any 1 s", "from")
	for _, r := range results {
		fmt.Fprintf(&b, "%-16s %8d %8d %14d %8.3fs\n", r.Kind, r.Admitted, r.Rejected, r.MaxInWindow, r.MaxAt.Seconds())
	}
	_, err := io.WriteString(w, b.String())
	return err
}
