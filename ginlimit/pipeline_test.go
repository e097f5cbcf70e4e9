package ginlimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/identity"
	"github.com/ginlimit/ginlimit/internal/redistest"
	"github.com/ginlimit/ginlimit/internal/testtier"
	"github.com/ginlimit/ginlimit/lua"
)

// TestEveryRefusalGoesThroughTheHooks: OnLimited and Respond see every 429
// the route answers: a refusal by Redis, by the deny cache, for a cost no
// rule can admit, on one rule and on several.
func TestEveryRefusalGoesThroughTheHooks(t *testing.T) {
	t.Parallel()
	_, c := newMini(t)
	for _, tc := range []struct {
		name  string
		rules []Option
	}{
		{"one rule", []Option{Limit(2)}},
		{"two rules", []Option{Rule(Name("a"), Limit(2)), Rule(Name("b"), Limit(5))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var limited, responded []Decision
			e := gin.New()
			e.GET("/x", testLimit(append([]Option{Redis(c), Key(prefix(t)),
				Cost(func(c *gin.Context) int { return len(c.Query("n")) + 1 }),
				Observe(func(_ context.Context, e Event) {
					if e.Outcome == OutcomeLimited {
						limited = append(limited, e.Decision)
					}
				}),
				Respond(func(c *gin.Context, d Decision) {
					responded = append(responded, d)
					c.JSON(http.StatusTooManyRequests, gin.H{"mine": d.Rule})
				})}, tc.rules...)...), ok)
			// Two admitted, then one from Redis, one from the deny cache, one
			// that costs 10 (more than 2 can ever admit).
			for i, want := range []int{200, 200, 429, 429, 429} {
				target := "/x"
				if i == 4 {
					target = "/x?n=123456789"
				}
				w := do(e, http.MethodGet, target, nil)
				if w.Code != want {
					t.Fatalf("request %d: %d %s, want %d", i, w.Code, w.Body, want)
				}
				if want == 429 && !strings.Contains(w.Body.String(), `"mine"`) {
					t.Fatalf("request %d: body %s is not Respond's", i, w.Body)
				}
			}
			if len(limited) != 3 || len(responded) != 3 {
				t.Fatalf("Observe saw %d and Respond %d of the 3 refusals", len(limited), len(responded))
			}
			if !limited[1].Cached || limited[2].Reason == "" {
				t.Fatalf("Observe did not see the cached and the too-costly refusal: %+v", limited)
			}
		})
	}
}

// TestNewLoadsEveryScript: New loads the shared scripts on its Redis, the
// several-rule one included, and compiling a route loads its rules'
// single-rule scripts (each with its settings written in), so the first
// burst of decisions does not meet NOSCRIPT; a load that misses
// engine.LoadTimeout goes on, and still loads every one.
func TestNewLoadsEveryScript(t *testing.T) {
	t.Parallel()
	// slow: each script's load takes two proxy delays (40 ms), so the
	// start-up load of 9 scripts always misses engine.LoadTimeout.
	for _, delay := range []time.Duration{0, 20 * time.Millisecond} {
		t.Run(fmt.Sprintf("delay=%v", delay), func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			via := redis.NewClient(&redis.Options{Addr: startSlowProxy(t, srv.Addr, delay).Addr()})
			t.Cleanup(func() { _ = via.Close() })
			testNewLoadsEveryScript(t, srv.Client(), via)
		})
	}
}

// testNewLoadsEveryScript checks TestNewLoadsEveryScript on c, with the
// Limiter's calls going through via (c's Redis).
func testNewLoadsEveryScript(t *testing.T, c, via *redis.Client) {
	ctx := context.Background()
	var shas []string
	for _, s := range allScripts {
		shas = append(shas, s.Hash())
	}
	// The sliding log's param is the length of its key's prefix.
	pre := prefix(t)
	singles := []string{
		redis.NewScript(lua.Single(string(SlidingLog), time.Minute.Microseconds(), 5, int64(len(pre)))).Hash(),
		redis.NewScript(lua.Single(string(TokenBucket), time.Second.Microseconds(), 7, 7)).Hash(),
	}
	shas = append(shas, singles...)
	if got, err := c.ScriptExists(ctx, shas...).Result(); err != nil || len(got) != len(shas) || slices.Contains(got, true) {
		t.Fatalf("before New: %v, %v; want none loaded", got, err)
	}
	l, err := New(Timeout(testTimeout), Redis(via))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	if got, err := c.ScriptExists(ctx, singles...).Result(); err != nil || slices.Contains(got, true) {
		t.Fatalf("after New, before any route: %v, %v; want no single-rule script loaded", got, err)
	}
	if _, err := l.Policy(Key(pre), Window(time.Minute), Limit(5)); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Policy(Key(prefix(t)), Window(time.Second), Limit(7), Algorithm(TokenBucket)); err != nil {
		t.Fatal(err)
	}
	// The load may go on past New on a loaded machine: wait for it.
	var got []bool
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if got, err = c.ScriptExists(ctx, shas...).Result(); err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(got, false) || time.Now().After(deadline) {
			break
		}
	}
	for i, loaded := range got {
		if !loaded {
			t.Errorf("script %s is not loaded 30 s after New", shas[i])
		}
	}
}

