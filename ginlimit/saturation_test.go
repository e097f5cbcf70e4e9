package ginlimit

// Saturation told apart from a Redis failure: a decision that gets no
// verdict from Redis because this process is out of connections or a call
// slot is ErrSaturated (never a breaker failure, never an admission, under
// any failure policy), while a Redis that answers nothing in time is a failure, on a
// plain client, a Ring and a cluster, against real redis-servers.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/ginlimit/internal/engine"
	"github.com/ginlimit/ginlimit/internal/redistest"
	"github.com/ginlimit/ginlimit/internal/testtier"
)

// busyPoolDecisions is the busy-pool scenario on client, whose pool has one
// connection: hold, the application's own blocking command, takes it for
// 1.5 s, and meanwhile three decisions are asked of a Limit(1) rule with
// Timeout(100ms), queueTimeout(1s), withBreaker(1, 1m), FailOpen and no deny
// cache (plus extra). Redis is healthy, so none may be admitted beyond the
// limit's one, no breaker may open, and an error must be ErrSaturated.
// It returns how many were admitted, how many breakers are open and the
// last error (one that is not ErrSaturated, if any was).
func busyPoolDecisions(t *testing.T, client redis.Scripter, hold func(context.Context) error, extra ...Option) (admitted, open int, lastErr error) {
	t.Helper()
	ctx := context.Background()
	l, err := New(append([]Option{Redis(client), Timeout(100 * time.Millisecond), queueTimeout(time.Second),
		withBreaker(1, time.Minute), OnFailure(FailOpen), DenyCache(0)}, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	p, err := l.Policy(Key(prefix(t)), Window(time.Hour), Limit(1))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		// The Limiter's upkeep shares the pool: a hold that finds its
		// connection taken by one of the upkeep's calls (at once, with
		// MaxActiveConns) takes it when that call ends.
		for {
			if err := hold(ctx); !errors.Is(err, redis.ErrPoolExhausted) && !errors.Is(err, redis.ErrPoolTimeout) {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	time.Sleep(200 * time.Millisecond)
	// On a loaded machine a decision may come after the hold has ended,
	// and Redis then answers it: lastErr is the last error a decision
	// got, and any other error than ErrSaturated is kept.
	for range 3 {
		d, err := p.Allow(ctx, "client", 1)
		if err != nil && (lastErr == nil || errors.Is(lastErr, ErrSaturated)) {
			lastErr = err
		}
		if d.Allowed {
			admitted++
		}
	}
	<-done
	// The client's breaker, then each master's (a cluster) or shard's (a Ring).
	for _, brk := range append([]*engine.Breaker{p.route.Engine.Breaker()}, p.route.Engine.NodeBreakers()...) {
		if brk.State() == "open" {
			open++
		}
	}
	return admitted, open, lastErr
}

// TestBusyRingPoolKeepsTheBreakerClosed: a busy client is not a failing
// Redis: a decision that cannot get a connection in time is ErrSaturated,
// never trips the breaker and is never answered by FailOpen's unlimited
// admission. poolBusy, which tells a wait for a pooled connection from a
// Redis that does not answer, asks the pool of the shard that serves the
// key: knowing only *redis.Client, on a *redis.Ring it would take a pool
// whose connections the application's own commands hold (here one BLPOP
// on a pool of 1) for a Redis failure on every decision, the breaker would
// open and FailOpen would let requests through.
func TestBusyRingPoolKeepsTheBreakerClosed(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, cte := range []bool{false, true} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", cte), func(t *testing.T) {
			ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": srv.Addr}, PoolSize: 1, ContextTimeoutEnabled: cte})
			t.Cleanup(func() { _ = ring.Close() })
			ctx := context.Background()
			if err := ring.Ping(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			admitted, open, lastErr := busyPoolDecisions(t, ring, func(ctx context.Context) error {
				return ring.BLPop(ctx, 1500*time.Millisecond, prefix(t)+"nothing").Err()
			}, autoPipeline(false))
			if admitted > 1 || open > 0 || (lastErr != nil && !errors.Is(lastErr, ErrSaturated)) {
				t.Fatalf("application holds the Ring's only connection (Redis healthy): %d of 3 admitted at Limit(1), %d breakers open, last error %v", admitted, open, lastErr)
			}
		})
	}
}

// TestBusyPlainPoolKeepsTheBreakerClosed is the control of
// TestBusyRingPoolKeepsTheBreakerClosed: the same application command on a
// plain *redis.Client's pool of 1 gives ErrSaturated, no admission beyond
// the limit's and no open breaker.
func TestBusyPlainPoolKeepsTheBreakerClosed(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 1})
	t.Cleanup(func() { _ = c.Close() })
	admitted, open, lastErr := busyPoolDecisions(t, c, func(ctx context.Context) error {
		return c.BLPop(ctx, 1500*time.Millisecond, prefix(t)+"nothing").Err()
	}, autoPipeline(false))
	if admitted > 1 || open > 0 || !errors.Is(lastErr, ErrSaturated) {
		t.Fatalf("plain client: %d of 3 admitted, %d breakers open, last error %v", admitted, open, lastErr)
	}
}

