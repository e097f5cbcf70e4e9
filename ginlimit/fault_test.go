package ginlimit

// Fault tests: a real redis-server that is killed, flushed, slow, out of
// pooled connections or answering errors. Each test checks three things
// besides its own case:
//
//   - no decision hung (faultHang: a hang guard, not a performance goal);
//   - no goroutine leaked (faultNoLeaks, checked after every other cleanup);
//   - once Redis was healthy again, the count was exact (faultExact).
//
// They run on shared, loaded 2-core CI machines, where this process may not
// get the CPU for seconds (decisions of 0.6-2.2 s were measured under two
// busy loops and -race). So no outcome depends on a decision beating a
// short deadline: a Timeout is short only where Redis answers nothing at
// all (a proxy that holds every reply, a pool held by the application),
// so that every call there runs out of it however loaded the machine is;
// where Redis answers, the Timeout is long. And a bound on how long a
// decision took is only a hang guard, faultHang, far above any stall of a
// loaded machine and far below faultStall, what the decision would wait
// for if ginlimit's own bound did not hold.
//
// These tests are not parallel: goleak's IgnoreCurrent, taken at a test's
// start, would otherwise see the goroutines of tests running beside it.

import (
	"github.com/ginlimit/ginlimit/ginlimit/internal/rule"

	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/ginlimit/ginlimit/ginlimit/internal/engine"
	"github.com/ginlimit/ginlimit/internal/redistest"
	"github.com/ginlimit/ginlimit/internal/testtier"
	"github.com/ginlimit/ginlimit/lua"
)

const (
	// faultTimeout is the decision timeout of the fault tests in which
	// Redis answers nothing (or the pool is the application's), so that
	// every call runs out of it however loaded the machine is.
	faultTimeout = 100 * time.Millisecond
	// faultStall is what a decision would wait for if ginlimit did not
	// bound it: how long the slow proxy holds a reply, and the clients'
	// ReadTimeout and PoolTimeout in the tests of timeouts.
	faultStall = 2 * time.Minute
	// faultHang is the hang guard: the longest a decision may take in a
	// fault test. It is far above a decision's latency on a loaded machine
	// (its Timeout, the PING that confirms a timeout, and stalls of over
	// 2 s measured with two busy loops) and an order of magnitude below
	// faultStall, so it fails a decision that waited for the stall, never
	// a CPU-starved one.
	faultHang = 10 * time.Second
)

// faultNoLeaks fails t if a goroutine started during t is still running
// once t's other cleanups (clients, proxies, servers) have run. Call it first
// in the test, so that its cleanup runs last. goleak retries for a while,
// which lets goroutines that are already ending finish.
func faultNoLeaks(t *testing.T, opts ...goleak.Option) {
	t.Helper()
	opts = append(opts, goleak.IgnoreCurrent())
	t.Cleanup(func() { goleak.VerifyNone(t, opts...) })
}

// pipelinerOfOpenClient are the goroutines of an auto-pipeliner that is not
// closed (go-redis's full-duplex engine, and its reader), as a package-level
// RateLimit with no Limiter leaves them until they have been idle a while:
// a subtest whose client belongs to its parent lets them be (the parent's
// own check, after the client is closed, does not).
var pipelinerOfOpenClient = []goleak.Option{
	goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9.(*fdEngine).run"),
	goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9.(*fdEngine).session.func2"),
}

// faultClient returns a client closed when t ends (before the leak check).
func faultClient(t *testing.T, o *redis.Options) *redis.Client {
	t.Helper()
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// faultExact checks that a fresh key with limit n, reached through c,
// admits exactly n of 3n concurrent decisions, with no error, and holds n
// entries. It runs with the default deny cache, as in production.
func faultExact(t *testing.T, c *redis.Client, n int) {
	t.Helper()
	p := mustPolicy(t, Redis(c), Key(prefix(t)), Window(time.Minute), Limit(n))
	var admitted, failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for range 3 * n {
		wg.Go(func() {
			<-gate
			d, err := p.Allow(context.Background(), "exact", 1)
			if err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err)
				return
			}
			if d.Allowed {
				admitted.Add(1)
			}
		})
	}
	close(gate)
	wg.Wait()
	if failed.Load() != 0 {
		t.Fatalf("exactness check: %d of %d decisions failed, first: %v", failed.Load(), 3*n, firstErr.Load())
	}
	if admitted.Load() != int64(n) {
		t.Fatalf("exactness check: %d of %d concurrent decisions admitted with limit %d", admitted.Load(), 3*n, n)
	}
	if card, err := logUnits(context.Background(), c, ruleKey(p, 0, "exact")); err != nil || card != int64(n) {
		t.Fatalf("exactness check: the key holds %d entries (%v), want %d", card, err, n)
	}
}

