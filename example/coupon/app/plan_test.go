package app_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/ginlimit/ginlimit/example/coupon/app"
)

// vipToken mints a token for user with the vip plan, as the command's
// "token -plan vip" subcommand does.
func vipToken(t *testing.T, user string) string {
	t.Helper()
	tok, err := app.NewToken(testSecret, user, app.Grants{Plan: app.PlanVIP}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestClaimVIPPlan, on a real redis-server: a token whose plan is vip gets
// 10 claims per window, then 429; a plain token 3, then 429, and the
// headers report the limit that applied. POST /api/login ignores a plan in
// its body, so nobody gets vip by asking for it.
func TestClaimVIPPlan(t *testing.T) {
	t.Parallel()
	h, _ := onRedisServer(t, app.Config{})
	claim := func(tok string) req { return req{target: app.ClaimPath, token: tok} }
	vip, plain := vipToken(t, "carol"), login(t, h, "dave")
	asked := loginBody(t, h, `{"user_id":"mallory","plan":"vip"}`)

	var steps []step
	steps = append(steps, repeat(app.ClaimVIPLimit, step{req: claim(vip), status: 200})...)
	steps = append(steps, step{req: claim(vip), status: 429, body: tooMany(app.ClaimMessage)})
	steps = append(steps, repeat(app.ClaimLimit, step{req: claim(plain), status: 200})...)
	steps = append(steps, step{req: claim(plain), status: 429, body: tooMany(app.ClaimMessage)})
	steps = append(steps, repeat(app.ClaimLimit, step{req: claim(asked), status: 200})...)
	steps = append(steps, step{req: claim(asked), status: 429, body: tooMany(app.ClaimMessage)})
	ws := run(t, h, steps)

	for i, want := range map[int]int{0: app.ClaimVIPLimit, app.ClaimVIPLimit: app.ClaimVIPLimit, app.ClaimVIPLimit + 1: app.ClaimLimit} {
		if got := ws[i].Header().Get("X-RateLimit-Limit"); got != strconv.Itoa(want) {
			t.Errorf("step %d: X-RateLimit-Limit = %q, want %d", i, got, want)
		}
	}
}

// loginBody POSTs body to /api/login and returns the token.
func loginBody(t *testing.T, h http.Handler, body string) string {
	t.Helper()
	w := serve(t, h, req{method: http.MethodPost, target: "/api/login", body: body})
	var out struct {
		Token string `json:"token"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &out); w.Code != http.StatusOK || err != nil || out.Token == "" {
		t.Fatalf("login %s: status %d, body %s", body, w.Code, w.Body)
	}
	return out.Token
}

// TestAdminClaimPlans: the admin GET reads the default plan's count, or the
// plan of ?plan= (limit 10 for vip); a plan the rule lacks gets 400 before
// the admin limit or Redis; DELETE clears the user's count in every plan.
func TestAdminClaimPlans(t *testing.T) {
	t.Parallel()
	h, rdb := onRedisServer(t, app.Config{})
	admin := token(t, "ops", app.AdminRole)
	vip, plain := vipToken(t, "carol"), token(t, "carol", "")
	claim := func(tok string) req { return req{target: app.ClaimPath, token: tok} }

	var steps []step
	steps = append(steps, repeat(app.ClaimVIPLimit, step{req: claim(vip), status: 200})...)
	steps = append(steps, step{req: claim(plain), status: 200}) // her default-plan count is apart
	run(t, h, steps)

	// An unknown plan is refused before the admin limit: no admin key yet.
	run(t, h, []step{{req: req{target: adminPath("carol") + "?plan=gold", token: admin}, status: 400,
		body: `{"code":400,"message":"The plan must be one of: vip"}`}})
	if ks := keys(t, rdb, app.AdminKey); len(ks) != 0 {
		t.Errorf("a refused ?plan= touched the admin limit: keys %q", ks)
	}

	peek := func(query string) app.ClaimLimitState {
		t.Helper()
		w := serve(t, h, req{target: adminPath("carol") + query, token: admin})
		if w.Code != http.StatusOK {
			t.Fatalf("GET %s: status %d, body %s", query, w.Code, w.Body)
		}
		var s app.ClaimLimitState
		if err := json.Unmarshal(w.Body.Bytes(), &s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	for query, want := range map[string]app.ClaimLimitState{
		"":          {Limit: app.ClaimLimit, Remaining: app.ClaimLimit - 1, Allowed: true},
		"?plan=":    {Limit: app.ClaimLimit, Remaining: app.ClaimLimit - 1, Allowed: true},
		"?plan=vip": {Plan: app.PlanVIP, Limit: app.ClaimVIPLimit, Remaining: 0, Allowed: false},
	} {
		got := peek(query)
		if got.Plan != want.Plan || got.Limit != want.Limit || got.Remaining != want.Remaining || got.Allowed != want.Allowed {
			t.Errorf("GET %s: %+v, want plan %q, limit %d, remaining %d, allowed %v",
				query, got, want.Plan, want.Limit, want.Remaining, want.Allowed)
		}
	}

	resetClaim(t, h, "carol")
	if s := peek("?plan=vip"); s.Remaining != app.ClaimVIPLimit || !s.Allowed {
		t.Errorf("vip plan after DELETE: %+v, want remaining %d", s, app.ClaimVIPLimit)
	}
	if s := peek(""); s.Remaining != app.ClaimLimit || !s.Allowed {
		t.Errorf("default plan after DELETE: %+v, want remaining %d", s, app.ClaimLimit)
	}
	run(t, h, []step{{req: claim(vip), status: 200}})
}
