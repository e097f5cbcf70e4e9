package engine

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestBreakerOpensProbesAndCloses walks a breaker through its states:
// closed until threshold failures in a row (a success in between starts
// the count again), open (every call refused) for its period, then one
// probe at a time: a failed probe opens it again at once, an abandoned one
// lets the next call probe, a good one closes it.
func TestBreakerOpensProbesAndCloses(t *testing.T) {
	t.Parallel()
	b := newBreaker(3, time.Hour)
	b.done(false, true)
	b.done(false, false) // a success starts the count again
	for i := range 2 {
		b.done(false, true)
		if ok, _ := b.allow(); !ok || b.State() != "closed" || b.Failures() != i+1 {
			t.Fatalf("after %d failures in a row: allowed %v, %s, %d counted; want closed", i+1, ok, b.State(), b.Failures())
		}
	}
	b.done(false, true)
	if ok, _ := b.allow(); ok || b.State() != "open" {
		t.Fatalf("after 3 failures: allowed %v, %s; want open, refusing", ok, b.State())
	}

	h := newBreaker(1, time.Nanosecond) // half-open as soon as it opens
	h.done(false, true)
	time.Sleep(time.Millisecond)
	if h.State() != "half-open" {
		t.Fatalf("state %s after the open period, want half-open", h.State())
	}
	ok, probe := h.allow()
	if !ok || !probe {
		t.Fatalf("allow = %v, %v; want the probe", ok, probe)
	}
	if ok, _ := h.allow(); ok {
		t.Fatal("a second call went through while the probe was out")
	}
	h.abandon()
	if ok, probe := h.allow(); !ok || !probe {
		t.Fatalf("after an abandoned probe: allow = %v, %v; want the next probe", ok, probe)
	}
	h.done(true, true)
	if h.Failures() != 2 || h.State() == "closed" {
		t.Fatalf("a failed probe: %s, %d counted; want open again", h.State(), h.Failures())
	}
	time.Sleep(time.Millisecond)
	_, probe = h.allow()
	h.done(probe, false)
	if h.State() != "closed" || h.Failures() != 0 {
		t.Fatalf("a good probe: %s, %d counted; want closed, none", h.State(), h.Failures())
	}
}

// TestNoBreaker: a nil *Breaker (breakers off) lets every call through,
// counts nothing and reports no state.
func TestNoBreaker(t *testing.T) {
	t.Parallel()
	b := newBreaker(0, time.Second)
	if b != nil {
		t.Fatal("newBreaker(0, ...) made a breaker")
	}
	b.done(false, true)
	b.abandon()
	if ok, probe := b.allow(); !ok || probe || b.State() != "" || b.Failures() != 0 {
		t.Fatalf("nil breaker: allow = %v, %v, state %q, %d counted", ok, probe, b.State(), b.Failures())
	}
}

// TestUnavailable: only errors that mean Redis could not serve count
// against a breaker; a reply error about one key does not.
func TestUnavailable(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		want bool
	}{
		{errors.New("dial tcp: connection refused"), true},
		{redis.ErrClosed, true},
		{proto("LOADING Redis is loading the dataset in memory"), true},
		{proto("BUSY Redis is busy running a script"), true},
		{proto("MASTERDOWN Link with MASTER is down"), true},
		{proto("CLUSTERDOWN The cluster is down"), true},
		{proto("READONLY You can't write against a read only replica."), true},
		{proto("TRYAGAIN Multiple keys request during rehashing of slot"), true},
		{proto("WRONGTYPE Operation against a key holding the wrong kind of value"), false},
		{proto("ERR Error running script"), false},
	} {
		if got := unavailable(c.err); got != c.want {
			t.Errorf("unavailable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// proto is a reply error of Redis with text s, as go-redis returns it.
type proto string

func (p proto) Error() string { return string(p) }
func (proto) RedisError()     {}