// TestOneBreakerPerRedis: every route of a limiter on one Redis shares one
// backend, so an outage trips one breaker: once one route has seen the
// failures, the others fail fast at once. A route with its own breaker
// settings gets a backend of its own.
func TestOneBreakerPerRedis(t *testing.T) {
	t.Parallel()
	hung := redis.NewClient(&redis.Options{Addr: blackhole(t), ReadTimeout: 300 * time.Millisecond, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = hung.Close() })
	l, err := New(Redis(hung), Timeout(100*time.Millisecond), withBreaker(2, time.Minute), OnFailure(FailClosed))
	if err != nil {
		t.Fatal(err)
	}
	a, errA := l.Policy(Key(prefix(t)))
	b, errB := l.Policy(Key(prefix(t)), Rule(Name("x")), Rule(Name("y")), Timeout(time.Second))
	own, errO := l.Policy(Key(prefix(t)), withBreaker(3, time.Minute))
	if err := errors.Join(errA, errB, errO); err != nil {
		t.Fatal(err)
	}
	if a.route.Engine != b.route.Engine || a.route.Engine == own.route.Engine {
		t.Fatal("routes on one Redis do not share one backend, or a route with its own breaker settings shares it")
	}
	ctx := context.Background()
	for i := range 2 {
		if _, err := a.Allow(ctx, "k", 1); err == nil || errors.Is(err, ErrCircuitOpen) {
			t.Fatalf("route a, failure %d: %v; want a Redis timeout", i, err)
		}
	}
	if _, err := b.Allow(ctx, "k", 1); !errors.Is(err, ErrCircuitOpen) {
		t.Fatalf("route b after route a tripped the breaker: %v; want ErrCircuitOpen", err)
	}
	if _, err := own.Allow(ctx, "k", 1); err == nil || errors.Is(err, ErrCircuitOpen) {
		t.Fatalf("the route with its own breaker: %v; want a Redis timeout", err)
	}
}

// TestDenyCacheOnSeveralRules: a route with several Rules has the deny
// cache too, and it answers exactly as Redis does over a random timeline,
// with some answers from the cache.
func TestDenyCacheOnSeveralRules(t *testing.T) {
	testtier.Long(t)
	t.Parallel()
	_, c := newMini(t)
	var now int64 = t0.UnixMicro()
	rules := []Option{
		Rule(Name("fast"), Window(200*time.Millisecond), Limit(5)),
		Rule(Name("slow"), Window(time.Second), Limit(12), Algorithm(FixedWindow)),
		Rule(Name("bucket"), Window(500*time.Millisecond), Limit(8), Algorithm(TokenBucket), Burst(4)),
	}
	withCache := mustPolicy(t, append([]Option{Redis(c), Key(prefix(t)), DenyCache(100)}, rules...)...)
	without := mustPolicy(t, append([]Option{Redis(c), Key(prefix(t)), DenyCache(0)}, rules...)...)
	for _, p := range []*Policy{withCache, without} {
		p.route.Clock = func() int64 { return now }
	}
	for _, r := range withCache.route.Rules {
		r.Deny.SetClock(func() int64 { return (now - t0.UnixMicro()) * 1000 })
	}
	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, 3))
	cached := 0
	ctx := context.Background()
	for i := range 1500 {
		switch r := rng.IntN(10); {
		case r < 4:
		case r < 8:
			now += rng.Int64N(20_000)
		default:
			now += rng.Int64N(600_000)
		}
		cost := 1 + rng.IntN(3)
		a, errA := withCache.Allow(ctx, "k", cost)
		b, errB := without.Allow(ctx, "k", cost)
		if errA != nil || errB != nil {
			t.Fatalf("seed %d step %d: %v / %v", seed, i, errA, errB)
		}
		same := a.Allowed == b.Allowed
		if a.Cached {
			// The cache names a rule it is certain rejects; Redis names the
			// first rule that rejects. Either way that rule rejected.
			for _, rd := range b.Rules {
				if rd.Rule == a.Rule {
					same = same && rd.RetryAfter > 0 && rd.Remaining <= a.Remaining
				}
			}
		} else {
			same = same && a.Rule == b.Rule && a.Remaining == b.Remaining && a.Reset == b.Reset && a.RetryAfter == b.RetryAfter
		}
		if !same {
			t.Fatalf("seed %d step %d (cost %d): with cache %+v, without %+v", seed, i, cost, a, b)
		}
		if a.Cached {
			cached++
		}
	}
	if cached == 0 {
		t.Fatalf("seed %d: no decision came from the deny cache", seed)
	}
	t.Logf("seed %d: %d of 1500 decisions from the deny cache", seed, cached)
}

