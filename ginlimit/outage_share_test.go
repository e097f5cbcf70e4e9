package ginlimit

import (
	"context"
	"math"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ginlimit/ginlimit/internal/redistest"
	"github.com/ginlimit/ginlimit/internal/testtier"
)

// outageBound is the most docs/operations.md lets a fleet of n instances
// admit on one key in the window Redis fails in, Redis's admissions
// included: limit × (1 + (n − 1)/n), in whole requests.
func outageBound(limit, n int) int64 {
	return int64(math.Floor(float64(limit) * (1 + float64(n-1)/float64(n))))
}

// TestOutageShareBelowOne: 4 instances share a rule of Limit(1) per 24 h
// (the demo's voucher), so each one's share is a quarter of a request.
// Redis is stopped before anyone claims, and every instance is flooded on
// the key, window after window (the fallback's clock moves a window at a
// time: nothing depends on the machine's speed). No window may admit more
// than the documented limit × (1 + (n − 1)/n), one claim: a share rounded
// up to 1 gave one claim per instance in every window, and a bucket that
// holds one unit while its share is a quarter gave all 4 instances a
// claim in the same window once their quarters had added up. A share
// below one request admits nothing.
func TestOutageShareBelowOne(t *testing.T) {
	t.Parallel()
	const limit, n, window, windows = 1, 4, 24 * time.Hour, 8
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
	srv.Stop()

	var per []int64
	for range windows {
		_, local := outageFlood(fleet, 4*limit)
		per = append(per, local)
		offset.Add(int64(window))
	}
	t.Logf("Limit(%d) per %v on %d instances, admitted per window of the outage: %v", limit, window, n, per)
	bound := outageBound(limit, n)
	for k, got := range per {
		if got > bound {
			t.Errorf("window %d of the outage: %d admitted, over the documented %d × (1 + (n−1)/n) = %d", k, got, limit, bound)
		}
	}
	if want := make([]int64, windows); !slices.Equal(per, want) {
		t.Errorf("admitted per window %v, want %v: a share below one request admits nothing", per, want)
	}
}

// TestOutageFleetRestarts: 2 instances share a rule of Limit(10) per
// hour; Redis admits the 10, and dies. Both instances are then replaced,
// each by a Limiter made with New while Redis is down, as a crash loop, a
// deploy or an autoscale step does. The new instances have never heard
// from Redis: they know neither the key nor the fleet, and refuse as
// FailClosed would (503) rather than start from a budget. The fleet's
// total stays within the documented limit × (1 + (n − 1)/n).
func TestOutageFleetRestarts(t *testing.T) {
	testtier.Long(t)
	t.Parallel()
	const limit, n = 10, 2
	srv := redistest.Start(t)
	pfx := prefix(t)
	opts := []Option{Key(pfx), Window(time.Hour), Limit(limit)}
	fleet := make([]fleetMember, n)
	for i := range fleet {
		fleet[i] = newMember(t, srv, opts...)
	}
	waitFleetCount(t, fleet, n)
	fromRedis := outageRounds(t, fleet, limit/n)
	if fromRedis != limit {
		t.Fatalf("Redis admitted %d of the first %d requests", fromRedis, limit)
	}
	srv.Stop()
	for i := range fleet {
		_ = fleet[i].limiter.Close()
		fleet[i] = newMember(t, srv, opts...)
	}
	_, local := outageFlood(fleet, 2*limit)
	t.Logf("Limit(%d) on %d instances restarted during the outage: Redis admitted %d, the new instances %d", limit, n, fromRedis, local)
	if bound := outageBound(limit, n); fromRedis+local > bound {
		t.Errorf("%d admitted in all (Redis %d, the restarted instances %d), over the documented %d × (1 + (n−1)/n) = %d",
			fromRedis+local, fromRedis, local, limit, bound)
	}
	// The answer is FailClosed's: a 503, never a 429 with made-up counters.
	d, err := fleet[0].policy.Allow(context.Background(), "one-key", 1)
	if err == nil || d.Allowed || d.Local {
		t.Errorf("a fresh instance during the outage decided %+v, %v: want refused, not by the fallback, with the error", d, err)
	}
	r := gin.New()
	r.GET("/", fleet[1].limiter.RateLimit(opts...), ok)
	if w := do(r, http.MethodGet, "/", nil); w.Code != http.StatusServiceUnavailable {
		t.Errorf("a fresh instance during the outage answered %d, want 503", w.Code)
	}
}
