package ginlimit

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ginlimit/ginlimit/identity"
)

// exchange is one request and what its response must carry.
type exchange struct {
	at      time.Duration     // Redis clock offset from t0
	status  int               // expected status
	headers map[string]string // expected header values ("" = must be absent)
	body    string            // expected body, if not empty
}

func runExchanges(t *testing.T, e *gin.Engine, set func(time.Time), target string, req map[string]string, xs []exchange) {
	t.Helper()
	for i, x := range xs {
		set(t0.Add(x.at))
		w := do(e, http.MethodGet, target, req)
		if w.Code != x.status {
			t.Fatalf("exchange %d: status %d, want %d (body %s)", i, w.Code, x.status, w.Body)
		}
		for k, v := range x.headers {
			if got := w.Header().Get(k); got != v {
				t.Errorf("exchange %d: %s = %q, want %q", i, k, got, v)
			}
		}
		if x.body != "" && w.Body.String() != x.body {
			t.Errorf("exchange %d: body %s, want %s", i, w.Body, x.body)
		}
	}
}

func TestHeaders(t *testing.T) {
	t.Parallel()
	m, c := newMini(t)
	e := gin.New()
	l, err := New(Timeout(testTimeout), Redis(c))
	if err != nil {
		t.Fatal(err)
	}
	e.GET("/x", RateLimit(l, Key(prefix(t)), Name("coupon"), Window(10*time.Second), Limit(2), Message("slow down"), DenyCache(0)), ok)
	reset := strconv.FormatInt(t0.Unix()+10, 10)
	runExchanges(t, e, m.SetTime, "/x", nil, []exchange{
		{0, 200, map[string]string{
			"RateLimit-Policy": `"coupon";q=2;w=10`, "RateLimit": `"coupon";r=1;t=10`,
			"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": reset, "Retry-After": "",
		}, `{"ok":true}`},
		{1500 * time.Millisecond, 200, map[string]string{
			"RateLimit": `"coupon";r=0;t=9`, "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": reset, "Retry-After": "",
		}, ""},
		{2 * time.Second, 429, map[string]string{
			"RateLimit-Policy": `"coupon";q=2;w=10`, "RateLimit": `"coupon";r=0;t=8`,
			"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": reset, "Retry-After": "8",
			"Content-Type": "application/json; charset=utf-8",
		}, `{"code":429,"message":"slow down"}`},
		// 0.3 s before more quota: Retry-After is never 0.
		{9700 * time.Millisecond, 429, map[string]string{"Retry-After": "1", "RateLimit": `"coupon";r=0;t=1`}, ""},
		{10 * time.Second, 200, map[string]string{"RateLimit": `"coupon";r=0;t=2`}, ""},
	})
}

func TestHeadersSubSecondWindow(t *testing.T) {
	t.Parallel()
	m, c := newMini(t)
	e := gin.New()
	e.GET("/x", testLimit(Redis(c), Key(prefix(t)), Name("test"), Window(250*time.Millisecond), Limit(1), DenyCache(0)), ok)
	runExchanges(t, e, m.SetTime, "/x", nil, []exchange{
		{0, 200, map[string]string{"RateLimit-Policy": `"test";q=1;w=1`, "RateLimit": `"test";r=0;t=1`}, ""},
		{100 * time.Millisecond, 429, map[string]string{"Retry-After": "1"}, ""},
		{250 * time.Millisecond, 200, nil, ""},
	})
}

