package ginlimit

import (
	"context"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/identity"
	"github.com/ginlimit/ginlimit/internal/redistest"
	"github.com/ginlimit/ginlimit/internal/testtier"
)

// TestRulesAllOrNothing: a request rejected by one rule consumes nothing
// from the others, on miniredis and on a real Redis.
func TestRulesAllOrNothing(t *testing.T) {
	t.Parallel()
	_, mini := newMini(t)
	srv := redistest.Start(t)
	for i, c := range []*redis.Client{mini, srv.Client()} {
		pre := prefix(t)
		p := mustPolicy(t, Redis(c), Key(pre), DenyCache(0),
			Rule(Name("sec"), Window(time.Second), Limit(2)),
			Rule(Name("min"), Window(time.Minute), Limit(3), Algorithm(FixedWindow)))
		// miniredis expires keys on its own clock (t0); a real server on
		// the wall clock, so its test clock must not lag the wall clock. It
		// is on a millisecond, sec's unit, so that sec's entries leave the
		// window exactly a second after their admission.
		var now int64 = t0.UnixMicro() + 1000
		if i == 1 { // the start of the next minute: ahead, and far from a boundary
			now = time.Now().Truncate(time.Minute).Add(time.Minute).UnixMicro() + 1000
		}
		p.route.Clock = func() int64 { return now }
		ctx := context.Background()
		for i, step := range []struct {
			after   time.Duration
			allowed bool
			rule    string
			secLeft int
			minLeft int
		}{
			{0, true, "sec", 1, 2},
			{0, true, "sec", 0, 1},
			{0, false, "sec", 0, 1}, // sec fires; min keeps its 1
			{0, false, "sec", 0, 1},
			{time.Second, true, "min", 1, 0},
			{0, false, "min", 1, 0}, // min fires; sec keeps its 1
		} {
			now += step.after.Microseconds()
			d, err := p.Allow(ctx, "k", 1)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed != step.allowed || d.Rule != step.rule || len(d.Rules) != 2 ||
				d.Rules[0].Remaining != step.secLeft || d.Rules[1].Remaining != step.minLeft {
				t.Fatalf("step %d: %+v; want allowed=%v rule=%s sec=%d min=%d", i, d, step.allowed, step.rule, step.secLeft, step.minLeft)
			}
			if !d.Allowed && d.RetryAfter <= 0 {
				t.Fatalf("step %d: rejected without a retry: %+v", i, d)
			}
		}
		log, err := readSlidingLog(ctx, c, ruleKey(p, 0, "k"))
		n := log.inWindow(now, time.Second.Microseconds())
		// The two admitted at t left the window at t+1s; the one admitted
		// then stays, and the request that min rejected added nothing.
		if err != nil || n != 1 {
			t.Fatalf("sec log holds %d, %v; want 1 (nothing from the rejected request)", n, err)
		}
		if cnt := fixedWindowCount(t, c, ruleKey(p, 1, "k")); cnt != 3 {
			t.Fatalf("min count %d; want 3", cnt)
		}
	}
}

// TestRulesMatchSingleRule: a route with one Rule decides exactly as the
// single-rule script does, for every algorithm, over a random timeline.
func TestRulesMatchSingleRule(t *testing.T) {
	testtier.Long(t)
	t.Parallel()
	for _, alg := range []AlgorithmKind{SlidingLog, SlidingCounter, FixedWindow, TokenBucket} {
		t.Run(string(alg), func(t *testing.T) {
			t.Parallel()
			_, c := newMini(t)
			opts := []RuleOption{Window(100 * time.Millisecond), Limit(8), Algorithm(alg), subWindows(5), Burst(12)}
			if alg != TokenBucket {
				opts = opts[:len(opts)-1]
			}
			singleOpts := []Option{Redis(c), Key(prefix(t)), DenyCache(0)}
			for _, o := range opts {
				singleOpts = append(singleOpts, o)
			}
			single := mustPolicy(t, singleOpts...)
			multi := mustPolicy(t, Redis(c), Key(prefix(t)), DenyCache(0), Rule(append([]RuleOption{Name("only")}, opts...)...))
			var now int64 = t0.UnixMicro()
			single.route.Clock = func() int64 { return now }
			multi.route.Clock = single.route.Clock
			seed := rand.Uint64()
			rng := rand.New(rand.NewPCG(seed, 2))
			for i := range 600 {
				if rng.IntN(3) > 0 {
					now += rng.Int64N(30_000)
				}
				cost := 1 + rng.IntN(3)
				a, errA := single.Allow(context.Background(), "k", cost)
				b, errB := multi.Allow(context.Background(), "k", cost)
				if errA != nil || errB != nil {
					t.Fatalf("seed %d step %d: %v / %v", seed, i, errA, errB)
				}
				if a.Allowed != b.Allowed || a.Remaining != b.Remaining || a.Reset != b.Reset || a.RetryAfter != b.RetryAfter {
					t.Fatalf("seed %d step %d (cost %d): single %+v, rules %+v", seed, i, cost, a, b)
				}
			}
		})
	}
}

