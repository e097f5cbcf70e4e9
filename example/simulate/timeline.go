package main

import (
	"math/rand/v2"
	"slices"
	"time"
)

// The rule every algorithm enforces in the simulation.
const (
	// Limit is how many requests the rule admits per Window.
	Limit = 10
	// Window is the rule's window. Fixed windows start at whole seconds of
	// the timeline, because the timeline starts at a whole second of the
	// Redis clock (see EpochUnix).
	Window = time.Second
)

// DefaultSeed is the seed of the timeline drawn in docs/algorithms.svg.
const DefaultSeed = 1

// EpochUnix is the Redis time, in Unix seconds, at which every timeline
// starts. It is a whole second, so the fixed window's windows, aligned on
// the Redis clock, begin at 0 s, 1 s, 2 s... of the timeline.
const EpochUnix = 1_800_000_000

// Phase is a named stretch of a timeline with one traffic pattern.
type Phase struct {
	// Name is the phase's short name, the first line of its chart label.
	Name string
	// Detail describes its traffic, the second line of its label.
	Detail string
	// Start and End bound the phase, [Start, End), from the timeline's start.
	Start, End time.Duration
}

// Timeline is a deterministic sequence of request arrival times.
type Timeline struct {
	// Requests are the arrival times from the start, in order, at
	// microsecond precision (the Redis clock's).
	Requests []time.Duration
	// Phases cover the timeline from 0 to Length, in order.
	Phases []Phase
	// Burst is the span of the burst at the window boundary: Limit
	// requests in its first half and Limit in its second, with the
	// boundary in the middle.
	Burst Phase
	// Length is the timeline's duration.
	Length time.Duration
}

// NewTimeline returns the timeline for seed: a quiet start, steady traffic
// below the limit, a burst of 2×Limit requests straddling the window
// boundary at 5 s, steady traffic at twice the limit, a flood of 200
// requests in one second, and a calm end. The same seed always gives the
// same timeline.
func NewTimeline(seed uint64) Timeline {
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	s := func(x float64) time.Duration { return time.Duration(x * float64(time.Second)) }

	tl := Timeline{
		Phases: []Phase{
			{Name: "quiet", Detail: "2 requests", Start: 0, End: s(1)},
			{Name: "steady", Detail: "~6/s, under the limit", Start: s(1), End: s(4)},
			{Name: "burst", Detail: "10 + 10 around 5 s", Start: s(4), End: s(6)},
			{Name: "steady", Detail: "~20/s, twice the limit", Start: s(6), End: s(10)},
			{Name: "flood", Detail: "200 in 1 s", Start: s(10), End: s(11)},
			{Name: "calm", Detail: "~4/s", Start: s(11), End: s(13)},
		},
		Burst:  Phase{Name: "burst", Start: s(4.95), End: s(5.05)},
		Length: s(13),
	}
	add := func(d time.Duration) { tl.Requests = append(tl.Requests, d.Truncate(time.Microsecond)) }
	// poisson adds arrivals at rate per second over [from, to).
	poisson := func(from, to time.Duration, rate float64) {
		for t := from + s(rng.ExpFloat64()/rate); t < to; t += s(rng.ExpFloat64() / rate) {
			add(t)
		}
	}
	// uniform adds n arrivals spread at random over [from, to).
	uniform := func(from, to time.Duration, n int) {
		for range n {
			add(from + time.Duration(rng.Int64N(int64(to-from))))
		}
	}

	uniform(s(0.2), s(0.8), 2)
	poisson(s(1), s(4), 6)
	mid := (tl.Burst.Start + tl.Burst.End) / 2
	uniform(tl.Burst.Start, mid, Limit)
	uniform(mid, tl.Burst.End, Limit)
	poisson(s(6), s(10), 2*Limit)
	uniform(s(10), s(11), 200)
	poisson(s(11), s(13), 4)
	slices.Sort(tl.Requests)
	return tl
}
