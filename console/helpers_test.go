package console

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/ginlimit"
	"github.com/ginlimit/ginlimit/identity"
)

func init() { gin.SetMode(gin.TestMode) }

// bearer is the tests' admin credential.
const bearer = "Bearer test-admin"

// instance is one application instance with a console at /console/.
type instance struct {
	engine  *gin.Engine
	limiter *ginlimit.Limiter
	console *Console
}

// claimRoute is the route of the tests' rule: 2 per minute per user (the
// X-User header), banned for an hour after 3 refusals.
const claimRoute = "GET /claim"

// newInstance makes an instance on rdb whose console beats only when the
// test drives it; consoleRedis, when not nil, is the console's own client.
func newInstance(t testing.TB, rdb, consoleRedis redis.UniversalClient, opts ...ginlimit.Option) *instance {
	t.Helper()
	obs := NewObserver()
	l, err := ginlimit.New(append([]ginlimit.Option{ginlimit.Redis(rdb), ginlimit.Timeout(5 * time.Second),
		ginlimit.UserIdentity(identity.FromContext("uid")), obs.Option()}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	e := gin.New()
	e.GET("/claim", func(c *gin.Context) { c.Set("uid", c.GetHeader("X-User")) }, l.RateLimit(ginlimit.Key("claim:"), ginlimit.Name("claim"), ginlimit.Limit(2), ginlimit.Window(time.Minute),
		ginlimit.Per(ginlimit.User), ginlimit.Ban(3, time.Minute, time.Hour)), func(c *gin.Context) { c.String(200, "ok") })
	if consoleRedis == nil {
		consoleRedis = rdb
	}
	con, err := withPeriod(e.Group("/console"), Config{Limiter: l, Redis: consoleRedis, Routes: e.Routes,
		Authorize: func(c *gin.Context) (string, bool) {
			return "tester", c.GetHeader("Authorization") == bearer
		}}, obs, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = con.Close() })
	return &instance{engine: e, limiter: l, console: con}
}

// get serves a GET with the admin's credential (none when anon).
func (in *instance) get(target string, anon bool, hdr ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodGet, target, nil)
	if !anon {
		req.Header.Set("Authorization", bearer)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	in.engine.ServeHTTP(w, req)
	return w
}

// post serves a form post with the admin's credential and hdr.
func (in *instance) post(target string, form url.Values, hdr ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, target, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", bearer)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	in.engine.ServeHTTP(w, req)
	return w
}

// claim sends one claim as user.
func (in *instance) claim(user string) int {
	return in.get("/claim", true, "X-User", user).Code
}
