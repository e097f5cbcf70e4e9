package main

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ginlimit/ginlimit/ginlimit"
)

// histogram counts durations in log-linear buckets, like HDR Histogram:
// values below 2^histSubBits ns are exact, and above that each power of two
// is split into 2^(histSubBits-1) buckets, so a quantile is off by less than
// 1/2^(histSubBits-1) (1.6%). Recording is a few integer operations with no
// allocation. A histogram is not safe for concurrent use: each caller owns
// one, and they are merged after a run.
type histogram struct {
	counts []uint64
	n      uint64
}

const (
	histSubBits = 7
	histHalf    = 1 << (histSubBits - 1)
	histBuckets = 1<<histSubBits + (64-histSubBits)*histHalf
)

func newHistogram() *histogram { return &histogram{counts: make([]uint64, histBuckets)} }

func histIndex(v uint64) int {
	if v < 1<<histSubBits {
		return int(v)
	}
	shift := bits.Len64(v) - histSubBits
	top := v >> shift // in [histHalf, 2*histHalf)
	return 1<<histSubBits + (shift-1)*histHalf + int(top) - histHalf
}

// histValue returns the middle of bucket i.
func histValue(i int) uint64 {
	if i < 1<<histSubBits {
		return uint64(i)
	}
	j := i - 1<<histSubBits
	shift := j/histHalf + 1
	top := uint64(j%histHalf + histHalf)
	return top<<shift + (uint64(1)<<shift)/2
}

func (h *histogram) record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	h.counts[histIndex(uint64(d))]++
	h.n++
}

func (h *histogram) reset() {
	clear(h.counts)
	h.n = 0
}

func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
}

// quantile returns the q-quantile (0 < q <= 1), or 0 for an empty histogram.
func (h *histogram) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q*float64(h.n) + 0.5)
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return time.Duration(histValue(i))
		}
	}
	return time.Duration(histValue(len(h.counts) - 1))
}

// workerState is what one caller goroutine owns during a run.
type workerState struct {
	hist         *histogram // latency of every call (throughput) or of rejected decisions (flood)
	rng          *rand.Rand
	calls        int64
	allowed      int64
	nonDecisions int64
	saturated    int64
	firstErr     error
	_            [64]byte // keep workers' counters off each other's cache lines
}

// workers is a reusable set of caller states, allocated once for the largest
// concurrency so that a run allocates nothing of its own while it is measured.
type workers struct {
	states []*workerState
}

func newWorkers(n int) *workers {
	w := &workers{}
	for i := range n {
		w.states = append(w.states, &workerState{
			hist: newHistogram(),
			rng:  rand.New(rand.NewPCG(uint64(i)+1, 0x9e3779b97f4a7c15)),
		})
	}
	return w
}

// runResult is the outcome of one run of n callers.
type runResult struct {
	// Calls counts every call of the decider: decisions and non-decisions.
	Calls int64
	// Allowed counts the decisions that admitted.
	Allowed int64
	// NonDecisions counts the calls that returned an error (see decider):
	// they are not decisions, and PerSec leaves them out.
	NonDecisions int64
	// Saturated counts the non-decisions whose error wraps
	// ginlimit.ErrSaturated: this process could not get the call to Redis in
	// time.
	Saturated int64
	FirstErr  error
	Elapsed   time.Duration
	Hist      *histogram // merged
	Mallocs   uint64     // heap allocations of the whole process during the run
}

// Decisions returns the calls that were decisions.
func (r runResult) Decisions() int64 { return r.Calls - r.NonDecisions }

// Denied returns the decisions that rejected.
func (r runResult) Denied() int64 { return r.Decisions() - r.Allowed }

// PerSec returns decisions per second: non-decisions are not counted.
func (r runResult) PerSec() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Decisions()) / r.Elapsed.Seconds()
}

// runSpec says how a run ends and what it records.
type runSpec struct {
	callers  int
	keys     []string      // each call picks one uniformly at random
	duration time.Duration // run until then, or
	total    int64         // until this many decisions, when > 0
	// rejectedOnly records the latency of rejected decisions only.
	rejectedOnly bool
}

