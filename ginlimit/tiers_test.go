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
		{[]Option{Type(User), UserIdentity(verifier), Tiers("tier", map[string]int{"pro": 2}), Rule(Name("a"))}, "several Rules"},
	} {
		if _, err := New(append([]Option{Redis(c)}, tc.opts...)...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want one containing %q", err, tc.want)
		}
	}
}
