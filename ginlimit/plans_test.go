package ginlimit

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/golang-jwt/jwt/v5"

	"github.com/ginlimit/ginlimit/identity"
)

func TestTiers(t *testing.T) {
	t.Parallel()
	m, c := newMini(t)
	pre := prefix(t)
	secret := []byte(strings.Repeat("t", 32))
	verifier, err := identity.NewJWT(identity.HMACSecret(secret))
	if err != nil {
		t.Fatal(err)
	}
	token := func(sub, tier string) string {
		claims := jwt.MapClaims{"sub": sub, "exp": time.Now().Add(time.Hour).Unix()}
		if tier != "" {
			claims["tier"] = tier
		}
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(secret)
		if err != nil {
			t.Fatal(err)
		}
		return "Bearer " + s
	}
	e := gin.New()
	e.GET("/x", testLimit(Redis(c), Key(pre), Type(User), UserIdentity(verifier), Limit(1), DenyCache(0),
		Tiers("tier", map[string]int{"pro": 3})), ok)
	count := func(auth string) (admitted int) {
		for range 5 {
			if w := do(e, http.MethodGet, "/x", map[string]string{"Authorization": auth}); w.Code == 200 {
				admitted++
			}
		}
		return admitted
	}
	if n := count(token("alice", "pro")); n != 3 {
		t.Fatalf("pro user admitted %d of 5, want 3", n)
	}
	if n := count(token("bob", "")); n != 1 {
		t.Fatalf("default user admitted %d of 5, want 1", n)
	}
	if n := count(token("carol", "platinum")); n != 1 {
		t.Fatalf("unknown tier admitted %d of 5, want the route's 1", n)
	}
	// A tier in a token that does not verify buys nothing: 401.
	forged := token("mallory", "pro")
	forged = forged[:len(forged)-2] + "xx"
	if w := do(e, http.MethodGet, "/x", map[string]string{"Authorization": forged}); w.Code != 401 {
		t.Fatalf("forged pro token: %d", w.Code)
	}
	found := false
	for _, k := range m.Keys() {
		if k == pre+"tier=pro:{GET /x user:alice}" {
			found = true
		}
	}
	if !found {
		t.Fatalf("no tier key among %q", m.Keys())
	}
	for _, tc := range []struct {
		opts []Option
		want string
	}{
		{[]Option{Type(IP), Tiers("tier", map[string]int{"pro": 3})}, "Type(User)"},
		{[]Option{Type(User), UserIdentity(identity.FromContext("u")), Tiers("tier", map[string]int{"pro": 3})}, "cannot read claims"},
		{[]Option{Type(User), UserIdentity(verifier), Tiers("tier", map[string]int{"pro": 0})}, "want 1 to 1e9"},
		{[]Option{Type(User), UserIdentity(verifier), Rule(Name("a"), Type(IP), Tiers("tier", map[string]int{"pro": 2}))}, "Type(User)"},
	} {
		if _, err := New(append([]Option{Redis(c)}, tc.opts...)...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want one containing %q", err, tc.want)
		}
	}

	// A rule of a route with several Rules has tiers too, each rule its own.
	e.GET("/y", testLimit(Redis(c), Key(pre+"m:"), Type(User), UserIdentity(verifier), DenyCache(0),
		Rule(Name("burst"), Window(time.Minute), Limit(1), Tiers("tier", map[string]int{"pro": 3})),
		Rule(Name("daily"), Window(time.Hour), Limit(4))), ok)
	countY := func(auth string) (admitted int, policy string) {
		for range 5 {
			w := do(e, http.MethodGet, "/y", map[string]string{"Authorization": auth})
			if w.Code == 200 {
				admitted++
			}
			policy = w.Header().Get("RateLimit-Policy")
		}
		return admitted, policy
	}
	if n, policy := countY(token("dave", "pro")); n != 3 || policy != `"burst";q=3;w=60, "daily";q=4;w=3600` {
		t.Fatalf("pro user on two rules: admitted %d of 5, policy %q; want 3 and the pro tier's limit", n, policy)
	}
	if n, policy := countY(token("erin", "")); n != 1 || policy != `"burst";q=1;w=60, "daily";q=4;w=3600` {
		t.Fatalf("default user on two rules: admitted %d of 5, policy %q; want 1", n, policy)
	}
	found = false
	for _, k := range m.Keys() {
		if k == pre+"m:tier=pro:{GET /y} rule:burst user:dave" {
			found = true
		}
	}
	if !found {
		t.Fatalf("no tier key for a Rule among %q", m.Keys())
	}
}
