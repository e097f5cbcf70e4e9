package ginlimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ginlimit/ginlimit/ginlimit/internal/decide"
	"github.com/ginlimit/ginlimit/ginlimit/internal/rule"
	"github.com/ginlimit/ginlimit/identity"
	"github.com/ginlimit/ginlimit/internal/redistest"
)

// The scope of a rule's and a plan's override, on a real redis-server: an
// override holds for the rule on the route it names, or for its Shared
// group as one, and nowhere else, whatever Key prefix other routes share.

// TestRuleOverrideStaysOnItsRoute: two routes of one Limiter on the
// default Key, a search route and a login route of 5 a minute: lifting the
// search route's limit through its own Policy leaves the login route's 5,
// and a Policy used through Allow on the same Key, alone.
func TestRuleOverrideStaysOnItsRoute(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	l, err := New(Redis(srv.Client()), Timeout(testTimeout), queueTimeout(testTimeout))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	e := gin.New()
	e.GET("/search", l.RateLimit(Limit(100), Window(time.Minute)), ok)
	e.POST("/login", l.RateLimit(Limit(5), Window(time.Minute)), ok)
	search, err := l.Policy(Limit(100), Window(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	allow, err := l.Policy(Limit(3), Window(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := search.SetLimit(context.Background(), Target{Route: "GET /search"}, 10_000, 0); err != nil {
		t.Fatal(err)
	}
	if w := do(e, http.MethodGet, "/search", nil); w.Code != http.StatusOK || w.Header().Get("X-RateLimit-Limit") != "10000" {
		t.Fatalf("search after its override: %d, limit %q; want 200, 10000", w.Code, w.Header().Get("X-RateLimit-Limit"))
	}
	logins, limits := 0, map[string]int{}
	for range 200 {
		w := do(e, http.MethodPost, "/login", nil)
		if w.Code == http.StatusOK {
			logins++
		}
		limits[w.Header().Get("X-RateLimit-Limit")]++
	}
	t.Logf("logins admitted: %d of 200, limits reported %v", logins, limits)
	if logins != 5 || limits["5"] != 200 {
		t.Errorf("logins admitted %d of 200, limits reported %v; want 5, all of them 5", logins, limits)
	}
	admitted := 0
	for range 10 {
		d, err := allow.Allow(context.Background(), "tenant", 1)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			admitted++
		}
	}
	if admitted != 3 {
		t.Errorf("Policy.Allow on the same Key admitted %d of 10, want its own 3", admitted)
	}
	// Policy.Allow's calls take an override of their own, which no route
	// applies; a rule's override that names no route is refused.
	if err := allow.SetLimit(context.Background(), Target{Route: "Policy.Allow"}, 7, 0); err != nil {
		t.Fatal(err)
	}
	if d, err := allow.Allow(context.Background(), "tenant", 1); err != nil || !d.Allowed || d.Limit != 7 || d.Source != SourceOverride {
		t.Errorf("Policy.Allow under its override: %+v, %v; want admitted on 7", d, err)
	}
	if w := do(e, http.MethodPost, "/login", nil); w.Header().Get("X-RateLimit-Limit") != "5" {
		t.Errorf("login after Policy.Allow's override: limit %q, want 5", w.Header().Get("X-RateLimit-Limit"))
	}
	if err := search.SetLimit(context.Background(), Target{}, 50, 0); !errors.Is(err, ErrBadTarget) {
		t.Errorf("a rule's override without its route: %v, want ErrBadTarget", err)
	}
}

// TestSharedOverrideHoldsForTheGroup: a Shared group of Limit(10) whose
// routes declare it differently (one alone, one among Rules), overridden
// to 2 through the second route's Policy: traffic split over both routes
// admits 2 in all, and both routes' headers say 2.
func TestSharedOverrideHoldsForTheGroup(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	l, err := New(Redis(srv.Client()), Timeout(testTimeout), queueTimeout(testTimeout))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	pre := prefix(t)
	alone := []Option{Key(pre), Name("group"), Per(Shared), Limit(10), Window(time.Hour)}
	inRules := []Option{Rule(Key(pre), Name("group"), Per(Shared), Limit(10), Window(time.Hour))}
	e := gin.New()
	e.GET("/a", l.RateLimit(alone...), ok)
	e.GET("/b", l.RateLimit(inRules...), ok)
	admin, err := l.Policy(inRules...)
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.SetLimit(context.Background(), Target{Rule: "group", Route: "GET /b"}, 2, 0); err != nil {
		t.Fatal(err)
	}
	admitted, limits := map[string]int{}, map[string]string{}
	for i := range 20 {
		path := []string{"/a", "/b"}[i%2]
		w := do(e, http.MethodGet, path, nil)
		if w.Code == http.StatusOK {
			admitted[path]++
		}
		if i < 2 {
			limits[path] = w.Header().Get("X-RateLimit-Limit")
		}
	}
	t.Logf("admitted %v, limits %v", admitted, limits)
	if admitted["/a"]+admitted["/b"] != 2 || limits["/a"] != "2" || limits["/b"] != "2" {
		t.Errorf("admitted %v, limits reported %v; want 2 in all, both routes reporting 2", admitted, limits)
	}
}

// TestOverridesCompileOnFirstUse: with many identity overrides stored,
// each further Policy on their Key compiles none of them until a request
// uses one; then that one compiles once, however many policies there are.
func TestOverridesCompileOnFirstUse(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	pre := prefix(t)
	const stored, policies = 300, 10
	var fill []any
	for i := range stored {
		fill = append(fill, fmt.Sprintf("%s{GET /claim user:u%d}", pre, i), fmt.Sprintf("%d 0", 10+i))
	}
	if err := c.HSet(ctx, LimitsKey, fill...).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, limitsVersionKey, 7, 0).Err(); err != nil {
		t.Fatal(err)
	}
	l, err := New(Redis(c), Timeout(testTimeout), queueTimeout(testTimeout), UserIdentity(identity.FromContext("uid")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	opts := []Option{Key(pre), Limit(3), Window(time.Minute), Type(User)}
	var ps []*Policy
	for range policies {
		p, err := l.Policy(opts...)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	lv := ps[0].route
	t.Logf("compiles after %d policies over %d stored overrides: %d", policies, stored, compiles(lv))
	if n := compiles(lv); n != 0 {
		t.Errorf("%d overrides compiled by %d policies that decided nothing, want 0", n, policies)
	}
	waitOverridesLoaded(t, lv)
	e := gin.New()
	e.GET("/claim", func(c *gin.Context) { c.Set("uid", c.GetHeader("X-User")) }, ps[0].route.Serve, ok)
	for range 3 {
		if w := do(e, http.MethodGet, "/claim", map[string]string{"X-User": "u7"}); w.Code != http.StatusOK || w.Header().Get("X-RateLimit-Limit") != "17" {
			t.Fatalf("u7 under its override: %d, limit %q; want 200 of 17", w.Code, w.Header().Get("X-RateLimit-Limit"))
		}
	}
	if n := compiles(lv); n != 1 {
		t.Errorf("%d compiles after u7's requests, want 1", n)
	}
}

// waitOverridesLoaded waits, up to 30 s, until lv has the overrides'
// first load: New does it only when Redis answered the script load in
// time, which a loaded machine can outlast; the upkeep does it then.
func waitOverridesLoaded(t *testing.T, lv *decide.Route) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		_, loaded := decide.ProbeOverrides(lv)
		if loaded {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the overrides were not loaded within 30 s")
		}
	}
}

// TestRuleOverrideHasRoomAmongIdentities: with the identity overrides at
// their quota, a rule still gets its first emergency override.
func TestRuleOverrideHasRoomAmongIdentities(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	in := newInstance(t, c, Key(prefix(t)), Limit(3), Type(User))
	var fill []any
	for i := range MaxIdentityOverrides {
		fill = append(fill, fmt.Sprintf("other:{GET /x user:%d}", i), "5 0")
	}
	if err := c.HSet(ctx, LimitsKey, fill...).Err(); err != nil {
		t.Fatal(err)
	}
	err := in.policy.SetLimit(ctx, Target{Route: claimRoute}, 1, 0)
	t.Logf("rule override with the identities' quota full: %v", err)
	if err != nil {
		t.Fatalf("the rule's first override, with the identities' quota full: %v", err)
	}
	// Stored; whether this instance loaded the full hash within the poll's
	// bound depends on the machine, so the field is read from Redis.
	field := in.policy.route.OverrideField(in.policy.route.Rules[0], rule.Scope{Method: "GET", Route: "/claim"})
	if v, err := c.HGet(ctx, LimitsKey, field).Result(); err != nil || v != "1 0" {
		t.Fatalf("the rule's override in LimitsKey: %q, %v; want \"1 0\"", v, err)
	}
	// An identity's override more is still refused.
	if err := in.policy.SetLimit(ctx, Target{Route: claimRoute, User: "one-more"}, 5, 0); !errors.Is(err, ErrBadLimit) {
		t.Fatalf("an identity's override past MaxIdentityOverrides: %v, want ErrBadLimit", err)
	}
}

// BenchmarkPolicyAmongOverrides: one more Policy on a Key under which
// MaxIdentityOverrides identities' overrides are stored, each of its own
// limit, on a real redis-server: the time and memory a Policy costs for
// them (none is compiled until a request meets it).
func BenchmarkPolicyAmongOverrides(b *testing.B) {
	srv := redistest.Start(b)
	c := srv.Client()
	ctx := context.Background()
	pre := "bench:"
	fill := make([]any, 0, 2*MaxIdentityOverrides)
	for i := range MaxIdentityOverrides {
		fill = append(fill, fmt.Sprintf("%s{GET /claim user:u%d}", pre, i), fmt.Sprintf("%d 0", 10+i))
	}
	if err := c.HSet(ctx, LimitsKey, fill...).Err(); err != nil {
		b.Fatal(err)
	}
	if err := c.Set(ctx, limitsVersionKey, 7, 0).Err(); err != nil {
		b.Fatal(err)
	}
	l, err := New(Redis(c), UserIdentity(identity.FromContext("uid")))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	keep := make([]*Policy, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		p, err := l.Policy(Key(pre), Limit(3), Window(time.Minute), Type(User))
		if err != nil {
			b.Fatal(err)
		}
		keep = append(keep, p) // each stays followed, as a route's does
	}
	b.StopTimer()
	runtime.KeepAlive(keep)
}

// TestMaxRuleOverrides: past MaxRuleOverrides rules' and plans' overrides,
// SetLimit refuses a new one, naming the bound, while an identity's still
// has room.
func TestMaxRuleOverrides(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	in := newInstance(t, c, Key(prefix(t)), Limit(3), Type(User))
	var fill []any
	for i := range MaxRuleOverrides {
		fill = append(fill, fmt.Sprintf("other:{GET /r%d} *", i), "5 0")
	}
	if err := c.HSet(ctx, LimitsKey, fill...).Err(); err != nil {
		t.Fatal(err)
	}
	err := in.policy.SetLimit(ctx, Target{Route: claimRoute}, 5, 0)
	if !errors.Is(err, ErrBadLimit) || !strings.Contains(err.Error(), "MaxRuleOverrides (1000)") {
		t.Fatalf("a rule's override past MaxRuleOverrides: %v, want ErrBadLimit naming MaxRuleOverrides", err)
	}
	if err := in.policy.SetLimit(ctx, Target{Route: claimRoute, User: "alice"}, 5, 0); err != nil {
		t.Fatalf("an identity's override with the rules' quota full: %v", err)
	}
}

// compiles is how many overrides' rules the policies that follow p's
// overrides have compiled.
func compiles(p *decide.Route) int64 {
	n, _ := decide.ProbeOverrides(p)
	return n
}
