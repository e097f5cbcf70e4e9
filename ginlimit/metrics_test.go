package ginlimit_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/ginlimit"
	"github.com/ginlimit/ginlimit/identity"
	"github.com/ginlimit/ginlimit/internal/promtest"
	"github.com/ginlimit/ginlimit/metrics"
)

// The metric names, as package metrics documents them.
const (
	decisions = promtest.Decisions
	latency   = promtest.Latency
	nearLimit = promtest.NearLimit
	denyCache = promtest.DenyCacheHits
	breaker   = promtest.BreakerOpen
)

// TestMetricsEndToEnd serves the demo's kinds of routes through gin with a
// metrics.Collector observing, and checks every series a scrape shows,
// and that no label or line of the exposition names a client.
func TestMetricsEndToEnd(t *testing.T) {
	t.Parallel()
	const (
		userID   = "user-7f3a9c"
		clientIP = "203.0.113.77"
	)
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	dead := redis.NewClient(&redis.Options{Addr: closedAddr(t), MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = dead.Close() })

	collector := metrics.New()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collector)

	r := gin.New()
	r.Use(func(c *gin.Context) { // the application's own authentication
		if u := c.GetHeader("X-User"); u != "" {
			c.Set("user_id", u)
		}
	})
	// The deny caches keep what they learn, and the breaker stays open,
	// for a minute: the counts below cannot depend on how fast this
	// machine runs the steps.
	observe := []ginlimit.Option{ginlimit.Observe(collector.Observe),
		ginlimit.MaxStalenessForTest(time.Minute), ginlimit.BreakerForTest(ginlimit.DefaultBreakerFailures, time.Minute)}
	ok := func(c *gin.Context) { c.String(http.StatusOK, "ok") }
	r.GET("/api/coupon/claim", ginlimit.RateLimit(ginlimit.Redis(rdb), observe[0], observe[1], observe[2], ginlimit.Timeout(5*time.Second),
		ginlimit.Key("coupon:claim:"), ginlimit.Window(time.Minute), ginlimit.Limit(2),
		ginlimit.Type(ginlimit.User), ginlimit.UserIdentity(identity.FromContext("user_id"))), ok)
	r.GET("/merchant/:id", ginlimit.RateLimit(ginlimit.Redis(rdb), observe[0], observe[1], observe[2], ginlimit.Timeout(5*time.Second),
		ginlimit.Key("merchant:"), ginlimit.Window(time.Minute), ginlimit.Limit(3),
		ginlimit.Type(ginlimit.IP)), ok)
	r.GET("/report", ginlimit.RateLimit(ginlimit.Redis(dead), observe[0], observe[1], observe[2],
		ginlimit.Key("report:"), ginlimit.Timeout(time.Second), ginlimit.OnFailure(ginlimit.FailOpen)), ok)
	r.NoRoute(ginlimit.RateLimit(ginlimit.Redis(rdb), observe[0], observe[1], observe[2], ginlimit.Timeout(5*time.Second), ginlimit.Key("notfound:"), ginlimit.Limit(100)),
		func(c *gin.Context) { c.String(http.StatusNotFound, "not found") })
	r.GET("/metrics", gin.WrapH(promhttp.HandlerFor(reg, promhttp.HandlerOpts{})))

	steps := []struct {
		method, target, user string
		status               int
	}{
		{"GET", "/api/coupon/claim", userID, 200},
		{"GET", "/api/coupon/claim", userID, 200},
		{"GET", "/api/coupon/claim", userID, 429}, // the deny cache answers: the quota was used up
		{"GET", "/api/coupon/claim", userID, 429},
		{"GET", "/api/coupon/claim", "", 401}, // no identity: counted nowhere
		{"GET", "/merchant/1", "", 200},
		{"GET", "/merchant/2", "", 200},
		{"GET", "/merchant/3", "", 200},
		{"GET", "/merchant/4", "", 429},
		{"GET", "/report", "", 200}, // Redis down, fail open
		{"GET", "/report", "", 200},
		{"GET", "/report", "", 200},
		{"GET", "/report", "", 200},
		{"GET", "/report", "", 200}, // DefaultBreakerFailures: the fifth failure opens the breaker
		{"GET", "/report", "", 200}, // answered by the open breaker
		{"BREW", "/coffee", "", 404},
		{"GET", "/nowhere", "", 404},
	}
	for i, st := range steps {
		req := httptest.NewRequest(st.method, st.target, nil)
		req.RemoteAddr = clientIP + ":4711"
		if st.user != "" {
			req.Header.Set("X-User", st.user)
		}
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		if w.Code != st.status {
			t.Fatalf("step %d: %s %s: status %d, want %d; body %s", i, st.method, st.target, w.Code, st.status, w.Body)
		}
	}

	s := promtest.Scrape(t, collector)
	for _, tt := range []struct {
		name        string
		route, rule string
		decision    string
		want        float64
	}{
		{decisions, "GET /api/coupon/claim", "coupon:claim", "allowed", 2},
		{decisions, "GET /api/coupon/claim", "coupon:claim", "limited", 2},
		{decisions, "GET /merchant/:id", "merchant", "allowed", 3},
		{decisions, "GET /merchant/:id", "merchant", "limited", 1},
		{decisions, "GET /report", "report", "error", 6},
		{decisions, "GET /report", "report", "allowed", 0},
		{decisions, metrics.Unmatched, "notfound", "allowed", 2},
		{latency, "GET /api/coupon/claim", "coupon:claim", "", 4},
		{latency, "GET /merchant/:id", "merchant", "", 4},
		{nearLimit, "GET /api/coupon/claim", "coupon:claim", "", 1}, // 0 of 2 left
		{nearLimit, "GET /merchant/:id", "merchant", "", 1},         // 0 of 3 left
		{denyCache, "GET /api/coupon/claim", "coupon:claim", "", 2},
		{denyCache, "GET /merchant/:id", "merchant", "", 1},
		{breaker, "GET /report", "report", "", 1},
		{breaker, "GET /merchant/:id", "merchant", "", 0},
	} {
		kv := []string{"route", tt.route, "rule", tt.rule}
		if tt.decision != "" {
			kv = append(kv, "decision", tt.decision)
		}
		if got := s.Must(t, tt.name, kv...); got != tt.want {
			t.Errorf("%s%v: %v, want %v", tt.name, kv, got, tt.want)
		}
	}
	if got := s.Sum(decisions); got != 16 {
		t.Errorf("sum of %s: %v, want 16 (every request but the 401)", decisions, got)
	}

	// No label, and nothing in the exposition, names the client.
	w := httptest.NewRecorder()
	r.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body, _ := io.ReadAll(w.Body)
	if !strings.Contains(string(body), decisions+"{") {
		t.Fatalf("/metrics has no %s:\n%s", decisions, body)
	}
	secrets := []string{userID, clientIP, "/merchant/1", "BREW", "/coffee", "/nowhere"}
	for _, secret := range secrets {
		if strings.Contains(string(body), secret) {
			t.Errorf("/metrics contains %q", secret)
		}
	}
	for name, mf := range s {
		for _, m := range mf.GetMetric() {
			for _, p := range m.GetLabel() {
				for _, secret := range secrets {
					if strings.Contains(p.GetValue(), secret) {
						t.Errorf("%s: label %s=%q contains %q", name, p.GetName(), p.GetValue(), secret)
					}
				}
			}
		}
	}
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}