// isTimeout reports whether err says the decision ran out of time: the
// context's deadline (the pool wait, the bounded call) or a socket deadline
// set from it (a client with ContextTimeoutEnabled).
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// checkFailed checks a decision that Redis could not take: an error, carried
// in the decision too, and the failure policy's verdict.
// It reports with t.Errorf, so it may run on any goroutine.
func checkFailed(t *testing.T, what string, fp FailPolicy, d Decision, err error) {
	t.Helper()
	switch {
	case err == nil:
		t.Errorf("%s: no error (decision %+v)", what, d)
	case d.Err == nil || d.Err.Error() != err.Error():
		t.Errorf("%s: decision.Err = %v, want the returned error %v", what, d.Err, err)
	case d.Allowed != (fp == FailOpen) || d.Cached:
		t.Errorf("%s: %v: decision %+v does not follow the failure policy", what, fp, d)
	}
}

// TestFaultRedisKilled: Redis is killed under load from 32 goroutines and
// restarted. No decision hangs (faultHang); errors come only while Redis is
// down (or the breaker has not yet let a probe through), each under the
// failure policy; the breaker opens while Redis is down; decisions come
// from Redis again after the restart; and the count is then exact.
//
// A killed Redis refuses connections, which fails a decision at once, so
// the Timeout need not be short to be tested here (TestFaultSlowRedis does
// that): it is faultStall, so that no decision of a Redis that is up can run
// out of it on a loaded machine and count as an error while Redis was up,
// and a decision that waited for it, instead of failing fast, trips the hang
// guard. The phases end on what happened (the breaker seen open and
// answering, a decision from the restarted Redis), not after set times.
func TestFaultRedisKilled(t *testing.T) {
	for _, fp := range []FailPolicy{FailOpen, FailClosed} {
		t.Run(string(fp), func(t *testing.T) {
			faultNoLeaks(t)
			srv := redistest.Start(t)
			c := faultClient(t, &redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true,
				ReadTimeout: faultStall, WriteTimeout: faultStall})
			// A limit never reached, so that every successful decision is
			// Redis's, never the deny cache's.
			p := mustPolicy(t, Redis(c), Key(prefix(t)), Window(time.Minute), Limit(lua.MaxLogLimit),
				OnFailure(fp), Timeout(faultStall))
			if p.route.Engine.Breaker() == nil {
				t.Fatal("the default circuit breaker is off")
			}

			type call struct {
				start, end time.Duration // since base
				d          Decision
				err        error
			}
			base := time.Now()
			var restartedAt, recoveredAt atomic.Int64            // since base; 0: not yet
			var fromRedis, byBreaker, afterRecovery atomic.Int64 // so far
			var stop atomic.Bool
			calls := make([][]call, 32)
			var wg sync.WaitGroup
			for g := range calls {
				wg.Go(func() {
					key := "g" + strconv.Itoa(g)
					for !stop.Load() {
						start := time.Since(base)
						d, err := p.Allow(context.Background(), key, 1)
						end := time.Since(base)
						calls[g] = append(calls[g], call{start, end, d, err})
						if err == nil {
							fromRedis.Add(1)
						}
						if errors.Is(err, ErrCircuitOpen) {
							byBreaker.Add(1)
						}
						if r := restartedAt.Load(); err == nil && r != 0 && int64(start) >= r {
							recoveredAt.CompareAndSwap(0, int64(end))
							if rec := recoveredAt.Load(); int64(start) > rec {
								afterRecovery.Add(1)
							}
						}
						// Paced, like requests arriving: 32 goroutines
						// spinning on the open breaker's instant answers
						// would starve the scheduler of a 2-core machine.
						time.Sleep(time.Millisecond)
					}
				})
			}
			// Stop the load however the test ends; a no-op once stopped.
			defer func() { stop.Store(true); wg.Wait() }()

			// waitFor waits for cond, up to 30 s: an order of magnitude above
			// the breaker's open time and a loaded machine's stalls.
			waitFor := func(what string, cond func() bool) {
				t.Helper()
				for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(2 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("%s: not within 30 s (breaker %s)", what, p.route.Engine.Breaker().State())
					}
				}
			}
			waitFor("decisions from Redis before the kill", func() bool { return fromRedis.Load() >= 64 })
			stopAt := time.Since(base)
			srv.Stop()
			// Redis stays down until the breaker is open and has answered.
			sawOpen := false
			waitFor("the breaker opening while Redis is down", func() bool {
				if p.route.Engine.Breaker().State() == "open" {
					sawOpen = true
				}
				return sawOpen && byBreaker.Load() > 0
			})
			srv.Restart()
			restarted := time.Since(base)
			restartedAt.Store(int64(restarted))
			waitFor("a decision from the restarted Redis", func() bool { return recoveredAt.Load() != 0 })
			// Keep going once recovered: every goroutine's next decision.
			waitFor("decisions after the recovery", func() bool { return afterRecovery.Load() >= 64 })
			stop.Store(true)
			wg.Wait()

			recovered := time.Duration(recoveredAt.Load())
			var total, okBefore, failedDown, circuitOpen, okAfter, saturated int
			for _, cs := range calls {
				for _, c := range cs {
					total++
					if el := c.end - c.start; el > faultHang {
						t.Errorf("a decision started at %v took %v (killed at %v, restarted at %v): it waited for the %v Timeout: %+v, %v", c.start, el, stopAt, restarted, faultStall, c.d, c.err)
					}
					if errors.Is(c.err, ErrSaturated) {
						// This process could not get the call to Redis in
						// time (a wait for a slot): no verdict on Redis,
						// whenever it happens.
						saturated++
						continue
					}
					if c.err == nil {
						if c.d.Cached || c.d.Time.IsZero() || !c.d.Allowed {
							t.Errorf("decision at %v: %+v, want an admission from Redis", c.start, c.d)
						}
						if c.end < stopAt {
							okBefore++
						}
						if c.start > recovered {
							okAfter++
						}
						continue
					}
					// Errors only while down: the call overlapped the time
					// from the kill until the first decision from the
					// restarted Redis.
					if c.end < stopAt || c.start > recovered {
						t.Errorf("a decision from %v to %v failed while Redis was up (killed at %v, restarted at %v, recovered at %v): %v",
							c.start, c.end, stopAt, restarted, recovered, c.err)
					}
					checkFailed(t, fmt.Sprintf("decision at %v", c.start), fp, c.d, c.err)
					failedDown++
					if errors.Is(c.err, ErrCircuitOpen) {
						circuitOpen++
					}
				}
			}
			t.Logf("%d decisions: %d from Redis before the kill, %d failed while down (%d by the open breaker), %d from Redis after recovery, %d saturation answers; recovered %v after the restart",
				total, okBefore, failedDown, circuitOpen, okAfter, saturated, recovered-restarted)
			if okBefore == 0 || failedDown == 0 || circuitOpen == 0 || okAfter == 0 {
				t.Errorf("the load did not cover every phase: %d ok before, %d failed, %d by the breaker, %d ok after", okBefore, failedDown, circuitOpen, okAfter)
			}
			faultExact(t, c, 100)
		})
	}
}

