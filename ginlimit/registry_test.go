package ginlimit

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ginlimit/ginlimit/identity"
)

// TestRulesListsBeforeTraffic: Limiter.Rules lists a route's rules from
// RateLimit on, before any request, with their configuration; the route
// comes with its first request, and an override shows as the limit in
// force and its source.
func TestRulesListsBeforeTraffic(t *testing.T) {
	_, c := newMini(t)
	l, err := New(Redis(c), Timeout(testTimeout), UserIdentity(identity.FromContext("uid")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	e := gin.New()
	e.GET("/a/:id", l.RateLimit(Key(prefix(t)), Limit(5), Window(time.Minute), Per(User), Ban(3, time.Minute, time.Hour),
		LimitBy(func(*gin.Context) string { return "" }, map[string]int{"pro": 50})), ok)
	rules := l.Rules()
	if len(rules) != 1 || rules[0].Route != "" || rules[0].Limit != 5 || rules[0].Window != time.Minute ||
		strings.Join(rules[0].Per, ",") != "user" || rules[0].BanAfter != 3 || rules[0].Plans["pro"] != 50 || rules[0].OnFailure != FailLocal {
		t.Fatalf("before traffic: %+v", rules)
	}
	do(e, http.MethodGet, "/a/7", nil) // 401: no user, but the route is seen
	rules = l.Rules()
	if len(rules) != 1 || rules[0].Route != "GET /a/:id" {
		t.Fatalf("after a request: %+v", rules)
	}
	if err := rules[0].Policy.SetLimit(context.Background(), Target{Route: rules[0].Route}, 9, 0); err != nil {
		t.Fatal(err)
	}
	if ri := l.Rules()[0]; ri.Limit != 9 || ri.Source != SourceOverride || ri.ConfigLimit != 5 || ri.Window != time.Minute {
		t.Errorf("after SetLimit: %+v", ri)
	}
}

// TestRuleOnAnotherRoute: RuleInfo.On describes a rule on a route this
// instance has not served, with the override in force there; a text that
// is not a route is refused.
func TestRuleOnAnotherRoute(t *testing.T) {
	_, c := newMini(t)
	l, err := New(Redis(c), Timeout(testTimeout))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	gin.New().GET("/b/:id", l.RateLimit(Key(prefix(t)), Name("b"), Limit(5), Window(time.Minute)), ok)
	ri := l.Rules()[0]
	if err := ri.Policy.SetLimit(context.Background(), Target{Route: "GET /b/:id", Rule: "b"}, 9, 0); err != nil {
		t.Fatal(err)
	}
	on, err := ri.On("GET /b/:id")
	if err != nil || on.Route != "GET /b/:id" || on.Rule != "b" || on.Limit != 9 || on.Source != SourceOverride || on.ConfigLimit != 5 {
		t.Errorf("On: %+v, %v", on, err)
	}
	for _, bad := range []string{"", "unmatched", "GET b", "GET /b\n"} {
		if _, err := ri.On(bad); !errors.Is(err, ErrBadTarget) {
			t.Errorf("On(%q): %v, want ErrBadTarget", bad, err)
		}
	}
}

// TestRefusedIdentityMatchesTarget: the identity an observer reads from a
// refusal (RuleInfo.Refused) is the one RuleInfo.Identity gives for the
// same user, hashed with HashIdentities; an admission carries none.
func TestRefusedIdentityMatchesTarget(t *testing.T) {
	for _, hashed := range []bool{false, true} {
		_, c := newMini(t)
		var mu sync.Mutex
		var events []Event
		// A long staleness bound: the third request is the deny cache's
		// however slow the machine.
		opts := []Option{Redis(c), Timeout(testTimeout), maxStaleness(time.Hour), UserIdentity(identity.FromContext("uid")),
			Observe(func(_ context.Context, e Event) { mu.Lock(); events = append(events, e); mu.Unlock() })}
		if hashed {
			opts = append(opts, HashIdentities([]byte(strings.Repeat("k", 32))))
		}
		l, err := New(opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		e := gin.New()
		e.GET("/c", func(c *gin.Context) { c.Set("uid", "<img src=x>") }, l.RateLimit(Key(prefix(t)), Limit(1), Per(User)), ok)
		for range 3 { // an admission, Redis's refusal, the deny cache's
			do(e, http.MethodGet, "/c", nil)
		}
		ri := l.Rules()[0]
		want, err := ri.Identity(Target{User: "<img src=x>"})
		if err != nil {
			t.Fatal(err)
		}
		if hashed == strings.Contains(want, "img") || !strings.HasPrefix(want, "user:") {
			t.Errorf("hashed %v: identity %q", hashed, want)
		}
		if id, ok := ri.Refused(events[0]); ok || id != "" {
			t.Errorf("an admission gave identity %q", id)
		}
		for _, e := range events[1:] {
			if id, ok := ri.Refused(e); !ok || id != want {
				t.Errorf("hashed %v: refusal's (cached %v) identity %q, %v; want %q", hashed, e.Decision.Cached, id, ok, want)
			}
		}
		if !events[2].Decision.Cached {
			t.Error("the third request was not refused by the deny cache")
		}
		// The identity names the count back, hashed or not: its Reset
		// lets the user in again.
		tg, err := ri.Target(want)
		if err != nil {
			t.Fatal(err)
		}
		if err := ri.Policy.Reset(context.Background(), tg, "test"); err != nil {
			t.Fatal(err)
		}
		if w := do(e, http.MethodGet, "/c", nil); w.Code != http.StatusOK {
			t.Errorf("hashed %v: after a Reset of Target(%q), %d", hashed, want, w.Code)
		}
		bad := []string{"ip:1", "p.x:1 user:a", "user:%~" + strings.Repeat("0", 32)}
		if hashed {
			bad = []string{"user:zz", "ip:" + strings.Repeat("0", 32), "user:" + strings.Repeat("0", 31), "p.x:1 user:a", "user+ip:" + strings.Repeat("0", 32)}
		}
		for _, bad := range bad {
			tg, err := ri.Target(bad)
			if err == nil {
				_, err = ri.Policy.Peek(context.Background(), tg)
			}
			if !errors.Is(err, ErrBadTarget) {
				t.Errorf("hashed %v: Target(%q): %v", hashed, bad, err)
			}
		}
	}
}

// TestKeyIdentity: the identity part of each layout of buildKey.
func TestKeyIdentity(t *testing.T) {
	for key, want := range map[string]string{
		"p:{GET /a user:al%20ice}":           "user:al%20ice",
		"p:{GET /a user:x p.id:7}":           "user:x p.id:7",
		"p:{GET /a}":                         "",
		"p:{GET /a} rule:r user:x":           "user:x",
		"p:{* shared} rule:r ip:192.0.2.1":   "ip:192.0.2.1",
		"p:{* unmatched anon:192.0.2.1}":     "anon:192.0.2.1",
		"p:{allow-key}":                      "",
		"p:{GET /a} rule:r":                  "",
		"p:tier=pro:{GET /a user:u}":         "user:u",
		"no brace":                           "",
		"p:}{":                               "",
		"p:ban:{POST /b user+ip:0123456789}": "user+ip:0123456789",
	} {
		if got := keyIdentity(key); got != want {
			t.Errorf("keyIdentity(%q) = %q, want %q", key, got, want)
		}
	}
}
