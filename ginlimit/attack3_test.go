package ginlimit

// Attack tests (review 3): per-rule single-rule scripts under real
// concurrency, on one redis-server and on a 3-master cluster, for every
// algorithm, with plans, and across SCRIPT FLUSH.

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/identity"
	"github.com/ginlimit/ginlimit/internal/redistest"
)

// attackWindow is a window no test run crosses: the fixed window's
// boundaries are aligned on the clock, so it takes the longest.
func attackWindow(alg AlgorithmKind) time.Duration {
	if alg == FixedWindow {
		return maxWindow
	}
	return 24 * time.Hour
}

// TestAttackConcurrentExactEveryAlgorithm: 32 goroutines race on one key of
// each algorithm, with costs of 1 to 3, while the scripts are flushed from
// Redis midway (NOSCRIPT); the units admitted never exceed the limit, and
// once the race is over, requests of cost 1 fill it exactly. On one
// redis-server and on a 3-master cluster.
func TestAttackConcurrentExactEveryAlgorithm(t *testing.T) {
	t.Parallel()
	type target struct {
		name   string
		client redis.Scripter
		flush  func()
		pipe   bool
	}
	var targets []target
	srv := redistest.Start(t)
	sc := srv.Client()
	flush := func() { sc.ScriptFlush(context.Background()) }
	targets = append(targets, target{"redis", sc, flush, false}, target{"redis-pipelined", sc, flush, true})
	cl := redistest.StartCluster(t)
	cc := cl.Client()
	targets = append(targets, target{"cluster", cc, func() {
		for i := range 3 {
			cl.NodeClient(i).ScriptFlush(context.Background())
		}
	}, false})
	ctx := context.Background()
	const limit = 200
	for _, tg := range targets {
		for _, alg := range []AlgorithmKind{SlidingLog, SlidingCounter, FixedWindow, TokenBucket} {
			t.Run(tg.name+"/"+alg.String(), func(t *testing.T) {
				p := mustPolicy(t, Redis(tg.client), Key(prefix(t)), Window(attackWindow(alg)), Limit(limit), Algorithm(alg), DenyCache(0), AutoPipeline(tg.pipe))
				var units, calls atomic.Int64
				var once sync.Once
				var wg sync.WaitGroup
				for g := range 32 {
					wg.Go(func() {
						for i := range 15 {
							if calls.Add(1) == 200 {
								once.Do(tg.flush)
							}
							n := 1 + (g+i)%3
							d, err := p.AllowN(ctx, "hot", n)
							if err != nil {
								t.Error(err)
								return
							}
							if d.Allowed {
								units.Add(int64(n))
							}
						}
					})
				}
				wg.Wait()
				if t.Failed() {
					return
				}
				if units.Load() > limit {
					t.Fatalf("%d units admitted, limit %d", units.Load(), limit)
				}
				filled := units.Load()
				for filled < limit+5 {
					d, err := p.Allow(ctx, "hot")
					if err != nil {
						t.Fatal(err)
					}
					if !d.Allowed {
						break
					}
					filled++
				}
				if filled != limit {
					t.Fatalf("%d units in the race, %d after filling with cost 1: want exactly %d", units.Load(), filled, limit)
				}
			})
		}
	}
}

// TestAttackConcurrentPlans: routes whose rule has plans (LimitBy), every
// plan its own single-rule script, and a Tiers route, raced by 32
// goroutines with the scripts flushed midway: every plan admits exactly its
// limit, on one redis-server and on a cluster.
func TestAttackConcurrentPlans(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	cl := redistest.StartCluster(t)
	for _, tg := range []struct {
		name   string
		client redis.Scripter
		flush  func()
	}{
		{"redis", srv.Client(), func() { srv.Client().ScriptFlush(context.Background()) }},
		{"cluster", cl.Client(), func() {
			for i := range 3 {
				cl.NodeClient(i).ScriptFlush(context.Background())
			}
		}},
	} {
		for _, alg := range []AlgorithmKind{SlidingLog, SlidingCounter, FixedWindow, TokenBucket} {
			t.Run(tg.name+"/"+alg.String(), func(t *testing.T) {
				w := attackWindow(alg)
				plans := map[string]Plan{"gold": {Limit: 40}, "silver": {Limit: 25, Window: w / 2}, "tiny": {Limit: 3}}
				if alg == SlidingCounter {
					plans["silver"] = Plan{Limit: 25, Window: w / 4}
				}
				want := map[string]int64{"gold": 40, "silver": 25, "tiny": 3, "": 10}
				l, err := New(Redis(tg.client), Timeout(testTimeout), QueueTimeout(testTimeout), UserIdentity(identity.FromContext("uid")))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = l.Close() })
				p, err := l.Policy(Key(prefix(t)), Type(User), Window(w), Limit(10), Algorithm(alg), DenyCache(0),
					LimitBy(func(c *gin.Context) string { return c.GetHeader("X-Plan") }, plans))
				if err != nil {
					t.Fatal(err)
				}
				e := gin.New()
				e.GET("/x", func(c *gin.Context) { c.Set("uid", c.GetHeader("X-User")) }, p.Handler(), ok)
				names := []string{"gold", "silver", "tiny", ""}
				var admitted [4]atomic.Int64
				var calls atomic.Int64
				var once sync.Once
				var wg sync.WaitGroup
				for g := range 32 {
					wg.Go(func() {
						for i := range 8 {
							if calls.Add(1) == 100 {
								once.Do(tg.flush)
							}
							k := (g + i) % 4
							r := httptest.NewRequest(http.MethodGet, "/x", nil)
							r.Header.Set("X-User", "u1")
							r.Header.Set("X-Plan", names[k])
							rec := httptest.NewRecorder()
							e.ServeHTTP(rec, r)
							switch rec.Code {
							case http.StatusOK:
								admitted[k].Add(1)
							case http.StatusTooManyRequests:
							default:
								t.Errorf("plan %q: status %d %s", names[k], rec.Code, rec.Body)
							}
						}
					})
				}
				wg.Wait()
				for k, name := range names {
					if got := admitted[k].Load(); got != want[name] {
						t.Errorf("plan %q: %d admitted of 64, want %d", name, got, want[name])
					}
				}
			})
		}
	}
}