func TestDecisionFrom(t *testing.T) {
	t.Parallel()
	_, c := newMini(t)
	var got Decision
	var found bool
	e := gin.New()
	e.GET("/x", testLimit(Redis(c), Key(prefix(t)), Name("r1"), Limit(5)), func(c *gin.Context) {
		got, found = DecisionFrom(c)
	})
	do(e, http.MethodGet, "/x", nil)
	do(e, http.MethodGet, "/x", nil)
	if !found || got.Rule != "r1" || !got.Allowed || got.Limit != 5 || got.Remaining != 3 || got.Reset != DefaultWindow || !got.Time.Equal(t0) || got.Err != nil {
		t.Fatalf("DecisionFrom = %+v, %v", got, found)
	}
	c2, _ := gin.CreateTestContext(nil)
	if _, ok := DecisionFrom(c2); ok {
		t.Fatal("DecisionFrom found a decision on a fresh context")
	}
}

func TestRouteTemplateSharesOneBucket(t *testing.T) {
	t.Parallel()
	m, c := newMini(t)
	pre := prefix(t)
	e := gin.New()
	e.GET("/voucher-order/seckill/:id", testLimit(Redis(c), Key(pre), Limit(3)), ok)
	for i, want := range []int{200, 200, 200, 429, 429} {
		if w := do(e, http.MethodGet, "/voucher-order/seckill/"+strconv.Itoa(i+1), nil); w.Code != want {
			t.Fatalf("request %d: %d, want %d", i, w.Code, want)
		}
	}
	if keys := m.Keys(); len(keys) != 1 || keys[0] != pre+"sl2:{GET /voucher-order/seckill/:id}" {
		t.Fatalf("keys %q, want the one route-template key", keys)
	}
}

func TestKeyLayoutAndEscaping(t *testing.T) {
	t.Parallel()
	m, c := newMini(t)
	pre := prefix(t)
	e := gin.New()
	e.Use(func(c *gin.Context) {
		if u := c.GetHeader("X-Test-User"); u != "" {
			c.Set("uid", u)
		}
	})
	e.GET("/ip", testLimit(Redis(c), Key(pre), Type(IP)), ok)
	e.GET("/user", testLimit(Redis(c), Key(pre), Type(User), UserIdentity(identity.FromContext("uid"))), ok)
	for _, tc := range []struct {
		path, user, remote, want string
	}{
		{"/ip", "", "192.0.2.1:1234", pre + "sl2:{GET /ip ip:192.0.2.1}"},
		{"/ip", "", "[::ffff:192.0.2.2]:1234", pre + "sl2:{GET /ip ip:192.0.2.2}"},
		{"/ip", "", "[2001:db8::1]:1234", pre + "sl2:{GET /ip ip:2001:db8::/64}"},
		// Another address in the same /64 is the same client.
		{"/ip", "", "[2001:db8::dead:beef]:1234", pre + "sl2:{GET /ip ip:2001:db8::/64}"},
		{"/user", "alice", "192.0.2.1:1", pre + "sl2:{GET /user user:alice}"},
		// A user id that tries to close the hash tag or spell another key.
		{"/user", "x} ip:1.2.3.4", "192.0.2.1:1", pre + "sl2:{GET /user user:x%7D%20ip:1.2.3.4}"},
		{"/user", "a%7D", "192.0.2.1:1", pre + "sl2:{GET /user user:a%257D}"},
	} {
		m.FlushAll()
		w := do(e, http.MethodGet, tc.path, map[string]string{"X-Test-User": tc.user, "RemoteAddr": tc.remote})
		if w.Code != 200 {
			t.Fatalf("%s %q: status %d", tc.path, tc.user, w.Code)
		}
		if keys := m.Keys(); len(keys) != 1 || keys[0] != tc.want {
			t.Errorf("%s user=%q remote=%s: keys %q, want %q", tc.path, tc.user, tc.remote, keys, tc.want)
		}
	}
}

