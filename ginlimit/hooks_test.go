package ginlimit

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"
)

func TestHeaderStyles(t *testing.T) {
	t.Parallel()
	_, c := newMini(t)
	for _, tc := range []struct {
		style       HeaderStyle
		ietf, xrate bool
	}{
		{HeadersBoth, true, true},
		{HeadersIETF, true, false},
		{HeadersLegacy, false, true},
		{HeadersNone, false, false},
	} {
		e := gin.New()
		e.GET("/x", testLimit(Redis(c), Key(prefix(t)), Limit(1), Headers(tc.style)), ok)
		do(e, http.MethodGet, "/x", nil)
		w := do(e, http.MethodGet, "/x", nil)
		h := w.Header()
		if w.Code != 429 || (h.Get("RateLimit") != "") != tc.ietf || (h.Get("RateLimit-Policy") != "") != tc.ietf ||
			(h.Get("X-RateLimit-Remaining") != "") != tc.xrate || (h.Get("Retry-After") != "") != (tc.style != HeadersNone) {
			t.Errorf("%v: %d %v", tc.style, w.Code, h)
		}
	}
	if _, err := New(Redis(c), Headers(HeaderStyle("Headers9"))); err == nil || !strings.Contains(err.Error(), "Headers(") {
		t.Errorf("bad style: %v", err)
	}
}

// TestObserveAndRespond: Respond writes every 429, and Observe sees each
// refusal and each Redis error with its outcome and Err.
func TestObserveAndRespond(t *testing.T) {
	t.Parallel()
	_, c := newMini(t)
	var limited []Decision
	e := gin.New()
	e.GET("/x", testLimit(Redis(c), Key(prefix(t)), Name("api"), Limit(1),
		Observe(func(_ context.Context, e Event) {
			if e.Outcome == OutcomeLimited {
				limited = append(limited, e.Decision)
			}
		}),
		Respond(func(c *gin.Context, d Decision) {
			c.Header("Content-Type", "application/problem+json")
			c.String(http.StatusTooManyRequests, `{"type":"about:blank","title":"Too Many Requests","status":429,"rule":%q}`, d.Rule)
		})), ok)
	do(e, http.MethodGet, "/x", nil)
	w := do(e, http.MethodGet, "/x", nil)
	if w.Code != 429 || w.Header().Get("Content-Type") != "application/problem+json" ||
		w.Body.String() != `{"type":"about:blank","title":"Too Many Requests","status":429,"rule":"api"}` || w.Header().Get("Retry-After") == "" {
		t.Fatalf("custom response: %d %v %s", w.Code, w.Header(), w.Body)
	}
	if len(limited) != 1 || limited[0].Rule != "api" || limited[0].Allowed {
		t.Fatalf("Observe saw the refusals %+v", limited)
	}

	var errs []error
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { _ = down.Close() })
	e2 := gin.New()
	e2.GET("/y", testLimit(Redis(down), Timeout(200*time.Millisecond), Observe(func(_ context.Context, e Event) {
		if e.Decision.Err != nil {
			errs = append(errs, e.Decision.Err)
		}
	})), ok)
	if w := do(e2, http.MethodGet, "/y", nil); w.Code != 200 {
		t.Fatalf("fail open: %d", w.Code)
	}
	var re interface{ Error() string }
	if len(errs) != 1 || !errors.As(errs[0], &re) {
		t.Fatalf("Observe saw the errors %v", errs)
	}
}

func TestRejectionsLoggedAtDebug(t *testing.T) {
	t.Parallel()
	_, c := newMini(t)
	var buf strings.Builder
	var mu sync.Mutex
	w := writerFunc(func(b []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return buf.Write(b) })
	e := gin.New()
	e.GET("/x", testLimit(Redis(c), Key(prefix(t)), Name("r"), Limit(1), Type(IP),
		withLogger(slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug})))), ok)
	for range 3 {
		do(e, http.MethodGet, "/x", map[string]string{"RemoteAddr": "192.0.2.55:1"})
	}
	mu.Lock()
	defer mu.Unlock()
	// Two rejections, one line: debug lines are throttled per rule too.
	if n := strings.Count(buf.String(), "level=DEBUG msg=\"ginlimit: request limited\" rule=r route=/x"); n != 1 {
		t.Fatalf("%d debug lines for 2 rejections, want 1 (throttled):\n%s", n, buf.String())
	}
	if strings.Contains(buf.String(), "192.0.2.55") {
		t.Fatalf("the log holds the client's IP:\n%s", buf.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }
