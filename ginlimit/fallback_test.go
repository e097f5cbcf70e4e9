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

// TestFallbackContinuesFromRedis: while this process cannot get decisions
// to a healthy Redis in time (every connection slot taken, as by a flood on
// another route), the FailLocal fallback continues from what Redis last
// said of each key, never from a full budget:
//   - a route-wide Limit(50) that Redis has counted 30 on admits 20 more,
//     and one Redis has counted 50 on admits none (before: up to 50 more
//     each, 110 in one window in the reported case);
//   - a key this instance has never seen gets the per-instance share;
//   - an identity Redis banned stays banned.
func TestFallbackContinuesFromRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	l, err := New(Redis(srv.Client()), Timeout(5*time.Second), QueueTimeout(20*time.Millisecond),
		Logger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	pre := prefix(t)
	e := gin.New()
	route := func(path string, opts ...Option) {
		e.GET(path, l.RateLimit(append([]Option{Key(pre), Window(time.Hour), DenyCache(0)}, opts...)...), ok)
	}
	route("/partly", Limit(50))
	route("/used", Limit(50))
	route("/unseen", Limit(50))
	route("/banned", Type(IP), Limit(1), Ban(1, time.Hour, time.Hour))
	send := func(path string, n int) (admitted int) {
		for range n {
			switch code := do(e, http.MethodGet, path, map[string]string{"RemoteAddr": "192.0.2.9:1"}).Code; code {
			case http.StatusOK:
				admitted++
			case http.StatusTooManyRequests:
			default:
				t.Fatalf("%s: %d", path, code)
			}
		}
		return admitted
	}
	if n := send("/partly", 30); n != 30 {
		t.Fatalf("/partly: Redis admitted %d of 30", n)
	}
	if n := send("/used", 60); n != 50 {
		t.Fatalf("/used: Redis admitted %d of 60", n)
	}
	send("/banned", 2) // one admitted, one refused: a strike, and Ban(1, ...) bans
	if n := send("/banned", 1); n != 0 {
		t.Fatal("/banned: the identity is not banned")
	}

	saturate(t, l)
	if n := send("/partly", 40); n != 20 {
		t.Errorf("/partly under saturation: the fallback admitted %d, want the 20 Redis last reported", n)
	}
	if n := send("/used", 40); n != 0 {
		t.Errorf("/used under saturation: the fallback admitted %d after Redis reported none left", n)
	}
	if n := send("/unseen", 60); n != 50 {
		t.Errorf("/unseen under saturation: the fallback admitted %d, want the share (50)", n)
	}
	if n := send("/banned", 5); n != 0 {
		t.Errorf("/banned under saturation: the fallback admitted %d of a banned identity", n)
	}
}
