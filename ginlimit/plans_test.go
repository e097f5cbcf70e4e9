package ginlimit

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/golang-jwt/jwt/v5"
	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/identity"
	"github.com/ginlimit/ginlimit/internal/redistest"
)

// TestLimitByClaim: LimitBy with a pick that reads a claim of the verified
// token gives each tier its limit; a tier in a token that does not verify
// buys nothing.
func TestLimitByClaim(t *testing.T) {
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
	tiers := LimitBy(func(c *gin.Context) string {
		tier, _ := verifier.Claim(c, "tier")
		return tier
	}, map[string]int{"pro": 3})
	e := gin.New()
	e.GET("/x", testLimit(Redis(c), Key(pre), Type(User), UserIdentity(verifier), Limit(1), DenyCache(0), tiers), ok)
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
		if k == pre+"tier=pro:sl2:{GET /x user:alice}" {
			found = true
		}
	}
	if !found {
		t.Fatalf("no tier key among %q", m.Keys())
	}

	// A rule of a route with several Rules has tiers too, each rule its own.
	e.GET("/y", testLimit(Redis(c), Key(pre+"m:"), Type(User), UserIdentity(verifier), DenyCache(0),
		Rule(Name("burst"), Window(time.Minute), Limit(1), tiers),
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
		if k == pre+"m:tier=pro:sl2:{GET /y} rule:burst user:dave" {
			found = true
		}
	}
	if !found {
		t.Fatalf("no tier key for a Rule among %q", m.Keys())
	}
}

// TestLimitBy (on a real redis-server): each request gets the plan its function picks, with the
// plan's limit, its own counts and its limit in the headers; an
// unknown or empty plan gets the rule's own; Peek and Reset name a plan.
func TestLimitBy(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client()
	pre := prefix(t)
	in := newInstance(t, c, Key(pre), Type(User), Limit(1), Window(time.Minute),
		LimitBy(func(c *gin.Context) string { return c.GetHeader("X-Plan") }, map[string]int{
			"gold":   3,
			"silver": 2,
		}))
	count := func(user, plan string) (admitted int, policy string) {
		for range 5 {
			w := do(in.e, http.MethodGet, "/claim", map[string]string{"X-User": user, "X-Plan": plan})
			if w.Code == http.StatusOK {
				admitted++
			}
			policy = w.Header().Get("RateLimit-Policy")
		}
		return admitted, policy
	}
	for _, tc := range []struct {
		user, plan string
		want       int
		policy     string
	}{
		{"alice", "gold", 3, ";q=3;w=60"},
		{"bob", "silver", 2, ";q=2;w=60"},
		{"carol", "", 1, ";q=1;w=60"},
		{"dave", "platinum", 1, ";q=1;w=60"},
	} {
		n, policy := count(tc.user, tc.plan)
		if n != tc.want || !strings.HasSuffix(policy, tc.policy) {
			t.Errorf("%s on plan %q: %d admitted, policy %q; want %d and %q", tc.user, tc.plan, n, policy, tc.want, tc.policy)
		}
	}
	// alice's gold count is her own: on the default plan she starts afresh.
	if n, _ := count("alice", ""); n != 1 {
		t.Errorf("alice on the default plan: %d admitted, want 1", n)
	}
	target := Target{Route: claimRoute, User: "alice", Plan: "gold"}
	if d, err := in.policy.Peek(context.Background(), target); err != nil || d.Limit != 3 || d.Remaining != 0 {
		t.Fatalf("Peek of alice's gold plan: %+v, %v", d, err)
	}
	if err := in.policy.Reset(context.Background(), Target{Route: claimRoute, User: "alice"}, "test"); err != nil {
		t.Fatal(err)
	}
	keys, err := c.Keys(context.Background(), pre+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if strings.Contains(k, "user:alice}") {
			t.Errorf("Reset left %q: it must clear every plan", k)
		}
	}
}

