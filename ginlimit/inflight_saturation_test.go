package ginlimit

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/ginlimit/ginlimit/internal/redistest"
)

// saturate takes every decision slot of every node l has made so far, so
// that each decision of l waits its QueueTimeout and gets ErrSaturated, as
// under a flood that holds every slot, whatever the machine's speed. The
// slots are given back when the test ends.
func saturate(t *testing.T, l *Limiter) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, b := range l.owned {
		t.Cleanup(b.engine.HoldSlots())
	}
}

// TestInFlightLeaseHeldThroughAFlood: a flood on instance A that takes
// every decision slot must not make the lease of a request A is serving
// lapse while Redis answers: renewals have capacity of their own. Instance
// B, on the same Redis, is refused the slot for as long as A's handler
// runs, over several leases. Before, renewals waited in the decisions'
// queue, each was ErrSaturated, the lease lapsed, and B was handed the
// slot: two orders in flight under InFlight(1).
func TestInFlightLeaseHeldThroughAFlood(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	quiet := withLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
	// Long enough that a renewal delayed by a loaded machine (a call and
	// a timer each late by a few hundred ms) still lands within its lease:
	// the test is about the flood, not the scheduler.
	const lease = 1500 * time.Millisecond
	pre := prefix(t)
	a := slotLimiter(t, srv.Client(), queueTimeout(20*time.Millisecond), quiet)
	b := slotLimiter(t, srv.Client(), quiet)
	ga, gb := newGate(), newGate()
	defer ga.open()
	defer gb.open()
	ea := slotEngine(a.RateLimit(Key(pre), InFlight(1, lease)), ga)
	eb := slotEngine(b.RateLimit(Key(pre), InFlight(1, lease)), gb)

	done := make(chan int, 1)
	go func() { done <- do(ea, http.MethodGet, "/order", nil).Code }()
	select {
	case <-ga.entered:
	case <-time.After(slotWait):
		t.Fatal("A's request never got its slot")
	}
	saturate(t, a)
	// Three leases: every renewal in them had to get through for the slot
	// to be A's still.
	time.Sleep(3 * lease)
	if w := do(eb, http.MethodGet, "/order?fast=1", nil); w.Code != http.StatusTooManyRequests {
		t.Fatalf("B, while A's handler runs under InFlight(1): %d, want 429 (A's lease lapsed)", w.Code)
	}
	ga.open()
	if code := <-done; code != http.StatusOK {
		t.Fatalf("A's request: %d", code)
	}
}

// TestInFlightFallbackCountsSlotsHeldInRedis: while Redis fails, the
// in-process fallback of FailLocal counts the slots this instance already
// holds in Redis against its cap: with InFlight(2) and both slots held
// through Redis, an instance whose Redis then stops admits no third
// request. Before, the fallback counted only its own slots and let two
// more run (n + n/LocalInstances on one instance).
func TestInFlightFallbackCountsSlotsHeldInRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	quiet := withLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
	c := srv.Client()
	l := slotLimiter(t, c, quiet)
	beatNow(t, l, c) // the instance has heard from Redis: its fallback decides
	g := newGate()
	defer g.open()
	e := slotEngine(l.RateLimit(Key(prefix(t)), InFlight(2, time.Minute)), g)

	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			if w := do(e, http.MethodGet, "/order", nil); w.Code != http.StatusOK {
				t.Errorf("a holder got %d", w.Code)
			}
		})
	}
	for range 2 {
		select {
		case <-g.entered:
		case <-time.After(slotWait):
			t.Fatal("the holders never got their slots")
		}
	}
	srv.Stop()
	codes := make(chan int, 4)
	for range 4 {
		wg.Go(func() {
			r := httptest.NewRequest(http.MethodGet, "/order", nil)
			w := httptest.NewRecorder()
			e.ServeHTTP(w, r)
			codes <- w.Code
		})
	}
	for range 4 {
		select {
		case code := <-codes:
			if code != http.StatusTooManyRequests {
				t.Errorf("with Redis down and both slots held, a request got %d, want 429", code)
			}
		case <-g.entered:
			t.Error("a third request ran under InFlight(2)")
			g.open()
		case <-time.After(slotWait):
			t.Fatal("a request was never answered")
		}
	}
	g.open()
	wg.Wait()
}
