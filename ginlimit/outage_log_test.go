package ginlimit

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/ginlimit/internal/decide"
	"github.com/ginlimit/ginlimit/internal/redistest"
)

// getUntil serves GET /x on e, 20 ms apart, until the status is want, and
// fails t after 30 s.
func getUntil(t *testing.T, e *gin.Engine, want int) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if do(e, http.MethodGet, "/x", nil).Code == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /x did not answer %d within 30 s", want)
		}
	}
}

// waitLog waits, 30 s at most, until logs holds want.
func waitLog(t *testing.T, logs *syncBuffer, want string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(logs.String(), want); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the log lacks %q within 30 s:\n%s", want, logs)
		}
	}
}

// TestFailureLogsTheOutageOnceWithItsCause: a real redis-server is killed
// while a route uses it, with the default 250 ms Timeout and a client
// that bounds reads by the context, as the coupon demo's: go-redis then
// retries the dial for longer than the Timeout and reports only that the
// Timeout ran out. The outage is logged once over more than LogEvery of
// failing decisions, at warn, with its real cause (the refused
// connection), and when the server is back, its end is logged at info.
//
// The route is made again until one answers with nothing failed: on a
// loaded machine a first call can outlast the Timeout, and the warning of
// that failure would hold back the outage's for logEvery (logThrottle),
// leaving no warning to check.
func TestFailureLogsTheOutageOnceWithItsCause(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		rule []Option
	}{
		{"rate", []Option{Limit(1000), Window(time.Minute)}},
		{"in-flight", []Option{Rule(Name("busy"), InFlight(1000, time.Minute))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			outageLoggedOnce(t, tc.rule)
		})
	}
}

// outageLoggedOnce is TestFailureLogsTheOutageOnceWithItsCause on a route
// with rule.
func outageLoggedOnce(t *testing.T, rule []Option) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	var logs *syncBuffer
	var e *gin.Engine
	for attempt := 1; ; attempt++ {
		logs, e = &syncBuffer{}, gin.New()
		e.GET("/x", RateLimit(append([]Option{Redis(c), Key(prefix(t)), OnFailure(FailClosed),
			withLogger(slog.New(slog.NewTextHandler(logs, nil)))}, rule...)...), ok)
		getUntil(t, e, http.StatusOK)
		if !strings.Contains(logs.String(), "level=WARN") {
			break
		}
		if attempt == 10 {
			t.Fatalf("10 routes in a row logged a failure before Redis was stopped:\n%s", logs)
		}
	}
	mark := len(logs.String())
	srv.Stop()
	start := time.Now()
	getUntil(t, e, http.StatusServiceUnavailable)
	for time.Since(start) < decide.LogEvery+time.Second {
		do(e, http.MethodGet, "/x", nil)
		time.Sleep(20 * time.Millisecond)
	}
	outage := logs.String()[mark:]
	var warnings []string
	for line := range strings.Lines(outage) {
		if strings.Contains(line, "level=WARN") {
			warnings = append(warnings, line)
		}
	}
	t.Logf("over %v of outage, %d warnings:\n%s", time.Since(start).Round(time.Second), len(warnings), strings.Join(warnings, ""))
	// Its cause is the refused connection; or, when the kill cut a call
	// in flight while another call made the one new dial, the EOF of the
	// connection the server closed. Either says why, not only that the
	// Timeout ran out.
	if len(warnings) != 1 || !strings.Contains(warnings[0], "ginlimit: Redis is failing") ||
		!strings.Contains(warnings[0], "connection refused") && !strings.Contains(warnings[0], "error=EOF") {
		t.Errorf("want one warning, that Redis is failing because the connection was refused or closed")
	}

	srv.Restart()
	getUntil(t, e, http.StatusOK)
	waitLog(t, logs, "ginlimit: Redis answers again")
	for line := range strings.Lines(logs.String()) {
		if strings.Contains(line, "Redis answers again") && (!strings.Contains(line, "level=INFO") || !strings.Contains(line, "down=")) {
			t.Errorf("recovery line %q, want level=INFO with down=", line)
		}
	}
}

// TestFailClosedAnswers503WithRetryAfter: with Redis down, FailClosed's
// 503 says when to come back: the breaker's open time rounded up to a
// second, when its next probe may find Redis again; HeadersNone sends no
// Retry-After, as it sends none on a 429.
func TestFailClosedAnswers503WithRetryAfter(t *testing.T) {
	t.Parallel()
	c := redis.NewClient(&redis.Options{Addr: deadAddr(t)})
	t.Cleanup(func() { _ = c.Close() })
	quiet := withLogger(slog.New(slog.DiscardHandler))
	e := gin.New()
	e.GET("/closed", testLimit(Redis(c), quiet, Key(prefix(t)), Limit(5), OnFailure(FailClosed)), ok)
	e.GET("/none", testLimit(Redis(c), quiet, Key(prefix(t)), Limit(5), OnFailure(FailClosed), Headers(HeadersNone)), ok)
	for range 3 { // before, and once the breaker is open
		if w := do(e, http.MethodGet, "/closed", nil); w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") != "1" {
			t.Fatalf("/closed: %d, Retry-After %q; want 503 with Retry-After: 1", w.Code, w.Header().Get("Retry-After"))
		}
		if w := do(e, http.MethodGet, "/none", nil); w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") != "" {
			t.Fatalf("/none: %d, Retry-After %q; want 503 without it", w.Code, w.Header().Get("Retry-After"))
		}
	}
}
