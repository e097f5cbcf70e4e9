package ginlimit

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/internal/redistest"
)

// goneRoute is a route on a real redis-server whose handler counts how
// often it ran, and how many of it ran at once at most.
type goneRoute struct {
	e       *gin.Engine
	policy  *Policy
	seen    *recorder
	ran     atomic.Int64
	running atomic.Int64
	most    atomic.Int64
	block   chan struct{} // when not nil, the first request's handler waits for it to close
	entered chan struct{} // and signals this on entry
}

func newGoneRoute(t *testing.T, c redis.Scripter, opts ...Option) *goneRoute {
	t.Helper()
	g := &goneRoute{seen: &recorder{}}
	l, err := New(Redis(c), Timeout(5*time.Second), Observe(g.seen.Observe))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	if g.policy, err = l.Policy(opts...); err != nil {
		t.Fatal(err)
	}
	g.e = gin.New()
	g.e.GET("/order", g.policy.route.Serve, func(c *gin.Context) {
		first := g.ran.Add(1) == 1
		n := g.running.Add(1)
		defer g.running.Add(-1)
		for {
			m := g.most.Load()
			if n <= m || g.most.CompareAndSwap(m, n) {
				break
			}
		}
		if first && g.block != nil { // the first request holds on
			g.entered <- struct{}{}
			<-g.block
		}
		c.Status(http.StatusOK)
	})
	return g
}

// serve sends one request from ip; with gone, its context has ended
// before it is served, as a client that sent its request and hung up.
func (g *goneRoute) serve(ip string, gone bool) int {
	req := httptest.NewRequest(http.MethodGet, "/order", nil)
	req.RemoteAddr = ip + ":1"
	if gone {
		ctx, cancel := context.WithCancel(req.Context())
		cancel()
		req = req.WithContext(ctx)
	}
	w := httptest.NewRecorder()
	g.e.ServeHTTP(w, req)
	return w.Code
}

// TestClientGoneIsNeverAdmitted: a request whose client hung up before
// Redis decided is aborted with 499 and never runs the handler, whatever
// the route (a rate limit, an in-flight limit, a ban): no fallback decides
// for it, so it buys no admission that Redis did not grant. Before, each
// such request was taken for saturation and the FailLocal fallback, which
// knew nothing of Redis's counts, admitted it: the handler ran 6 times
// under Limit(3), twice at once under InFlight(1), and for a banned IP.
func TestClientGoneIsNeverAdmitted(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = c.Close() })
	const staleness = 20 * time.Millisecond

	t.Run("rate limit", func(t *testing.T) {
		g := newGoneRoute(t, c, Key(prefix(t)), Type(IP), Window(time.Hour), Limit(3), maxStaleness(staleness))
		for range 3 {
			if code := g.serve("192.0.2.1", false); code != http.StatusOK {
				t.Fatalf("a request within the limit got %d", code)
			}
		}
		for i := range 10 {
			// The cached refusal lapses, so the next request is the key's
			// probe: a hung-up one must not be admitted by the fallback.
			time.Sleep(3 * staleness)
			if code := g.serve("192.0.2.1", true); code != 499 {
				t.Fatalf("hung-up request %d got %d, want 499", i, code)
			}
			if o := g.seen.last().Outcome; o != OutcomeClientGone {
				t.Fatalf("hung-up request %d: outcome %q, want %q", i, o, OutcomeClientGone)
			}
			if code := g.serve("192.0.2.1", false); code != http.StatusTooManyRequests {
				t.Fatalf("request %d after the limit got %d, want 429", i, code)
			}
		}
		if n := g.ran.Load(); n != 3 {
			t.Fatalf("the handler ran %d times under Limit(3), want 3", n)
		}
	})

	t.Run("in-flight limit", func(t *testing.T) {
		g := newGoneRoute(t, c, Key(prefix(t)), InFlight(1, time.Minute))
		g.block, g.entered = make(chan struct{}), make(chan struct{}, 1)
		var wg sync.WaitGroup
		wg.Go(func() {
			if code := g.serve("192.0.2.2", false); code != http.StatusOK {
				t.Errorf("the holder got %d", code)
			}
		})
		<-g.entered // the slot is held
		for i := range 10 {
			if code := g.serve("192.0.2.2", true); code != 499 {
				t.Errorf("hung-up request %d got %d, want 499", i, code)
			}
		}
		close(g.block)
		wg.Wait()
		if n := g.most.Load(); n != 1 {
			t.Fatalf("%d handlers ran at once under InFlight(1), want 1", n)
		}
		if n := g.ran.Load(); n != 1 {
			t.Fatalf("the handler ran %d times, want 1 (the holder)", n)
		}
	})

	t.Run("ban", func(t *testing.T) {
		g := newGoneRoute(t, c, Key(prefix(t)), Type(IP), Window(time.Hour), Limit(1),
			Ban(2, time.Hour, time.Hour), maxStaleness(staleness))
		for i := 0; ; i++ {
			time.Sleep(3 * staleness) // each refusal from Redis
			g.serve("192.0.2.3", false)
			if g.seen.last().Decision.Banned {
				break
			}
			if i == 10 {
				t.Fatal("not banned after 10 refusals under Ban(2, ...)")
			}
		}
		ran := g.ran.Load()
		for i := range 10 {
			time.Sleep(3 * staleness)
			if code := g.serve("192.0.2.3", true); code != 499 {
				t.Fatalf("hung-up request %d of a banned IP got %d, want 499", i, code)
			}
		}
		if n := g.ran.Load(); n != ran {
			t.Fatalf("the handler ran %d more times for a banned IP", n-ran)
		}
	})
}

