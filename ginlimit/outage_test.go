package ginlimit

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/internal/redistest"
)

// outageEpsilon is the overshoot docs/operations.md states for traffic
// spread over the instances, in the window Redis fails in and after: the
// fleet admits at most limit × (1 + outageEpsilon) per window.
const outageEpsilon = 0.1

// fleetMember is one application instance of the outage test: its own
// Limiter on its own client of the shared redis-server.
type fleetMember struct {
	limiter *Limiter
	client  *redis.Client
	policy  *Policy
}

// count is the instance's count of the instances sharing its Redis.
func (o fleetMember) count() int { return o.limiter.instancesFor(&routeConfig{client: o.client}).Load() }

// TestOutageOvershoot: 2 and then 4 instances share one real redis-server
// and one rule (120 per hour, on one key); each learns from the heartbeat
// how many they are. Traffic spread over them spends half the limit
// through Redis; then Redis is stopped and every instance is flooded until
// its fallback refuses. The fleet admits at most limit × (1 + ε) in that
// window, counting what Redis admitted, and then, window after window (the
// fallback's clock moved a window at a time, so nothing depends on the
// machine's speed), at most the same again; and each instance keeps the
// count it last saw.
func TestOutageOvershoot(t *testing.T) {
	for _, n := range []int{2, 4} {
		t.Run(fmt.Sprintf("%d instances", n), func(t *testing.T) { outageOvershoot(t, n) })
	}
}

func outageOvershoot(t *testing.T, n int) {
	const limit, window = 120, time.Hour
	srv := redistest.Start(t)
	var offset atomic.Int64 // the fallback's clock, ahead of the wall clock
	clock := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	pfx := prefix(t)
	fleet := make([]fleetMember, n)
	for i := range fleet {
		fleet[i] = newMember(t, srv, Key(pfx), Window(window), Limit(limit))
		fleet[i].policy.localClock = clock
	}
	waitFleetCount(t, fleet, n)

	// Redis decides half the limit, spread over the instances; then it dies.
	redis0, _ := outageFlood(fleet, limit/2, limit)
	if redis0 != limit/2 {
		t.Fatalf("Redis admitted %d of the first %d requests", redis0, limit/2)
	}
	srv.Stop()
	_, local0 := outageFlood(fleet, n*limit, limit)
	windows := []int64{redis0 + local0}
	for range 3 {
		offset.Add(int64(window))
		_, local := outageFlood(fleet, n*limit, limit)
		windows = append(windows, local)
	}
	t.Logf("%d instances, limit %d: admitted per window from Redis's failure on %v (Redis %d, fallback %d in the first); overshoot %.1f%%",
		n, limit, windows, redis0, local0, 100*(float64(windows[0])/limit-1))
	for k, got := range windows {
		if float64(got) > limit*(1+outageEpsilon) {
			t.Errorf("window %d of the outage: %d admitted in all, over %d × (1 + %v)", k, got, limit, outageEpsilon)
		}
	}
	// FailLocal still enforces, and lets each instance's share through:
	// the bound above is not met by refusing everything.
	if local0 == 0 || windows[2] < limit-int64(n) {
		t.Errorf("the fallback admitted %d in Redis's window and %d a full window later, want some and about %d", local0, windows[2], limit)
	}
	for i, o := range fleet {
		if got := o.count(); got != n {
			t.Errorf("instance %d counts %d instances during the outage, want the last count seen, %d", i, got, n)
		}
	}
}

// waitFleetCount waits until every instance of fleet counts n instances.
func waitFleetCount(t *testing.T, fleet []fleetMember, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second) // many heartbeats, on a loaded machine
	for {
		done := true
		for _, o := range fleet {
			done = done && o.count() == n
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the instances did not all count %d within 30 s", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// outageFlood sends requests on one key to every instance of fleet from
// two goroutines each: total requests in all, at most each to one
// instance (a flood of the limit on each empties any fallback's bucket).
// It returns how many Redis admitted, and how many the fallbacks did.
func outageFlood(fleet []fleetMember, total, each int) (fromRedis, local int64) {
	var tickets atomic.Int64
	tickets.Store(int64(total))
	var wg sync.WaitGroup
	for _, o := range fleet {
		var mine atomic.Int64
		for range 2 {
			wg.Go(func() {
				for mine.Add(1) <= int64(each) && tickets.Add(-1) >= 0 {
					d, _ := o.policy.Allow(context.Background(), "one-key", 1)
					switch {
					case d.Allowed && d.Local:
						atomic.AddInt64(&local, 1)
					case d.Allowed:
						atomic.AddInt64(&fromRedis, 1)
					}
				}
			})
		}
	}
	wg.Wait()
	return fromRedis, local
}