// TestLimitByOptions: plans are checked at start-up, naming the option and
// the plan; a plan the algorithm cannot run is refused too.
func TestLimitByOptions(t *testing.T) {
	t.Parallel()
	_, c := newMini(t)
	pick := func(*gin.Context) string { return "" }
	for name, opt := range map[string]Option{
		"nil pick":   LimitBy(nil, map[string]int{"a": 1}),
		"no plans":   LimitBy(pick, nil),
		"zero limit": LimitBy(pick, map[string]int{"a": 0}),
		"huge limit": LimitBy(pick, map[string]int{"a": 2e9}),
		"empty name": LimitBy(pick, map[string]int{"": 1}),
		"bucket": Rule(Name("r"), Algorithm(TokenBucket), Window(1000*time.Hour), Limit(100),
			LimitBy(pick, map[string]int{"big": 5000})), // burst (the limit) × window over 2^53
	} {
		if _, err := New(Redis(c), opt); err == nil {
			t.Errorf("%s: New accepted it", name)
		} else if !strings.Contains(err.Error(), "LimitBy") && !strings.Contains(err.Error(), "plan") {
			t.Errorf("%s: %v does not name the option", name, err)
		}
	}
}

// TestConcurrentPlans: routes whose rule has plans (LimitBy), every
// plan its own single-rule script, and a Tiers route, raced by 32
// goroutines with the scripts flushed midway: every plan admits exactly its
// limit, on one redis-server and on a cluster.
func TestConcurrentPlans(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	cl := redistest.StartCluster(t)
	for _, tg := range []struct {
		name   string
		client redis.Scripter
		flush  func()
	}{
		{"redis", srv.Client(), func() { srv.Client().ScriptFlush(context.Background()) }},
		{"cluster", cl.Client(), func() {
			for i := range 3 {
				cl.NodeClient(i).ScriptFlush(context.Background())
			}
		}},
	} {
		for _, alg := range []AlgorithmKind{SlidingLog, SlidingCounter, FixedWindow, TokenBucket} {
			t.Run(tg.name+"/"+string(alg), func(t *testing.T) {
				w := uncrossedWindow(alg)
				plans := map[string]int{"gold": 40, "silver": 25, "tiny": 3}
				want := map[string]int64{"gold": 40, "silver": 25, "tiny": 3, "": 10}
				l, err := New(Redis(tg.client), Timeout(testTimeout), queueTimeout(testTimeout), UserIdentity(identity.FromContext("uid")))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = l.Close() })
				p, err := l.Policy(Key(prefix(t)), Type(User), Window(w), Limit(10), Algorithm(alg), DenyCache(0),
					LimitBy(func(c *gin.Context) string { return c.GetHeader("X-Plan") }, plans))
				if err != nil {
					t.Fatal(err)
				}
				e := gin.New()
				e.GET("/x", func(c *gin.Context) { c.Set("uid", c.GetHeader("X-User")) }, p.route.Serve, ok)
				names := []string{"gold", "silver", "tiny", ""}
				var admitted [4]atomic.Int64
				var calls atomic.Int64
				var once sync.Once
				var wg sync.WaitGroup
				for g := range 32 {
					wg.Go(func() {
						for i := range 8 {
							if calls.Add(1) == 100 {
								once.Do(tg.flush)
							}
							k := (g + i) % 4
							r := httptest.NewRequest(http.MethodGet, "/x", nil)
							r.Header.Set("X-User", "u1")
							r.Header.Set("X-Plan", names[k])
							rec := httptest.NewRecorder()
							e.ServeHTTP(rec, r)
							switch rec.Code {
							case http.StatusOK:
								admitted[k].Add(1)
							case http.StatusTooManyRequests:
							default:
								t.Errorf("plan %q: status %d %s", names[k], rec.Code, rec.Body)
							}
						}
					})
				}
				wg.Wait()
				for k, name := range names {
					if got := admitted[k].Load(); got != want[name] {
						t.Errorf("plan %q: %d admitted of 64, want %d", name, got, want[name])
					}
				}
			})
		}
	}
}
