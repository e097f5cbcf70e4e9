package ginlimit

import (
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/ginlimit/ginlimit/identity"
)

func TestHashIdentities(t *testing.T) {
	t.Parallel()
	m, c := newMini(t)
	pre := prefix(t)
	secret := []byte(strings.Repeat("k", 32))
	e := gin.New()
	e.Use(func(c *gin.Context) { c.Set("uid", c.GetHeader("X-User")) })
	e.GET("/ip", testLimit(Redis(c), Key(pre), Type(IP), HashIdentities(secret)), ok)
	e.GET("/user", testLimit(Redis(c), Key(pre), Type(User), UserIdentity(identity.FromContext("uid")), HashIdentities(secret)), ok)
	for _, r := range []map[string]string{
		{"RemoteAddr": "192.0.2.1:1"}, {"RemoteAddr": "192.0.2.2:1"}, {"RemoteAddr": "192.0.2.1:2"},
	} {
		do(e, http.MethodGet, "/ip", r)
	}
	for _, u := range []string{"alice", "bob", "alice"} {
		do(e, http.MethodGet, "/user", map[string]string{"X-User": u})
	}
	keys := m.Keys()
	if len(keys) != 4 {
		t.Fatalf("keys %q: want one per identity (2 IPs, 2 users)", keys)
	}
	shape := regexp.MustCompile(`^` + regexp.QuoteMeta(pre) + `sl2:\{GET /(ip ip|user user):[0-9a-f]{32}\}$`)
	for _, k := range keys {
		if !shape.MatchString(k) || strings.Contains(k, "192.0.2") || strings.Contains(k, "alice") || strings.Contains(k, "bob") {
			t.Errorf("key %q holds the raw identity or has the wrong shape", k)
		}
	}
	if _, err := New(Redis(c), HashIdentities([]byte("short"))); err == nil {
		t.Error("a short secret was accepted")
	}
}

func TestUserOrIP(t *testing.T) {
	t.Parallel()
	m, c := newMini(t)
	pre := prefix(t)
	e := gin.New()
	e.Use(func(c *gin.Context) {
		if u := c.GetHeader("X-User"); u != "" {
			c.Set("uid", u)
		}
	})
	e.GET("/x", testLimit(Redis(c), Key(pre), Type(UserOrIP), Limit(1), UserIdentity(identity.FromContext("uid"))), ok)
	for i, tc := range []struct {
		remote, user string
		want         int
	}{
		{"192.0.2.1:1", "", 200},
		{"192.0.2.1:2", "", 429}, // the same anonymous client
		{"192.0.2.2:1", "", 200}, // another one
		{"192.0.2.1:1", "alice", 200},
	} {
		if w := do(e, http.MethodGet, "/x", map[string]string{"RemoteAddr": tc.remote, "X-User": tc.user}); w.Code != tc.want {
			t.Fatalf("request %d: %d, want %d", i, w.Code, tc.want)
		}
	}
	want := map[string]bool{pre + "sl2:{GET /x anon:192.0.2.1}": true, pre + "sl2:{GET /x anon:192.0.2.2}": true, pre + "sl2:{GET /x user:alice}": true}
	for _, k := range m.Keys() {
		if !want[k] {
			t.Errorf("unexpected key %q", k)
		}
	}
}