// TestFaultScriptFlush: SCRIPT FLUSH, 20 times every 5 ms, while 32
// goroutines race on one key with limit 500 and no deny cache: no decision
// fails (EVALSHA falls back to EVAL on NOSCRIPT) and exactly 500 are
// admitted, directly and through the auto-pipeliner.
func TestFaultScriptFlush(t *testing.T) {
	for _, tc := range []struct {
		name     string
		pipeline bool
	}{{"direct", false}, {"auto-pipelined", true}} {
		t.Run(tc.name, func(t *testing.T) {
			faultNoLeaks(t)
			srv := redistest.Start(t)
			c := faultClient(t, &redis.Options{Addr: srv.Addr})
			admin := faultClient(t, &redis.Options{Addr: srv.Addr})
			const limit = 500
			p := mustPolicy(t, Redis(c), Key(prefix(t)), Window(time.Minute), Limit(limit), DenyCache(0), autoPipeline(tc.pipeline))
			ctx := context.Background()

			var flushing atomic.Bool
			flushing.Store(true)
			var calls, admitted, failed, duringFlushes atomic.Int64
			var firstErr atomic.Value
			var wg sync.WaitGroup
			for range 32 {
				wg.Go(func() {
					// Until the flushes are over and enough decisions were
					// made to exceed the limit, then two more: the last
					// flush is met by at least one EVALSHA.
					for after := 0; after < 2; {
						if !flushing.Load() && calls.Load() >= 3*limit {
							after++
						}
						start := time.Now()
						d, err := p.Allow(ctx, "k", 1)
						if el := time.Since(start); el > 2*testTimeout+faultHang {
							t.Errorf("a decision took %v", el)
						}
						calls.Add(1)
						if flushing.Load() {
							duringFlushes.Add(1)
						}
						switch {
						case err != nil:
							failed.Add(1)
							firstErr.CompareAndSwap(nil, err)
						case d.Allowed:
							admitted.Add(1)
						}
					}
				})
			}
			for range 20 {
				time.Sleep(5 * time.Millisecond)
				if err := admin.ScriptFlush(ctx).Err(); err != nil {
					t.Errorf("SCRIPT FLUSH: %v", err)
				}
			}
			flushing.Store(false)
			wg.Wait()

			evals := evalCalls(t, admin)
			t.Logf("%d decisions, %d during the flushes, %d admitted, %d EVAL (after NOSCRIPT)", calls.Load(), duringFlushes.Load(), admitted.Load(), evals)
			if failed.Load() != 0 {
				t.Fatalf("%d decisions failed across SCRIPT FLUSH, first: %v", failed.Load(), firstErr.Load())
			}
			if admitted.Load() != limit {
				t.Fatalf("%d admitted, want exactly %d", admitted.Load(), limit)
			}
			if card, err := logUnits(ctx, admin, ruleKey(p, 0, "k")); err != nil || card != limit {
				t.Fatalf("the key holds %d entries (%v), want %d", card, err, limit)
			}
			if duringFlushes.Load() == 0 || evals == 0 {
				t.Fatalf("the flushes did not meet the load: %d decisions during them, %d EVAL", duringFlushes.Load(), evals)
			}
		})
	}
}

// evalCalls returns how many EVAL commands the server has run.
func evalCalls(t *testing.T, c *redis.Client) int {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(info) {
		if rest, ok := strings.CutPrefix(line, "cmdstat_eval:calls="); ok {
			n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			return n
		}
	}
	return 0
}

