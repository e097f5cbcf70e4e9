package ginlimit

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ginlimit/ginlimit/ginlimit/internal/rule"
	"github.com/ginlimit/ginlimit/identity"
	"github.com/ginlimit/ginlimit/internal/redistest"
)

// TestPerKeys: each combination of dimension values has its own key, named
// as the package documentation says, in the rule's order.
func TestPerKeys(t *testing.T) {
	t.Parallel()
	m, c := newMini(t)
	pre := prefix(t)
	l, err := New(Timeout(testTimeout), Redis(c), UserIdentity(identity.FromContext("uid")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	e := gin.New()
	setUser := func(c *gin.Context) { c.Set("uid", c.GetHeader("X-User")) }
	tenant := ByFunc("tenant", func(c *gin.Context) (string, bool) { return c.Query("tenant"), true })
	e.GET("/v/:id/claim", setUser, l.RateLimit(Key(pre), Limit(1), Per(User, ByParam("id"), ByHeader("x-api-key"), tenant)), ok)
	w := do(e, http.MethodGet, "/v/7/claim?tenant=acme", map[string]string{"X-User": "alice", "X-Api-Key": "k 1", "RemoteAddr": "192.0.2.1:1"})
	if w.Code != http.StatusOK {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
	want := pre + "sl2:{GET /v/:id/claim user:alice p.id:7 h.x-api-key:k%201 f.tenant:acme}"
	if keys := ruleKeys(m); len(keys) != 1 || keys[0] != want {
		t.Fatalf("keys %q, want [%q]", keys, want)
	}
}

// TestPerValuesCannotForgeKeys: values from the request are escaped, so no
// client can spell another's key, close the hash tag, or add a dimension;
// and an over-long value goes in as a hash, bounded.
func TestPerValuesCannotForgeKeys(t *testing.T) {
	t.Parallel()
	m, c := newMini(t)
	pre := prefix(t)
	e := gin.New()
	e.GET("/x", testLimit(Redis(c), Key(pre), Limit(1), Per(ByHeader("X-Key"), IP)), ok)
	send := func(key string) int {
		return do(e, http.MethodGet, "/x", map[string]string{"X-Key": key, "RemoteAddr": "192.0.2.1:1"}).Code
	}
	if send("a ip:192.0.2.1") != http.StatusOK {
		t.Fatal("first request refused")
	}
	// "a" alone, with the same IP, is another count: the space was escaped.
	for _, k := range []string{"a", "a}", "a ip:192.0.2.1}", strings.Repeat("z", 10_000)} {
		if code := send(k); code != http.StatusOK {
			t.Errorf("X-Key %.20q shares a count with another value: %d", k, code)
		}
	}
	for _, k := range m.Keys() {
		if strings.Count(k, "{") != 1 || strings.Count(k, "}") != 1 || len(k) > len(pre)+rule.MaxKeyText+64 {
			t.Errorf("key %.80q is not one bounded hash tag", k)
		}
	}
}

// TestMissingDimensionValues: a request without a value the rule counts
// per is answered as documented and touches no key: 400 for a header or a
// function, 500 (a wiring mistake) for a route without the parameter.
func TestMissingDimensionValues(t *testing.T) {
	t.Parallel()
	m, c := newMini(t)
	e := gin.New()
	e.GET("/h", testLimit(Redis(c), Key(prefix(t)), Per(ByHeader("X-API-Key"))), ok)
	e.GET("/f", testLimit(Redis(c), Key(prefix(t)), Per(ByFunc("tenant", func(*gin.Context) (string, bool) { return "", false }))), ok)
	e.GET("/p", testLimit(Redis(c), Key(prefix(t)), Per(ByParam("id"))), ok)
	for _, tc := range []struct {
		path string
		code int
		body string
	}{
		{"/h", 400, `{"code":400,"message":"Missing X-Api-Key header"}`},
		{"/f", 400, `{"code":400,"message":"Bad request"}`},
		{"/p", 500, `{"code":500,"message":"Internal server error"}`},
	} {
		w := do(e, http.MethodGet, tc.path, nil)
		if w.Code != tc.code || w.Body.String() != tc.body {
			t.Errorf("%s: %d %s, want %d %s", tc.path, w.Code, w.Body, tc.code, tc.body)
		}
	}
	if keys := m.Keys(); len(keys) != 0 {
		t.Errorf("requests without the value touched keys %v", keys)
	}
}

// TestPerOptions: bad dimensions are refused at start-up, naming the
// option; Per(d) and Type(d) are one rule, keys included.
func TestPerOptions(t *testing.T) {
	t.Parallel()
	_, c := newMini(t)
	for name, opt := range map[string]Option{
		"too many":      Per(IP, User, ByParam("a"), ByParam("b"), ByParam("c")),
		"twice":         Per(ByParam("id"), ByParam("id")),
		"nil":           Per(nil),
		"zero":          Per(valueDim{}),
		"bad builtin":   Per(Builtin(9)),
		"method and ip": Per(Method, IP),
		"user twice":    Per(User, UserOrIP),
		"nil type":      Type(nil),
		"empty name":    Per(ByHeader("")),
		"spaced name":   Per(ByParam("a b")),
		"nil func":      Per(ByFunc("f", nil)),
		"user, no user": Per(User),
	} {
		if _, err := New(Redis(c), opt); err == nil {
			t.Errorf("%s: New accepted it", name)
		} else if !strings.Contains(err.Error(), "Per") && !strings.Contains(err.Error(), "Type(") {
			t.Errorf("%s: %v does not name the option", name, err)
		}
	}
	for _, pair := range [][2]Option{{Type(User), Per(User)}, {Type(IP), Per(IP)}, {Type(Method), Per()}, {Per(Method), Per()},
		{Type(UserOrIP), Per(UserOrIP)}} {
		keys := [2]string{}
		for i, opt := range pair {
			m, c := newMini(t)
			e := gin.New()
			e.GET("/x", func(c *gin.Context) { c.Set("uid", "alice") },
				testLimit(Redis(c), Key("k:"), opt, UserIdentity(identity.FromContext("uid"))), ok)
			do(e, http.MethodGet, "/x", map[string]string{"RemoteAddr": "192.0.2.1:1"})
			keys[i] = strings.Join(m.Keys(), ",")
		}
		if keys[0] != keys[1] || keys[0] == "" {
			t.Errorf("Type and Per disagree: %q vs %q", keys[0], keys[1])
		}
	}
}

// TestPerHashed: with HashIdentities, a combination is one HMAC part; one
// dimension keeps the key it always had.
func TestPerHashed(t *testing.T) {
	t.Parallel()
	m, c := newMini(t)
	secret := []byte("0123456789abcdef0123456789abcdef")
	pre := prefix(t)
	e := gin.New()
	e.GET("/v/:id", testLimit(Redis(c), Key(pre), Per(IP, ByParam("id")), HashIdentities(secret)), ok)
	do(e, http.MethodGet, "/v/7", map[string]string{"RemoteAddr": "192.0.2.1:1"})
	keys := m.Keys()
	if len(keys) != 1 || !strings.HasPrefix(keys[0], pre+"sl2:{GET /v/:id ip+p.id:") || strings.Contains(keys[0], "192.0.2.1") {
		t.Fatalf("keys %q: want one hashed ip+p.id part", keys)
	}
}

// TestPerIsExactUnderConcurrency: one claim per user per voucher, on a real
// redis-server, from 200 goroutines over 10 users × 10 vouchers, each pair
// tried 8 times at once: exactly one admission per pair.
func TestPerIsExactUnderConcurrency(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	l, err := New(Redis(srv.Client()), Timeout(testTimeout), queueTimeout(testTimeout), UserIdentity(identity.FromContext("uid")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	e := gin.New()
	e.GET("/v/:id/claim", func(c *gin.Context) { c.Set("uid", c.GetHeader("X-User")) },
		l.RateLimit(Key(prefix(t)), Window(24*time.Hour), Limit(1), Per(User, ByParam("id"))), ok)
	var admitted [10][10]atomic.Int64
	var wg sync.WaitGroup
	for g := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 40 {
				n := (g*40 + i) % 800
				u, v := n%10, n/10%10
				w := do(e, http.MethodGet, fmt.Sprintf("/v/%d/claim", v), map[string]string{"X-User": fmt.Sprint("user-", u)})
				if w.Code == http.StatusOK {
					admitted[u][v].Add(1)
				} else if w.Code != http.StatusTooManyRequests {
					t.Errorf("status %d", w.Code)
				}
			}
		}()
	}
	wg.Wait()
	for u := range admitted {
		for v := range admitted[u] {
			if n := admitted[u][v].Load(); n != 1 {
				t.Errorf("user %d voucher %d: %d admitted, want exactly 1", u, v, n)
			}
		}
	}
}

// TestTargetValues: Peek and Reset name a Per count by its values.
func TestTargetValues(t *testing.T) {
	t.Parallel()
	_, c := newMini(t)
	in := newInstance(t, c, Key(prefix(t)), Limit(1), Per(User, ByHeader("X-Voucher")))
	for _, code := range []int{200, 429} {
		w := do(in.e, http.MethodGet, "/claim", map[string]string{"X-User": "alice", "X-Voucher": "7"})
		if w.Code != code {
			t.Fatalf("%d, want %d", w.Code, code)
		}
	}
	target := Target{Route: claimRoute, User: "alice", Values: map[string]string{"X-Voucher": "7"}}
	if d, err := in.policy.Peek(context.Background(), target); err != nil || d.Remaining != 0 {
		t.Fatalf("Peek: %+v %v, want 0 remaining", d, err)
	}
	for _, bad := range []Target{
		{Route: claimRoute, User: "alice"},
		{Route: claimRoute, User: "alice", Values: map[string]string{"X-Voucher": "7", "other": "1"}},
	} {
		if _, err := in.policy.Peek(context.Background(), bad); err == nil {
			t.Errorf("Peek(%+v) accepted a target that names no count", bad)
		}
	}
	if err := in.policy.Reset(context.Background(), target, "test"); err != nil {
		t.Fatal(err)
	}
	if w := do(in.e, http.MethodGet, "/claim", map[string]string{"X-User": "alice", "X-Voucher": "7"}); w.Code != 200 {
		t.Fatalf("after Reset: %d", w.Code)
	}
}