// run calls d from spec.callers goroutines and measures. The goroutines are
// started and the memory statistics read before the clock starts, so the
// allocation count is that of the decisions (plus whatever the Go runtime and
// go-redis do in the background, which is negligible over a run).
func (w *workers) run(ctx context.Context, d decider, spec runSpec) runResult {
	states := w.states[:spec.callers]
	for _, s := range states {
		s.hist.reset()
		s.calls, s.allowed, s.nonDecisions, s.saturated, s.firstErr = 0, 0, 0, 0, nil
	}
	var (
		start    = make(chan struct{})
		wg       sync.WaitGroup
		deadline time.Time
		claimed  atomic.Int64
	)
	for _, s := range states {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			s.runCalls(ctx, d, spec, &claimed, deadline)
		}()
	}
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	t0 := time.Now()
	deadline = t0.Add(spec.duration)
	close(start)
	wg.Wait()
	elapsed := time.Since(t0)
	runtime.ReadMemStats(&m1)

	return sumStates(states, elapsed, m1.Mallocs-m0.Mallocs)
}

// runCalls calls d until spec's total is claimed (when it has one) or the
// deadline has passed, and counts and records each call in s.
func (s *workerState) runCalls(ctx context.Context, d decider, spec runSpec, claimed *atomic.Int64, deadline time.Time) {
	keys, nk := spec.keys, len(spec.keys)
	for {
		if spec.total > 0 && claimed.Add(1) > spec.total {
			return
		}
		key := keys[0]
		if nk > 1 {
			key = keys[s.rng.IntN(nk)]
		}
		t0 := time.Now()
		ok, err := d(ctx, key)
		t1 := time.Now()
		s.count(ok, err)
		if !spec.rejectedOnly || (err == nil && !ok) {
			s.hist.record(t1.Sub(t0))
		}
		if spec.total == 0 && !t1.Before(deadline) {
			return
		}
	}
}

// count counts one call's outcome: a decision that admitted or not, or a
// non-decision (see decider).
func (s *workerState) count(ok bool, err error) {
	s.calls++
	switch {
	case err != nil:
		s.nonDecisions++
		if errors.Is(err, ginlimit.ErrSaturated) {
			s.saturated++
		}
		if s.firstErr == nil {
			s.firstErr = err
		}
	case ok:
		s.allowed++
	}
}

// sumStates sums the callers' counts and histograms into one run's result.
func sumStates(states []*workerState, elapsed time.Duration, mallocs uint64) runResult {
	r := runResult{Elapsed: elapsed, Hist: newHistogram(), Mallocs: mallocs}
	for _, s := range states {
		r.Calls += s.calls
		r.Allowed += s.allowed
		r.NonDecisions += s.nonDecisions
		r.Saturated += s.saturated
		if r.FirstErr == nil {
			r.FirstErr = s.firstErr
		}
		r.Hist.merge(s.hist)
	}
	return r
}

// cellResult is one case at one concurrency in the throughput tables,
// summed over its rounds.
type cellResult struct {
	Case    *benchCase
	Callers int
	Run     runResult
	Stats   cmdStats // INFO commandstats of the measured runs only
	CPU     cpuTicks
}

// AllocsPerCall returns the process's heap allocations per call (decisions
// and non-decisions).
func (c cellResult) AllocsPerCall() float64 {
	return float64(c.Run.Mallocs) / float64(max(1, c.Run.Calls))
}

// ServerUsecPerCall is the server's usec per call of the case's command
// (EVALSHA, or PING for the PING floor), and whether there was one.
func (c cellResult) ServerUsecPerCall() (float64, bool) {
	name := "evalsha"
	if c.Case.ID == "ping" {
		name = "ping"
	}
	st := c.Stats[name]
	if st.Calls == 0 {
		return 0, false
	}
	return float64(st.Usec) / float64(st.Calls), true
}

// ServerPerCall returns the top-level commands per call of the decider and
// their server µs per call (see topLevel).
func (c cellResult) ServerPerCall() (calls, usec float64) {
	t := c.Stats.topLevelTotal()
	n := float64(max(1, c.Run.Calls))
	return float64(t.Calls) / n, float64(t.Usec) / n
}