// slowProxy forwards TCP connections to a Redis server and delays every
// chunk the server sends back: a slow Redis.
type slowProxy struct {
	ln       net.Listener
	upstream string
	delay    atomic.Int64 // ns
	chunk    int          // the most bytes forwarded per delay
	done     chan struct{}
	wg       sync.WaitGroup

	mu      sync.Mutex
	conns   []net.Conn
	closed  bool
	changed chan struct{} // closed and replaced by SetDelay
}

// startSlowProxy starts a proxy to upstream on 127.0.0.1 that forwards up
// to 32 KiB per delay; it is closed when t ends, or earlier by Close.
func startSlowProxy(t *testing.T, upstream string, delay time.Duration) *slowProxy {
	t.Helper()
	return startSlowProxyChunks(t, upstream, delay, 32<<10)
}

// startSlowProxyChunks is startSlowProxy forwarding at most chunk bytes per
// delay: a Redis that answers slowly but steadily.
func startSlowProxyChunks(t *testing.T, upstream string, delay time.Duration, chunk int) *slowProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &slowProxy{ln: ln, upstream: upstream, chunk: chunk, done: make(chan struct{}), changed: make(chan struct{})}
	p.delay.Store(int64(delay))
	p.wg.Go(p.accept)
	t.Cleanup(p.Close)
	return p
}

func (p *slowProxy) Addr() string { return p.ln.Addr().String() }

// SetDelay changes the delay of the chunks read from now on, and of those
// waiting now, counted from when each was read.
func (p *slowProxy) SetDelay(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay.Store(int64(d))
	close(p.changed)
	p.changed = make(chan struct{})
}

// wait holds a chunk read at read for the delay, and reports false when the
// proxy is closed meanwhile.
func (p *slowProxy) wait(read time.Time) bool {
	for {
		p.mu.Lock()
		changed := p.changed
		p.mu.Unlock()
		left := time.Duration(p.delay.Load()) - time.Since(read)
		if left <= 0 {
			return true
		}
		timer := time.NewTimer(left)
		select {
		case <-timer.C:
			return true
		case <-changed:
			timer.Stop()
		case <-p.done:
			timer.Stop()
			return false
		}
	}
}

// track remembers c, to be closed by Close; it reports false, having closed
// c, when the proxy is already closed.
func (p *slowProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns = append(p.conns, c)
	return true
}

