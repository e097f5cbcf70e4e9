package app_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/gin-gonic/gin"
	"github.com/golang-jwt/jwt/v5"

	"github.com/ginlimit/ginlimit/example/coupon/app"
	"github.com/ginlimit/ginlimit/ginlimit"
	"github.com/ginlimit/ginlimit/identity"
)

func TestMain(m *testing.M) {
	gin.SetMode(gin.TestMode) // no route dump or debug warnings
	os.Exit(m.Run())
}

// testSecret is the JWT secret of the tests that need to forge tokens.
var testSecret = []byte("coupon-test-secret-0123456789abcdef")

// testIdentitySecret is the identity secret of the tests whose instances
// share counts.
var testIdentitySecret = []byte("coupon-test-identity-secret-0123456789")

// newApp returns the handler of a new App with its own embedded miniredis,
// closed when the test ends.
func newApp(t *testing.T, cfg app.Config) http.Handler {
	t.Helper()
	return newAppOf(t, cfg).Handler
}

// newAppOf is newApp's App.
func newAppOf(t *testing.T, cfg app.Config) *app.App {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.DecisionTimeout = 5 * time.Second // a loaded machine must not fail open
	a, err := app.New(t.Context(), cfg)
	if err != nil {
		t.Fatalf("app.New: %v", err)
	}
	t.Cleanup(func() {
		if err := a.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return a
}

// req is one request of a test sequence.
type req struct {
	method string // default GET
	target string
	body   string
	remote string // RemoteAddr; default 192.0.2.1:1234
	token  string // bearer token
	xff    string // X-Forwarded-For
}

// step is a request and what it must get.
type step struct {
	req
	status int
	body   string // the exact body, when not empty
}

func serve(t *testing.T, h http.Handler, r req) *httptest.ResponseRecorder {
	t.Helper()
	method := r.method
	if method == "" {
		method = http.MethodGet
	}
	hr := httptest.NewRequest(method, r.target, strings.NewReader(r.body))
	if r.remote != "" {
		hr.RemoteAddr = r.remote
	}
	if r.token != "" {
		hr.Header.Set("Authorization", "Bearer "+r.token)
	}
	if r.xff != "" {
		hr.Header.Set("X-Forwarded-For", r.xff)
	}
	if r.body != "" {
		hr.Header.Set("Content-Type", "application/json")
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, hr)
	return w
}

// run serves steps in order and checks each status and body.
func run(t *testing.T, h http.Handler, steps []step) []*httptest.ResponseRecorder {
	t.Helper()
	ws := make([]*httptest.ResponseRecorder, len(steps))
	for i, s := range steps {
		w := serve(t, h, s.req)
		ws[i] = w
		if w.Code != s.status {
			t.Fatalf("step %d: %s %s from %s: status %d, want %d; body %s", i, s.method, s.target, s.remote, w.Code, s.status, w.Body)
		}
		if s.body != "" && w.Body.String() != s.body {
			t.Fatalf("step %d: %s: body %s, want %s", i, s.target, w.Body, s.body)
		}
	}
	return ws
}

func repeat(n int, s step) []step { return slices.Repeat([]step{s}, n) }

func tooMany(msg string) string {
	b, _ := json.Marshal(map[string]any{"code": 429, "message": msg})
	return string(b)
}

// login gets a token for user from h.
func login(t *testing.T, h http.Handler, user string) string {
	t.Helper()
	w := serve(t, h, req{method: http.MethodPost, target: "/api/login", body: `{"user_id":` + strconv.Quote(user) + `}`})
	if w.Code != http.StatusOK {
		t.Fatalf("login %q: status %d, body %s", user, w.Code, w.Body)
	}
	var out struct {
		Token string `json:"token"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil || out.Token == "" {
		t.Fatalf("login %q: body %s: %v", user, w.Body, err)
	}
	return out.Token
}

func TestLogin(t *testing.T) {
	t.Parallel()
	h := newApp(t, app.Config{JWTSecret: testSecret})

	before := time.Now().Truncate(time.Second)
	tok := login(t, h, "alice")
	after := time.Now()

	var claims jwt.RegisteredClaims
	parsed, err := jwt.ParseWithClaims(tok, &claims, func(*jwt.Token) (any, error) { return testSecret, nil },
		jwt.WithValidMethods([]string{"HS256"}), jwt.WithExpirationRequired())
	if err != nil {
		t.Fatalf("token %s: %v", tok, err)
	}
	if alg := parsed.Method.Alg(); alg != "HS256" {
		t.Errorf("alg = %s, want HS256", alg)
	}
	if claims.Subject != "alice" {
		t.Errorf("sub = %q, want alice", claims.Subject)
	}
	if claims.IssuedAt == nil || claims.IssuedAt.Before(before) || claims.IssuedAt.After(after) {
		t.Errorf("iat = %v, want between %v and %v", claims.IssuedAt, before, after)
	}
	if claims.ExpiresAt == nil || claims.IssuedAt == nil || claims.ExpiresAt.Sub(claims.IssuedAt.Time) != app.TokenTTL {
		t.Errorf("exp = %v, want iat + %v", claims.ExpiresAt, app.TokenTTL)
	}
}

func TestLoginBadBody(t *testing.T) {
	t.Parallel()
	h := newApp(t, app.Config{})
	for _, body := range []string{
		``,
		`not json`,
		`[]`,
		`"alice"`,
		`null`,
		`{}`,
		`{"user_id":""}`,
		`{"user_id":null}`,
		`{"user_id":42}`,
		`{"user_id":"alice"} trailing`,
		`{"user_id":"` + strings.Repeat("a", app.MaxUserIDLen+1) + `"}`,
		`{"user_id":"` + strings.Repeat("a", 10_000) + `"}`,
	} {
		w := serve(t, h, req{method: http.MethodPost, target: "/api/login", body: body})
		if w.Code != http.StatusBadRequest {
			t.Errorf("body %.40q: status %d, want 400", body, w.Code)
			continue
		}
		var out struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil || out.Code != 400 || out.Message == "" {
			t.Errorf("body %.40q: answer %s, want {\"code\":400,\"message\":...}", body, w.Body)
		}
	}
	// The longest accepted id.
	login(t, h, strings.Repeat("a", app.MaxUserIDLen))
}

func TestClaim(t *testing.T) {
	t.Parallel()
	h := newApp(t, app.Config{JWTSecret: testSecret})
	alice, bob := login(t, h, "alice"), login(t, h, "bob")

	forged, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.RegisteredClaims{
		Subject: "alice", ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Hour)),
	}).SignedString([]byte("another-secret-of-at-least-32-bytes!"))
	if err != nil {
		t.Fatal(err)
	}
	expired, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.RegisteredClaims{
		Subject: "alice", ExpiresAt: jwt.NewNumericDate(time.Now().Add(-time.Hour)),
	}).SignedString(testSecret)
	if err != nil {
		t.Fatal(err)
	}

	const unauthorized = `{"code":401,"message":"Authentication required"}`
	claim := req{target: "/api/coupon/claim"}
	as := func(tok string) req { r := claim; r.token = tok; return r }

	steps := []step{
		{req: claim, status: 401, body: unauthorized},
		{req: as("not-a-jwt"), status: 401, body: unauthorized},
		{req: as(forged), status: 401, body: unauthorized},
		{req: as(expired), status: 401, body: unauthorized},
		{req: as(alice), status: 200},
		{req: as(alice), status: 200},
		{req: as(alice), status: 200},
		{req: as(alice), status: 429, body: tooMany(app.ClaimMessage)},
		{req: claim, status: 401, body: unauthorized}, // still 401, not 429
		{req: as(bob), status: 200},                   // bob has his own bucket
	}
	ws := run(t, h, steps)

	if got := ws[0].Header().Get("WWW-Authenticate"); got != "Bearer" {
		t.Errorf("401 WWW-Authenticate = %q, want Bearer", got)
	}
	for i, want := range map[int]int{4: 2, 5: 1, 6: 0} {
		var out struct {
			Code int `json:"code"`
			Data struct {
				UserID    string `json:"user_id"`
				Remaining *int   `json:"remaining"`
			} `json:"data"`
		}
		if err := json.Unmarshal(ws[i].Body.Bytes(), &out); err != nil {
			t.Fatalf("step %d: %s: %v", i, ws[i].Body, err)
		}
		if out.Code != 200 || out.Data.UserID != "alice" || out.Data.Remaining == nil || *out.Data.Remaining != want {
			t.Errorf("step %d: body %s, want code 200, user_id alice, remaining %d", i, ws[i].Body, want)
		}
	}
	limited := ws[7]
	if ct := limited.Header().Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("429 Content-Type = %q", ct)
	}
	ra, err := strconv.Atoi(limited.Header().Get("Retry-After"))
	// A sliding log's entry may leave up to a millisecond after a window,
	// and Retry-After rounds up to the second.
	if err != nil || ra < 1 || ra > int(app.ClaimWindow/time.Second)+1 {
		t.Errorf("Retry-After = %q, want 1..%d", limited.Header().Get("Retry-After"), int(app.ClaimWindow/time.Second)+1)
	}
}

func TestMerchantPerIP(t *testing.T) {
	t.Parallel()
	h := newApp(t, app.Config{})
	from := func(remote string) req { return req{target: "/api/coupon/merchant", remote: remote} }

	var steps []step
	steps = append(steps, repeat(app.MerchantLimit, step{req: from("192.0.2.1:1111"), status: 200})...)
	steps = append(steps,
		step{req: from("192.0.2.1:2222"), status: 429, body: tooMany(app.MerchantMessage)}, // another port, same IP
		step{req: from("198.51.100.7:1111"), status: 200},
		step{req: from("[2001:db8::1]:1111"), status: 200},
		step{req: from("[::ffff:192.0.2.1]:1111"), status: 429}, // IPv4-mapped is the same client
		// Without trusted proxies X-Forwarded-For is ignored: a client
		// cannot pick itself a fresh bucket.
		step{req: req{target: "/api/coupon/merchant", remote: "192.0.2.1:1111", xff: "203.0.113.9"}, status: 429},
	)
	run(t, h, steps)
}

func TestMerchantTrustedProxy(t *testing.T) {
	t.Parallel()
	h := newApp(t, app.Config{TrustedProxies: []string{"10.0.0.0/8"}})
	via := func(client string) req {
		return req{target: "/api/coupon/merchant", remote: "10.1.2.3:5555", xff: client}
	}

	var steps []step
	steps = append(steps, repeat(app.MerchantLimit, step{req: via("203.0.113.1"), status: 200})...)
	steps = append(steps,
		step{req: via("203.0.113.1"), status: 429},
		step{req: via("203.0.113.2"), status: 200},
		// The right-most untrusted hop is the client; what it wrote to
		// the left is ignored.
		step{req: via("198.51.100.1, 203.0.113.1"), status: 429},
	)
	run(t, h, steps)
}

func TestVoucherSeckillSharesOneBucket(t *testing.T) {
	t.Parallel()
	h := newApp(t, app.Config{})
	voucher := func(id, remote string) req {
		return req{target: "/voucher-order/seckill/" + id, remote: remote}
	}
	steps := []step{
		{req: voucher("1", "192.0.2.1:1"), status: 200},
		{req: voucher("2", "192.0.2.2:1"), status: 200},
		{req: voucher("1", "192.0.2.3:1"), status: 200},
		{req: voucher("2", "192.0.2.4:1"), status: 200},
		{req: voucher("3", "192.0.2.5:1"), status: 200},
		{req: voucher("1", "192.0.2.6:1"), status: 429, body: tooMany(app.SeckillMessage)},
		{req: voucher("2", "192.0.2.7:1"), status: 429, body: tooMany(app.SeckillMessage)},
	}
	if len(steps) != app.VoucherSeckillLimit+2 {
		t.Fatalf("test assumes VoucherSeckillLimit = 5, it is %d", app.VoucherSeckillLimit)
	}
	run(t, h, steps)
}

func TestSeckill(t *testing.T) {
	t.Parallel()
	h := newApp(t, app.Config{})
	steps := repeat(app.SeckillLimit, step{req: req{target: "/api/coupon/seckill"}, status: 200})
	steps = append(steps, step{req: req{target: "/api/coupon/seckill", remote: "198.51.100.1:1"}, status: 429, body: tooMany(app.SeckillMessage)})
	ws := run(t, h, steps)
	if got := ws[len(ws)-1].Header().Get("Retry-After"); got == "" {
		t.Error("429 has no Retry-After")
	}
	// The seckill limit is its own: other routes still answer.
	run(t, h, []step{{req: req{target: "/voucher-order/seckill/1"}, status: 200}})
}

func TestHealthzIsNeverLimited(t *testing.T) {
	t.Parallel()
	h := newApp(t, app.Config{})
	run(t, h, repeat(200, step{req: req{target: "/healthz"}, status: 200, body: `{"status":"ok"}`}))
}

// TestMetrics: GET /metrics counts the decisions of the limited routes by
// route template and rule, names no client, and is never limited itself.
func TestMetrics(t *testing.T) {
	t.Parallel()
	h := newApp(t, app.Config{JWTSecret: testSecret})
	alice := login(t, h, "alice")
	claim := req{target: "/api/coupon/claim", token: alice}
	steps := append(repeat(app.ClaimLimit, step{req: claim, status: 200}),
		step{req: claim, status: 429, body: tooMany(app.ClaimMessage)})
	for i := range app.VoucherSeckillLimit + 1 {
		status := 200
		if i == app.VoucherSeckillLimit {
			status = 429
		}
		steps = append(steps, step{req: req{target: "/voucher-order/seckill/" + strconv.Itoa(i+1)}, status: status})
	}
	steps = append(steps, step{req: req{target: "/api/coupon/merchant", remote: "198.51.100.23:5555"}, status: 200})
	run(t, h, steps)

	var body string
	for range 50 { // never limited
		w := serve(t, h, req{target: "/metrics"})
		if w.Code != http.StatusOK {
			t.Fatalf("GET /metrics: status %d, body %s", w.Code, w.Body)
		}
		if ct := w.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
			t.Errorf("GET /metrics: Content-Type %q, want text/plain", ct)
		}
		body = w.Body.String()
	}
	for _, want := range []string{
		`ginlimit_decisions_total{decision="allowed",route="GET /api/coupon/claim",rule="coupon:claim"} 3`,
		`ginlimit_decisions_total{decision="limited",route="GET /api/coupon/claim",rule="coupon:claim"} 1`,
		`ginlimit_decisions_total{decision="allowed",route="GET /voucher-order/seckill/:id",rule="voucher:seckill"} 5`,
		`ginlimit_decisions_total{decision="limited",route="GET /voucher-order/seckill/:id",rule="voucher:seckill"} 1`,
		`ginlimit_decisions_total{decision="allowed",route="GET /api/coupon/merchant",rule="coupon:merchant"} 1`,
		`ginlimit_decision_seconds_count{route="GET /api/coupon/claim",rule="coupon:claim"} 4`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// Neither the client nor an unlimited route shows up.
	for _, absent := range []string{"alice", "198.51.100.23", "192.0.2.1", "/voucher-order/seckill/1", "/metrics", "/healthz"} {
		if strings.Contains(body, absent) {
			t.Errorf("/metrics contains %q", absent)
		}
	}
}

func TestNotFound(t *testing.T) {
	t.Parallel()
	h := newApp(t, app.Config{})
	run(t, h, []step{
		{req: req{target: "/nope"}, status: 404, body: `{"code":404,"message":"Not found"}`},
		{req: req{target: "/voucher-order/seckill/abc"}, status: 400},
	})
}

// TestRedisURL runs the demo against a Redis it does not own.
func TestRedisURL(t *testing.T) {
	t.Parallel()
	m := miniredis.RunT(t)
	now := time.Now()
	m.SetTime(now)
	h := newApp(t, app.Config{RedisURL: "redis://" + m.Addr() + "/0"})

	merchant := req{target: "/api/coupon/merchant"}
	steps := repeat(app.MerchantLimit, step{req: merchant, status: 200})
	run(t, h, append(steps, step{req: merchant, status: 429}))
	if len(m.Keys()) == 0 {
		t.Error("no key written to the Redis of REDIS_URL")
	}
	// The window sliding on the Redis clock is tested in package ginlimit;
	// here the in-process deny cache would (correctly) keep answering 429
	// until the local clock, which SetTime does not move, passes the window.
}

func TestNewErrors(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]app.Config{
		"short JWT secret":      {JWTSecret: []byte("too short")},
		"bad trusted proxy":     {TrustedProxies: []string{"10.0.0.0/33"}},
		"bad Redis URL scheme":  {RedisURL: "http://localhost:6379"},
		"unparsable Redis URL":  {RedisURL: "redis://user:hunter2@[::1"},
		"short identity secret": {IdentitySecret: []byte("too short")},
		"unknown algorithm":     {Algorithm: ginlimit.AlgorithmKind("leaky_bucket")},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			a, err := app.New(t.Context(), cfg)
			if err == nil {
				a.Close()
				t.Fatal("New succeeded, want an error")
			}
			t.Logf("New: %v", err)
			if !strings.HasPrefix(err.Error(), "coupon: ") {
				t.Errorf("error %q does not start with \"coupon: \"", err)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error %q leaks the Redis password", err)
			}
		})
	}
}

// syncBuffer is a bytes.Buffer safe for the concurrent writes of a logger.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestStartupLogs(t *testing.T) {
	t.Parallel()
	var dev, prod syncBuffer
	h := newApp(t, app.Config{Logger: slog.New(slog.NewTextHandler(&dev, nil))})
	newApp(t, app.Config{JWTSecret: testSecret, Logger: slog.New(slog.NewTextHandler(&prod, nil))})

	if s := dev.String(); !strings.Contains(s, "level=WARN") || !strings.Contains(s, "JWT_SECRET") {
		t.Errorf("no warning about the development secret in:\n%s", s)
	}
	if s := dev.String(); !strings.Contains(s, "level=INFO") || !strings.Contains(s, "miniredis") || !strings.Contains(s, "addr=127.0.0.1:") {
		t.Errorf("no message about the embedded miniredis and its address in:\n%s", s)
	}
	if s := prod.String(); strings.Contains(s, "level=WARN") {
		t.Errorf("a warning with a JWT secret set:\n%s", s)
	}

	// Tokens signed with the development secret work.
	dj, err := identity.NewJWT(identity.HMACSecret([]byte(app.DevJWTSecret)))
	if err != nil {
		t.Fatal(err)
	}
	tok := login(t, h, "carol")
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("Authorization", "Bearer "+tok)
	if id, err := dj.Verify(r); err != nil || id != "carol" {
		t.Errorf("token not signed with DevJWTSecret: %q, %v", id, err)
	}
	run(t, h, []step{{req: req{target: "/api/coupon/claim", token: tok}, status: 200}})
}

func TestConfigFromEnv(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		env  map[string]string
		want app.Config
	}{
		{name: "empty", env: nil, want: app.Config{}},
		{
			name: "all",
			env: map[string]string{
				"REDIS_URL":           "redis://localhost:6379/1",
				"JWT_SECRET":          "s3cret",
				"TRUSTED_PROXIES":     "10.0.0.0/8,192.168.0.0/16",
				"LIMIT_ALGORITHM":     "token_bucket",
				"ADDR":                ":9999",
				"REDIS_CLUSTER_ADDRS": "10.0.0.1:6379, 10.0.0.2:6379,",
				"FAIL_POLICY":         "local",
				"SHADOW":              "1",
				"JWKS_URL":            "https://idp.example.com/.well-known/jwks.json",
			},
			want: app.Config{
				RedisURL:       "redis://localhost:6379/1",
				JWTSecret:      []byte("s3cret"),
				TrustedProxies: []string{"10.0.0.0/8", "192.168.0.0/16"},
				Algorithm:      ginlimit.TokenBucket,
				ClusterAddrs:   []string{"10.0.0.1:6379", "10.0.0.2:6379"},
				FailPolicy:     ginlimit.FailLocal,
				Shadow:         true,
				JWKSURL:        "https://idp.example.com/.well-known/jwks.json",
			},
		},
		{
			name: "fail closed",
			env:  map[string]string{"FAIL_POLICY": "closed", "SHADOW": "0"},
			want: app.Config{FailPolicy: ginlimit.FailClosed},
		},
		{
			name: "blank proxy entries",
			env:  map[string]string{"TRUSTED_PROXIES": " , 10.0.0.0/8 ,,  2001:db8::/32, "},
			want: app.Config{TrustedProxies: []string{"10.0.0.0/8", "2001:db8::/32"}},
		},
		{
			name: "only blanks",
			env:  map[string]string{"TRUSTED_PROXIES": " ,, ", "LIMIT_ALGORITHM": "  "},
			want: app.Config{},
		},
		{name: "sliding_log", env: map[string]string{"LIMIT_ALGORITHM": "sliding_log"}, want: app.Config{Algorithm: ginlimit.SlidingLog}},
		{name: "sliding_counter", env: map[string]string{"LIMIT_ALGORITHM": "sliding_counter"}, want: app.Config{Algorithm: ginlimit.SlidingCounter}},
		{name: "fixed_window", env: map[string]string{"LIMIT_ALGORITHM": " fixed_window "}, want: app.Config{Algorithm: ginlimit.FixedWindow}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := app.ConfigFromEnv(func(k string) string { return tt.env[k] })
			if err != nil {
				t.Fatalf("ConfigFromEnv: %v", err)
			}
			if got.RedisURL != tt.want.RedisURL || !bytes.Equal(got.JWTSecret, tt.want.JWTSecret) ||
				(got.JWTSecret == nil) != (tt.want.JWTSecret == nil) ||
				!slices.Equal(got.TrustedProxies, tt.want.TrustedProxies) || got.Logger != nil ||
				got.Algorithm != tt.want.Algorithm || got.JWKSURL != tt.want.JWKSURL {
				t.Errorf("ConfigFromEnv = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestConfigFromEnvBadAlgorithm checks that an unknown LIMIT_ALGORITHM stops
// the demo at start-up with an error that names the variable and the value.
func TestConfigFromEnvBadValues(t *testing.T) {
	t.Parallel()
	for k, v := range map[string]string{"FAIL_POLICY": "sometimes", "SHADOW": "yes please"} {
		_, err := app.ConfigFromEnv(func(key string) string {
			if key == k {
				return v
			}
			return ""
		})
		if err == nil || !strings.Contains(err.Error(), k) {
			t.Errorf("%s=%q: error %v, want one naming %s", k, v, err, k)
		}
	}
}

// TestShadow: with SHADOW the merchant route never refuses.
func TestShadow(t *testing.T) {
	t.Parallel()
	h := newApp(t, app.Config{Shadow: true})
	for i := range app.MerchantLimit + 3 {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/api/coupon/merchant", nil))
		if w.Code != http.StatusOK {
			t.Fatalf("shadow mode, request %d: %d", i, w.Code)
		}
	}
}

func TestConfigFromEnvBadAlgorithm(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"leaky_bucket", "SlidingLog", "sliding-log", "0"} {
		_, err := app.ConfigFromEnv(func(k string) string {
			if k == "LIMIT_ALGORITHM" {
				return v
			}
			return ""
		})
		if err == nil {
			t.Errorf("LIMIT_ALGORITHM=%q: no error", v)
			continue
		}
		if msg := err.Error(); !strings.HasPrefix(msg, "coupon: LIMIT_ALGORITHM: ") || !strings.Contains(msg, strconv.Quote(v)) {
			t.Errorf("LIMIT_ALGORITHM=%q: error %q does not name the variable and the value", v, msg)
		}
	}
}

// TestAlgorithms runs the demo with each algorithm: the merchant route admits
// its limit, 5, and then answers 429 (the token bucket's burst is the limit),
// and every other limited route still admits a request (the voucher claim
// route one per user per voucher, then 429), so each route's
// window suits each algorithm (a sliding counter's sub-windows must divide
// it). The Redis clock is frozen with SetTime, so no window slides and no
// token refills while the test runs, however slow the machine. The shape of
// the merchant key (its type and its algorithm's tag) shows which script
// really ran.
func TestAlgorithms(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		alg      ginlimit.AlgorithmKind
		keyType  string // the Redis type of the merchant key
		tag      string // how the algorithm's tag after the prefix starts
		hasField string // a field the merchant key must have, for hashes
	}{
		{ginlimit.SlidingLog, "string", "sl2:", ""},
		{ginlimit.SlidingCounter, "string", "sc-", ""},
		{ginlimit.FixedWindow, "string", "fw2:", ""},
		{ginlimit.TokenBucket, "string", "tb3:", ""},
	} {
		alg := tt.alg
		t.Run(string(alg), func(t *testing.T) {
			t.Parallel()
			m := miniredis.RunT(t)
			m.SetTime(time.Now())
			h := newApp(t, app.Config{RedisURL: "redis://" + m.Addr() + "/0", Algorithm: alg, JWTSecret: testSecret})

			merchant := req{target: "/api/coupon/merchant", remote: "192.0.2.1:1111"}
			steps := repeat(app.MerchantLimit, step{req: merchant, status: 200})
			steps = append(steps,
				step{req: merchant, status: 429, body: tooMany(app.MerchantMessage)},
				step{req: merchant, status: 429, body: tooMany(app.MerchantMessage)},
				step{req: req{target: "/api/coupon/merchant", remote: "198.51.100.7:1111"}, status: 200},
				step{req: req{target: "/api/coupon/seckill"}, status: 200},
				step{req: req{target: "/api/coupon/claim", token: login(t, h, "alice")}, status: 200},
				step{req: req{target: "/voucher-order/seckill/1"}, status: 200},
				step{req: req{target: "/api/vouchers/7/claim", token: login(t, h, "alice")}, status: 200},
				step{req: req{target: "/api/vouchers/7/claim", token: login(t, h, "alice")}, status: 429, body: tooMany(app.VoucherClaimMessage)},
			)
			ws := run(t, h, steps)
			if got := ws[app.MerchantLimit].Header().Get("Retry-After"); got == "" {
				t.Error("429 has no Retry-After")
			}
			if got, want := ws[0].Header().Get("X-RateLimit-Limit"), strconv.Itoa(app.MerchantLimit); got != want {
				t.Errorf("X-RateLimit-Limit = %q, want %q", got, want)
			}
			// Each key of an IP (hashed: HashIdentities) carries the
			// algorithm's tag between the prefix and the hash tag.
			var merchantKeys []string
			for _, k := range m.Keys() {
				// The ban's strikes (a hash under ban:) are recorded in the
				// background after a refusal, so they may or may not be
				// there yet: only the counts are this test's subject.
				if strings.HasPrefix(k, app.MerchantKey) && !strings.Contains(k, ":ban:") {
					merchantKeys = append(merchantKeys, k)
				}
			}
			if len(merchantKeys) != 2 {
				t.Errorf("merchant keys %q, want one for each of 2 IPs", merchantKeys)
			}
			for _, key := range merchantKeys {
				if got := m.Type(key); got != tt.keyType || !strings.HasPrefix(key, app.MerchantKey+tt.tag) ||
					!strings.HasSuffix(key, "}") || strings.Contains(key, "192.0.2.1") {
					t.Errorf("%s is a %q, want a %q under the tag %q, with no IP in it; keys: %q", key, got, tt.keyType, tt.tag, m.Keys())
				}
				if tt.hasField != "" {
					if fields, _ := m.HKeys(key); !slices.Contains(fields, tt.hasField) {
						t.Errorf("%s has fields %q, want %q among them", key, fields, tt.hasField)
					}
				}
			}
		})
	}
}
