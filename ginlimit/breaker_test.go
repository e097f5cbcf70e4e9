package ginlimit

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/internal/redistest"
)

// TestBreakerOpensAndRecovers: against a hung Redis the first failures cost
// the timeout, then the breaker answers at once; once Redis is back, the
// first probe after the open period closes it again.
func TestBreakerOpensAndRecovers(t *testing.T) {
	t.Parallel()
	hung := redis.NewClient(&redis.Options{Addr: blackhole(t), ReadTimeout: 300 * time.Millisecond, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = hung.Close() })
	// Open for an hour: the breaker must still be open at the last of the
	// 50 calls below however slowly a loaded machine runs them (with 300 ms
	// it could let a probe through to the hung Redis).
	p := mustPolicy(t, Redis(hung), Key(prefix(t)), Timeout(100*time.Millisecond), withBreaker(3, time.Hour), OnFailure(FailClosed))
	ctx := context.Background()
	for i := range 3 {
		d, err := p.Allow(ctx, "k", 1)
		if err == nil || d.Allowed || errors.Is(err, ErrCircuitOpen) {
			t.Fatalf("failure %d: %+v, %v; want a Redis timeout", i, d, err)
		}
	}
	if got := p.route.Engine.Breaker().State(); got != "open" {
		t.Fatalf("after 3 failures the breaker is %s", got)
	}
	// Each answered by the open breaker (ErrCircuitOpen), so none waited
	// for the hung Redis: that is checked by what they answered, not by
	// how long they took.
	for i := range 50 {
		d, err := p.Allow(ctx, "k", 1)
		if !errors.Is(err, ErrCircuitOpen) || d.Allowed || d.Err == nil {
			t.Fatalf("open breaker, call %d: %+v, %v", i, d, err)
		}
	}

	srv := redistest.Start(t)
	c := srv.Client()
	q := mustPolicy(t, Redis(c), Key(prefix(t)), Timeout(200*time.Millisecond), withBreaker(2, 200*time.Millisecond))
	srv.Stop()
	for range 2 {
		if _, err := q.Allow(ctx, "k", 1); err == nil {
			t.Fatal("a stopped Redis answered")
		}
	}
	if got := q.route.Engine.Breaker().State(); got != "open" {
		t.Fatalf("after 2 failures the breaker is %s", got)
	}
	srv.Restart()
	back := time.Now()
	for {
		d, err := q.Allow(ctx, "k", 1)
		if err == nil && d.Err == nil {
			break
		}
		// The breaker is open for 200 ms: 30 s is room for a loaded machine.
		if time.Since(back) > 30*time.Second {
			t.Fatalf("decisions did not come from Redis again within 30 s of its return: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("decisions came from Redis again %v after it returned", time.Since(back).Round(time.Millisecond))
	if got := q.route.Engine.Breaker().State(); got != "closed" {
		t.Fatalf("after a good probe the breaker is %s", got)
	}
}

func TestBreakerOption(t *testing.T) {
	t.Parallel()
	_, c := newMini(t)
	for _, o := range []Option{withBreaker(0, time.Second), withBreaker(3, 0), withBreaker(-1, time.Second), withBreaker(1, 2*time.Hour)} {
		if _, err := New(Redis(c), o); err == nil {
			t.Errorf("an invalid Breaker was accepted")
		}
	}
	p := mustPolicy(t, Redis(c), withBreaker(0, 0))
	if p.route.Engine.Breaker() != nil {
		t.Fatal("withBreaker(0, 0) left a breaker")
	}
}

// TestShadowMode: nothing is ever refused, the headers still tell the
// truth, and the decision says what would have happened.
func TestShadowMode(t *testing.T) {
	t.Parallel()
	_, c := newMini(t)
	var seen []Decision
	e := gin.New()
	e.GET("/x", testLimit(Redis(c), Key(prefix(t)), Limit(1), Shadow(true)), func(c *gin.Context) {
		d, _ := DecisionFrom(c)
		seen = append(seen, d)
		ok(c)
	})
	for i := range 3 {
		w := do(e, http.MethodGet, "/x", nil)
		if w.Code != 200 {
			t.Fatalf("request %d: %d in shadow mode", i, w.Code)
		}
		if i > 0 && (w.Header().Get("X-RateLimit-Remaining") != "0" || w.Header().Get("Retry-After") != "") {
			t.Fatalf("request %d: headers %v", i, w.Header())
		}
	}
	if len(seen) != 3 || seen[0].Shadow || !seen[1].Shadow || seen[1].Allowed || !seen[2].Shadow {
		t.Fatalf("decisions %+v", seen)
	}
	// A failing Redis under FailClosed does not refuse in shadow mode either.
	stopped := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { _ = stopped.Close() })
	e2 := gin.New()
	e2.GET("/y", testLimit(Redis(stopped), OnFailure(FailClosed), Shadow(true), Timeout(200*time.Millisecond)), ok)
	if w := do(e2, http.MethodGet, "/y", nil); w.Code != 200 {
		t.Fatalf("FailClosed in shadow mode: %d", w.Code)
	}
}

// TestFailLocal: while Redis is down, an in-process limiter of the same rule
// decides, its limit divided by the instances sharing it, and says so.
func TestFailLocal(t *testing.T) {
	t.Parallel()
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { _ = down.Close() })
	e := gin.New()
	var seen []Decision
	e.GET("/x", testLimit(Redis(down), Key(prefix(t)), Window(time.Minute), Limit(6), OnFailure(FailLocal), LocalInstances(2),
		Timeout(200*time.Millisecond)), func(c *gin.Context) {
		d, _ := DecisionFrom(c)
		seen = append(seen, d)
		ok(c)
	})
	codes := []int{}
	for range 5 {
		w := do(e, http.MethodGet, "/x", nil)
		codes = append(codes, w.Code)
		if w.Code == 429 && w.Header().Get("Retry-After") == "" {
			t.Fatalf("a local 429 without Retry-After: %v", w.Header())
		}
	}
	// 6 per minute over 2 instances: this instance admits 3.
	if want := []int{200, 200, 200, 429, 429}; !slices.Equal(codes, want) {
		t.Fatalf("codes %v, want %v", codes, want)
	}
	for _, d := range seen {
		if !d.Local || d.Err == nil || !d.Allowed {
			t.Fatalf("decision %+v: want an allowed local decision carrying the Redis error", d)
		}
	}
	// Several rules fall back all or nothing too.
	p := mustPolicy(t, Redis(down), Key(prefix(t)), OnFailure(FailLocal), Timeout(200*time.Millisecond),
		Rule(Name("a"), Window(time.Minute), Limit(2)), Rule(Name("b"), Window(time.Minute), Limit(5)))
	// A Limiter from New that has never heard from Redis spends nothing;
	// from its first answer on, the fallback decides.
	if d, err := p.Allow(context.Background(), "k", 1); err == nil || d.Local || d.Allowed {
		t.Fatalf("a fresh instance: %+v, %v; want refused, not by the fallback", d, err)
	}
	heardOnce(p.route.RuleRoute.Instances)
	for i, want := range []bool{true, true, false} {
		d, err := p.Allow(context.Background(), "k", 1)
		if err == nil || !d.Local || d.Allowed != want {
			t.Fatalf("rules, request %d: %+v, %v; want local allowed=%v", i, d, err, want)
		}
	}
}

// TestBreakerFailuresOverflow: newBreaker stores the threshold as an
// int32, so a failures count of 2^32 (someone asking for "practically
// never") would wrap to 0 and open the breaker on the very first failure.
// Breaker refuses more than math.MaxInt32 at start-up; the test accepts a
// refusal or a breaker that does not open at once.
func TestBreakerFailuresOverflow(t *testing.T) {
	t.Parallel()
	const failures = 1 << 32
	l, err := New(Redis(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})), Timeout(time.Second),
		withBreaker(failures, time.Hour), OnFailure(FailClosed))
	if err != nil {
		return // refused at start-up: the promise holds
	}
	t.Cleanup(func() { _ = l.Close() })
	p, err := l.Policy(Key(prefix(t)))
	if err != nil {
		return
	}
	ctx := context.Background()
	if _, err := p.Allow(ctx, "k", 1); err == nil {
		t.Fatal("a call to a closed port succeeded")
	}
	if _, err := p.Allow(ctx, "k", 1); errors.Is(err, ErrCircuitOpen) {
		t.Fatalf("withBreaker(%d, 1h) accepted at start-up, and the breaker opened after 1 failure (%d failures counted)", failures, p.route.Engine.Breaker().Failures())
	}
}