func (p *slowProxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(client) {
			return
		}
		server, err := net.Dial("tcp", p.upstream)
		if err != nil {
			client.Close()
			continue
		}
		if !p.track(server) {
			return
		}
		p.wg.Go(func() {
			_, _ = io.Copy(server, client)
			server.Close()
			client.Close()
		})
		p.wg.Go(func() {
			defer client.Close()
			defer server.Close()
			for {
				buf := make([]byte, p.chunk)
				n, err := server.Read(buf)
				if n > 0 {
					if !p.wait(time.Now()) {
						return
					}
					if _, werr := client.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		})
	}
}

// Close stops the proxy, closes every connection and waits for its
// goroutines.
func (p *slowProxy) Close() {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.done)
		p.ln.Close()
		for _, c := range p.conns {
			c.Close()
		}
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// TestFaultSlowRedis: behind a proxy that holds every reply for
// faultStall (a hung Redis), on clients whose own ReadTimeout is faultStall
// too, each decision with Timeout(100ms) ends with a timeout error under the
// failure policy, on a client that bounds reads by the context and on a
// default one (whose calls ginlimit makes on a clone that does). Without
// ginlimit's bound a decision would wait for the client's ReadTimeout: the
// hang guard (faultHang) is far below it, and far above a loaded machine's
// stalls. The proxy answers nothing, so every call runs out of its Timeout
// however late this process runs. Once the proxy is fast again, the same
// client counts exactly.
func TestFaultSlowRedis(t *testing.T) {
	testtier.Long(t)
	faultNoLeaks(t)
	srv := redistest.Start(t)
	for _, ctxAware := range []bool{true, false} {
		for _, fp := range []FailPolicy{FailOpen, FailClosed} {
			name := "default client"
			if ctxAware {
				name = "ContextTimeoutEnabled"
			}
			t.Run(name+" "+string(fp), func(t *testing.T) {
				faultNoLeaks(t, pipelinerOfOpenClient...)
				proxy := startSlowProxy(t, srv.Addr, faultStall)
				c := faultClient(t, &redis.Options{Addr: proxy.Addr(), ContextTimeoutEnabled: ctxAware,
					ReadTimeout: faultStall, WriteTimeout: faultStall})
				// No breaker: every decision meets the slow Redis.
				p := mustPolicy(t, Redis(c), Key(prefix(t)), Window(time.Minute), Limit(1000),
					OnFailure(fp), Timeout(faultTimeout), withBreaker(0, 0))
				if p.route.Engine.HonoursContext() != ctxAware {
					t.Fatalf("honours = %v for ContextTimeoutEnabled = %v", p.route.Engine.HonoursContext(), ctxAware)
				}
				for round := range 3 {
					var wg sync.WaitGroup
					for g := range 8 {
						wg.Go(func() {
							start := time.Now()
							d, err := p.Allow(context.Background(), "k"+strconv.Itoa(g), 1)
							if el := time.Since(start); el > faultHang {
								t.Errorf("round %d: a decision took %v with a %v timeout: it waited for the client's %v ReadTimeout", round, el, faultTimeout, faultStall)
							}
							checkFailed(t, "slow Redis", fp, d, err)
							if !isTimeout(err) {
								t.Errorf("round %d: error %v is not a timeout", round, err)
							}
						})
					}
					wg.Wait()
					if t.Failed() {
						return // a round that hung took faultStall; one is enough
					}
				}
				proxy.SetDelay(0)
				faultExact(t, c, 50)
				// The cleanups close the client and the proxy.
			})
		}
	}
}

// TestFaultPoolExhausted: both connections of a PoolSize(2) client are held
// by the application's own BLPOPs (for up to faultStall), and 20 concurrent
// decisions with Timeout(100ms) and queueTimeout(100ms) wait for a
// connection. Redis is healthy, so this is saturation, not failure: each
// decision ends with ErrSaturated from a timeout, the breaker stays closed,
// and nothing is admitted, under FailOpen as under FailClosed: only Redis
// grants while Redis is healthy. No connection frees up while they wait,
// so every decision runs out of its bound however loaded the machine is;
// without the bound it would wait for the client's PoolTimeout or the
// BLPOPs (faultStall), which the hang guard (faultHang) is far below. Once
// the connections are free the same client counts exactly.
func TestFaultPoolExhausted(t *testing.T) {
	faultNoLeaks(t)
	srv := redistest.Start(t)
	admin := faultClient(t, &redis.Options{Addr: srv.Addr})
	ctx := context.Background()
	for _, ctxAware := range []bool{true, false} {
		for _, fp := range []FailPolicy{FailOpen, FailClosed} {
			name := "default client"
			if ctxAware {
				name = "ContextTimeoutEnabled"
			}
			t.Run(name+" "+string(fp), func(t *testing.T) {
				faultNoLeaks(t)
				c := faultClient(t, &redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: ctxAware,
					PoolSize: 2, PoolTimeout: faultStall})
				pfx := prefix(t)
				p := mustPolicy(t, Redis(c), Key(pfx), Window(time.Minute), Limit(1000),
					OnFailure(fp), Timeout(faultTimeout), queueTimeout(faultTimeout), withBreaker(1, time.Hour),
					autoPipeline(false)) // the direct path: the auto-pipeliner keeps a connection of its own

				hold := pfx + "hold"
				var holders sync.WaitGroup
				for range 2 {
					holders.Go(func() {
						if err := c.BLPop(ctx, faultStall, hold).Err(); err != nil {
							t.Errorf("BLPOP holder: %v", err)
						}
					})
				}
				defer holders.Wait()
				released := false
				release := func() {
					if !released {
						released = true
						if err := admin.RPush(ctx, hold, "a", "b").Err(); err != nil {
							t.Errorf("RPUSH: %v", err)
						}
					}
				}
				defer release()
				for deadline := time.Now().Add(5 * time.Second); blockedClients(t, admin) < 2; time.Sleep(5 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatal("the BLPOP holders never blocked")
					}
				}

				var wg sync.WaitGroup
				var queueTimedOut atomic.Int64
				gate := make(chan struct{})
				for g := range 20 {
					wg.Go(func() {
						<-gate
						start := time.Now()
						d, err := p.Allow(ctx, "k"+strconv.Itoa(g), 1)
						if errors.Is(err, engine.ErrQueueTimedOut) {
							queueTimedOut.Add(1)
						}
						if el := time.Since(start); el > faultHang {
							t.Errorf("a decision waiting for a pooled connection took %v with a %v timeout: it waited for a connection", el, faultTimeout)
						}
						if !errors.Is(err, ErrSaturated) || !isTimeout(err) || d.Err == nil {
							t.Errorf("error %v (decision %+v): want ErrSaturated from a timeout", err, d)
						}
						if d.Allowed || d.Local {
							t.Errorf("%v: decision %+v: want the saturation answer (refused, by no fallback)", fp, d)
						}
					})
				}
				close(gate)
				wg.Wait()
				// 2 decisions hold the node's 2 slots, each until its
				// Timeout, and the others wait for a slot: all but a few of
				// them must have run out of the QueueTimeout, since a slot
				// frees only when its call has waited out the Timeout.
				if queueTimedOut.Load() == 0 {
					t.Errorf("no decision ran out of the QueueTimeout waiting for one of the 2 slots: the wait for a slot is not bounded by it")
				}
				if st := p.route.Engine.Breaker().State(); st != "closed" {
					t.Errorf("waiting for a connection opened the breaker (%s): it is not a Redis failure", st)
				}
				release()
				holders.Wait()
				faultExact(t, c, 50)
			})
		}
	}
}