// TestBusyPoolErrorsAreSaturation: go-redis's own "no connection" errors,
// with the application's BLPOP holding the pool, are saturation too, never
// a Redis failure that FailOpen or FailLocal would answer by admitting: a
// PoolTimeout shorter than the Timeout (ErrPoolTimeout), and MaxActiveConns
// below PoolSize (ErrPoolExhausted, at once; ginlimit takes no more calls
// at once than MaxActiveConns). Before, both admitted 3 of 3 under FailOpen
// and opened the breaker.
func TestBusyPoolErrorsAreSaturation(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for name, opt := range map[string]*redis.Options{
		"PoolTimeout":    {Addr: srv.Addr, PoolSize: 1, PoolTimeout: 30 * time.Millisecond},
		"MaxActiveConns": {Addr: srv.Addr, PoolSize: 10, MaxActiveConns: 1},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := redis.NewClient(opt)
			t.Cleanup(func() { _ = c.Close() })
			admitted, open, lastErr := busyPoolDecisions(t, c, func(ctx context.Context) error {
				return c.BLPop(ctx, 1500*time.Millisecond, prefix(t)+"nothing").Err()
			}, autoPipeline(false))
			if admitted > 1 || open > 0 || !errors.Is(lastErr, ErrSaturated) {
				t.Fatalf("%s: %d of 3 admitted (Limit 1), %d breakers open, last error %v", name, admitted, open, lastErr)
			}
		})
	}
}

// TestBusyClusterPoolKeepsTheBreakerClosed is TestBusyRingPoolKeepsTheBreakerClosed
// on a real 3-master Redis Cluster: the application's BLPOP holds the one
// connection of the master that owns the decision's key.
func TestBusyClusterPoolKeepsTheBreakerClosed(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), PoolSize: 1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = cc.Close() })
	ctx := context.Background()
	if err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return m.Ping(ctx).Err() }); err != nil {
		t.Fatal(err)
	}
	admitted, open, lastErr := busyPoolDecisions(t, cc, func(ctx context.Context) error {
		return cc.BLPop(ctx, 1500*time.Millisecond, "{client}:nothing").Err() // the decision key's slot
	})
	if admitted > 1 || open > 0 || (lastErr != nil && !errors.Is(lastErr, ErrSaturated)) {
		t.Fatalf("application holds the master's only connection (cluster healthy): %d of 3 admitted at Limit(1), %d breakers open, last error %v", admitted, open, lastErr)
	}
}

