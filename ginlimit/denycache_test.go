package ginlimit

import (
	"strconv"
	"testing"
	"time"
)

// learn records a decision with the given remaining and reset, sent at now.
func learn(c *denyCache, key string, counted *keyState, now int64, remaining int, reset time.Duration) {
	c.leave(key, counted, 1, now, 0, false, &Decision{Allowed: true, Remaining: remaining, Reset: reset, Time: t0}, true)
}

func TestDenyCacheBoundedAndExpiring(t *testing.T) {
	t.Parallel()
	if newDenyCache(0, time.Hour) != nil {
		t.Fatal("DenyCache(0) made a cache")
	}
	c := newDenyCache(64, time.Hour)
	for i := range 10_000 {
		learn(c, "k"+strconv.Itoa(i), nil, 0, 0, 100)
		if n := c.len(); n > 64 {
			t.Fatalf("after %d keys the cache holds %d, want at most 64", i+1, n)
		}
	}
	learn(c, "x", nil, 0, 0, 100)
	if v, _, snap := c.enter("x", 99, 1); v != rejected || snap.until != 100 || snap.resetAt != t0.UnixMicro() {
		t.Fatalf("enter before the deadline: %v %+v, want a certain rejection", v, snap)
	}
	if v, st, _ := c.enter("x", 100, 1); v != callRedis || st != nil {
		t.Fatalf("enter at the deadline: %v, want an uncounted call", v)
	}
	if v, _, _ := c.enter("never", 0, 1); v != callRedis {
		t.Fatalf("enter of an unknown key: %v", v)
	}
	// High remaining quota is not tracked at all.
	learn(c, "roomy", nil, 0, lowRemaining, time.Second)
	if v, st, _ := c.enter("roomy", 1, 1); v != callRedis || st != nil {
		t.Fatalf("roomy key: %v %v", v, st)
	}
}

// TestDenyCacheInFlight: with 2 known remaining, 2 calls go and the third
// waits until one of them ends; nothing is rejected on a guess.
func TestDenyCacheInFlight(t *testing.T) {
	t.Parallel()
	c := newDenyCache(100, time.Hour)
	learn(c, "k", nil, 0, 2, time.Second)
	v1, s1, _ := c.enter("k", 1, 1)
	v2, s2, _ := c.enter("k", 2, 1)
	v3, _, snap := c.enter("k", 3, 1)
	if v1 != callRedis || s1 == nil || v2 != callRedis || s2 == nil || v3 != waitTurn {
		t.Fatalf("verdicts %v %v %v, want two counted calls and a wait", v1, v2, v3)
	}
	select {
	case <-snap.wake:
		t.Fatal("woken before any call ended")
	default:
	}
	// The first call was rejected elsewhere? No: it was admitted with 1 left.
	learn(c, "k", s1, 1, 1, time.Second)
	select {
	case <-snap.wake:
	default:
		t.Fatal("not woken when a call ended")
	}
	// 1 remaining, 1 in flight: still wait.
	if v, _, _ := c.enter("k", 4, 1); v != waitTurn {
		t.Fatalf("after the first call: %v, want wait", v)
	}
	// The second call used the last of the quota: now a certain rejection.
	learn(c, "k", s2, 2, 0, time.Second)
	if v, _, _ := c.enter("k", 5, 1); v != rejected {
		t.Fatalf("after the quota ran out: %v, want rejected", v)
	}
	// A failed call releases its place and proves nothing.
	c2 := newDenyCache(100, time.Hour)
	learn(c2, "k", nil, 0, 1, time.Second)
	_, st, _ := c2.enter("k", 1, 1)
	c2.leave("k", st, 1, 1, 0, false, &Decision{}, false)
	if v, st, _ := c2.enter("k", 2, 1); v != callRedis || st == nil {
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
	v, _, snap := c.enter("k", int64(time.Second)-1, 1)
	if v != rejected || snap.grows != int64(time.Hour) {
		t.Fatalf("within the bound: %v, grows %d: want a cached rejection that resets in an hour", v, snap.grows)
	}
	if d := (&rule{}).cached(snap, int64(time.Second)-1); d.RetryAfter < 59*time.Minute {
		t.Fatalf("cached decision %+v: want the true retry of about an hour", d)
	}
	if v, _, _ := c.enter("k", int64(time.Second), 1); v != callRedis {
		t.Fatalf("at the bound: %v, want the call to go to Redis", v)
	}
	learn(c, "k", nil, int64(time.Second), 0, time.Hour)
	c.forget("k")
	if v, _, _ := c.enter("k", int64(time.Second)+1, 1); v != callRedis {
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
	v, probe, snap := c.enter("k", sec, 1)
	if v != callRedis || probe == nil || !snap.probing {
		t.Fatalf("first request after the bound: %v, probe %v: want it to be the probe", v, snap.probing)
	}
	if v, _, _ := c.enter("k", sec+1, 1); v != rejected {
		t.Fatalf("while the probe is out: %v, want the cached rejection", v)
	}
	if v, st, snap := c.enter("k", 2*sec, 1); v != callRedis || st != nil || snap.probing {
		t.Fatalf("two bounds after learning, the probe still out: %v, want a plain call to Redis", v)
	}
	c.leave("k", probe, 1, sec, 0, true, nil, false) // the probe failed
	if v, _, snap := c.enter("k", sec+2, 1); v != callRedis || !snap.probing {
		t.Fatalf("after a failed probe: %v, want the next request to probe", v)
	}
}