// TestFaultPipelineBacklog: a Redis that answers slowly but steadily
// (behind a proxy that forwards 32 bytes of replies every 50 ms, about one
// reply per 0.1 s) gets 128 concurrent decisions at once, which the
// auto-pipeliner puts on the wire together (PoolSize(2): 2 × 64 slots).
// The replies take over 10 s to come back, longer than the 5 s Timeout,
// although the first come back within tens of milliseconds: the calls that
// miss the Timeout waited behind this process's own calls, and a busy client
// is not a failing Redis. So no decision fails open and the breaker stays
// closed: a call that times out while Redis answers others of this node is
// saturation (refused: it may have run in Redis), not a Redis failure.
// The Timeout is long next to the pace of the replies, so that every call
// that runs out of it saw replies come meanwhile however loaded the machine
// is. Once the proxy is fast, the same client counts exactly; and once it
// holds every reply, Redis answers nothing in time: that is a failure, and
// the breaker opens (on a route of the same limiter, so the same breaker,
// with Timeout(100ms): no call can be answered, whatever the load).
func TestFaultPipelineBacklog(t *testing.T) {
	testtier.Long(t)
	faultNoLeaks(t)
	srv := redistest.Start(t)
	proxy := startSlowProxyChunks(t, srv.Addr, 50*time.Millisecond, 32)
	c := faultClient(t, &redis.Options{Addr: proxy.Addr(), PoolSize: 2, ReadTimeout: faultStall, WriteTimeout: faultStall})
	l, err := New(Redis(c), Key(prefix(t)), Window(time.Minute), Limit(1000),
		OnFailure(FailOpen), withBreaker(3, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	p, err := l.Policy(Timeout(testTimeout))
	if err != nil {
		t.Fatal(err)
	}
	hung, err := l.Policy(Timeout(faultTimeout))
	if err != nil {
		t.Fatal(err)
	}
	if p.route.Engine.Pipeliner() == nil {
		t.Fatal("the auto-pipeliner is off")
	}
	if hung.route.Engine != p.route.Engine {
		t.Fatal("the two routes of one limiter and client have backends of their own")
	}
	const callers = 2 * engine.PipelineDepth
	var fromRedis, timedOut, wrong atomic.Int64
	var firstWrong atomic.Value
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for g := range callers {
		wg.Go(func() {
			<-gate
			d, err := p.Allow(context.Background(), "k"+strconv.Itoa(g), 1)
			if isTimeout(err) {
				timedOut.Add(1)
			}
			switch {
			case err == nil:
				fromRedis.Add(1)
			case !errors.Is(err, ErrSaturated) || d.Local || d.Allowed:
				wrong.Add(1)
				firstWrong.CompareAndSwap(nil, fmt.Sprintf("decision %+v, error %v", d, err))
			}
		})
	}
	close(gate)
	wg.Wait()
	t.Logf("%d of %d decisions answered by Redis, %d timed out behind the backlog", fromRedis.Load(), callers, timedOut.Load())
	if wrong.Load() != 0 {
		t.Errorf("%d decisions were neither answered by Redis nor given the saturation answer (refused); the first: %v", wrong.Load(), firstWrong.Load())
	}
	if fromRedis.Load() == 0 || timedOut.Load() == 0 {
		t.Fatalf("%d answered by Redis, %d timed out: the test needs both (a backlog that outlasts the Timeout while Redis answers)", fromRedis.Load(), timedOut.Load())
	}
	if st := p.route.Engine.Breaker().State(); st != "closed" {
		t.Errorf("a backlog opened the breaker (%s): it is not a Redis failure", st)
	}
	proxy.SetDelay(0)
	faultExact(t, c, 50)

	// A Redis that answers none of the calls in time is failing: the
	// proxy now holds every reply, and the breaker opens.
	proxy.SetDelay(time.Hour)
	var failedOpen atomic.Int64
	for g := range 16 {
		wg.Go(func() {
			d, err := hung.Allow(context.Background(), "hung"+strconv.Itoa(g), 1)
			if err != nil && !errors.Is(err, ErrSaturated) && d.Allowed && !d.Local {
				failedOpen.Add(1)
			}
		})
	}
	wg.Wait()
	if st := p.route.Engine.Breaker().State(); st != "open" || failedOpen.Load() != 16 {
		t.Errorf("Redis answering nothing: the breaker is %s and %d of 16 decisions failed open; want open and 16", st, failedOpen.Load())
	}
	proxy.SetDelay(0) // the held replies come: the Limiter's Close waits for its pipeliner's calls
}

// TestFaultSaturationIsNoVerdict: a saturation answer says nothing about
// Redis, either way. Behind a proxy that holds every reply (a hung Redis),
// with withBreaker(2, …): a decision times out (one failure), a decision whose
// request's context ends first gets ErrClientGone, and the next
// decision that times out is the second failure in a row, which opens the
// breaker; the answer between them must not have counted as a success and
// reset the count. Every call here waits for a Redis that
// answers nothing, so no outcome depends on a deadline being beaten.
func TestFaultSaturationIsNoVerdict(t *testing.T) {
	faultNoLeaks(t)
	srv := redistest.Start(t)
	proxy := startSlowProxy(t, srv.Addr, time.Hour)
	c := faultClient(t, &redis.Options{Addr: proxy.Addr(), ContextTimeoutEnabled: true})
	p := mustPolicy(t, Redis(c), Key(prefix(t)), Window(time.Minute), Limit(10),
		OnFailure(FailClosed), Timeout(faultTimeout), withBreaker(2, time.Hour))
	ctx := context.Background()
	if _, err := p.Allow(ctx, "a", 1); err == nil || errors.Is(err, ErrSaturated) {
		t.Fatalf("a hung Redis: error %v, want a failure", err)
	}
	short, cancel := context.WithTimeout(ctx, faultTimeout/4)
	defer cancel()
	if _, err := p.Allow(short, "b", 1); !errors.Is(err, ErrClientGone) {
		t.Fatalf("the request's context ended first: error %v, want ErrClientGone", err)
	}
	if st := p.route.Engine.Breaker().State(); st != "closed" {
		t.Fatalf("after one failure the breaker is %s, want closed", st)
	}
	if _, err := p.Allow(ctx, "c", 1); err == nil || errors.Is(err, ErrSaturated) {
		t.Fatalf("a hung Redis: error %v, want a failure", err)
	}
	if st := p.route.Engine.Breaker().State(); st != "open" {
		t.Errorf("after two failures with a saturation answer between them the breaker is %s, want open: saturation counted as a success", st)
	}
	proxy.SetDelay(0) // the held replies come: the clients close at once
}

// blockedClients returns the server's count of clients blocked in BLPOP
// and the like.
func blockedClients(t *testing.T, c *redis.Client) int {
	t.Helper()
	info, err := c.Info(context.Background(), "clients").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(info) {
		if rest, ok := strings.CutPrefix(line, "blocked_clients:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(rest))
			return n
		}
	}
	return 0
}

// TestFaultErrorReplies: the rule's key holds a hash, so the sliding
// log's GETRANGE answers WRONGTYPE. Decisions return an error wrapping Redis's,
// under the failure policy; an HTTP route answers the policy's response
// without the error text, which goes to the log. Once the key is deleted,
// decisions work again and count exactly on that very key.
func TestFaultErrorReplies(t *testing.T) {
	faultNoLeaks(t)
	srv := redistest.Start(t)
	// Redis answers at once here, so the Timeout is the tests' long one
	// (testTimeout): a decision on a loaded machine must not run out of it
	// and fail for want of time rather than for WRONGTYPE. The client's
	// ReadTimeout is longer still: go-redis would retry a read that ran out
	// of it, and the retry would count the request twice.
	c := faultClient(t, &redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, ReadTimeout: faultStall})
	ctx := context.Background()
	const limit = 30
	for _, fp := range []FailPolicy{FailOpen, FailClosed} {
		t.Run(string(fp)+" policy", func(t *testing.T) {
			faultNoLeaks(t, pipelinerOfOpenClient...)
			p := mustPolicy(t, Redis(c), Key(prefix(t)), Window(time.Minute), Limit(limit),
				OnFailure(fp))
			// The key holds an identity, which no error text may carry.
			const id = "user:alice@example.com"
			key := ruleKey(p, 0, id)
			if err := c.HSet(ctx, key, "not", "a sliding log").Err(); err != nil {
				t.Fatal(err)
			}
			var wrongType int
			for i := range 8 {
				start := time.Now()
				d, err := p.Allow(ctx, id, 1)
				if el := time.Since(start); el > faultHang {
					t.Fatalf("decision %d took %v", i, el)
				}
				checkFailed(t, "WRONGTYPE", fp, d, err)
				var rerr redis.Error
				switch {
				case errors.As(err, &rerr) && strings.HasPrefix(rerr.Error(), "WRONGTYPE"):
					wrongType++
					if strings.Contains(err.Error(), "alice") || !strings.Contains(err.Error(), `rule "`+p.route.Rules[0].Name+`"`) {
						t.Errorf("error %q: want one that names the rule and not the identity", err)
					}
				case errors.Is(err, ErrCircuitOpen) && i >= DefaultBreakerFailures:
				default:
					t.Fatalf("decision %d: error %v (%T) wraps neither Redis's WRONGTYPE nor, after %d failures, ErrCircuitOpen",
						i, err, errors.Unwrap(err), DefaultBreakerFailures)
				}
			}
			if wrongType < DefaultBreakerFailures {
				t.Fatalf("%d WRONGTYPE errors, want at least %d", wrongType, DefaultBreakerFailures)
			}
			if err := c.Del(ctx, key).Err(); err != nil {
				t.Fatal(err)
			}
			faultRecover(t, func() error { _, err := p.Allow(ctx, "probe", 1); return err })

			var admitted atomic.Int64
			var wg sync.WaitGroup
			for range 3 * limit {
				wg.Go(func() {
					d, err := p.Allow(ctx, id, 1)
					if err != nil {
						t.Errorf("after DEL: %v", err)
					}
					if d.Allowed {
						admitted.Add(1)
					}
				})
			}
			wg.Wait()
			if admitted.Load() != limit {
				t.Fatalf("after DEL: %d of %d admitted, want %d", admitted.Load(), 3*limit, limit)
			}
			if card, err := logUnits(ctx, c, key); err != nil || card != limit {
				t.Fatalf("after DEL: the key holds %d entries (%v), want %d", card, err, limit)
			}
		})

		t.Run(string(fp)+" route", func(t *testing.T) {
			faultNoLeaks(t, pipelinerOfOpenClient...)
			var logs syncBuffer
			pfx := prefix(t)
			e := gin.New()
			e.GET("/x", testLimit(Redis(c), Key(pfx), Type(IP), Window(time.Minute), Limit(limit),
				OnFailure(fp), withLogger(slog.New(slog.NewTextHandler(&logs, nil)))), ok)
			const poisoned, other = "192.0.2.10", "192.0.2.11"
			key := pfx + rule.SlidingLogTag + "{GET /x ip:" + poisoned + "}"
			if err := c.HSet(ctx, key, "not", "a sliding log").Err(); err != nil {
				t.Fatal(err)
			}
			from := map[string]string{"RemoteAddr": poisoned + ":1234"}
			wantCode, wantBody := http.StatusOK, `{"ok":true}`
			if fp == FailClosed {
				wantCode, wantBody = http.StatusServiceUnavailable, `{"code":503,"message":"Service temporarily unavailable, please try again later"}`
			}
			for i := range 8 {
				start := time.Now()
				w := do(e, http.MethodGet, "/x", from)
				if el := time.Since(start); el > faultHang {
					t.Fatalf("request %d took %v", i, el)
				}
				if w.Code != wantCode || w.Body.String() != wantBody {
					t.Fatalf("request %d: %d %s, want %d %s", i, w.Code, w.Body, wantCode, wantBody)
				}
				for _, leak := range []string{"WRONGTYPE", "Operation against", "ginlimit", pfx, "sliding"} {
					if strings.Contains(w.Body.String(), leak) {
						t.Fatalf("request %d: the body %s contains the internal %q", i, w.Body, leak)
					}
				}
				if w.Header().Get("RateLimit") != "" || w.Header().Get("RateLimit-Policy") == "" {
					t.Fatalf("request %d: headers %v: want the policy but no counters", i, w.Header())
				}
			}
			if !strings.Contains(logs.String(), "WRONGTYPE") || !strings.Contains(logs.String(), "GET /x") {
				t.Fatalf("the log does not carry the cause and the route:\n%s", logs.String())
			}
			if strings.Contains(logs.String(), poisoned) {
				t.Fatalf("the log carries the client's IP:\n%s", logs.String())
			}
			if err := c.Del(ctx, key).Err(); err != nil {
				t.Fatal(err)
			}
			faultRecover(t, func() error {
				if w := do(e, http.MethodGet, "/x", map[string]string{"RemoteAddr": other + ":1234"}); w.Header().Get("RateLimit") == "" {
					return fmt.Errorf("%d %s without counters", w.Code, w.Body)
				}
				return nil
			})

			var mu sync.Mutex
			codes := map[int]int{}
			var wg sync.WaitGroup
			for range 3 * limit {
				wg.Go(func() {
					w := do(e, http.MethodGet, "/x", from)
					mu.Lock()
					codes[w.Code]++
					mu.Unlock()
				})
			}
			wg.Wait()
			if codes[http.StatusOK] != limit || codes[http.StatusTooManyRequests] != 2*limit {
				t.Fatalf("after DEL: status counts %v for %d requests with limit %d", codes, 3*limit, limit)
			}
		})
	}
}

// faultRecover waits up to 30 s (the breaker's open time and a probe, with
// room to spare for a loaded machine) for try to succeed.
func faultRecover(t *testing.T, try func() error) {
	t.Helper()
	var err error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if err = try(); err == nil {
			return
		}
	}
	t.Fatalf("decisions did not work again within 30 s of the repair: %v", err)
}