// TestAttackTokenBucketAt2Pow53: settings ginlimit accepts at start-up
// (Window 2^24 µs, Limit 1, Burst 2^29: burst × window = 2^53, the bound
// validate allows) admit a request one µs before GCRA conforms it: the
// script's ahead + cost*window is 2^53 + 1, which rounds to 2^53, the
// capacity. So one unit more than the bucket holds passes.
func TestAttackTokenBucketAt2Pow53(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client()
	window := time.Duration(1<<24) * time.Microsecond
	p := mustPolicy(t, Redis(c), Key(prefix(t)), Algorithm(TokenBucket), Window(window), Limit(1), Burst(1<<29), DenyCache(0))
	now := time.Now().Add(time.Minute).UnixMicro()
	p.clock = func() int64 { return now }
	ctx := context.Background()
	if d, err := p.AllowN(ctx, "k", 1<<29); err != nil || !d.Allowed {
		t.Fatalf("emptying the bucket: %+v, %v", d, err)
	}
	now += 1<<24 - 1 // a token is back at +2^24 µs
	d, err := p.Allow(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if d.Allowed || d.RetryAfter != time.Microsecond {
		t.Fatalf("1 µs before a token is back: allowed %v, retry %v; want rejected, retry 1µs", d.Allowed, d.RetryAfter)
	}
}

// TestAttackExtremeSettings: settings at the edges of what ginlimit accepts
// at start-up, now written into the script text, never make the script
// refuse a call: each rule admits its first request (of cost 1, and the
// most it can cost on a fresh key), then rejects once full when that is
// quick to reach, on a real redis-server with the Redis clock.
func TestAttackExtremeSettings(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client()
	ctx := context.Background()
	maxW := maxWindow
	for i, opts := range [][]Option{
		{Window(time.Millisecond), Limit(1)},
		{Window(time.Millisecond), Limit(1e9)},
		{Window(maxW), Limit(1e9)},
		{Window(maxW), Limit(1)},
		{Window(time.Millisecond + time.Microsecond), Limit(7)},
		{Window(time.Millisecond), Limit(1e9), Algorithm(SlidingCounter), SubWindows(1000)},
		{Window(maxW), Limit(1e9), Algorithm(SlidingCounter), SubWindows(1000)},
		{Window(maxW), Limit(3), Algorithm(SlidingCounter), SubWindows(1)},
		{Window(time.Millisecond + time.Microsecond), Limit(5), Algorithm(SlidingCounter), SubWindows(7)},
		{Window(time.Millisecond), Limit(1e9), Algorithm(FixedWindow)},
		{Window(maxW), Limit(1e9), Algorithm(FixedWindow)},
		{Window(maxW), Limit(1), Algorithm(FixedWindow)},
		{Window(time.Millisecond), Limit(1e9), Algorithm(TokenBucket), Burst(1e9)},
		{Window(time.Millisecond), Limit(1), Algorithm(TokenBucket), Burst(1e9)},
		{Window(maxW), Limit(1), Algorithm(TokenBucket), Burst(9)},
		{Window(maxW), Limit(1e9), Algorithm(TokenBucket), Burst(9)},
		{Window(time.Duration(1<<33) * time.Microsecond), Limit(1e9), Algorithm(TokenBucket), Burst(1 << 20)},
	} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			p := mustPolicy(t, append([]Option{Redis(c), Key(prefix(t)), DenyCache(0)}, opts...)...)
			r := p.rules[0]
			for _, n := range []int{1, r.maxCost - 1} {
				if n < 1 {
					continue
				}
				d, err := p.AllowN(ctx, fmt.Sprint("k", n), n)
				if err != nil || !d.Allowed {
					t.Fatalf("settings %v, cost %d on a fresh key: %+v, %v", r.settings, n, d, err)
				}
			}
			if r.maxCost <= 10 && r.settings[1].(int64) > 60e6 {
				for j := range r.maxCost {
					if _, err := p.Allow(ctx, "full"); err != nil {
						t.Fatalf("settings %v, request %d: %v", r.settings, j, err)
					}
				}
				d, err := p.Allow(ctx, "full")
				if err != nil || d.Allowed || d.RetryAfter <= 0 {
					t.Fatalf("settings %v, full: %+v, %v; want rejected with a retry", r.settings, d, err)
				}
			}
		})
	}
}

