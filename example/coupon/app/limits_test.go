package app_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ginlimit/ginlimit/example/coupon/app"
)

const limitsPath = "/api/admin/limits/claim"

// putLimit PUTs body to h's claim limits with an admin token.
func putLimit(t *testing.T, h http.Handler, body string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(http.MethodPut, limitsPath, strings.NewReader(body))
	r.Header.Set("Authorization", "Bearer "+token(t, "ops", app.AdminRole))
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// claimSettings GETs h's claim settings for query ("" for the rule's).
func claimSettings(t *testing.T, h http.Handler, query string) app.ClaimSettings {
	t.Helper()
	w := serve(t, h, req{target: limitsPath + query, token: token(t, "ops", app.AdminRole)})
	if w.Code != http.StatusOK {
		t.Fatalf("GET %s%s: %d %s", limitsPath, query, w.Code, w.Body)
	}
	var s app.ClaimSettings
	if err := json.Unmarshal(w.Body.Bytes(), &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestLiveLimitIsSeenByTheOtherInstance is the scenario on a real
// redis-server with two instances, each with its own Redis client: an
// admin PUT on A gives alice 5 claims a minute, and B applies it within
// the second ginlimit promises (the change's notice); B then
// admits her 5 claims, and a PUT of 0 takes her back to the rule's 3.
func TestLiveLimitIsSeenByTheOtherInstance(t *testing.T) {
	t.Parallel()
	_, a, b := twoInstances(t)
	if s := claimSettings(t, b, ""); s.Limit != app.ClaimLimit || s.WindowSeconds != int64(app.ClaimWindow/time.Second) || s.Source != "config" {
		t.Fatalf("B before any override: %+v", s)
	}
	start := time.Now()
	if w := putLimit(t, a, `{"limit": 5, "user": "alice"}`); w.Code != http.StatusOK {
		t.Fatalf("PUT: %d %s", w.Code, w.Body)
	}
	if s := claimSettings(t, a, "?user=alice"); s.Limit != 5 || s.Source != "user" {
		t.Fatalf("A, right after its PUT: %+v, want 5 from the user's override", s)
	}
	var seen time.Duration
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if s := claimSettings(t, b, "?user=alice"); s.Limit == 5 && s.Source == "user" {
			seen = time.Since(start)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("B did not apply the override within 30 s")
		}
	}
	t.Logf("B applied the override %v after the PUT on A", seen.Round(time.Millisecond))
	if seen > time.Second {
		t.Errorf("B applied the override %v after the PUT, more than the second promised", seen)
	}
	tok := login(t, b, "alice")
	claim := req{target: app.ClaimPath, token: tok}
	run(t, b, append(repeat(5, step{req: claim, status: http.StatusOK}),
		step{req: claim, status: http.StatusTooManyRequests, body: tooMany(app.ClaimMessage)}))
	if s := claimSettings(t, b, ""); s.Source != "config" || s.Limit != app.ClaimLimit {
		t.Errorf("the rule's settings, under alice's override: %+v, want the configured ones", s)
	}
	if w := putLimit(t, a, `{"limit": 0, "user": "alice"}`); w.Code != http.StatusOK {
		t.Fatalf("PUT of 0: %d %s", w.Code, w.Body)
	}
	if s := claimSettings(t, a, "?user=alice"); s.Limit != app.ClaimLimit || s.Source != "config" {
		t.Fatalf("A after clearing: %+v", s)
	}
}

// TestLiveLimitRefusals: an override the claim rule cannot take gets 400
// with ginlimit's reason and no internal error text; a bad body or target
// 400; no token 401, a token without the role 403.
func TestLiveLimitRefusals(t *testing.T) {
	t.Parallel()
	_, h, _ := twoInstances(t)
	for _, tc := range []struct {
		body string
		want string // in the message
	}{
		{`{"limit": 200000}`, "at most 100000"},
		{`{"limit": -1}`, "between 1 and 1e9"},
		{`{"limit": 5, "window_seconds": 2592000}`, "window of at most"},
		{`{"limit": 5, "plan": "gold"}`, "The plan must be one of"},
		{`{"limit": 5, "plan": "vip", "user": "alice"}`, "not both"},
		{`{"limit": 5, "extra": true}`, "The body must be"},
		{`{"limit": 5, "window_seconds": 99999999999999}`, "window_seconds"},
	} {
		w := putLimit(t, h, tc.body)
		var body struct{ Message string }
		_ = json.Unmarshal(w.Body.Bytes(), &body)
		if w.Code != http.StatusBadRequest || !strings.Contains(body.Message, tc.want) || strings.Contains(body.Message, "ginlimit:") {
			t.Errorf("PUT %s: %d %s; want 400 saying %q, without ginlimit's error text", tc.body, w.Code, w.Body, tc.want)
		}
	}
	if s := claimSettings(t, h, ""); s.Source != "config" {
		t.Errorf("after the refusals: %+v, want the configuration", s)
	}
	for _, tc := range []struct {
		token  string
		status int
	}{{"", http.StatusUnauthorized}, {token(t, "bob", ""), http.StatusForbidden}} {
		for _, method := range []string{http.MethodGet, http.MethodPut} {
			r := httptest.NewRequest(method, limitsPath, strings.NewReader(`{"limit": 5}`))
			if tc.token != "" {
				r.Header.Set("Authorization", "Bearer "+tc.token)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != tc.status {
				t.Errorf("%s %s (token %v): %d, want %d", method, limitsPath, tc.token != "", w.Code, tc.status)
			}
		}
	}
}

// TestLiveLimitOfARuleAndAPlan: a PUT without a user overrides the rule,
// with a plan that plan; GET says which applies.
func TestLiveLimitOfARuleAndAPlan(t *testing.T) {
	t.Parallel()
	_, h, _ := twoInstances(t)
	if w := putLimit(t, h, `{"limit": 4, "window_seconds": 30}`); w.Code != http.StatusOK {
		t.Fatalf("PUT: %d %s", w.Code, w.Body)
	}
	if w := putLimit(t, h, `{"limit": 20, "plan": "vip"}`); w.Code != http.StatusOK {
		t.Fatalf("PUT: %d %s", w.Code, w.Body)
	}
	if s := claimSettings(t, h, ""); s.Limit != 4 || s.WindowSeconds != 30 || s.Source != "rule" {
		t.Errorf("the rule's: %+v", s)
	}
	if s := claimSettings(t, h, "?plan=vip"); s.Limit != 20 || s.WindowSeconds != int64(app.ClaimWindow/time.Second) || s.Source != "plan" {
		t.Errorf("vip's: %+v", s)
	}
	tok := login(t, h, "dave")
	claim := req{target: app.ClaimPath, token: tok}
	run(t, h, append(repeat(4, step{req: claim, status: http.StatusOK}),
		step{req: claim, status: http.StatusTooManyRequests, body: tooMany(app.ClaimMessage)}))
}
