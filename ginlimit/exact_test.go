package ginlimit

// Every algorithm stays exact under real concurrency, on one redis-server
// and on a 3-master cluster: no more admitted than the limit, across SCRIPT
// FLUSH and in any window-long span of Redis's own clock.

import (
	"cmp"
	"context"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/ginlimit/internal/rule"
	"github.com/ginlimit/ginlimit/internal/redistest"
	"github.com/ginlimit/ginlimit/lua"
)

// uncrossedWindow is a window no test run crosses: the fixed window's
// boundaries are aligned on the clock, so it takes the longest.
func uncrossedWindow(alg AlgorithmKind) time.Duration {
	if alg == FixedWindow {
		return rule.MaxWindow
	}
	return 24 * time.Hour
}

// TestConcurrentExactEveryAlgorithm: 32 goroutines race on one key of
// each algorithm, with costs of 1 to 3, while the scripts are flushed from
// Redis midway (NOSCRIPT); the units admitted never exceed the limit, and
// once the race is over, requests of cost 1 fill it exactly. On one
// redis-server and on a 3-master cluster.
func TestConcurrentExactEveryAlgorithm(t *testing.T) {
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
			t.Run(tg.name+"/"+string(alg), func(t *testing.T) {
				p := mustPolicy(t, Redis(tg.client), Key(prefix(t)), Window(uncrossedWindow(alg)), Limit(limit), Algorithm(alg), DenyCache(0), autoPipeline(tg.pipe))
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
							d, err := p.Allow(ctx, "hot", n)
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
					d, err := p.Allow(ctx, "hot", 1)
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

// TestRedisClockWindowExact: on the Redis clock, 16 goroutines send
// requests of cost 1 to 3 to one key, through a window of about three
// limits' worth of their own decisions (40 ms on a quiet machine, longer on
// a loaded one, measured first), until there have been at least 100
// admissions, 100 rejections and 10 windows, so that entries leave the
// window all the time (the sliding log's exact newest entries are made and
// outlived again and again). Every
// decision carries Redis's time (Decision.Time); afterwards, sorted by it,
// with each admission in the window while its time rounded up to the
// millisecond (the log's record of it) is after T - w: at no admission at T
// do the admissions in the window hold more than the limit, and no
// rejection at T had room (the admissions up to T in the window, ties
// included, plus its cost fit). On one redis-server and on a cluster.
func TestRedisClockWindowExact(t *testing.T) {
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
			warm := mustPolicy(t, Redis(tg.client), Key(prefix(t)+"warm:"), Window(time.Hour), Limit(lua.MaxLogLimit), DenyCache(0))
			var made atomic.Int64
			var wg sync.WaitGroup
			warmStart := time.Now()
			measureFrom := warmStart.Add(200 * time.Millisecond) // connections and slots first
			for range 16 {
				wg.Go(func() {
					for time.Since(warmStart) < 500*time.Millisecond {
						if _, err := warm.Allow(context.Background(), "w", 1); err != nil {
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
						d, err := p.Allow(context.Background(), "hot", n)
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
				// Units admitted up to d.at, ties after i included, whose
				// time rounded up to the millisecond is after d.at - w: those
				// after the last whole millisecond at or before d.at - w.
				cut := d.at - w
				units := through(d.at) - through(cut-cut%1000)
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
