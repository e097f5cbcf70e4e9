package ginlimit

// Tests against a real redis-server started by the test (internal/redistest):
// miniredis runs gopher-lua, not Redis's own Lua, so it is no proof of
// atomicity, script caching or failure behaviour.

import (
	"context"
	"errors"
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

	"github.com/ginlimit/ginlimit/internal/redistest"
	"github.com/ginlimit/ginlimit/internal/testtier"
)

// TestExactUnderConcurrency: 64 goroutines race for a limit of 500; exactly
// 500 are admitted, whether they share one client or are spread over three
// independent clients and limiters (three app instances), with and without
// auto-pipelining and the deny cache.
func TestExactUnderConcurrency(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, tc := range []struct {
		name    string
		clients int
		opts    []Option
	}{
		{"one client", 1, []Option{DenyCache(0)}},
		{"three clients", 3, []Option{DenyCache(0)}},
		{"three clients, deny cache", 3, nil},
		{"one client, autopipeline", 1, []Option{DenyCache(0), autoPipeline(true)}},
		{"three clients, autopipeline and deny cache", 3, []Option{autoPipeline(true)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pre := prefix(t)
			policies := make([]*Policy, tc.clients)
			for i := range policies {
				opts := append([]Option{Redis(srv.Client()), Key(pre), Window(time.Minute), Limit(500)}, tc.opts...)
				policies[i] = mustPolicy(t, opts...)
			}
			var allowed, rejected atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, 64)
			for g := range 64 {
				wg.Go(func() {
					p := policies[g%tc.clients]
					for range 16 { // 1,024 attempts in all
						d, err := p.Allow(context.Background(), "hot", 1)
						if err != nil {
							errs <- err
							return
						}
						if d.Allowed {
							allowed.Add(1)
						} else {
							rejected.Add(1)
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			if allowed.Load() != 500 || rejected.Load() != 1024-500 {
				t.Fatalf("admitted %d and rejected %d, want exactly 500 and 524", allowed.Load(), rejected.Load())
			}
			n, err := logUnits(context.Background(), srv.Client(), ruleKey(policies[0], 0, "hot"))
			if err != nil || n != 500 {
				t.Fatalf("the log holds %d units, %v; want 500", n, err)
			}
		})
	}
}

// scriptCalls returns how many EVALSHA and EVAL calls the server has run
// since its stats were last reset.
func scriptCalls(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, line := range strings.Split(info, "\n") {
		for _, cmd := range []string{"cmdstat_evalsha:calls=", "cmdstat_eval:calls="} {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), cmd); ok {
				n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
				total += n
			}
		}
	}
	return total
}

// TestDenyCacheFlood: a flood on an over-limit key is answered in process.
// Redis sees the admissions plus at most the calls that were already in
// flight when the quota ran out, and the count stays exact.
func TestDenyCacheFlood(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client()
	p := mustPolicy(t, Redis(c), Key(prefix(t)), Window(time.Minute), Limit(100))
	if err := c.ConfigResetStat(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	const callers, each = 32, 300
	var allowed, cached atomic.Int64
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for range each {
				d, err := p.Allow(context.Background(), "flood", 1)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					allowed.Add(1)
				}
				if d.Cached {
					cached.Add(1)
					if d.Allowed || d.RetryAfter <= 0 || d.RetryAfter > time.Minute {
						t.Errorf("bad cached decision %+v", d)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	calls := scriptCalls(t, c)
	if allowed.Load() != 100 {
		t.Fatalf("admitted %d, want exactly 100", allowed.Load())
	}
	// Each decision not answered from the cache made one script call, plus
	// at most one EVAL per caller for the first EVALSHAs, which race the
	// script's loading and meet NOSCRIPT.
	fromRedis := callers*each - cached.Load()
	t.Logf("%d of %d decisions went to Redis (%d script calls)", fromRedis, callers*each, calls)
	if fromRedis > 100+10 || calls > fromRedis+callers {
		t.Fatalf("%d of %d decisions went to Redis, which saw %d script calls; want at most 110 decisions and one call each",
			fromRedis, callers*each, calls)
	}
}

// TestAutoPipelineSurvivesScriptFlushAndTimesOut: the auto-pipelined path
// reloads the script after SCRIPT FLUSH and is bounded by the timeout on a
// hung server.
func TestAutoPipelineSurvivesScriptFlushAndTimesOut(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client()
	p := mustPolicy(t, Redis(c), Key(prefix(t)), Limit(5), autoPipeline(true), DenyCache(0))
	if p.route.Engine.Pipeliner() == nil {
		t.Fatal("autoPipeline(true) on a *redis.Client did not auto-pipeline")
	}
	p.route.Engine.SetPipelineAbove(0) // pipeline even a lone decision
	ctx := context.Background()
	for i, want := range []int{4, 3} {
		if i == 1 {
			if err := c.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if d, err := p.Allow(ctx, "k", 1); err != nil || d.Remaining != want {
			t.Fatalf("request %d: %+v, %v; want %d remaining", i, d, err, want)
		}
	}
	// Short client timeouts only so that closing the client at the end does
	// not wait on the black hole; the decision's own bound is the 100ms.
	hung := redis.NewClient(&redis.Options{Addr: blackhole(t), ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { _ = hung.Close() })
	hp := mustPolicy(t, Redis(hung), Key(prefix(t)), autoPipeline(true), Timeout(100*time.Millisecond), OnFailure(FailClosed))
	hp.route.Engine.SetPipelineAbove(0)
	start := time.Now()
	d, err := hp.Allow(ctx, "k", 1)
	if err == nil || d.Allowed {
		t.Fatalf("hung server: %+v, %v; want a fail-closed error", d, err)
	}
	// A hang guard (faultHang), far above a loaded machine's stalls: the
	// pipeliner would wait for the reply for as long as the server is hung.
	if el := time.Since(start); el > faultHang {
		t.Fatalf("auto-pipelined call on a hung server took %v with a 100ms timeout", el)
	}
}

// wrapped is a Scripter go-redis cannot auto-pipeline.
type wrapped struct{ redis.Scripter }

func TestAutoPipelineFallsBack(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	p := mustPolicy(t, Redis(wrapped{srv.Client()}), Key(prefix(t)), Limit(1), autoPipeline(true))
	if p.route.Engine.Pipeliner() != nil {
		t.Fatal("a wrapped client was auto-pipelined")
	}
	for i, want := range []bool{true, false} {
		if d, err := p.Allow(context.Background(), "k", 1); err != nil || d.Allowed != want {
			t.Fatalf("request %d: %+v, %v", i, d, err)
		}
	}
}

// TestSurvivesScriptFlush: EVALSHA falls back to EVAL on NOSCRIPT.
func TestSurvivesScriptFlush(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client()
	p := mustPolicy(t, Redis(c), Key(prefix(t)), Window(time.Minute), Limit(3))
	ctx := context.Background()
	for i, want := range []int{2, 1} {
		if i == 1 {
			if err := c.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		d, err := p.Allow(ctx, "k", 1)
		if err != nil || !d.Allowed || d.Remaining != want {
			t.Fatalf("request %d: %+v, %v; want allowed with %d remaining", i, d, err, want)
		}
	}
	if n, _ := c.ScriptExists(ctx, p.route.Rules[0].Script.Hash()).Result(); len(n) != 1 || !n[0] {
		t.Fatalf("script not reloaded after SCRIPT FLUSH")
	}
}

// TestRealRedisClockAndTTL: the decision time is the server's TIME, and a
// 250 ms window's key expires at the end of the quarter of a window (63 ms,
// aligned on the clock) its entry came in, plus the window: the entry's
// time is the decision's rounded up to the millisecond.
func TestRealRedisClockAndTTL(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client()
	pre := prefix(t)
	const window = 250 * time.Millisecond
	p := mustPolicy(t, Redis(c), Key(pre), Window(window), Limit(1))
	ctx := context.Background()
	// On a loaded machine the key can expire before PEXPIRETIME reads it:
	// that attempt proves nothing unless it expired too early, and a new key
	// is tried. Likewise the server's TIME is compared with the time this
	// process took, not with a fixed second.
	for attempt := 0; ; attempt++ {
		key := "k" + strconv.Itoa(attempt)
		start := time.Now()
		d, err := p.Allow(ctx, key, 1)
		if err != nil || !d.Allowed {
			t.Fatalf("%+v, %v", d, err)
		}
		exp, err := c.PExpireTime(ctx, ruleKey(p, 0, key)).Result()
		tm, terr := c.Time(ctx).Result()
		took := time.Since(start)
		at, quarter := (d.Time.UnixMicro()+999)/1000, int64(63)
		want := time.Duration((at/quarter+1)*quarter) * time.Millisecond
		if terr != nil || d.Time.After(tm) || tm.Sub(d.Time) > took+100*time.Millisecond {
			t.Fatalf("decision time %v, server TIME %v %v, %v later", d.Time, tm, terr, took)
		}
		if err != nil || exp >= 0 && exp != want+window {
			t.Fatalf("PEXPIRETIME = %v, %v; want %v (the admission at %v)", exp, err, want+window, d.Time)
		}
		if exp >= 0 {
			break
		}
		if took < window {
			t.Fatalf("PEXPIRETIME = %v %v after the admission; want %v", exp, took, want+window)
		}
		if attempt == 20 {
			t.Fatalf("20 keys expired before PEXPIRETIME read them")
		}
	}
}

// blackhole accepts TCP connections and never answers: a hung Redis.
func blackhole(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// TestFailurePolicies: with Redis stopped or hung, every answer comes within
// the decision timeout, under the route's failure policy, and the log gets
// one line, not one per request.
func TestFailurePolicies(t *testing.T) {
	testtier.Long(t)
	t.Parallel()
	srv := redistest.Start(t)
	stopped := srv.Client()
	srv.Stop()
	// Without our timeout a hung Redis would hold each request for the
	// client's read timeout, faultStall: an order of magnitude above the
	// hang guard, faultHang, which is far above a loaded machine's stalls.
	hung := redis.NewClient(&redis.Options{Addr: blackhole(t), ReadTimeout: faultStall})
	t.Cleanup(func() { _ = hung.Close() })
	// The same, on a client that bounds reads by the context itself.
	hungCtx := redis.NewClient(&redis.Options{Addr: blackhole(t), ReadTimeout: faultStall, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = hungCtx.Close() })
	const timeout = 100 * time.Millisecond
	for _, tc := range []struct {
		name   string
		client *redis.Client
		policy FailPolicy
		status int
		body   string
	}{
		{"stopped open", stopped, FailOpen, 200, `{"ok":true}`},
		{"stopped closed", stopped, FailClosed, 503, `{"code":503,"message":"Service temporarily unavailable, please try again later"}`},
		{"hung open", hung, FailOpen, 200, `{"ok":true}`},
		{"hung closed", hung, FailClosed, 503, `{"code":503,"message":"Service temporarily unavailable, please try again later"}`},
		{"hung context-aware open", hungCtx, FailOpen, 200, `{"ok":true}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var logs syncBuffer // the upkeep's call, on a goroutine of its own, may log the outage
			e := gin.New()
			var seen Decision
			e.GET("/x", testLimit(Redis(tc.client), Key(prefix(t)), OnFailure(tc.policy), Timeout(timeout),
				withLogger(slog.New(slog.NewTextHandler(&logs, nil)))), func(c *gin.Context) {
				seen, _ = DecisionFrom(c)
				ok(c)
			})
			for i := range 5 {
				start := time.Now()
				w := do(e, http.MethodGet, "/x", nil)
				// A hang guard, not a performance goal.
				if el := time.Since(start); el > faultHang {
					t.Fatalf("request %d took %v with a %v timeout", i, el, timeout)
				}
				if w.Code != tc.status || w.Body.String() != tc.body {
					t.Fatalf("request %d: %d %s, want %d %s", i, w.Code, w.Body, tc.status, tc.body)
				}
				if w.Header().Get("RateLimit") != "" || w.Header().Get("RateLimit-Policy") == "" {
					t.Fatalf("request %d: headers %v: want the policy but no counters", i, w.Header())
				}
				if strings.Contains(w.Body.String(), "127.0.0.1") || strings.Contains(w.Body.String(), "ginlimit") {
					t.Fatalf("internal error text in the body: %s", w.Body)
				}
			}
			if tc.policy == FailOpen && (seen.Err == nil || !seen.Allowed) {
				t.Fatalf("handler saw decision %+v, want an allowed one carrying the error", seen)
			}
			if n := strings.Count(logs.String(), "level=WARN"); n != 1 {
				t.Fatalf("%d warning lines for 5 failures, want 1:\n%s", n, logs.String())
			}
		})
	}
}

// TestRequestContextBoundsTheCall: a request whose own context ends first is
// not held for the rest of the decision timeout, and is not admitted: no
// fallback decides for it (ErrClientGone).
func TestRequestContextBoundsTheCall(t *testing.T) {
	t.Parallel()
	hung := redis.NewClient(&redis.Options{Addr: blackhole(t)})
	t.Cleanup(func() { _ = hung.Close() })
	p := mustPolicy(t, Redis(hung), Key(prefix(t)), Timeout(5*time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	d, err := p.Allow(ctx, "k", 1)
	if !errors.Is(err, ErrClientGone) || d.Allowed || d.Local || !errors.Is(d.Err, ErrClientGone) {
		t.Fatalf("Allow on a hung Redis: %+v, %v; want a refused decision with ErrClientGone", d, err)
	}
	if !errors.Is(err, context.DeadlineExceeded) && !strings.Contains(err.Error(), "timeout") {
		t.Fatalf("error %v does not say it timed out", err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("took %v; the request context allowed 50ms", el)
	}
}

// TestRingAndUniversalClients: the same policy runs on a Ring and on a
// UniversalClient, not only on *redis.Client.
func TestRingAndUniversalClients(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"one": srv.Addr}})
	universal := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{srv.Addr}})
	t.Cleanup(func() { _ = ring.Close(); _ = universal.Close() })
	for name, client := range map[string]redis.Scripter{"ring": ring, "universal": universal} {
		p := mustPolicy(t, Redis(client), Key(prefix(t)), Limit(2))
		for i, want := range []bool{true, true, false} {
			d, err := p.Allow(context.Background(), "k", 1)
			if err != nil || d.Allowed != want {
				t.Fatalf("%s request %d: %+v, %v; want allowed=%v", name, i, d, err, want)
			}
		}
	}
}

// pipelineCounter is a go-redis hook that counts the commands sent in
// pipelines.
type pipelineCounter struct{ n atomic.Int64 }

func (*pipelineCounter) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (*pipelineCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *pipelineCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// TestAutoPipelineBatchesConcurrentDecisions: under concurrency the
// decisions really travel in pipelines, and the count stays exact.
func TestAutoPipelineBatchesConcurrentDecisions(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client()
	hook := &pipelineCounter{}
	c.AddHook(hook)
	p := mustPolicy(t, Redis(c), Key(prefix(t)), Window(time.Minute), Limit(300), autoPipeline(true), DenyCache(0))
	allowed := allowConcurrently(t, 32, 20, func(int) (Decision, error) { return p.Allow(context.Background(), "k", 1) })
	if allowed != 300 {
		t.Fatalf("admitted %d of 640, want exactly 300", allowed)
	}
	if hook.n.Load() == 0 {
		t.Fatal("no decision went through a pipeline")
	}
	t.Logf("%d of 640 decisions were pipelined", hook.n.Load())
}

// TestKeyOverItsLimit: a key holding more than the rule's limit (a limit
// lowered on redeploy) is rejected at once, with remaining 0, with and
// without the deny cache: never a negative count, never a wait that times
// out and fails open.
func TestKeyOverItsLimit(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client()
	pre := prefix(t)
	ctx := context.Background()
	old := mustPolicy(t, Redis(c), Key(pre), Window(time.Minute), Limit(10), DenyCache(0))
	for range 10 {
		if _, err := old.Allow(ctx, "k", 1); err != nil {
			t.Fatal(err)
		}
	}
	for _, cache := range []int{0, 100} {
		// A wait that timed out would be an error, which the check below
		// refuses; how long a rejection took is not checked, since on a
		// loaded machine a healthy call can take seconds.
		lowered := mustPolicy(t, Redis(c), Key(pre), Window(time.Minute), Limit(3), DenyCache(cache))
		for i := range 3 {
			d, err := lowered.Allow(ctx, "k", 1)
			if err != nil || d.Allowed || d.Remaining != 0 || d.RetryAfter <= 0 {
				t.Fatalf("cache %d request %d: %+v, %v; want a rejection with 0 remaining", cache, i, d, err)
			}
		}
	}
}
