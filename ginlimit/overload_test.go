package ginlimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/identity"
	"github.com/ginlimit/ginlimit/internal/redistest"
)

// overloadCallers is how many goroutines decide at once in the overload
// tests: far more than a client's connection pool (10 per CPU).
const overloadCallers = 1000

// overloadFleet is n application instances on one redis-server: each its
// own go-redis client (default options) and its own Limiter with ginlimit's
// defaults, plus opts.
func overloadFleet(t *testing.T, srv *redistest.Server, n int, opts ...Option) []*Limiter {
	t.Helper()
	var fleet []*Limiter
	for range n {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr})
		t.Cleanup(func() { _ = c.Close() })
		l, err := New(append([]Option{Redis(c)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		fleet = append(fleet, l)
	}
	return fleet
}

// TestExactUnderOverload: with ginlimit's defaults but for the two
// deadlines, 1,000 concurrent callers on a healthy real Redis, for every
// algorithm, on one instance and on two: a limit-100 key admits exactly
// 100, and 300 users each limited to 3 (12 requests each, over HTTP) get
// exactly 3 each. No decision is answered by anything but Redis: waiting
// for a connection is not a failure, so nothing fails open, falls back or
// trips a breaker. Timeout and QueueTimeout are a minute rather than a
// second: on a machine loaded enough (the race detector and busy loops on
// both cores), Redis itself can take longer than a second to reach the last
// of a thousand queued calls, which is a real miss of the deadline, and the
// fallback answering it is right (TestOverloadWithRedisMissingTheTimeout;
// TestFaultPoolExhausted bounds waiting for a connection).
func TestExactUnderOverload(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, alg := range []AlgorithmKind{SlidingLog, SlidingCounter, FixedWindow, TokenBucket} {
		for _, instances := range []int{1, 2} {
			t.Run(fmt.Sprintf("%v/%d instances", alg, instances), func(t *testing.T) {
				pre := prefix(t)
				fleet := overloadFleet(t, srv, instances, Key(pre), Window(time.Hour), Algorithm(alg),
					Timeout(time.Minute), queueTimeout(time.Minute))

				// One hot key, limit 100.
				policies := make([]*Policy, instances)
				for i, l := range fleet {
					var err error
					if policies[i], err = l.Policy(Limit(100)); err != nil {
						t.Fatal(err)
					}
				}
				var admitted, other atomic.Int64
				var firstErr atomic.Value
				var wg sync.WaitGroup
				gate := make(chan struct{})
				for g := range overloadCallers {
					wg.Go(func() {
						<-gate
						d, err := policies[g%instances].Allow(context.Background(), "hot", 1)
						switch {
						case err != nil || d.Err != nil || d.Local:
							other.Add(1)
							firstErr.CompareAndSwap(nil, fmt.Sprintf("%+v, %v", d, err))
						case d.Allowed:
							admitted.Add(1)
						}
					})
				}
				close(gate)
				wg.Wait()
				if other.Load() != 0 || admitted.Load() != 100 {
					t.Fatalf("hot key: %d admitted of %d, %d not decided by Redis (first: %v); want exactly 100, all by Redis",
						admitted.Load(), overloadCallers, other.Load(), firstErr.Load())
				}

				// 300 users, limit 3 each, 12 requests each, over HTTP.
				engines := make([]*gin.Engine, instances)
				for i, l := range fleet {
					e := gin.New()
					e.Use(func(c *gin.Context) { c.Set("uid", c.GetHeader("X-User")) })
					e.POST("/api/coupon/claim", l.RateLimit(Key(pre+"claim:"), Limit(3), Type(User),
						UserIdentity(identity.FromContext("uid"))), ok)
					engines[i] = e
				}
				const users, each = 300, 12
				jobs := make(chan int, users*each)
				for u := range users {
					for range each {
						jobs <- u
					}
				}
				close(jobs)
				var mu sync.Mutex
				got := make([]int, users)
				codes := map[int]int{}
				for g := range overloadCallers {
					wg.Go(func() {
						for u := range jobs {
							r := httptest.NewRequest(http.MethodPost, "/api/coupon/claim", nil)
							r.Header.Set("X-User", "user-"+strconv.Itoa(u))
							w := httptest.NewRecorder()
							engines[g%instances].ServeHTTP(w, r)
							mu.Lock()
							codes[w.Code]++
							if w.Code == http.StatusOK {
								got[u]++
							}
							mu.Unlock()
						}
					})
				}
				wg.Wait()
				if codes[200] != users*3 || codes[429] != users*(each-3) {
					t.Fatalf("codes %v, want %d × 200 and %d × 429", codes, users*3, users*(each-3))
				}
				for u, n := range got {
					if n != 3 {
						t.Fatalf("user %d was admitted %d times, want exactly 3", u, n)
					}
				}
				for _, l := range fleet {
					for _, b := range l.backends {
						if st := b.engine.Breaker().State(); st != "closed" {
							t.Fatalf("a breaker is %s after an overload on a healthy Redis", st)
						}
					}
				}
			})
		}
	}
}

// TestOverloadWithRedisMissingTheTimeout: the same flood with Timeout(1ms),
// which Redis (or this loaded process) really does miss. Those decisions are
// Redis failures, which the default policy, FailLocal, answers with each
// instance's in-process limiter, or saturation where Redis answered other
// calls in time, which is refused: what is admitted beyond the limit is
// bounded by one more limit per instance (LocalInstances(1)), never
// unbounded.
func TestOverloadWithRedisMissingTheTimeout(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, instances := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d instances", instances), func(t *testing.T) {
			fleet := overloadFleet(t, srv, instances, Key(prefix(t)), Window(time.Hour), Timeout(time.Millisecond))
			policies := make([]*Policy, instances)
			for i, l := range fleet {
				var err error
				if policies[i], err = l.Policy(Limit(100)); err != nil {
					t.Fatal(err)
				}
			}
			var admitted, fromRedis, local, errs atomic.Int64
			var wg sync.WaitGroup
			for g := range overloadCallers {
				wg.Go(func() {
					d, err := policies[g%instances].Allow(context.Background(), "hot", 1)
					if err != nil {
						errs.Add(1)
						if !d.Local && !errors.Is(err, ErrCircuitOpen) && d.Allowed {
							t.Errorf("a failed decision admitted without the fallback: %+v, %v", d, err)
						}
					}
					if d.Local {
						local.Add(1)
					}
					if d.Allowed {
						admitted.Add(1)
						if !d.Local {
							fromRedis.Add(1)
						}
					}
				})
			}
			wg.Wait()
			bound := int64(100 + 100*instances)
			t.Logf("Timeout(1ms), %d instance(s), limit 100: %d admitted (%d by Redis, %d by the fallback), %d decisions failed over to it, %d errors",
				instances, admitted.Load(), fromRedis.Load(), admitted.Load()-fromRedis.Load(), local.Load(), errs.Load())
			if fromRedis.Load() > 100 || admitted.Load() > bound {
				t.Fatalf("admitted %d (%d by Redis), want at most %d: the limit plus each instance's fallback", admitted.Load(), fromRedis.Load(), bound)
			}
		})
	}
}
