package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/ginlimit"
)

// Algorithm is one algorithm as the simulation runs it.
type Algorithm struct {
	// Kind is the algorithm.
	Kind ginlimit.AlgorithmKind
	// Title is its name on the chart.
	Title string
	// Note is its setting, or what it promises, in a few words.
	Note string
	// Options are its ginlimit options on top of the shared rule.
	Options []ginlimit.Option
}

// Algorithms returns the four algorithms in the order they are drawn, each
// with the settings the simulation uses. It returns a new slice each time.
func Algorithms() []Algorithm {
	return []Algorithm{
		{Kind: ginlimit.SlidingLog, Title: "Sliding log", Note: "exact",
			Options: []ginlimit.Option{ginlimit.Algorithm(ginlimit.SlidingLog)}},
		{Kind: ginlimit.SlidingCounter, Title: "Sliding counter", Note: "10 sub-windows of 100 ms",
			Options: []ginlimit.Option{ginlimit.Algorithm(ginlimit.SlidingCounter)}},
		{Kind: ginlimit.FixedWindow, Title: "Fixed window", Note: "1 s windows, aligned",
			Options: []ginlimit.Option{ginlimit.Algorithm(ginlimit.FixedWindow)}},
		{Kind: ginlimit.TokenBucket, Title: "Token bucket", Note: "burst 10, +1 token / 100 ms",
			Options: []ginlimit.Option{ginlimit.Algorithm(ginlimit.TokenBucket), ginlimit.Burst(Limit)}},
	}
}

// Outcome is the decision on one request of the timeline.
type Outcome struct {
	// At is the request's arrival time from the timeline's start.
	At time.Duration
	// Allowed reports whether the algorithm admitted it.
	Allowed bool
}

// Result is what one algorithm did with the whole timeline.
type Result struct {
	Algorithm
	// Outcomes has one entry per request of the timeline, in order.
	Outcomes []Outcome
	// Admitted and Rejected count the outcomes.
	Admitted, Rejected int
	// MaxInWindow is the most requests admitted in any span of one Window,
	// and MaxAt the start of the first such span.
	MaxInWindow int
	MaxAt       time.Duration
}

// Admissions returns the arrival times of the admitted requests, in order.
func (r *Result) Admissions() []time.Duration {
	var at []time.Duration
	for _, o := range r.Outcomes {
		if o.Allowed {
			at = append(at, o.At)
		}
	}
	return at
}

// Simulate runs tl through every algorithm of [Algorithms] on a new
// embedded miniredis and returns their results in the same order. Before
// each request it sets the Redis clock to the request's arrival time, and
// then asks each algorithm, on its own key, to decide it. Any Redis error
// ends the simulation: a fail-open decision would falsify the chart.
func Simulate(ctx context.Context, tl Timeline) (_ []Result, err error) {
	m, err := miniredis.Run()
	if err != nil {
		return nil, fmt.Errorf("start miniredis: %w", err)
	}
	defer m.Close()
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
	defer func() { err = errors.Join(err, rdb.Close()) }()

	limiter, err := ginlimit.New(
		ginlimit.Redis(rdb),
		ginlimit.Limit(Limit), ginlimit.Window(Window),
		// The deny cache times its answers with the local clock, which
		// SetTime does not move: every decision must reach the script.
		ginlimit.DenyCache(0),
		// A slow machine (go test -race) must not turn into a failure.
		ginlimit.Timeout(10*time.Second),
		ginlimit.OnFailure(ginlimit.FailClosed),
	)
	if err != nil {
		return nil, err
	}
	algs := Algorithms()
	results := make([]Result, len(algs))
	policies := make([]*ginlimit.Policy, len(algs))
	for i, a := range algs {
		opts := append([]ginlimit.Option{ginlimit.Key("simulate:" + string(a.Kind) + ":")}, a.Options...)
		if policies[i], err = limiter.Policy(opts...); err != nil {
			return nil, fmt.Errorf("%s: %w", a.Kind, err)
		}
		results[i] = Result{Algorithm: a, Outcomes: make([]Outcome, 0, len(tl.Requests))}
	}

	epoch := time.Unix(EpochUnix, 0)
	for _, at := range tl.Requests {
		now := epoch.Add(at)
		m.SetTime(now)
		for i, p := range policies {
			d, err := p.Allow(ctx, "client", 1)
			if err != nil {
				return nil, fmt.Errorf("%s at %v: %w", algs[i].Kind, at, err)
			}
			if !d.Time.Equal(now) {
				return nil, fmt.Errorf("%s at %v: decided at Redis time %v, want %v", algs[i].Kind, at, d.Time, now)
			}
			r := &results[i]
			r.Outcomes = append(r.Outcomes, Outcome{At: at, Allowed: d.Allowed})
			if d.Allowed {
				r.Admitted++
			} else {
				r.Rejected++
			}
		}
	}
	for i := range results {
		r := &results[i]
		r.MaxInWindow, r.MaxAt = maxInSpan(r.Admissions(), Window)
	}
	return results, nil
}