// TestLogsCarryNoIdentity: a refused request's debug line tells clients
// apart by a short keyed hash, never by their id or IP; with
// HashIdentities the hash is the start of the one in the key.
func TestLogsCarryNoIdentity(t *testing.T) {
	t.Parallel()
	m, c := newMini(t)
	secret := []byte(strings.Repeat("s", 32))
	var logs syncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	pre := prefix(t)
	e := gin.New()
	e.Use(func(c *gin.Context) { c.Set("uid", c.GetHeader("X-User")) })
	e.GET("/plain", testLimit(Redis(c), Key(pre+"p:"), Limit(1), Type(User), UserIdentity(identity.FromContext("uid")), withLogger(logger)), ok)
	e.GET("/hashed", testLimit(Redis(c), Key(pre+"h:"), Limit(1), Type(User), UserIdentity(identity.FromContext("uid")),
		HashIdentities(secret), withLogger(logger)), ok)
	tag := regexp.MustCompile(`identity=([0-9a-f]+)`)
	for _, path := range []string{"/plain", "/hashed"} {
		logs.Reset()
		for range 2 {
			do(e, http.MethodGet, path, map[string]string{"X-User": "alice@example.com"})
		}
		line := logs.String()
		if strings.Contains(line, "alice") {
			t.Fatalf("%s: the log names the user:\n%s", path, line)
		}
		got := tag.FindStringSubmatch(line)
		if got == nil || len(got[1]) != 12 {
			t.Fatalf("%s: no 12-digit identity tag in:\n%s", path, line)
		}
		if path == "/hashed" {
			want := pre + "h:sl2:{GET /hashed user:" + got[1]
			found := false
			for _, k := range m.Keys() {
				found = found || strings.HasPrefix(k, want)
			}
			if !found {
				t.Fatalf("the tag %s does not start the key's hash: %q", got[1], m.Keys())
			}
		}
	}
}

// unhashable is a Scripter whose type Go can compare but whose value it
// cannot (it holds a map), so it cannot be a map key.
type unhashable struct {
	redis.Scripter
	extra any
}

// TestOddClientsNeverPanic: a client value that cannot be a map key works
// (with a backend of its own per route), and a typed nil client is refused
// as Redis(nil) at start-up, on New and on a route alike.
func TestOddClientsNeverPanic(t *testing.T) {
	t.Parallel()
	_, c := newMini(t)
	w := unhashable{c, map[string]int{"x": 1}}
	l, err := New(Timeout(testTimeout), Redis(w), Limit(1))
	if err != nil {
		t.Fatal(err)
	}
	e := gin.New()
	e.GET("/a", l.RateLimit(Key(prefix(t))), ok)
	e.GET("/b", testLimit(Redis(w), Key(prefix(t)), Limit(1)), ok)
	for _, path := range []string{"/a", "/b"} {
		for i, want := range []int{200, 429} {
			if got := do(e, http.MethodGet, path, nil).Code; got != want {
				t.Fatalf("%s request %d: %d, want %d", path, i, got, want)
			}
		}
	}
	var typedNil *redis.Client
	if _, err := New(Redis(typedNil)); err == nil || !strings.Contains(err.Error(), "Redis(nil)") {
		t.Fatalf("New(Redis(typed nil)): %v, want the Redis(nil) error", err)
	}
	if msg := panicMessage(func() { RateLimit(Redis(typedNil)) }); !strings.Contains(msg, "Redis(nil)") {
		t.Fatalf("RateLimit(Redis(typed nil)) panicked with %q, want the Redis(nil) error", msg)
	}
}
