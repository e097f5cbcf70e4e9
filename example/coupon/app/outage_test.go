package app_test

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ginlimit/ginlimit/example/coupon/app"
	"github.com/ginlimit/ginlimit/ginlimit"
	"github.com/ginlimit/ginlimit/internal/redistest"
)

// TestServesWhileRedisIsDownFromStartUp: the demo starts with a Redis
// address nothing listens on (a redis-server started, then stopped), and
// serves under the failure policy it is configured with: FailClosed
// answers 503 with a Retry-After, and so does FailLocal, since an instance
// that has never heard from Redis spends nothing (it cannot know what the
// fleet spent); the routes that are not limited answer as usual. Once the
// server is back, Redis decides again.
func TestServesWhileRedisIsDownFromStartUp(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	srv.Stop()
	var logs syncBuffer
	cfg := app.Config{RedisURL: "redis://" + srv.Addr + "/0", JWTSecret: testSecret,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	closedCfg := cfg
	closedCfg.FailPolicy = ginlimit.FailClosed
	closed, local := newApp(t, closedCfg), newApp(t, cfg)

	const unavailable = `{"code":503,"message":"Service temporarily unavailable, please try again later"}`
	ws := run(t, closed, []step{
		{req: req{target: "/api/coupon/seckill"}, status: http.StatusServiceUnavailable, body: unavailable},
		{req: req{target: "/healthz"}, status: http.StatusOK},
		{req: req{target: "/api/vouchers"}, status: http.StatusOK},
	})
	if got := ws[0].Header().Get("Retry-After"); got != "1" {
		t.Errorf("FailClosed's 503: Retry-After %q, want 1", got)
	}
	wl := run(t, local, []step{
		{req: req{target: "/api/coupon/merchant"}, status: http.StatusServiceUnavailable, body: unavailable},
		{req: req{target: "/healthz"}, status: http.StatusOK},
	})
	if got := wl[0].Header().Get("Retry-After"); got != "1" {
		t.Errorf("a fresh FailLocal instance's 503: Retry-After %q, want 1", got)
	}

	srv.Restart()
	// Once the server is back, Redis decides again on both policies.
	for _, c := range []struct {
		app    http.Handler
		target string
	}{{closed, "/api/coupon/seckill"}, {local, "/api/coupon/merchant"}} {
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			w := serve(t, c.app, req{target: c.target})
			if w.Code == http.StatusOK && w.Header().Get("X-RateLimit-Remaining") != "" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s still answers %d %s 30 s after Redis came back", c.target, w.Code, w.Body)
			}
		}
	}
	if s := logs.String(); strings.Contains(s, "level=ERROR") {
		t.Errorf("an error logged:\n%s", s)
	}
}
