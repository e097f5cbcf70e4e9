package ginlimit

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ginlimit/ginlimit/internal/redistest"
)

// panicOnce is an observer that panics on its first event, as a metrics
// collector with a bad label set does.
type panicOnce struct{ done bool }

func (p *panicOnce) Observe(context.Context, Event) {
	if !p.done {
		p.done = true
		panic("observer failed")
	}
}

// TestAttackInFlightObserverPanicLeaksSlot: InFlight promises the slot is
// given back "when the chain returns, a panic included". An observer runs
// after the slot is taken and before the release is deferred (serve); when
// it panics, gin's recovery answers 500 and the slot is never released:
// its lease is renewed every lease/3 for ever, so it is lost until the
// process exits, not until the lease ends.
func TestAttackInFlightObserverPanicLeaksSlot(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	l := slotLimiter(t, srv.Client())
	const lease = 300 * time.Millisecond
	p, err := l.Policy(Key(prefix(t)), InFlight(1, lease), Observe(&panicOnce{}))
	if err != nil {
		t.Fatal(err)
	}
	g := newGate()
	defer g.open()
	e := slotEngine(p.Handler(), g)
	if w := do(e, http.MethodGet, "/order?fast=1", nil); w.Code != http.StatusInternalServerError {
		t.Fatalf("the panicking observer: %d, want gin's recovery's 500", w.Code)
	}
	time.Sleep(4 * lease) // well past the lease: a slot nobody renews is free by now
	if n := held(t, p, ""); n != 0 {
		t.Errorf("%d slots held %v after the request ended, want 0", n, 4*lease)
	}
	if w := do(e, http.MethodGet, "/order?fast=1", nil); w.Code != http.StatusOK {
		t.Errorf("the next request: %d, want 200 (the only slot leaked)", w.Code)
	}
}

// TestAttackInFlightDeadlineLeaksSlot: a request whose context ends while
// its acquire is on the wire (a client that hangs up, a timeout middleware)
// is taken as ErrSaturated ("the call never left this process"), so no
// release is sent; but the script did run and leased a slot, which stays
// taken until its lease ends (30 s here) while nothing holds it. Redis is
// made to answer late by a 600 ms script on another connection.
func TestAttackInFlightDeadlineLeaksSlot(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	l := slotLimiter(t, srv.Client())
	p, err := l.Policy(Key(prefix(t)), InFlight(1, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	e := gin.New()
	e.GET("/order", p.Handler(), ok)
	busy := make(chan error, 1)
	go func() {
		c := srv.Client()
		defer c.Close()
		busy <- c.Eval(context.Background(), `
local s = redis.call('TIME')
local t0 = s[1] * 1000000 + s[2]
while true do
  local n = redis.call('TIME')
  if n[1] * 1000000 + n[2] - t0 > 600000 then return 1 end
end`, nil).Err()
	}()
	time.Sleep(100 * time.Millisecond) // the busy script has started
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	w := httptest.NewRecorder()
	e.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/order", nil).WithContext(ctx))
	if err := <-busy; err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for n := held(t, p, ""); n != 0; n = held(t, p, "") {
		if time.Now().After(deadline) {
			t.Fatalf("%d slots held 5 s after the request (answered %d) ended, want 0: the acquire ran after the request gave up, and nothing released it", n, w.Code)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
