package app

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
)

// FuzzAdminQuery: whatever the query of the admin GETs, parseSettingsQuery
// and parsePlanQuery return without panicking and refuse with an
// errOverride (the 400's message); what they accept names a plan of the
// claim rule or none, a user of 1 to MaxAdminUserIDLen bytes or none, not
// both, and exactly what the query says.
func FuzzAdminQuery(f *testing.F) {
	for _, s := range []string{
		"", "plan=vip", "plan=", "user=alice", "user=", "plan=vip&user=alice", "user=a&user=b",
		"plan=gold", "users=alice", "user=%zz", "user=%00", "plan=vip;user=x", "user=" + strings.Repeat("a", 300),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		checkErr := func(what string, err error) {
			var e errOverride
			if !errors.As(err, &e) || e == "" {
				t.Fatalf("%s %q: error %v is not a message for the client", what, raw, err)
			}
		}
		q, qerr := url.ParseQuery(raw)
		if o, err := parseSettingsQuery(raw); err != nil {
			checkErr("settings", err)
		} else {
			_, hasUser := q["user"]
			switch {
			case qerr != nil:
				t.Fatalf("settings %q: accepted an unparsable query", raw)
			case o.Plan != "" && claimPlans()[o.Plan] == 0, o.Plan != "" && o.User != "", hasUser && q.Has("plan"),
				hasUser && checkAdminUser(o.User) != nil, o.Plan != q.Get("plan"), o.User != q.Get("user"):
				t.Fatalf("settings %q: accepted %+v", raw, o)
			}
		}
		if plan, err := parsePlanQuery(raw); err != nil {
			checkErr("plan", err)
		} else if qerr != nil || plan != q.Get("plan") || plan != "" && claimPlans()[plan] == 0 || len(q) > 1 {
			t.Fatalf("plan %q: accepted %q", raw, plan)
		}
	})
}

// FuzzAdminUserPath: whatever the path segment given as :user (and the
// query) of GET /api/admin/limits/claim/users/:user, served by the demo on
// its embedded Redis to an admin with a token of their own (so that the
// admin's limit never answers first), the answer is 200 for the user the
// path names, or 400 or 404 with the demo's JSON body; never a 5xx, a
// panic or another user's count.
func FuzzAdminUserPath(f *testing.F) {
	for _, s := range []string{"alice", "", "a/b", "%2F", "..", " ", "\x00", strings.Repeat("a", 257), "ü", "a?b"} {
		f.Add(s, "")
		f.Add(s, "plan=vip")
	}
	a, err := New(context.Background(), Config{JWTSecret: []byte(DevJWTSecret), IdentitySecret: []byte(DevJWTSecret),
		Logger: slog.New(slog.DiscardHandler), DecisionTimeout: 5 * time.Second})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = a.Close() })
	var admins int
	f.Fuzz(func(t *testing.T, user, query string) {
		admins++
		tok, err := NewToken([]byte(DevJWTSecret), "ops-"+strconv.Itoa(admins), Grants{Role: AdminRole}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.URL = &url.URL{Path: "/api/admin/limits/claim/users/" + user, RawQuery: query}
		r.Header.Set("Authorization", "Bearer "+tok)
		w := httptest.NewRecorder()
		a.Handler.ServeHTTP(w, r)
		switch w.Code {
		case http.StatusOK:
			var s ClaimLimitState
			if err := json.Unmarshal(w.Body.Bytes(), &s); err != nil || s.UserID != user {
				t.Fatalf("%q?%q: 200 %s, want the count of %q", user, query, w.Body, user)
			}
		case http.StatusBadRequest, http.StatusNotFound:
			var body response
			if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || body.Code != w.Code || body.Message == "" {
				t.Fatalf("%q?%q: %d %s, want the demo's JSON body", user, query, w.Code, w.Body)
			}
		default:
			t.Fatalf("%q?%q: %d %s", user, query, w.Code, w.Body)
		}
	})
}
