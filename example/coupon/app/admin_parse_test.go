package app_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/ginlimit/ginlimit/example/coupon/app"
)

// TestOverrideBodyIsStrict on a real redis-server: with an override of the
// rule (4) and one of alice (6) in force, every PUT body that is not
// exactly {"limit": n} with optional known fields, each once, is refused
// with 400 and a fixed message, and changes nothing: a case-folded,
// unknown or repeated field, null, {}, a body without "limit" (which used
// to clear the rule's override), an empty "user" (which used to change the
// limit of every user) or an empty "plan", and a limit that is not an
// integer. {"limit": 0} is what clears.
func TestOverrideBodyIsStrict(t *testing.T) {
	t.Parallel()
	_, h, _ := twoInstances(t)
	for _, body := range []string{`{"limit": 4}`, `{"limit": 6, "user": "alice"}`} {
		if w := putLimit(t, h, body); w.Code != http.StatusOK {
			t.Fatalf("PUT %s: %d %s", body, w.Code, w.Body)
		}
	}
	refused := 0
	for _, body := range []string{
		`{"LIMIT": 5}`, `{"Limit": 5}`, `{"limit": 5, "User": "alice"}`,
		`{"limit": 5, "extra": 1}`, `{"limit": 5, "limit": 7}`, `{"limit": 5, "window_seconds": 60, "window_seconds": 30}`,
		`null`, `{}`, `[]`, `5`, `""`, ``,
		`{"window_seconds": 30}`, `{"plan": "vip"}`, `{"user": "alice"}`,
		`{"limit": 5, "user": ""}`, `{"limit": 5, "plan": ""}`, `{"limit": 5, "user": null}`,
		`{"limit": "5"}`, `{"limit": 5.0}`, `{"limit": 5e0}`, `{"limit": null}`, `{"limit": 1e30}`, `{"limit": true}`,
		`{"limit": 5, "window_seconds": -1}`, `{"limit": 5}{"limit": 6}`, `{"limit": 5} x`,
	} {
		w := putLimit(t, h, body)
		var out struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		}
		_ = json.Unmarshal(w.Body.Bytes(), &out)
		if w.Code != http.StatusBadRequest || out.Code != http.StatusBadRequest || out.Message == "" ||
			strings.Contains(out.Message, "json") || strings.Contains(out.Message, "ginlimit") {
			t.Errorf("PUT %s: %d %s; want 400 with a fixed message", body, w.Code, w.Body)
			continue
		}
		refused++
	}
	t.Logf("%d bodies refused", refused)
	if s := claimSettings(t, h, ""); s.Limit != 4 || s.Source != "rule" {
		t.Errorf("the rule's settings after the refused bodies: %+v, want the override of 4", s)
	}
	if s := claimSettings(t, h, "?user=alice"); s.Limit != 6 || s.Source != "user" {
		t.Errorf("alice's settings after the refused bodies: %+v, want her override of 6", s)
	}
	if s := claimSettings(t, h, "?user=bob"); s.Limit != 4 || s.Source != "rule" {
		t.Errorf("bob's settings after the refused bodies: %+v, want the rule's override of 4", s)
	}
	if w := putLimit(t, h, `{"limit": 0}`); w.Code != http.StatusOK {
		t.Fatalf("PUT {\"limit\": 0}: %d %s", w.Code, w.Body)
	}
	if s := claimSettings(t, h, ""); s.Limit != app.ClaimLimit || s.Source != "config" {
		t.Errorf("after {\"limit\": 0}: %+v, want the configuration", s)
	}
}

// TestAdminQueryIsStrict: the admin GETs refuse, with 400 and before the
// admin's limit, a query that names a user with an empty id (an unset
// shell variable), a parameter twice or one they do not take.
func TestAdminQueryIsStrict(t *testing.T) {
	t.Parallel()
	_, h, _ := twoInstances(t)
	admin := token(t, "ops", app.AdminRole)
	for _, target := range []string{
		limitsPath + "?user=", limitsPath + "?user=alice&user=bob", limitsPath + "?plan=vip&plan=vip",
		limitsPath + "?plan=vip&user=alice", limitsPath + "?plan=gold", limitsPath + "?users=alice", limitsPath + "?user=%zz",
		adminPath("alice") + "?plan=vip&plan=", adminPath("alice") + "?user=bob", adminPath("alice") + "?plan=gold",
	} {
		if w := serve(t, h, req{target: target, token: admin}); w.Code != http.StatusBadRequest {
			t.Errorf("GET %s: %d %s, want 400", target, w.Code, w.Body)
		}
	}
	for _, target := range []string{limitsPath, limitsPath + "?plan=", limitsPath + "?plan=vip", limitsPath + "?user=alice", adminPath("alice") + "?plan=vip", adminPath("alice")} {
		if w := serve(t, h, req{target: target, token: admin}); w.Code != http.StatusOK {
			t.Errorf("GET %s: %d %s, want 200", target, w.Code, w.Body)
		}
	}
}