// TestFaultErrorReplyLeavesTheBreakerClosed: a Redis that answers an
// error for one key is up and answering, so those replies must not count as
// Redis failures. (They used to: after DefaultBreakerFailures WRONGTYPE
// replies on one poisoned key, every other key of the rule got
// ErrCircuitOpen, and with FailClosed one bad key turned the whole route
// into 503s.) A realistic trigger: another program, or an operator, that
// writes a key of another type (here a hash) under the rule's Key.
func TestFaultErrorReplyLeavesTheBreakerClosed(t *testing.T) {
	faultNoLeaks(t)
	srv := redistest.Start(t)
	c := faultClient(t, &redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, ReadTimeout: faultStall})
	ctx := context.Background()
	// The Timeout is the tests' long one: a call that ran out of a short
	// one on a loaded machine would fail for want of time, not WRONGTYPE.
	p := mustPolicy(t, Redis(c), Key(prefix(t)), Window(time.Minute), Limit(10),
		OnFailure(FailClosed))
	if err := c.HSet(ctx, ruleKey(p, 0, "poisoned"), "not", "a sliding log").Err(); err != nil {
		t.Fatal(err)
	}
	for i := range DefaultBreakerFailures {
		if _, err := p.Allow(ctx, "poisoned", 1); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
			t.Fatalf("decision %d on the poisoned key: %v, want WRONGTYPE", i, err)
		}
	}
	if d, err := p.Allow(ctx, "healthy", 1); err != nil || !d.Allowed {
		t.Fatalf("a healthy key, after %d error replies on another key: %+v, %v; want an admission from Redis (breaker %s)",
			DefaultBreakerFailures, d, err, p.route.Engine.Breaker().State())
	}
}