// healthyTraffic makes decisions on keys, one goroutine each, a
// millisecond apart, until the returned stop is called; stop waits for
// them and returns how many Redis answered.
func healthyTraffic(p *Policy, keys []string) (stop func() int64) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	var answered atomic.Int64
	for _, k := range keys {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				if _, err := p.Allow(context.Background(), k, 1); err == nil {
					answered.Add(1)
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
	return func() int64 {
		close(done)
		wg.Wait()
		return answered.Load()
	}
}

// TestRingSlowShardIsAFailure: a Ring of two shards, one healthy and
// one behind a proxy that delays every reply by 300 ms (a Redis that never
// answers within the 100 ms Timeout, though its PINGs come back within the
// ReadTimeout, so go-redis's heartbeat keeps it in the ring). The slow
// shard answers no call in time: its timeouts are Redis failures and get
// the failure policy (FailOpen: admitted, not the local fallback), exactly
// as on a plain client (TestFaultSlowRedis). The healthy shard's answers
// say nothing about the slow one, so none of its timeouts may be taken for
// saturation.
func TestRingSlowShardIsAFailure(t *testing.T) {
	faultNoLeaks(t)
	srv := redistest.Start(t)
	proxy := startSlowProxy(t, srv.Addr, 300*time.Millisecond)
	for _, cte := range []bool{true, false} {
		t.Run("ContextTimeoutEnabled="+strconv.FormatBool(cte), func(t *testing.T) {
			ring := redis.NewRing(&redis.RingOptions{
				Addrs:                 map[string]string{"fast": srv.Addr, "slow": proxy.Addr()},
				ContextTimeoutEnabled: cte,
				// Room for the calls ginlimit abandons (without
				// ContextTimeoutEnabled they hold their connection until the
				// reply): a full pool is saturation by another rule (poolBusy).
				PoolSize:    200,
				ReadTimeout: time.Second, WriteTimeout: time.Second,
			})
			t.Cleanup(func() { _ = ring.Close() })
			p := mustPolicy(t, Redis(ring), Key(prefix(t)), Window(time.Minute), Limit(1000),
				OnFailure(FailOpen), Timeout(faultTimeout), withBreaker(0, 0))
			redisKey := func(k string) string { return p.route.Rules[0].Prefix + "{" + k + "}" }
			var slowKeys, fastKeys []string
			for i := 0; len(slowKeys) < 4 || len(fastKeys) < 4; i++ {
				k := "k" + strconv.Itoa(i)
				c, err := ring.GetShardClientForKey(redisKey(k))
				if err != nil {
					t.Fatal(err)
				}
				if c.Options().Addr == proxy.Addr() {
					slowKeys = append(slowKeys, k)
				} else {
					fastKeys = append(fastKeys, k)
				}
			}
			stopFast := healthyTraffic(p, fastKeys) // on the fast shard throughout
			var saturated, failedOpen, other atomic.Int64
			var first, firstFailed atomic.Value
			var wg sync.WaitGroup
			for _, k := range slowKeys {
				wg.Go(func() {
					for range 5 {
						d, err := p.Allow(context.Background(), k, 1)
						switch {
						case errors.Is(err, ErrSaturated):
							saturated.Add(1)
							first.CompareAndSwap(nil, fmt.Sprintf("decision %+v, error %v", d, err))
						case err != nil && d.Allowed && !d.Local:
							failedOpen.Add(1)
							firstFailed.CompareAndSwap(nil, err.Error())
						default:
							other.Add(1)
						}
					}
				})
			}
			wg.Wait()
			fastOK := stopFast()
			t.Logf("slow shard: %d saturated, %d failed open, %d other; fast shard answered %d; first failure: %v", saturated.Load(), failedOpen.Load(), other.Load(), fastOK, firstFailed.Load())
			if saturated.Load() != 0 {
				t.Errorf("%d of %d decisions on a shard that answers nothing in time were taken for saturation, because another shard answered; the first: %v",
					saturated.Load(), 5*len(slowKeys), first.Load())
			}
		})
	}
}

// TestClusterPausedMasterIsAFailure: on a three-master cluster, one
// master is paused (CLIENT PAUSE ALL, 1.5 s) while the other two answer
// decisions steadily. Each master is its own node, with its own count of
// calls answered in time, so the paused master's timeouts are Redis
// failures (FailOpen: admitted, not the local fallback), never saturation.
// With PoolSize(200) this holds. With go-redis's default pool (10 per
// CPU) and no ContextTimeoutEnabled, the calls ginlimit abandons hold
// their connections until the reply or the 3 s ReadTimeout, so after
// about a pool's worth of timeouts the master's pool is full, and poolBusy
// alone would take every later timeout for the application's own commands
// holding the pool (ErrSaturated: the local fallback, no failure counted):
// 30 of 40 decisions. A node counts its stranded calls (abandoned, still
// waiting for Redis), and while there are any, a full pool is not the
// application's.
func TestClusterPausedMasterIsAFailure(t *testing.T) {
	testtier.Long(t)
	cl := redistest.StartCluster(t)
	for _, pool := range []int{200, 0} {
		t.Run("PoolSize="+strconv.Itoa(pool), func(t *testing.T) {
			cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), PoolSize: pool})
			t.Cleanup(func() { _ = cc.Close() })
			p := mustPolicy(t, Redis(cc), Key(prefix(t)), Window(time.Minute), Limit(1000),
				OnFailure(FailOpen), Timeout(faultTimeout), withBreaker(0, 0))
			redisKey := func(k string) string { return p.route.Rules[0].Prefix + "{" + k + "}" }
			var slowKeys, fastKeys []string
			for i := 0; len(slowKeys) < 4 || len(fastKeys) < 8; i++ {
				k := "k" + strconv.Itoa(i)
				if cl.MasterForKey(redisKey(k)) == 0 {
					slowKeys = append(slowKeys, k)
				} else {
					fastKeys = append(fastKeys, k)
				}
			}
			for _, k := range append(slowKeys, fastKeys...) { // warm: slots and connections
				if _, err := p.Allow(context.Background(), k, 1); err != nil {
					t.Fatal(err)
				}
			}
			admin := cl.NodeClient(0)
			if err := admin.Do(context.Background(), "client", "pause", "1500", "all").Err(); err != nil {
				t.Fatal(err)
			}
			pausedAt := time.Now()
			stopFast := healthyTraffic(p, fastKeys) // on the other masters throughout
			var saturated, failedOpen, other atomic.Int64
			var first, firstOther atomic.Value
			var wg sync.WaitGroup
			for _, k := range slowKeys {
				wg.Go(func() {
					for time.Since(pausedAt) < time.Second {
						d, err := p.Allow(context.Background(), k, 1)
						switch {
						case errors.Is(err, ErrSaturated):
							saturated.Add(1)
							first.CompareAndSwap(nil, err.Error())
						case err != nil && d.Allowed && !d.Local:
							failedOpen.Add(1)
						default:
							other.Add(1)
							firstOther.CompareAndSwap(nil, fmt.Sprintf("%+v %v", d, err))
						}
					}
				})
			}
			wg.Wait()
			fastOK := stopFast()
			_ = admin.Do(context.Background(), "client", "unpause").Err()
			t.Logf("paused master: %d saturated, %d failed open, %d other (%v); the others answered %d",
				saturated.Load(), failedOpen.Load(), other.Load(), firstOther.Load(), fastOK)
			if saturated.Load() != 0 {
				t.Errorf("%d decisions on a paused master were taken for saturation; the first: %v", saturated.Load(), first.Load())
			}
			time.Sleep(2 * time.Second) // the abandoned calls end before the next round
		})
	}
}