// TestRulesOverHTTP: per-IP and per-user rules on one route, headers that
// list every policy, a 429 that names the rule, keys in one hash slot.
func TestRulesOverHTTP(t *testing.T) {
	t.Parallel()
	m, c := newMini(t)
	pre := prefix(t)
	e := gin.New()
	e.Use(func(c *gin.Context) { c.Set("uid", c.GetHeader("X-User")) })
	e.GET("/x/:id", testLimit(Redis(c), Key(pre), UserIdentity(identity.FromContext("uid")), Message("slow down"),
		Rule(Name("per-ip"), Type(IP), Window(time.Minute), Limit(3)),
		Rule(Name("per-user"), Type(User), Window(time.Hour), Limit(2), Message("user quota"))), ok)
	req := map[string]string{"RemoteAddr": "192.0.2.1:1", "X-User": "alice"}
	w := do(e, http.MethodGet, "/x/1", req)
	if w.Code != 200 || w.Header().Get("RateLimit-Policy") != `"per-ip";q=3;w=60, "per-user";q=2;w=3600` ||
		w.Header().Get("RateLimit") != `"per-ip";r=2;t=60, "per-user";r=1;t=3600` {
		t.Fatalf("first: %d %v", w.Code, w.Header())
	}
	do(e, http.MethodGet, "/x/2", req)
	w = do(e, http.MethodGet, "/x/3", req)
	if w.Code != 429 || w.Body.String() != `{"code":429,"message":"user quota","rule":"per-user"}` || w.Header().Get("Retry-After") == "" {
		t.Fatalf("third: %d %s %v", w.Code, w.Body, w.Header())
	}
	// Another user on the same IP: per-ip still has 1 (the rejection took
	// nothing from it).
	w = do(e, http.MethodGet, "/x/4", map[string]string{"RemoteAddr": "192.0.2.1:1", "X-User": "bob"})
	if w.Code != 200 {
		t.Fatalf("bob: %d %s", w.Code, w.Body)
	}
	w = do(e, http.MethodGet, "/x/5", map[string]string{"RemoteAddr": "192.0.2.1:1", "X-User": "carol"})
	if w.Code != 429 || !strings.Contains(w.Body.String(), `"rule":"per-ip"`) {
		t.Fatalf("carol: %d %s", w.Code, w.Body)
	}
	// Unauthenticated: 401, nothing counted anywhere.
	before := len(m.Keys())
	if w := do(e, http.MethodGet, "/x/6", map[string]string{"RemoteAddr": "192.0.2.9:1"}); w.Code != 401 {
		t.Fatalf("no user: %d", w.Code)
	}
	keys := m.Keys()
	if len(keys) != before {
		t.Fatalf("a 401 wrote keys: %q", keys)
	}
	for _, k := range keys {
		if !strings.HasPrefix(k, pre+"sl2:{GET /x/:id} rule:") {
			t.Fatalf("key %q is not in the route's hash slot", k)
		}
	}
}

func TestRulesValidation(t *testing.T) {
	t.Parallel()
	_, c := newMini(t)
	for _, tc := range []struct {
		opts []Option
		want string
	}{
		{[]Option{Rule(Limit(1)), Rule(Name("b"))}, "give each rule of a route a Name"},
		{[]Option{Rule(Name("a")), Rule(Name("a"))}, `"a" is used twice`},
		// Route options inside a Rule do not compile: see
		// TestRouteOptionsInRuleDoNotCompile.
		{[]Option{Rule(Name("a"), Limit(0))}, "Limit(0)"},
		{[]Option{Rule(Name("a"), Type(User))}, "UserIdentity"},
	} {
		l, err := New(Timeout(testTimeout), Redis(c))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Policy(tc.opts...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%d rules: error %v, want one containing %q", len(tc.opts), err, tc.want)
		}
	}
}
