package state

import (
	"strconv"
	"testing"
	"time"
)

// t0 is a fixed Redis clock: 2026-01-02 03:04:05 UTC.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// lowRemaining is the ExactBelow the caches of these tests are made with.
const lowRemaining = 64

// newDenyCache returns a cache of size keys with the given staleness bound.
func newDenyCache(size int, staleness time.Duration) *DenyCache {
	return NewDenyCache(DenyConfig{Size: size, Staleness: staleness, ExactBelow: lowRemaining})
}

// enterAt is Enter at now, on the test's clock, and returns its
// verdict, what it counted (nil if nothing) and the state that decided.
func (c *DenyCache) enterAt(key string, now int64, cost int) (Verdict, *keyState, keyState) {
	t := c.enter(key, Ticket{sent: now, cost: int32(cost)})
	snap := t.snap
	snap.probing = snap.probing || t.Ticket.probe
	return t.Verdict, t.Ticket.counted, snap
}

// learn records an answer with the given remaining and reset to a call
// sent at now that counted counted (nil if none) in flight.
func learn(c *DenyCache, key string, counted *keyState, now int64, remaining int, reset time.Duration) {
	c.Leave(key, Ticket{sent: now, cost: 1, counted: counted}, Answer{Remaining: remaining, Reset: reset, At: t0})
}

func TestDenyCacheBoundedAndExpiring(t *testing.T) {
	t.Parallel()
	if newDenyCache(0, time.Hour) != nil {
		t.Fatal("DenyCache(0) made a cache")
	}
	c := newDenyCache(64, time.Hour)
	for i := range 10_000 {
		learn(c, "k"+strconv.Itoa(i), nil, 0, 0, 100)
		if n := c.Len(); n > 64 {
			t.Fatalf("after %d keys the cache holds %d, want at most 64", i+1, n)
		}
	}
	learn(c, "x", nil, 0, 0, 100)
	if v, _, snap := c.enterAt("x", 99, 1); v != Reject || snap.until != 100 || snap.resetAt != t0.UnixMicro() {
		t.Fatalf("enter before the deadline: %v %+v, want a certain rejection", v, snap)
	}
	if v, st, _ := c.enterAt("x", 100, 1); v != Send || st != nil {
		t.Fatalf("enter at the deadline: %v, want an uncounted call", v)
	}
	if v, _, _ := c.enterAt("never", 0, 1); v != Send {
		t.Fatalf("enter of an unknown key: %v", v)
	}
	// High remaining quota is not tracked at all.
	learn(c, "roomy", nil, 0, lowRemaining, time.Second)
	if v, st, _ := c.enterAt("roomy", 1, 1); v != Send || st != nil {
		t.Fatalf("roomy key: %v %v", v, st)
	}
}

// TestDenyCacheInFlight: with 2 known remaining, 2 calls go and the third
// waits until one of them ends; nothing is Reject on a guess.
func TestDenyCacheInFlight(t *testing.T) {
	t.Parallel()
	c := newDenyCache(100, time.Hour)
	learn(c, "k", nil, 0, 2, time.Second)
	v1, s1, _ := c.enterAt("k", 1, 1)
	v2, s2, _ := c.enterAt("k", 2, 1)
	v3, _, snap := c.enterAt("k", 3, 1)
	if v1 != Send || s1 == nil || v2 != Send || s2 == nil || v3 != Wait {
		t.Fatalf("verdicts %v %v %v, want two counted calls and a wait", v1, v2, v3)
	}
	select {
	case <-snap.wake:
		t.Fatal("woken before any call ended")
	default:
	}
	// The first call was Reject elsewhere? No: it was admitted with 1 left.
	learn(c, "k", s1, 1, 1, time.Second)
	select {
	case <-snap.wake:
	default:
		t.Fatal("not woken when a call ended")
	}
	// 1 remaining, 1 in flight: still wait.
	if v, _, _ := c.enterAt("k", 4, 1); v != Wait {
		t.Fatalf("after the first call: %v, want wait", v)
	}
	// The second call used the last of the quota: now a certain rejection.
	learn(c, "k", s2, 2, 0, time.Second)
	if v, _, _ := c.enterAt("k", 5, 1); v != Reject {
		t.Fatalf("after the quota ran out: %v, want Reject", v)
	}
	// A failed call releases its place and proves nothing.
	c2 := newDenyCache(100, time.Hour)
	learn(c2, "k", nil, 0, 1, time.Second)
	_, st, _ := c2.enterAt("k", 1, 1)
	c2.Release("k", Ticket{sent: 1, cost: 1, counted: st})
	if v, st, _ := c2.enterAt("k", 2, 1); v != Send || st == nil {
		t.Fatalf("after a failed call: %v %v, want a counted call", v, st)
	}
}

// TestDenyCacheKeepsNothingPastTheStalenessBound: a refusal whose quota
// grows in an hour is answered from the cache for the staleness bound
// only, and meanwhile with the true reset, not the bound.
func TestDenyCacheKeepsNothingPastTheStalenessBound(t *testing.T) {
	t.Parallel()
	c := newDenyCache(64, time.Second)
	learn(c, "k", nil, 0, 0, time.Hour)
	v, _, snap := c.enterAt("k", int64(time.Second)-1, 1)
	if v != Reject || snap.grows != int64(time.Hour) {
		t.Fatalf("within the bound: %v, grows %d: want a cached rejection that resets in an hour", v, snap.grows)
	}
	if a := (&Turn{Ticket: Ticket{sent: int64(time.Second) - 1}, snap: snap}).Answer(); a.Reset < 59*time.Minute {
		t.Fatalf("cached answer %+v: want the true reset of about an hour", a)
	}
	if v, _, _ := c.enterAt("k", int64(time.Second), 1); v != Send {
		t.Fatalf("at the bound: %v, want the call to go to Redis", v)
	}
	learn(c, "k", nil, int64(time.Second), 0, time.Hour)
	c.Forget("k")
	if v, _, _ := c.enterAt("k", int64(time.Second)+1, 1); v != Send {
		t.Fatalf("after forget: %v, want the call to go to Redis", v)
	}
}

// TestDenyCacheProbesALapsedRejection: once a certain rejection outlives
// the staleness bound, one call (the probe) checks it with Redis while the
// others are still answered from the cache, for at most one more bound; a
// failed probe hands the job to the next request.
func TestDenyCacheProbesALapsedRejection(t *testing.T) {
	t.Parallel()
	const sec = int64(time.Second)
	c := newDenyCache(64, time.Second)
	learn(c, "k", nil, 0, 0, time.Hour)
	v, probe, snap := c.enterAt("k", sec, 1)
	if v != Send || probe == nil || !snap.probing {
		t.Fatalf("first request after the bound: %v, probe %v: want it to be the probe", v, snap.probing)
	}
	if v, _, _ := c.enterAt("k", sec+1, 1); v != Reject {
		t.Fatalf("while the probe is out: %v, want the cached rejection", v)
	}
	if v, st, snap := c.enterAt("k", 2*sec, 1); v != Send || st != nil || snap.probing {
		t.Fatalf("two bounds after learning, the probe still out: %v, want a plain call to Redis", v)
	}
	c.Release("k", Ticket{sent: sec, cost: 1, counted: probe, probe: true}) // the probe failed
	if v, _, snap := c.enterAt("k", sec+2, 1); v != Send || !snap.probing {
		t.Fatalf("after a failed probe: %v, want the next request to probe", v)
	}
}
