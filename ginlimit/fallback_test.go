package ginlimit

import (
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ginlimit/ginlimit/internal/redistest"
)

// TestFallbackContinuesFromRedis: while Redis fails, the FailLocal
// fallback continues from what Redis last said of each key, never from a
// full budget:
//   - a route-wide Limit(50) that Redis has counted 30 on admits 20 more,
//     and one Redis has counted 50 on admits none;
//   - a key this instance has never seen gets the per-instance share;
//   - an identity Redis banned stays banned.
func TestFallbackContinuesFromRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	_, e := fallbackRoutes(t, srv)
	send := sender(t, e)
	learnFromRedis(t, send)

	srv.Stop() // Redis fails: the fallback of FailLocal decides
	if n := send("/partly", 40, http.StatusTooManyRequests); n != 20 {
		t.Errorf("/partly with Redis down: the fallback admitted %d, want the 20 Redis last reported", n)
	}
	if n := send("/used", 40, http.StatusTooManyRequests); n != 0 {
		t.Errorf("/used with Redis down: the fallback admitted %d after Redis reported none left", n)
	}
	if n := send("/unseen", 60, http.StatusTooManyRequests); n != 50 {
		t.Errorf("/unseen with Redis down: the fallback admitted %d, want the share (50)", n)
	}
	if n := send("/banned", 5, http.StatusTooManyRequests); n != 0 {
		t.Errorf("/banned with Redis down: the fallback admitted %d of a banned identity", n)
	}
}

// fallbackRoutes is a limiter on srv (QueueTimeout 20 ms, so a saturated
// decision is answered soon) and an engine with four routes, each limited
// per hour with no deny cache: /partly, /used and /unseen by Limit(50),
// /banned by IP with Limit(1) and Ban(1, ...).
func fallbackRoutes(t *testing.T, srv *redistest.Server, opts ...Option) (*Limiter, *gin.Engine) {
	t.Helper()
	c := srv.Client()
	l, err := New(append([]Option{Redis(c), Timeout(5 * time.Second), queueTimeout(20 * time.Millisecond),
		withLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	beatNow(t, l, c) // the instance has heard from Redis: its fallback decides
	pre := prefix(t)
	e := gin.New()
	route := func(path string, opts ...Option) {
		e.GET(path, l.RateLimit(append([]Option{Key(pre), Window(time.Hour), DenyCache(0)}, opts...)...), ok)
	}
	route("/partly", Limit(50))
	route("/used", Limit(50))
	route("/unseen", Limit(50))
	route("/banned", Type(IP), Limit(1), Ban(1, time.Hour, time.Hour))
	return l, e
}

// sender returns a function that sends n requests to path from one client
// and returns how many were admitted; a request not admitted must get
// refused (or 429, which Redis's own refusals get).
func sender(t *testing.T, e *gin.Engine) func(path string, n, refused int) int {
	return func(path string, n, refused int) (admitted int) {
		t.Helper()
		for range n {
			switch code := do(e, http.MethodGet, path, map[string]string{"RemoteAddr": "192.0.2.9:1"}).Code; code {
			case http.StatusOK:
				admitted++
			case refused, http.StatusTooManyRequests:
			default:
				t.Fatalf("%s: %d, want 200, %d or 429", path, code, refused)
			}
		}
		return admitted
	}
}

// learnFromRedis has Redis count 30 of 50 on /partly, all 50 on /used, and
// ban the client on /banned.
func learnFromRedis(t *testing.T, send func(path string, n, refused int) int) {
	t.Helper()
	if n := send("/partly", 30, http.StatusTooManyRequests); n != 30 {
		t.Fatalf("/partly: Redis admitted %d of 30", n)
	}
	if n := send("/used", 60, http.StatusTooManyRequests); n != 50 {
		t.Fatalf("/used: Redis admitted %d of 60", n)
	}
	send("/banned", 2, http.StatusTooManyRequests) // one admitted, one refused: a strike, and Ban(1, ...) bans
	if n := send("/banned", 1, http.StatusTooManyRequests); n != 0 {
		t.Fatal("/banned: the identity is not banned")
	}
}