// TestSaturatedProbeKeepsTheBreakerOpen: a call that is saturation
// (ErrSaturated: no verdict on Redis) must not tell the breaker it
// succeeded (done(probe, false)), or a half-open probe taken for
// saturation closes the breaker of a master that answers nothing. On a
// cluster with go-redis's default options the calls ginlimit abandons on a
// paused master hold their connections (until the reply or the 3 s
// ReadTimeout), so once the breaker is half-open the probe finds the
// master's pool full: poolBusy makes it saturation, and a closed breaker
// would let every decision wait the full Timeout again. Want: while the
// master is paused, the breaker lets about one call per open period
// through, and the rest fail fast.
func TestSaturatedProbeKeepsTheBreakerOpen(t *testing.T) {
	cl := redistest.StartCluster(t)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	t.Cleanup(func() { _ = cc.Close() })
	const open = 100 * time.Millisecond
	p := mustPolicy(t, Redis(cc), Key(prefix(t)), Window(time.Minute), Limit(1000),
		OnFailure(FailOpen), Timeout(faultTimeout), withBreaker(3, open))
	redisKey := func(k string) string { return p.route.Rules[0].Prefix + "{" + k + "}" }
	var slowKeys []string
	for i := 0; len(slowKeys) < 8; i++ {
		if k := "k" + strconv.Itoa(i); cl.MasterForKey(redisKey(k)) == 0 {
			slowKeys = append(slowKeys, k)
		}
	}
	for _, k := range slowKeys { // the cluster's slots, the scripts, the pool
		warmUp(t, p, k)
	}
	admin := cl.NodeClient(0)
	if err := admin.Do(context.Background(), "client", "pause", "3000", "all").Err(); err != nil {
		t.Fatal(err)
	}
	defer admin.Do(context.Background(), "client", "unpause")
	const run = 2500 * time.Millisecond
	start := time.Now()
	var slow, saturated, total atomic.Int64
	var wg sync.WaitGroup
	for _, k := range slowKeys {
		wg.Go(func() {
			for time.Since(start) < run {
				t0 := time.Now()
				_, err := p.Allow(context.Background(), k, 1)
				total.Add(1)
				if time.Since(t0) >= faultTimeout {
					slow.Add(1)
				}
				if errors.Is(err, ErrSaturated) {
					saturated.Add(1)
				}
				if errors.Is(err, ErrCircuitOpen) {
					time.Sleep(5 * time.Millisecond)
				}
			}
		})
	}
	wg.Wait()
	// At most: the calls that opened it, the callers that were already
	// waiting, and one probe at a time (each waits the Timeout; a probe
	// taken for saturation lets the next call probe at once), with room to
	// spare (with a breaker that a saturated probe closes, 187 waited it).
	bound := int64(3 + 2*int(run/open) + len(slowKeys))
	t.Logf("%d decisions in %v on a paused master: %d waited the Timeout (bound %d), %d saturated", total.Load(), run, slow.Load(), bound, saturated.Load())
	if slow.Load() > bound {
		t.Errorf("%d decisions waited the full Timeout on a master that answers nothing, more than %d: the breaker did not stay open", slow.Load(), bound)
	}
	time.Sleep(time.Second) // the pause ends; the abandoned calls end
}

// TestSaturationAdmitsNothing: while this process cannot get decisions to
// a healthy Redis in time (every connection slot taken, as by a flood on
// another route), nothing is admitted, under every failure policy: not a
// key Redis said has room, not a key this instance has never seen. Only
// Redis grants while Redis is healthy; every such request is answered 503
// and its handler does not run. Before, the fallback admitted what Redis
// last reported (20 on /partly) and the per-instance share on a key it had
// never seen (50 on /unseen), which, with calls of the same key still on
// the wire, admitted beyond an exact limit.
func TestSaturationAdmitsNothing(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, fp := range []FailPolicy{FailLocal, FailOpen, FailClosed} {
		t.Run(string(fp), func(t *testing.T) {
			t.Parallel()
			l, e := fallbackRoutes(t, srv, OnFailure(fp))
			send := sender(t, e)
			learnFromRedis(t, send)

			saturate(t, l)
			for _, path := range []string{"/partly", "/used", "/unseen", "/banned"} {
				if n := send(path, 10, http.StatusServiceUnavailable); n != 0 {
					t.Errorf("%s under saturation: %d admitted, want none", path, n)
				}
			}
		})
	}
}