func TestUnauthenticatedIs401AndCountedNowhere(t *testing.T) {
	t.Parallel()
	m, c := newMini(t)
	secret := []byte(strings.Repeat("s", 32))
	jwt, err := identity.NewJWT(identity.HMACSecret(secret))
	if err != nil {
		t.Fatal(err)
	}
	e := gin.New()
	e.GET("/claim", testLimit(Redis(c), Key(prefix(t)), Type(User), UserIdentity(jwt), Limit(1)), ok)
	for _, auth := range []string{"", "Bearer", "Bearer garbage", "Basic YWxpY2U6eA=="} {
		w := do(e, http.MethodGet, "/claim", map[string]string{"Authorization": auth})
		if w.Code != 401 || w.Body.String() != `{"code":401,"message":"Authentication required"}` {
			t.Fatalf("auth %q: %d %s, want 401 JSON", auth, w.Code, w.Body)
		}
		challenge := "Bearer"
		if auth != "" {
			challenge = `Bearer error="invalid_token"`
		}
		if w.Header().Get("WWW-Authenticate") != challenge || w.Header().Get("RateLimit") != "" {
			t.Fatalf("auth %q: headers %v", auth, w.Header())
		}
	}
	if keys := m.Keys(); len(keys) != 0 {
		t.Fatalf("unauthenticated requests were counted: keys %q", keys)
	}
}

func TestSpoofedForwardedFor(t *testing.T) {
	t.Parallel()
	m, c := newMini(t)
	pre := prefix(t)
	trusted, err := identity.NewIP("10.0.0.0/8")
	if err != nil {
		t.Fatal(err)
	}
	e := gin.New()
	e.GET("/default", testLimit(Redis(c), Key(pre), Type(IP), Limit(1)), ok)
	e.GET("/proxied", testLimit(Redis(c), Key(pre), Type(IP), Limit(1), IPIdentity(trusted)), ok)
	for _, tc := range []struct {
		path, remote, xff, wantKey string
	}{
		{"/default", "203.0.113.9:5000", "198.51.100.1", pre + "sl2:{GET /default ip:203.0.113.9}"},
		{"/proxied", "203.0.113.9:5000", "198.51.100.1", pre + "sl2:{GET /proxied ip:203.0.113.9}"},
		{"/proxied", "10.1.2.3:5000", "198.51.100.1", pre + "sl2:{GET /proxied ip:198.51.100.1}"},
		{"/proxied", "10.1.2.3:5000", "6.6.6.6, 198.51.100.2, 10.9.9.9", pre + "sl2:{GET /proxied ip:198.51.100.2}"},
	} {
		m.FlushAll()
		for i, want := range []int{200, 429} {
			// The client rotates the header it controls; the bucket must not move.
			xff := tc.xff
			if tc.remote[:3] != "10." {
				xff = "192.0.2." + strconv.Itoa(i+1)
			}
			w := do(e, http.MethodGet, tc.path, map[string]string{"RemoteAddr": tc.remote, "X-Forwarded-For": xff})
			if w.Code != want {
				t.Fatalf("%s from %s (XFF %q) #%d: %d, want %d", tc.path, tc.remote, xff, i, w.Code, want)
			}
		}
		if keys := m.Keys(); len(keys) != 1 || keys[0] != tc.wantKey {
			t.Errorf("%s from %s: keys %q, want %q", tc.path, tc.remote, keys, tc.wantKey)
		}
	}
}

