package engine

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestCallContext: a call's context ends no earlier than its Timeout and
// carries the request's values; its cause is errTimedOut; a request whose
// own deadline comes first, or whose context has ended, gets a context of
// its own that keeps them.
func TestCallContext(t *testing.T) {
	t.Parallel()
	e := &Engine{}
	type key struct{}
	req := context.WithValue(context.Background(), key{}, "v")
	const timeout = time.Hour
	start := time.Now()
	ctx, cancel := e.transport.callContext(req, timeout, &wire{start: time.Now()})
	if cancel != nil {
		t.Fatal("a shared deadline has nothing to cancel")
	}
	dl, ok := ctx.Deadline()
	if !ok || dl.Before(start.Add(timeout)) || dl.After(time.Now().Add(timeout+timeout/deadlineSteps)) {
		t.Fatalf("deadline %v after the start, want within [%v, %v]", dl.Sub(start), timeout, timeout+timeout/deadlineSteps)
	}
	if ctx.Value(key{}) != "v" || ctx.Err() != nil {
		t.Fatalf("value %v, err %v; want the request's value and no error", ctx.Value(key{}), ctx.Err())
	}

	short, cancelShort := context.WithTimeout(req, time.Minute)
	defer cancelShort()
	ctx, cancel = e.transport.callContext(short, timeout, &wire{start: time.Now()})
	if cancel == nil {
		t.Fatal("a request deadline before the Timeout needs a context of its own")
	}
	defer cancel()
	if dl, _ := ctx.Deadline(); dl.After(time.Now().Add(time.Minute)) {
		t.Fatalf("deadline %v from now, want the request's minute", time.Until(dl))
	}

	ended, end := context.WithCancel(req)
	end()
	ctx, cancel = e.transport.callContext(ended, timeout, &wire{start: time.Now()})
	if cancel == nil || ctx.Err() == nil {
		t.Fatal("an ended request's call must end at once")
	}
	cancel()

	ctx, _ = e.transport.callContext(req, time.Nanosecond, &wire{start: time.Now()})
	<-ctx.Done()
	if err := cause(ctx); !errors.Is(err, errTimedOut) {
		t.Fatalf("cause %v, want errTimedOut", err)
	}
}

// TestStrandedCountEndsAtZero: boundedCounting's count of stranded
// calls, after many calls that return right about when they are abandoned
// (some before the grace ends, some after): every one it counted, it
// uncounts when the call returns, so it ends at zero (a count stuck above
// zero would make every later full pool a Redis failure).
func TestStrandedCountEndsAtZero(t *testing.T) {
	var stranded atomic.Int64
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Go(func() {
			for i := range 100 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
				d := time.Millisecond + time.Duration((g*100+i)%50)*time.Millisecond
				_, _ = boundedCounting(ctx, &stranded, func() (int, error) {
					time.Sleep(d)
					return 0, nil
				})
				cancel()
			}
		})
	}
	wg.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for stranded.Load() != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if v := stranded.Load(); v != 0 {
		t.Errorf("stranded ends at %d, want 0", v)
	}
}