// TestClientGoneKeepsStrikes: the strikes that refusals answered from the
// deny cache carry go to Redis with the key's next call. A hung-up request
// that was that call gives them back, so the next request reports them:
// 21 refusals under Ban(5) ban the client. Before, the hung-up probe
// drained them into a call that never ran, and the client stayed unbanned.
func TestClientGoneKeepsStrikes(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = c.Close() })
	const staleness = 50 * time.Millisecond
	g := newGoneRoute(t, c, Key(prefix(t)), Type(IP), Window(time.Hour), Limit(1),
		Ban(5, time.Hour, time.Hour), maxStaleness(time.Hour))
	// The deny cache's clock is the test's: refusals are answered from it
	// until the test moves it past the staleness bound.
	var now atomic.Int64
	deny := g.policy.route.Rules[0].Deny
	deny.SetClock(now.Load)
	g.policy.route.Rules[0].Deny.SetStaleness(staleness)
	if code := g.serve("192.0.2.4", false); code != http.StatusOK {
		t.Fatalf("the first request got %d", code)
	}
	if code := g.serve("192.0.2.4", false); code != http.StatusTooManyRequests {
		t.Fatalf("the second request got %d, want 429", code)
	}
	cached := 0
	for range 20 {
		g.serve("192.0.2.4", false)
		if d := g.seen.last().Decision; d.Cached {
			cached++
		}
	}
	if cached < 4 {
		t.Fatalf("%d refusals came from the deny cache; the test needs at least 4", cached)
	}
	now.Add(int64(2 * staleness)) // the cached refusal lapses: the next request probes
	if code := g.serve("192.0.2.4", true); code != 499 {
		t.Fatalf("the hung-up probe got %d, want 499", code)
	}
	g.serve("192.0.2.4", false)
	d := g.seen.last().Decision
	if !d.Banned {
		t.Fatalf("after %d cached refusals and a hung-up probe, the next request: %+v, want banned", cached, d)
	}
	if errors.Is(d.Err, ErrClientGone) {
		t.Fatal("the request after the hung-up one was taken for gone")
	}
}
