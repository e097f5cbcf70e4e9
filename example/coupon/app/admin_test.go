package app_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/example/coupon/app"
	"github.com/ginlimit/ginlimit/ginlimit"
	"github.com/ginlimit/ginlimit/internal/redistest"
)

// adminPath is the admin API's path for user's claim count.
func adminPath(user string) string {
	return "/api/admin/limits/claim/users/" + url.PathEscape(user)
}

// token mints a token for user with role, signed with testSecret.
func token(t *testing.T, user, role string) string {
	t.Helper()
	tok, err := app.NewToken(testSecret, user, app.Grants{Role: role}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// twoInstances starts a redis-server and two demo instances on it, each
// with its own Redis client, as two replicas of the service would run:
// with the same identity secret, or they would not find each other's
// counts.
func twoInstances(t *testing.T) (srv *redistest.Server, a, b http.Handler) {
	t.Helper()
	srv = redistest.Start(t)
	cfg := app.Config{RedisURL: "redis://" + srv.Addr + "/0", JWTSecret: testSecret, IdentitySecret: testIdentitySecret}
	return srv, newApp(t, cfg), newApp(t, cfg)
}

// peekClaim GETs user's claim count from h with an admin token and checks
// that the answer holds limit, remaining and reset_seconds as JSON integers.
func peekClaim(t *testing.T, h http.Handler, user string) app.ClaimLimitState {
	t.Helper()
	w := serve(t, h, req{target: adminPath(user), token: token(t, "ops", app.AdminRole)})
	if w.Code != http.StatusOK {
		t.Fatalf("GET %s: status %d, body %s", adminPath(user), w.Code, w.Body)
	}
	if cc := w.Header().Get("Cache-Control"); cc != "no-store" {
		t.Errorf("GET %s: Cache-Control %q, want no-store", adminPath(user), cc)
	}
	var raw map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &raw); err != nil {
		t.Fatalf("GET %s: %s: %v", adminPath(user), w.Body, err)
	}
	for _, k := range []string{"limit", "remaining", "reset_seconds"} {
		if n, ok := raw[k].(float64); !ok || n != float64(int64(n)) {
			t.Fatalf("GET %s: %s: %q is not an integer", adminPath(user), w.Body, k)
		}
	}
	var s app.ClaimLimitState
	if err := json.Unmarshal(w.Body.Bytes(), &s); err != nil {
		t.Fatal(err)
	}
	if s.UserID != user || s.Limit != app.ClaimLimit || s.Rule != "coupon:claim" {
		t.Fatalf("GET %s: %s: want user_id %q, rule coupon:claim, limit %d", adminPath(user), w.Body, user, app.ClaimLimit)
	}
	return s
}

// resetClaim DELETEs user's claim count through h with an admin token.
func resetClaim(t *testing.T, h http.Handler, user string) {
	t.Helper()
	w := serve(t, h, req{method: http.MethodDelete, target: adminPath(user), token: token(t, "ops", app.AdminRole)})
	if w.Code != http.StatusNoContent || w.Body.Len() != 0 {
		t.Fatalf("DELETE %s: status %d, body %q; want 204 and no body", adminPath(user), w.Code, w.Body)
	}
}

// metric returns the value of the series named by prefix (name and labels)
// in h's /metrics, 0 when it is absent.
func metric(t *testing.T, h http.Handler, series string) float64 {
	t.Helper()
	w := serve(t, h, req{target: "/metrics"})
	for line := range strings.Lines(w.Body.String()) {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				t.Fatalf("/metrics: %q: %v", line, err)
			}
			return v
		}
	}
	return 0
}

const claimDenyHits = `ginlimit_deny_cache_hits_total{route="GET /api/coupon/claim",rule="coupon:claim"}`

// cacheDenial sends claims to h, which must refuse them, until one refusal
// comes from h's deny cache, and fails the test if none does within a
// generous time. A refusal read from Redis makes the deny cache learn it,
// so the next refusal is normally the cached one; the loop only absorbs a
// loaded machine (a reset subscription not yet confirmed, in which case
// the cache learns nothing, or a pause longer than the staleness bound
// between two requests).
func cacheDenial(t *testing.T, h http.Handler, claim req) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		before := metric(t, h, claimDenyHits)
		run(t, h, []step{{req: claim, status: http.StatusTooManyRequests, body: tooMany(app.ClaimMessage)}})
		if metric(t, h, claimDenyHits) > before {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no refusal was served from the deny cache in 10 s (%s %v)", claimDenyHits, before)
		}
	}
}