func TestOptionValidation(t *testing.T) {
	t.Parallel()
	_, c := newMini(t)
	for _, tc := range []struct {
		name string
		opt  Option
		want string
	}{
		{"limit 0", Limit(0), "Limit(0)"},
		{"limit negative", Limit(-3), "Limit(-3)"},
		{"window 0", Window(0), "Window(0s)"},
		{"window sub-ms", Window(999 * time.Microsecond), "Window(999µs)"},
		{"window too long", Window(40 * 365 * 24 * time.Hour), "Window(350400h0m0s)"},
		{"empty key", Key(""), `Key("")`},
		{"brace key", Key("a{b}:"), `Key("a{b}:")`},
		{"empty message", Message(""), `Message("")`},
		{"bad type", Type(Builtin(7)), "Type: Builtin(7)"},
		{"nil type", Type(nil), "Type(nil)"},
		{"bad name", Name("bad\nname"), "Name("},
		{"nil redis", Redis(nil), "Redis(nil)"},
		{"nil user identity", UserIdentity(nil), "UserIdentity(nil)"},
		{"nil ip identity", IPIdentity(nil), "IPIdentity(nil)"},
		{"bad fail policy", OnFailure(FailPolicy("FailSoftly")), `OnFailure("FailSoftly")`},
		{"bad algorithm", Algorithm(AlgorithmKind("leaky_bucket")), `Algorithm("leaky_bucket")`},
		{"penalty is no algorithm", Algorithm(banAlg), `Algorithm("penalty")`},
		{"zero timeout", Timeout(0), "Timeout(0s)"},
		{"nil logger", withLogger(nil), "withLogger(nil)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(Redis(c), tc.opt); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New: error %v, want one naming %s", err, tc.want)
			}
			msg := panicMessage(func() { RateLimit(tc.opt) })
			if !strings.Contains(msg, tc.want) {
				t.Errorf("RateLimit: panic %q, want one naming %s", msg, tc.want)
			}
		})
	}
	// Cross-option errors.
	if _, err := New(); err == nil || !strings.Contains(err.Error(), "ginlimit.Redis") {
		t.Errorf("New without Redis: %v", err)
	}
	if _, err := New(Redis(c), Type(User)); err == nil || !strings.Contains(err.Error(), "UserIdentity") {
		t.Errorf("New with Type(User) and no identity: %v", err)
	}
	l, _ := New(Timeout(testTimeout), Redis(c))
	if msg := panicMessage(func() { l.RateLimit(Type(User)) }); !strings.Contains(msg, "UserIdentity") {
		t.Errorf("Limiter.RateLimit(Type(User)) without identity: panic %q", msg)
	}
	if msg := panicMessage(func() { RateLimit(Redis(c), Limit(5), Window(time.Millisecond)) }); msg != "" {
		t.Errorf("valid options panicked: %s", msg)
	}
}

func panicMessage(f func()) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			msg, _ = r.(string)
			if msg == "" {
				msg = "non-string panic"
			}
		}
	}()
	f()
	return ""
}

// TestMisconfiguredRoutePanicsAtStartup: the package-level RateLimit
// compiles its route when it is called, so a route without Redis or a User
// rule without a user identity panics there, naming what is missing, as
// Limiter.RateLimit does; it never reaches a request.
func TestMisconfiguredRoutePanicsAtStartup(t *testing.T) {
	t.Parallel()
	_, c := newMini(t)
	l, err := New(Redis(c))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		make func() gin.HandlerFunc
		want []string
	}{
		{"no limiter, no Redis", func() gin.HandlerFunc { return RateLimit(Limit(1)) },
			[]string{"ginlimit.RateLimit", "Redis(client)", "ginlimit.RateLimit(limiter, ...)"}},
		{"no user identity", func() gin.HandlerFunc { return RateLimit(l, Type(User)) }, []string{"ginlimit.RateLimit", "UserIdentity"}},
		{"limiter method, no user identity", func() gin.HandlerFunc { return l.RateLimit(Type(User)) }, []string{"Limiter.RateLimit", "UserIdentity"}},
		{"two limiters", func() gin.HandlerFunc { return RateLimit(l, l) }, []string{"two Limiters"}},
		{"nil limiter", func() gin.HandlerFunc { return RateLimit((*Limiter)(nil)) }, []string{"nil"}},
	} {
		msg := func() (msg string) {
			defer func() { msg = fmt.Sprint(recover()) }()
			tc.make()
			return "no panic"
		}()
		for _, want := range tc.want {
			if !strings.Contains(msg, want) {
				t.Errorf("%s: panic %q does not say %q", tc.name, msg, want)
			}
		}
	}
	if _, err := New(Redis(c), l); err == nil || !strings.Contains(err.Error(), "ginlimit.RateLimit only") {
		t.Errorf("a Limiter given to New: %v, want an error", err)
	}
	if _, err := l.Policy(l); err == nil || !strings.Contains(err.Error(), "ginlimit.RateLimit only") {
		t.Errorf("a Limiter given to Limiter.Policy: %v, want an error", err)
	}
}

