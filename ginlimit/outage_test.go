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
	"github.com/ginlimit/ginlimit/internal/testtier"
)

// outageEpsilon is the overshoot docs/operations.md states for traffic
// spread over the instances, in the window Redis fails in and after: the
// fleet admits at most limit × (1 + outageEpsilon) per window.
const outageEpsilon = 0.1

// fleetMember is one application instance of the outage test: its own
// Limiter on its own client of the shared redis-server.
type fleetMember struct {
	limiter *Limiter
	client  redis.Scripter
	policy  *Policy
}

// count is the instance's count of the instances sharing its Redis.
func (o fleetMember) count() int {
	return o.limiter.instancesFor(&routeConfig{client: o.client}).Load()
}

// TestOutageOvershoot: 2 and then 4 instances share one real redis-server
// and one rule (120 per hour, on one key); each learns from the heartbeat
// how many they are. Traffic spread over them spends half the limit
// through Redis; then Redis is stopped and every instance is flooded until
// its fallback refuses. The fleet admits at most limit × (1 + ε) in that
// window, counting what Redis admitted, and then, window after window (the
// fallback's clock moved a window at a time, so nothing depends on the
// machine's speed), at most the same again; and each instance keeps the
// count it last saw. The worst case is tested too: all the traffic before
// the outage on one instance, the others' shares unspent, where the first
// window's ε is at most (n − 1)/n.
func TestOutageOvershoot(t *testing.T) {
	testtier.Long(t)
	for _, n := range []int{2, 4} {
		for _, skewed := range []bool{false, true} {
			name := fmt.Sprintf("%d instances, traffic spread", n)
			if skewed {
				name = fmt.Sprintf("%d instances, traffic on one", n)
			}
			t.Run(name, func(t *testing.T) { outageOvershoot(t, n, skewed) })
		}
	}
}

func outageOvershoot(t *testing.T, n int, skewed bool) {
	const limit, window = 120, time.Hour
	srv := redistest.Start(t)
	var offset atomic.Int64 // the fallback's clock, ahead of the wall clock
	clock := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	pfx := prefix(t)
	fleet := make([]fleetMember, n)
	for i := range fleet {
		fleet[i] = newMember(t, srv, Key(pfx), Window(window), Limit(limit))
		fleet[i].policy.route.LocalClock = clock
	}
	waitFleetCount(t, fleet, n)

	// Redis decides half the limit, spread over the instances as a load
	// balancer spreads it, or all through the first; then it dies.
	first := outageEpsilon
	redis0 := int64(0)
	if skewed {
		first = float64(n-1) / float64(n)
		redis0 = outageRounds(t, fleet[:1], limit/2)
	} else {
		redis0 = outageRounds(t, fleet, limit/2/n)
	}
	if redis0 != limit/2 {
		t.Fatalf("Redis admitted %d of the first %d requests", redis0, limit/2)
	}
	srv.Stop()
	_, local0 := outageFlood(fleet, limit)
	windows := []int64{redis0 + local0}
	for range 3 {
		offset.Add(int64(window))
		_, local := outageFlood(fleet, limit)
		windows = append(windows, local)
	}
	t.Logf("%s, limit %d: admitted per window from Redis's failure on %v (Redis %d, fallback %d in the first); overshoot %.1f%%",
		t.Name(), limit, windows, redis0, local0, 100*(float64(windows[0])/limit-1))
	for k, got := range windows {
		eps := outageEpsilon
		if k == 0 {
			eps = first
		}
		if float64(got) > limit*(1+eps) {
			t.Errorf("window %d of the outage: %d admitted in all, over %d × (1 + %.2f)", k, got, limit, eps)
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
	deadline := time.Now().Add(heartbeatWait)
	for {
		done := true
		for _, o := range fleet {
			done = done && o.count() == n
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the instances did not all count %d within %v", n, heartbeatWait)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// outageRounds sends rounds rounds of requests on one key, each round one
// request to every instance of fleet at once, as a load balancer spreads
// traffic: so each instance's last answer is at most a round out of date,
// however the goroutines are scheduled. It returns how many were admitted.
func outageRounds(t *testing.T, fleet []fleetMember, rounds int) int64 {
	t.Helper()
	var admitted atomic.Int64
	for range rounds {
		var wg sync.WaitGroup
		for _, o := range fleet {
			wg.Go(func() {
				d, err := o.policy.Allow(context.Background(), "one-key", 1)
				if err != nil {
					t.Errorf("while Redis is up: %v", err)
				}
				if d.Allowed && !d.Local {
					admitted.Add(1)
				}
			})
		}
		wg.Wait()
	}
	return admitted.Load()
}

// outageFlood sends each requests on one key to every instance of fleet,
// from two goroutines per instance: a flood of the limit on each empties
// any fallback's bucket.
// It returns how many Redis admitted, and how many the fallbacks did.
func outageFlood(fleet []fleetMember, each int) (fromRedis, local int64) {
	var wg sync.WaitGroup
	for _, o := range fleet {
		var mine atomic.Int64
		for range 2 {
			wg.Go(func() {
				for mine.Add(1) <= int64(each) {
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
