package engine

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// errTimedOut is the cause of a call's context when its Timeout ran out.
//
//lint:ignore ST1005 Redis is a proper noun, and the text is what a user reads
var errTimedOut = fmt.Errorf("Redis did not answer within the Timeout: %w", context.DeadlineExceeded)

// callContext returns the context that bounds one call on the wire: it
// ends timeout after now, or up to timeout/deadlineSteps later (never
// earlier), or at ctx's own deadline when that comes first, and carries
// ctx's values (a tracing hook's span, say). The returned cancel is nil when
// there is nothing to release.
//
// A call shares its deadline with every call of the engine that starts
// within the same step, so a call pays for no context, timer or channel of
// its own (context.WithTimeout costs four allocations and a timer on every
// call). The price: once a call is on the wire, the request's cancellation
// no longer ends it early, only its deadline and the Timeout do; the
// script runs in Redis all the same, and its answer is still read. A
// request whose context has already ended, or whose deadline comes before
// the shared one, gets a context of its own.
func (e *Engine) callContext(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	d, ok := e.bounds.Load(timeout)
	if !ok {
		d, _ = e.bounds.LoadOrStore(timeout, &deadlines{timeout: timeout, step: max(timeout/deadlineSteps, time.Microsecond)})
	}
	bound, end := d.(*deadlines).at(time.Now())
	if ctx.Err() != nil {
		return context.WithTimeoutCause(ctx, timeout, errTimedOut)
	}
	if own, ok := ctx.Deadline(); ok && own.Before(end) {
		return context.WithTimeoutCause(ctx, timeout, errTimedOut)
	}
	return &callCtx{Context: ctx, bound: bound}, nil
}

// deadlineSteps is how many shared deadlines a Timeout is divided into: a
// call's bound is at most Timeout/deadlineSteps longer than its Timeout.
const deadlineSteps = 64

// deadlines hands out the shared deadlines of one Timeout. It is safe for
// concurrent use.
type deadlines struct {
	timeout, step time.Duration
	cur           atomic.Pointer[deadline]
}

// deadline is a context that ends timeout after until, shared by the calls
// that start before until and no earlier than one step before it.
type deadline struct {
	ctx    context.Context
	cancel context.CancelFunc // never needed: the context ends at its deadline
	until  time.Time
	end    time.Time
}

// at returns the shared context of a call that starts at now, and its
// deadline: no earlier than now + timeout.
func (ds *deadlines) at(now time.Time) (context.Context, time.Time) {
	if d := ds.cur.Load(); d != nil && now.Before(d.until) {
		return d.ctx, d.end
	}
	// Two calls may both start a new step; the later Store wins and the
	// other context serves its one call, then ends at its deadline.
	d := &deadline{until: now.Add(ds.step)}
	d.end = d.until.Add(ds.timeout)
	d.ctx, d.cancel = context.WithDeadlineCause(context.Background(), d.end, errTimedOut)
	ds.cur.Store(d)
	return d.ctx, d.end
}

// callCtx is a call's context: the request's values, and the shared
// deadline (see callContext).
type callCtx struct {
	context.Context                 // the request's, for its values
	bound           context.Context // a shared deadline
}

func (c *callCtx) Deadline() (time.Time, bool) { return c.bound.Deadline() }
func (c *callCtx) Done() <-chan struct{}       { return c.bound.Done() }
func (c *callCtx) Err() error                  { return c.bound.Err() }

// cause returns why a call's context (from callContext) ended:
// errTimedOut when its Timeout ran out.
func cause(ctx context.Context) error {
	if c, ok := ctx.(*callCtx); ok {
		return context.Cause(c.bound)
	}
	return context.Cause(ctx)
}

// boundedGrace is how long bounded waits, once ctx has ended, for f to
// return: go-redis ends a wait for a pooled connection with the context, so
// such a call returns its own context error at once, while a call on the
// wire of a client that ignores the context does not return. "At once" is
// its goroutine being scheduled, which on a loaded machine takes longer
// than a millisecond: a call that only waited for a connection the
// application held was then taken for one Redis left unanswered (a
// failure, and a stranded call making its siblings' pool waits failures
// too). 20 ms is a heuristic, not a proof: go-redis does not say whether a
// call has its connection. It applies only to a ClusterClient or Ring
// without ContextTimeoutEnabled.
const boundedGrace = 20 * time.Millisecond

// bounded runs f in a goroutine and returns its result, or ctx's cause once
// ctx has ended and f has not returned within boundedGrace.
func bounded[T any](ctx context.Context, f func() (T, error)) (T, error) {
	return boundedCounting(ctx, nil, f)
}

// boundedCounting is bounded, and while f runs on after being abandoned,
// it counts f in stranded (when not nil).
func boundedCounting[T any](ctx context.Context, stranded *atomic.Int64, f func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	// state: 0 while both wait, 1 once the caller abandoned f (and
	// counted it), 2 once f returned first.
	var state atomic.Int32
	go func() {
		v, err := f()
		done <- result{v, err}
		if !state.CompareAndSwap(0, 2) && stranded != nil {
			stranded.Add(-1)
		}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
	}
	grace := time.NewTimer(boundedGrace)
	defer grace.Stop()
	select {
	case r := <-done:
		return r.v, r.err
	case <-grace.C:
	}
	// Counted before the CAS that lets f's goroutine uncount it, so the
	// count never dips below zero (which judge would read as stranded calls).
	if stranded != nil {
		stranded.Add(1)
	}
	if !state.CompareAndSwap(0, 1) {
		if stranded != nil {
			stranded.Add(-1)
		}
		r := <-done // f returned just now
		return r.v, r.err
	}
	var zero T
	return zero, cause(ctx)
}