// TestAdminResetIsSeenByEveryInstance is the scenario on a real
// redis-server with two instances: alice exhausts her claims on A, B has
// her denial in its deny cache, an admin DELETE sent to A is seen by B at
// once, and GET on either instance shows the new count.
func TestAdminResetIsSeenByEveryInstance(t *testing.T) {
	t.Parallel()
	_, a, b := twoInstances(t)
	claim := req{target: app.ClaimPath, token: login(t, a, "alice")}

	run(t, a, append(repeat(app.ClaimLimit, step{req: claim, status: http.StatusOK}),
		step{req: claim, status: http.StatusTooManyRequests, body: tooMany(app.ClaimMessage)}))
	cacheDenial(t, b, claim)
	// Seconds are rounded up, and a sliding log's entry leaves up to 1 ms
	// after the window: a fresh admission's reset reads the window plus 1.
	maxReset := int64(app.ClaimWindow/time.Second) + 1
	for name, h := range map[string]http.Handler{"A": a, "B": b} {
		if s := peekClaim(t, h, "alice"); s.Allowed || s.Remaining != 0 ||
			s.ResetSeconds < 1 || s.ResetSeconds > maxReset ||
			s.RetryAfterSeconds < 1 || s.RetryAfterSeconds > s.ResetSeconds {
			t.Fatalf("GET on %s after the limit: %+v, want refused, remaining 0, reset and retry after 1..%v", name, s, app.ClaimWindow)
		}
	}

	resetClaim(t, a, "alice")
	// Right away, on the other instance: its cached denial is gone.
	w := run(t, b, []step{{req: claim, status: http.StatusOK}})[0]
	var out struct {
		Data struct {
			Remaining int `json:"remaining"`
		} `json:"data"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil || out.Data.Remaining != app.ClaimLimit-1 {
		t.Errorf("claim on B after the reset: %s, want remaining %d", w.Body, app.ClaimLimit-1)
	}
	for name, h := range map[string]http.Handler{"A": a, "B": b} {
		if s := peekClaim(t, h, "alice"); !s.Allowed || s.Remaining != app.ClaimLimit-1 || s.RetryAfterSeconds != 0 ||
			s.ResetSeconds < 1 || s.ResetSeconds > maxReset {
			t.Errorf("GET on %s after the reset and one claim: %+v, want allowed, remaining %d", name, s, app.ClaimLimit-1)
		}
	}

	// The reset is counted on the instance that made it, by the admin API,
	// without naming alice.
	resets := `ginlimit_resets_total{by="` + app.ResetBy + `",route="GET /api/coupon/claim",rule="coupon:claim"}`
	if got := metric(t, a, resets); got != 1 {
		t.Errorf("A: %s = %v, want 1", resets, got)
	}
	if body := serve(t, a, req{target: "/metrics"}).Body.String(); strings.Contains(body, "alice") {
		t.Error("/metrics names alice")
	}
}

// TestFlushAllIsSeenWithinTheStalenessBound: after a FLUSHALL made by hand,
// behind ginlimit's back, both instances admit alice again once the
// staleness bound has passed since they last learned her denial.
func TestFlushAllIsSeenWithinTheStalenessBound(t *testing.T) {
	t.Parallel()
	srv, a, b := twoInstances(t)
	const bound = ginlimit.DefaultMaxStaleness // the demo does not change it
	claim := req{target: app.ClaimPath, token: login(t, a, "alice")}

	run(t, a, append(repeat(app.ClaimLimit, step{req: claim, status: http.StatusOK}),
		step{req: claim, status: http.StatusTooManyRequests}))
	cacheDenial(t, b, claim)
	cacheDenial(t, a, claim)
	learned := time.Now() // after the last refusal read from Redis

	if err := srv.Client().FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	// Before the bound B may still answer from its cache; only checked
	// while clearly within it, so a slow machine cannot fail the test.
	if w := serve(t, b, claim); time.Since(learned) < bound/2 && w.Code != http.StatusTooManyRequests {
		t.Fatalf("B right after FLUSHALL: %d, want the cached 429 (the bound has not passed)", w.Code)
	}
	time.Sleep(time.Until(learned.Add(bound)))
	run(t, a, []step{{req: claim, status: http.StatusOK}})
	run(t, b, []step{{req: claim, status: http.StatusOK}})
}

// keyAccesses returns how many scripts the server has run plus how many
// key lookups it has made. ginlimit reaches keys only through scripts; the
// lookups catch anything else.
func keyAccesses(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats", "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for line := range strings.Lines(info) {
		line = strings.TrimSpace(line)
		for _, p := range []string{"cmdstat_evalsha:calls=", "cmdstat_eval:calls=", "cmdstat_evalsha_ro:calls=",
			"cmdstat_eval_ro:calls=", "cmdstat_del:calls=", "cmdstat_unlink:calls=", "keyspace_hits:", "keyspace_misses:"} {
			if rest, ok := strings.CutPrefix(line, p); ok {
				rest, _, _ = strings.Cut(rest, ",")
				n, err := strconv.ParseInt(rest, 10, 64)
				if err != nil {
					t.Fatalf("INFO: %q: %v", line, err)
				}
				total += n
			}
		}
	}
	return total
}

// TestAdminRefusalsTouchNoKey: requests without a valid admin token, or
// with a user id no count can have, or on a path the router does not know,
// get a clear 4xx JSON answer and reach no key: alice's exhausted count is
// neither read nor reset.
func TestAdminRefusalsTouchNoKey(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	h := newApp(t, app.Config{RedisURL: "redis://" + srv.Addr + "/0", JWTSecret: testSecret})
	rdb := srv.Client()
	alice := login(t, h, "alice")
	claim := req{target: app.ClaimPath, token: alice}
	run(t, h, append(repeat(app.ClaimLimit, step{req: claim, status: http.StatusOK}),
		step{req: claim, status: http.StatusTooManyRequests}))

	sign := func(c jwt.Claims, secret []byte) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(secret)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	hour := jwt.NewNumericDate(time.Now().Add(time.Hour))
	type roleClaims struct {
		Role any `json:"role,omitempty"`
		jwt.RegisteredClaims
	}
	forged := sign(roleClaims{Role: "admin", RegisteredClaims: jwt.RegisteredClaims{Subject: "ops", ExpiresAt: hour}},
		[]byte("another-secret-of-at-least-32-bytes!"))
	expired := sign(roleClaims{Role: "admin", RegisteredClaims: jwt.RegisteredClaims{
		Subject: "ops", ExpiresAt: jwt.NewNumericDate(time.Now().Add(-time.Hour))}}, testSecret)
	noSubject := sign(roleClaims{Role: "admin", RegisteredClaims: jwt.RegisteredClaims{ExpiresAt: hour}}, testSecret)
	roleList := sign(roleClaims{Role: []string{"admin"}, RegisteredClaims: jwt.RegisteredClaims{Subject: "ops", ExpiresAt: hour}}, testSecret)
	admin := token(t, "ops", app.AdminRole)

	const (
		unauthorized = `{"code":401,"message":"Authentication required"}`
		forbidden    = `{"code":403,"message":"This route needs a token whose \"role\" claim is \"admin\""}`
		notFound     = `{"code":404,"message":"Not found"}`
	)
	tooLong := `{"code":400,"message":"The user id must be 1 to ` + strconv.Itoa(app.MaxAdminUserIDLen) + ` bytes"}`
	var steps []step
	for _, method := range []string{http.MethodGet, http.MethodDelete} {
		at := func(target, tok string) req { return req{method: method, target: target, token: tok} }
		steps = append(steps,
			step{req: at(adminPath("alice"), ""), status: 401, body: unauthorized},
			step{req: at(adminPath("alice"), "not-a-jwt"), status: 401, body: unauthorized},
			step{req: at(adminPath("alice"), forged), status: 401, body: unauthorized},
			step{req: at(adminPath("alice"), expired), status: 401, body: unauthorized},
			step{req: at(adminPath("alice"), noSubject), status: 401, body: unauthorized},
			step{req: at(adminPath("alice"), alice), status: 403, body: forbidden}, // login never grants the role
			step{req: at(adminPath("alice"), token(t, "ops", "Admin")), status: 403, body: forbidden},
			step{req: at(adminPath("alice"), token(t, "ops", "administrator")), status: 403, body: forbidden},
			step{req: at(adminPath("alice"), roleList), status: 403, body: forbidden},
			// Auth comes first: a bad id without the role is still 403.
			step{req: at(adminPath(strings.Repeat("a", app.MaxAdminUserIDLen+1)), alice), status: 403, body: forbidden},
			step{req: at(adminPath(strings.Repeat("a", app.MaxAdminUserIDLen+1)), admin), status: 400, body: tooLong},
			step{req: at(adminPath(strings.Repeat("é", 200)), admin), status: 400, body: tooLong},
			// Paths the router does not know, the empty id among them.
			step{req: at("/api/admin/limits/claim/users/", admin), status: 404, body: notFound},
			step{req: at("/api/admin/limits/claim/users", admin), status: 404, body: notFound},
			step{req: at("/api/admin/limits/claim/users/alice/x", admin), status: 404, body: notFound},
			step{req: at("/api/admin/limits/claim/users/alice/", admin), status: 404, body: notFound},
			step{req: at("/api/admin/limits/claim/users//", admin), status: 404, body: notFound},
			step{req: at("/api/admin/limits/claim/users/%2F", admin), status: 404, body: notFound},
			step{req: at("/api/admin/limits/seckill/users/alice", admin), status: 404, body: notFound},
		)
	}
	steps = append(steps,
		step{req: req{method: http.MethodPost, target: adminPath("alice"), token: admin}, status: 404, body: notFound},
		step{req: req{method: http.MethodPut, target: adminPath("alice"), token: admin}, status: 404, body: notFound},
	)

	// The console's beat (one script call per 5 s; see package console)
	// may fall inside one run: the refused requests are sent again, up to
	// three times, and must touch nothing in one of them. Requests that
	// touch a key do so every time.
	var before int64
	var ws []*httptest.ResponseRecorder
	for attempt := 1; ; attempt++ {
		var keys []string
		before, keys = keyAccesses(t, rdb), rdb.Keys(context.Background(), "*").Val()
		ws = run(t, h, steps)
		after, got := keyAccesses(t, rdb), rdb.Keys(context.Background(), "*").Val()
		if after == before && strings.Join(got, "\n") == strings.Join(keys, "\n") {
			break
		}
		if attempt == 3 {
			t.Errorf("the refused requests made %d script calls or key lookups, want none; keys %q became %q", after-before, keys, got)
			break
		}
	}
	for i, w := range ws {
		if w.Code == 401 && w.Header().Get("WWW-Authenticate") != "Bearer" {
			t.Errorf("step %d: 401 without WWW-Authenticate: Bearer", i)
		}
	}

	// alice's count was not reset, and the meter above does see a Peek.
	if s := peekClaim(t, h, "alice"); s.Remaining != 0 {
		t.Errorf("alice after the refused DELETEs: %+v, want remaining 0", s)
	}
	if keyAccesses(t, rdb) == before {
		t.Error("a Peek did not move keyAccesses: the check above proves nothing")
	}
	// The longest id is accepted, its count is whole.
	if s := peekClaim(t, h, strings.Repeat("a", app.MaxAdminUserIDLen)); s.Remaining != app.ClaimLimit || !s.Allowed {
		t.Errorf("a fresh count: %+v, want allowed, remaining %d", s, app.ClaimLimit)
	}
}

// TestAdminRoutesAreNotCountedByTheClaimRule: admin requests about a user,
// however many, count neither against that user's claims nor the admin's.
func TestAdminRoutesAreNotCountedByTheClaimRule(t *testing.T) {
	t.Parallel()
	h := newApp(t, app.Config{JWTSecret: testSecret})
	for range app.ClaimLimit + 2 {
		peekClaim(t, h, "alice")
		resetClaim(t, h, "alice")
	}
	for _, user := range []string{"alice", "ops"} {
		if s := peekClaim(t, h, user); !s.Allowed || s.Remaining != app.ClaimLimit {
			t.Errorf("%s after %d admin GETs and DELETEs: %+v, want remaining %d", user, app.ClaimLimit+2, s, app.ClaimLimit)
		}
	}
	claim := req{target: app.ClaimPath, token: login(t, h, "alice")}
	run(t, h, append(repeat(app.ClaimLimit, step{req: claim, status: http.StatusOK}),
		step{req: claim, status: http.StatusTooManyRequests}))
	// The admin reads the count without consuming it.
	for range 3 {
		if s := peekClaim(t, h, "alice"); s.Remaining != 0 || s.Allowed {
			t.Fatalf("GET after the limit: %+v, want remaining 0", s)
		}
	}
}

// TestAdminLimitIsPerAdmin: each admin route admits AdminLimit requests per
// admin per window; another admin, and the other route, keep their own.
func TestAdminLimitIsPerAdmin(t *testing.T) {
	t.Parallel()
	h := newApp(t, app.Config{JWTSecret: testSecret})
	ops, ops2 := token(t, "ops", app.AdminRole), token(t, "ops2", app.AdminRole)
	get := req{target: adminPath("alice"), token: ops}
	steps := repeat(app.AdminLimit, step{req: get, status: http.StatusOK})
	steps = append(steps,
		step{req: get, status: http.StatusTooManyRequests, body: tooMany(app.AdminMessage)},
		step{req: req{target: adminPath("alice"), token: ops2}, status: http.StatusOK},
		step{req: req{method: http.MethodDelete, target: adminPath("alice"), token: ops}, status: http.StatusNoContent},
	)
	run(t, h, steps)
}

// TestAdminRedisDown: while Redis is down the admin API answers 503 with a
// fixed message; the error goes to the log, never to the body.
func TestAdminRedisDown(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	var logs syncBuffer
	h := newApp(t, app.Config{RedisURL: "redis://" + srv.Addr + "/0", JWTSecret: testSecret,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	peekClaim(t, h, "alice")
	srv.Stop()

	const down = `{"code":503,"message":"The rate limit store is unavailable, please try again later"}`
	admin := token(t, "ops", app.AdminRole)
	run(t, h, []step{
		{req: req{target: adminPath("alice"), token: admin}, status: http.StatusServiceUnavailable, body: down},
		{req: req{method: http.MethodDelete, target: adminPath("alice"), token: admin}, status: http.StatusServiceUnavailable, body: down},
	})
	for _, want := range []string{"coupon: admin peek of a claim count failed", "coupon: admin reset of a claim count failed"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log lacks %q:\n%s", want, logs.String())
		}
	}
}

// TestNewToken: the tokens of NewToken carry the role and the plan, and
// its arguments are checked: a plan the claim rule does not have is
// refused rather than silently given the default limit.
func TestNewToken(t *testing.T) {
	t.Parallel()
	tok, err := app.NewToken(testSecret, "ops", app.Grants{Role: app.AdminRole, Plan: app.PlanVIP}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Role string `json:"role"`
		Plan string `json:"plan"`
		jwt.RegisteredClaims
	}
	if _, err := jwt.ParseWithClaims(tok, &c, func(*jwt.Token) (any, error) { return testSecret, nil },
		jwt.WithValidMethods([]string{"HS256"})); err != nil {
		t.Fatal(err)
	}
	if c.Role != app.AdminRole || c.Plan != app.PlanVIP || c.Subject != "ops" || c.ExpiresAt.Sub(c.IssuedAt.Time) != app.TokenTTL {
		t.Errorf("claims %+v, want role admin, plan vip, sub ops, exp = iat + %v", c, app.TokenTTL)
	}
	// Zero Grants: neither claim is written.
	plain := token(t, "alice", "")
	raw := jwt.MapClaims{}
	if _, err := jwt.ParseWithClaims(plain, raw, func(*jwt.Token) (any, error) { return testSecret, nil }); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{app.RoleClaim, app.PlanClaim} {
		if v, ok := raw[k]; ok {
			t.Errorf("a token of zero Grants has %q: %v", k, v)
		}
	}
	for name, args := range map[string]struct {
		secret []byte
		user   string
		plan   string
	}{
		"empty user":   {testSecret, "", ""},
		"long user":    {testSecret, strings.Repeat("a", app.MaxUserIDLen+1), ""},
		"short secret": {[]byte("short"), "ops", ""},
		"unknown plan": {testSecret, "ops", "gold"},
	} {
		if _, err := app.NewToken(args.secret, args.user, app.Grants{Role: app.AdminRole, Plan: args.plan}, time.Now()); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