// TestAttackRedisClockWindowExact: on the Redis clock, 16 goroutines send
// requests of cost 1 to 3 to one key, through a window of about three
// limits' worth of their own decisions (40 ms on a quiet machine, longer on
// a loaded one, measured first), until there have been at least 100
// admissions, 100 rejections and 10 windows, so that entries leave the
// window all the time (the sliding log's exact newest entries are made and
// outlived again and again). Every
// decision carries Redis's time (Decision.Time); afterwards, sorted by it:
// no window-long span (T - w, T] of admissions holds more than the limit,
// and no rejection at T had room (the admissions up to T, ties included,
// plus its cost fit). On one redis-server and on a cluster.
func TestAttackRedisClockWindowExact(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	cl := redistest.StartCluster(t)
	for _, tg := range []struct {
		name   string
		client redis.Scripter
	}{{"redis", srv.Client()}, {"cluster", cl.Client()}} {
		t.Run(tg.name, func(t *testing.T) {
			const limit = 100
			// The window holds about three limits of the decisions this
			// machine makes now, so that some are rejected however loaded it is.
			warm := mustPolicy(t, Redis(tg.client), Key(prefix(t)+"warm:"), Window(time.Hour), Limit(1e9), DenyCache(0))
			var made atomic.Int64
			var wg sync.WaitGroup
			warmStart := time.Now()
			measureFrom := warmStart.Add(200 * time.Millisecond) // connections and slots first
			for range 16 {
				wg.Go(func() {
					for time.Since(warmStart) < 500*time.Millisecond {
						if _, err := warm.Allow(context.Background(), "w"); err != nil {
							t.Error(err)
							return
						}
						if time.Now().After(measureFrom) {
							made.Add(1)
						}
					}
				})
			}
			wg.Wait()
			rate := float64(made.Load()+1) / time.Since(measureFrom).Seconds()
			window := min(time.Second, max(40*time.Millisecond, time.Duration(3*limit/rate*float64(time.Second)).Truncate(time.Millisecond)))
			p := mustPolicy(t, Redis(tg.client), Key(prefix(t)), Window(window), Limit(limit), DenyCache(0))
			type dec struct {
				at      int64
				cost    int64
				allowed bool
			}
			var mu sync.Mutex
			var all []dec
			var nAdmitted, nRejected atomic.Int64
			start := time.Now()
			enough := func() bool {
				el := time.Since(start)
				return el > time.Minute || nAdmitted.Load() >= 100 && nRejected.Load() >= 100 && el >= 10*window
			}
			for g := range 16 {
				wg.Go(func() {
					for i := 0; !enough(); i++ {
						n := 1 + (g+i)%3
						if (g+i)%5 != 0 {
							n = 1
						}
						d, err := p.AllowN(context.Background(), "hot", n)
						if err != nil {
							t.Error(err)
							return
						}
						if d.Allowed {
							nAdmitted.Add(1)
						} else {
							nRejected.Add(1)
						}
						mu.Lock()
						all = append(all, dec{d.Time.UnixMicro(), int64(n), d.Allowed})
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			if t.Failed() {
				return
			}
			slices.SortStableFunc(all, func(a, b dec) int { return cmp.Compare(a.at, b.at) })
			w := window.Microseconds()
			// upto[i]: units admitted by all[:i].
			upto := make([]int64, len(all)+1)
			for i, d := range all {
				upto[i+1] = upto[i]
				if d.allowed {
					upto[i+1] += d.cost
				}
			}
			// through(t): units admitted at or before t.
			through := func(at int64) int64 {
				return upto[sort.Search(len(all), func(i int) bool { return all[i].at > at })]
			}
			var admitted, rejected int
			for i, d := range all {
				// Units admitted in (d.at - w, d.at], ties after i included.
				units := through(d.at) - through(d.at-w)
				if d.allowed {
					admitted++
					if units > limit {
						t.Fatalf("decision %d at %d: %d units admitted within a window ending there, limit %d", i, d.at, units, limit)
					}
				} else {
					rejected++
					// Without the ties that came later, units can only be
					// smaller: if even with them the request fits, the
					// rejection was wrong.
					if units+d.cost <= limit {
						t.Fatalf("decision %d at %d (cost %d) rejected with %d units in the window, limit %d", i, d.at, d.cost, units, limit)
					}
				}
			}
			t.Logf("window %v: %d decisions: %d admitted, %d rejected", window, len(all), admitted, rejected)
			if admitted < 100 || rejected < 100 {
				t.Fatalf("%d admitted, %d rejected: not both exercised", admitted, rejected)
			}
		})
	}
}

var _ = fmt.Sprint
