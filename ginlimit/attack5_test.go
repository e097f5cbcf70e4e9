package ginlimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/internal/redistest"
)

// TestAttack5LongBanRefusedAtStartUpOrWorks: the penalty passes the ban's
// length to the several-rule script as its param in milliseconds, which
// rule.lua's bad() caps at 1e9 (about 11.6 days). A Ban of 30 days was
// accepted at start-up, and then every decision of the rule was an error
// reply from Redis, so under FailOpen the rule limited nothing (review 5).
// A configuration the scripts would refuse is refused at start-up: Ban
// takes at most MaxBan, and a longer one must either be refused or work.
func TestAttack5LongBanRefusedAtStartUpOrWorks(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client()
	l, err := New(Redis(c), Timeout(5*time.Second), OnFailure(FailOpen))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	p, err := l.Policy(Key(prefix(t)), Window(time.Hour), Limit(2), Ban(3, time.Hour, 30*24*time.Hour))
	if err != nil {
		return // refused at start-up: the promise holds
	}
	admitted := 0
	var firstErr error
	for range 10 {
		d, err := p.Allow(context.Background(), "client")
		if err != nil && firstErr == nil {
			firstErr = err
		}
		if d.Allowed {
			admitted++
		}
	}
	if admitted > 2 || firstErr != nil {
		t.Fatalf("Ban(3, 1h, 720h) accepted at start-up, then %d of 10 admitted at Limit(2); first error: %v", admitted, firstErr)
	}
}

// TestAttack5BreakerFailuresOverflow: newBreaker stores the threshold as an
// int32, so a failures count of 2^32 (someone asking for "practically
// never") wrapped to 0 and the breaker opened on the very first failure
// (review 5). Breaker now refuses more than math.MaxInt32 at start-up; the
// test accepts a refusal or a breaker that does not open at once.
func TestAttack5BreakerFailuresOverflow(t *testing.T) {
	t.Parallel()
	const failures = 1 << 32
	l, err := New(Redis(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})), Timeout(time.Second),
		Breaker(failures, time.Hour), OnFailure(FailClosed))
	if err != nil {
		return // refused at start-up: the promise holds
	}
	t.Cleanup(func() { _ = l.Close() })
	p, err := l.Policy(Key(prefix(t)))
	if err != nil {
		return
	}
	ctx := context.Background()
	if _, err := p.Allow(ctx, "k"); err == nil {
		t.Fatal("a call to a closed port succeeded")
	}
	if _, err := p.Allow(ctx, "k"); errors.Is(err, ErrCircuitOpen) {
		t.Fatalf("Breaker(%d, 1h) accepted at start-up, and the breaker opened after 1 failure (threshold %d)", failures, p.backend.nodes.one.brk.threshold)
	}
}

// TestAttack5BusyRingPoolTripsBreaker: a busy client is not a failing
// Redis: a decision that cannot get a connection in time is ErrSaturated,
// never trips the breaker and is never answered by FailOpen's unlimited
// admission. poolBusy, which tells a wait for a pooled connection from a
// Redis that does not answer, used to know only *redis.Client: on a
// *redis.Ring, a pool whose connections the application's own commands
// hold (here one BLPOP on a pool of 1) turned every decision into a Redis
// failure, the breaker opened and FailOpen let requests through (review
// 5). It now asks the pool of the shard that serves the key.
func TestAttack5BusyRingPoolTripsBreaker(t *testing.T) {
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
			}, AutoPipeline(false))
			if admitted > 1 || open > 0 || (lastErr != nil && !errors.Is(lastErr, ErrSaturated)) {
				t.Fatalf("application holds the Ring's only connection (Redis healthy): %d of 3 admitted at Limit(1), %d breakers open, last error %v", admitted, open, lastErr)
			}
		})
	}
}

// TestAttack5BusyPlainPoolHolds is the control of
// TestAttack5BusyRingPoolTripsBreaker: the same application command on a
// plain *redis.Client's pool of 1 gives ErrSaturated, no admission beyond
// the in-process fallback's and no open breaker.
func TestAttack5BusyPlainPoolHolds(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 1})
	t.Cleanup(func() { _ = c.Close() })
	admitted, open, lastErr := busyPoolDecisions(t, c, func(ctx context.Context) error {
		return c.BLPop(ctx, 1500*time.Millisecond, prefix(t)+"nothing").Err()
	}, AutoPipeline(false))
	if admitted > 1 || open > 0 || !errors.Is(lastErr, ErrSaturated) {
		t.Fatalf("plain client: %d of 3 admitted, %d breakers open, last error %v", admitted, open, lastErr)
	}
}

