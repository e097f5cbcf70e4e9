package ginlimit

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"
)

// TestLimitedRequestAllocations: a request that one rate rule admits,
// through the middleware and go-redis, makes at most 8 allocations: the
// request (1), its key (1), gin's Keys map that DecisionFrom reads (2), the
// call's memory (1: see engine's wire), go-redis's command (1), the key
// boxed among its arguments (1) and the reply (1). The client's replies are
// canned, made anew for each command as go-redis's reader makes a real
// one, so the count is the one a real client sees, go-redis's
// auto-pipeliner aside (BenchmarkMiddlewareRealRedis/limited_route). The
// middleware is called on one gin Context, emptied as gin empties it
// between requests, rather than through gin's pool of Contexts, which the
// race detector makes allocate at random.
func TestLimitedRequestAllocations(t *testing.T) {
	const want = 8
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	rdb.AddHook(cannedReply{})
	t.Cleanup(func() { _ = rdb.Close() })
	for _, tc := range []struct {
		name string
		typ  Dimension
	}{{"Method", Method}, {"IP", IP}} {
		t.Run(tc.name, func(t *testing.T) {
			limit := testLimit(Redis(rdb), Type(tc.typ), Limit(benchLimit))
			w := httptest.NewRecorder()
			c, _ := gin.CreateTestContext(w)
			c.Request = httptest.NewRequest(http.MethodGet, "/r/1", nil)
			c.Request.RemoteAddr = "192.0.2.1:1234"
			serve := func() {
				c.Keys = nil
				clear(w.Header())
				limit(c)
			}
			serve() // the first reply tells the engine the script's reply shape
			if d, ok := DecisionFrom(c); !ok || !d.Allowed || d.Local || w.Header().Get("X-Ratelimit-Remaining") == "" {
				t.Fatalf("decision %+v, headers %v: the decision did not come from the (canned) script", d, w.Header())
			}
			if n := leastAllocs(200, serve); n > want {
				t.Errorf("a limited request makes %v allocations, want at most %d", n, want)
			}
		})
	}
}

// leastAllocs is the least of five testing.AllocsPerRun(runs, f).
// AllocsPerRun counts every allocation of the process, and the limiters of
// this test and of earlier ones keep goroutines that allocate now and then
// (the overrides' poll, the heartbeat); f's own count is the same on every
// run, so the least is f's, and a run that met a poll only counts more.
func leastAllocs(runs int, f func()) float64 {
	least := testing.AllocsPerRun(runs, f)
	for range 4 {
		least = min(least, testing.AllocsPerRun(runs, f))
	}
	return least
}