// add accumulates one round.
func (c *cellResult) add(r runResult, stats cmdStats, cpu cpuTicks) {
	if c.Run.Hist == nil {
		c.Run.Hist = newHistogram()
		c.Stats = make(cmdStats)
	}
	c.Run.Calls += r.Calls
	c.Run.Allowed += r.Allowed
	c.Run.NonDecisions += r.NonDecisions
	c.Run.Saturated += r.Saturated
	if c.Run.FirstErr == nil {
		c.Run.FirstErr = r.FirstErr
	}
	c.Run.Elapsed += r.Elapsed
	c.Run.Mallocs += r.Mallocs
	c.Run.Hist.merge(r.Hist)
	for name, st := range stats {
		t := c.Stats[name]
		t.Calls += st.Calls
		t.Usec += st.Usec
		c.Stats[name] = t
	}
	c.CPU = c.CPU.add(cpu)
}

// measureThroughput measures every case at n callers, each on a client of
// its own (of its kind), on an emptied database (FLUSHDB before each
// concurrency), interleaved (see interleave).
func (e *env) measureThroughput(ctx context.Context, cases []*benchCase, n int) ([]cellResult, error) {
	if err := e.admin.FlushDB(ctx).Err(); err != nil {
		return nil, fmt.Errorf("FLUSHDB: %w", err)
	}
	deciders := make([]decider, len(cases))
	for i, c := range cases {
		rdb := c.Client.newClient(e.srv.Addr)
		defer rdb.Close()
		d, err := c.New(rdb, e.cfg.limit, e.cfg.window)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.ID, err)
		}
		deciders[i] = d
	}
	return e.interleave(ctx, cases, deciders, n, e.keys)
}

// interleave measures deciders[i], the decider of cases[i], at n callers
// over keys. The machine is shared and its load changes from second to
// second, so the cases are interleaved: each cell's time is split into
// rounds, and every round runs every case once, in an order rotated by one
// each round (see roundOrder), so that a burst of outside load falls on all of
// them alike instead of on whichever case was running. This matters most at
// one caller: with both processes asleep between calls, a round trip includes
// waking idle CPUs, and it is several times shorter while other load keeps
// the CPUs awake.
//
// Each case is warmed up (pool connections open, scripts loaded) before the
// first round; each round of a case is bracketed by CONFIG RESETSTAT and
// INFO commandstats.
func (e *env) interleave(ctx context.Context, cases []*benchCase, deciders []decider, n int, keys []string) ([]cellResult, error) {
	cells := make([]cellResult, len(cases))
	for i, c := range cases {
		warm := e.workers.run(ctx, deciders[i], runSpec{callers: n, keys: keys, duration: e.cfg.warmup})
		if warm.Decisions() == 0 {
			return nil, fmt.Errorf("%s: warm-up: none of %d calls was a decision, first error: %w", c.ID, warm.Calls, warm.FirstErr)
		}
		if warm.NonDecisions > 0 {
			progress("%-25s %4d callers: warm-up: %d of %d calls were non-decisions, first: %v", c.ID, n, warm.NonDecisions, warm.Calls, warm.FirstErr)
		}
		cells[i] = cellResult{Case: c, Callers: n}
	}
	slice := e.cfg.duration / time.Duration(e.cfg.rounds)
	for round := range e.cfg.rounds {
		for _, i := range roundOrder(len(cases), round) {
			if err := e.admin.ConfigResetStat(ctx).Err(); err != nil {
				return nil, fmt.Errorf("CONFIG RESETSTAT: %w", err)
			}
			cpu0 := readCPU(e.srv.Pid)
			r := e.workers.run(ctx, deciders[i], runSpec{callers: n, keys: keys, duration: slice})
			cpu1 := readCPU(e.srv.Pid)
			stats, err := readCmdStats(ctx, e.admin)
			if err != nil {
				return nil, err
			}
			cells[i].add(r, stats, cpu1.since(cpu0))
		}
	}
	return cells, nil
}

// roundOrder returns the order in which round (from 0) runs n cases: the
// report order rotated left by round, so that over n consecutive rounds each
// case runs once in each position, first and last included.
func roundOrder(n, round int) []int {
	order := make([]int, n)
	for j := range order {
		order[j] = (j + round) % n
	}
	return order
}