// TestAttack5BusyClusterPoolTripsBreaker is TestAttack5BusyRingPoolTripsBreaker
// on a real 3-master Redis Cluster: the application's BLPOP holds the one
// connection of the master that owns the decision's key.
func TestAttack5BusyClusterPoolTripsBreaker(t *testing.T) {
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

// busyPoolDecisions is the busy-pool scenario on client, whose pool has one
// connection: hold, the application's own blocking command, takes it for
// 1.5 s, and meanwhile three decisions are asked of a Limit(1) rule with
// Timeout(100ms), QueueTimeout(1s), Breaker(1, 1m), FailOpen and no deny
// cache (plus extra). Redis is healthy, so none may be admitted beyond the
// fallback's one, no breaker may open, and an error must be ErrSaturated.
// It returns how many were admitted, how many breakers are open and the
// last error.
func busyPoolDecisions(t *testing.T, client redis.Scripter, hold func(context.Context) error, extra ...Option) (admitted, open int, lastErr error) {
	t.Helper()
	ctx := context.Background()
	l, err := New(append([]Option{Redis(client), Timeout(100 * time.Millisecond), QueueTimeout(time.Second),
		Breaker(1, time.Minute), OnFailure(FailOpen), DenyCache(0)}, extra...)...)
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
		_ = hold(ctx)
	}()
	time.Sleep(200 * time.Millisecond)
	for range 3 {
		d, err := p.Allow(ctx, "client")
		lastErr = err
		if d.Allowed {
			admitted++
		}
	}
	<-done
	if p.backend.nodes.one.brk.state() == "open" {
		open++
	}
	count := func(_, v any) bool {
		if v.(*node).brk.state() == "open" {
			open++
		}
		return true
	}
	p.backend.nodes.byAddr.Range(count)
	p.backend.nodes.byShard.Range(count) // a Ring's shards (attack7)
	return admitted, open, lastErr
}

// TestAttack5UnmatchedOddMethodsAndPathsHold: made-up methods and paths of
// 64 KiB with spaces, braces and control bytes, on 404 and 405 requests
// seen by an annotation given to Use, all land in the fixed unmatched
// scope of one IP bucket: one short key, limit respected.
func TestAttack5UnmatchedOddMethodsAndPathsHold(t *testing.T) {
	t.Parallel()
	m, c := newMini(t)
	l, err := New(Redis(c), Timeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	e := gin.New()
	e.HandleMethodNotAllowed = true
	e.Use(l.RateLimit(Key(prefix(t)), Type(IP), Window(time.Hour), Limit(3)))
	e.GET("/x/:id", ok)
	long := strings.Repeat("A{ }%\x01", 64<<10/6)
	admitted := 0
	for i, target := range []string{"/x/1", "/nowhere", "/x/1/" + url.PathEscape(long), "/" + url.PathEscape(long), "/x/1"} {
		for _, method := range []string{"FOO", "F{O}O", strings.Repeat("M", 64<<10)} {
			req := httptest.NewRequest(http.MethodGet, target, nil)
			req.Method = method
			req.RemoteAddr = "192.0.2.9:1"
			w := httptest.NewRecorder()
			e.ServeHTTP(w, req)
			if w.Code != http.StatusTooManyRequests {
				admitted++
			}
			_ = i
		}
	}
	if admitted != 3 {
		t.Fatalf("%d unmatched requests passed the limiter, want 3", admitted)
	}
	for _, k := range m.Keys() {
		if len(k) > 100 || !strings.Contains(k, "{* unmatched ip:192.0.2.9}") {
			t.Fatalf("unexpected key %q", k)
		}
	}
}

// TestAttack5BanUpTo1e9MillisecondsHolds is the control of
// TestAttack5LongBanRefusedAtStartUpOrWorks: a ban of 11 days (under 1e9
// ms) decides in Redis without error, and the limit holds under FailOpen.
func TestAttack5BanUpTo1e9MillisecondsHolds(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	l, err := New(Redis(srv.Client()), Timeout(5*time.Second), OnFailure(FailOpen))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	p, err := l.Policy(Key(prefix(t)), Window(time.Hour), Limit(2), Ban(3, time.Hour, 11*24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	admitted := 0
	for range 10 {
		d, err := p.Allow(context.Background(), "client")
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			admitted++
		}
	}
	if admitted != 2 {
		t.Fatalf("%d admitted at Limit(2)", admitted)
	}
}