func TestLimiterRouteOverridesAndIsolation(t *testing.T) {
	t.Parallel()
	_, c := newMini(t)
	pre := prefix(t)
	l1, _ := New(Timeout(testTimeout), Redis(c), Key(pre+"a:"), Limit(1))
	l2, _ := New(Timeout(testTimeout), Redis(c), Key(pre+"b:"), Limit(2))
	e := gin.New()
	// The same annotation on two limiters: each route takes its limiter's
	// defaults and counts apart.
	e.GET("/a", RateLimit(l1), ok)
	e.GET("/b", RateLimit(l2), ok)
	e.GET("/c", l1.RateLimit(Limit(3)), ok)
	for _, tc := range []struct {
		path string
		want []int
	}{
		{"/a", []int{200, 429}},
		{"/b", []int{200, 200, 429}},
		{"/c", []int{200, 200, 200, 429}},
	} {
		for i, want := range tc.want {
			if w := do(e, http.MethodGet, tc.path, nil); w.Code != want {
				t.Fatalf("%s #%d: %d, want %d", tc.path, i, w.Code, want)
			}
		}
	}
}

// TestCostOverHTTP: a per-request cost is charged, and a request that costs
// more than the rule can ever admit gets a 429 that says so, at once.
func TestCostOverHTTP(t *testing.T) {
	t.Parallel()
	m, c := newMini(t)
	pre := prefix(t)
	e := gin.New()
	e.GET("/batch", testLimit(Redis(c), Key(pre), Limit(10), DenyCache(0), Cost(func(c *gin.Context) int {
		n, _ := strconv.Atoi(c.Query("n"))
		return n
	})), ok)
	for i, tc := range []struct {
		n, status int
		remaining string
		body      string
	}{
		{4, 200, "6", ""},
		{0, 200, "5", ""}, // below 1 is charged as 1
		{5, 200, "0", ""},
		{1, 429, "0", ""},
		{11, 429, "", `{"code":429,"message":"the request costs 11, more than the rule can ever admit (10)"}`},
	} {
		w := do(e, http.MethodGet, "/batch?n="+strconv.Itoa(tc.n), nil)
		if w.Code != tc.status || w.Header().Get("X-RateLimit-Remaining") != tc.remaining || (tc.body != "" && w.Body.String() != tc.body) {
			t.Fatalf("request %d (n=%d): %d %q %s", i, tc.n, w.Code, w.Header().Get("X-RateLimit-Remaining"), w.Body)
		}
	}
	// One entry per admitted unit: the 3 admitted requests are 10 entries.
	if n, err := logUnits(context.Background(), c, pre+"sl2:{GET /batch}"); err != nil || n != 10 {
		t.Fatalf("the log holds %d units (%v) for the 3 admitted requests of 10 units, want 10", n, err)
	}
	// A fixed cost is a function returning it; one above the limit is
	// refused on every request, before Redis.
	e.GET("/six", testLimit(Redis(c), Key(pre+"six:"), Limit(5), costOf(6)), ok)
	if w := do(e, http.MethodGet, "/six", nil); w.Code != 429 ||
		w.Body.String() != `{"code":429,"message":"the request costs 6, more than the rule can ever admit (5)"}` {
		t.Fatalf("a fixed cost above the limit: %d %s", w.Code, w.Body)
	}
	if keys := m.Keys(); slices.ContainsFunc(keys, func(k string) bool { return strings.HasPrefix(k, pre+"six:") }) {
		t.Fatalf("a request no rule can admit reached Redis: %q", keys)
	}
}
