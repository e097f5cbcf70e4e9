package ginlimit

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ginlimit/ginlimit/ginlimit/internal/rule"
	"github.com/ginlimit/ginlimit/internal/redistest"
)

// sharedInstance is one instance of a service on its own client of srv:
// a group of two routes, GET /api/a and POST /api/b, given one annotation
// with Use.
func sharedInstance(t *testing.T, srv *redistest.Server, opts ...Option) *gin.Engine {
	t.Helper()
	l, err := New(Redis(srv.Client()), Timeout(testTimeout), queueTimeout(testTimeout), withLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	e := gin.New()
	api := e.Group("/api")
	api.Use(l.RateLimit(opts...))
	api.GET("/a", ok)
	api.POST("/b", ok)
	return e
}

// TestSharedExactAcrossInstances: a group's budget is one count, exact,
// on a real redis-server: two instances on clients of their own, each
// serving both routes of the group, concurrently, admit exactly the limit
// in all, for the whole group and, with Per(Shared, ByHeader), per
// caller; every algorithm whose budget does not refill within the test.
func TestSharedExactAcrossInstances(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const limit = 20
	for _, alg := range []AlgorithmKind{SlidingLog, SlidingCounter, FixedWindow} {
		for _, perCaller := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/per caller %v", alg, perCaller), func(t *testing.T) {
				dims := Per(Shared)
				if perCaller {
					dims = Per(Shared, ByHeader("X-Caller"))
				}
				opts := []Option{Key(prefix(t)), Algorithm(alg), Window(time.Hour), Limit(limit), dims}
				instances := []*gin.Engine{sharedInstance(t, srv, opts...), sharedInstance(t, srv, opts...)}
				callers := []string{"alice", "bob"}
				var admitted [2]atomic.Int64
				var wg sync.WaitGroup
				for g := range 8 {
					wg.Go(func() {
						e := instances[g%2]
						method, path := http.MethodGet, "/api/a"
						if g/2%2 == 1 {
							method, path = http.MethodPost, "/api/b"
						}
						for i := range 3 * limit / 2 {
							caller := i % 2
							w := do(e, method, path, map[string]string{"X-Caller": callers[caller]})
							switch w.Code {
							case http.StatusOK:
								admitted[caller].Add(1)
							case http.StatusTooManyRequests:
							default:
								t.Errorf("%s %s: %d %s", method, path, w.Code, w.Body)
								return
							}
						}
					})
				}
				wg.Wait()
				got := admitted[0].Load() + admitted[1].Load()
				if perCaller {
					if a, b := admitted[0].Load(), admitted[1].Load(); a != limit || b != limit {
						t.Fatalf("admitted %d for alice and %d for bob across both routes and instances, want exactly %d each", a, b, limit)
					}
				} else if got != limit {
					t.Fatalf("admitted %d across both routes and instances, want exactly %d", got, limit)
				}
			})
		}
	}
}

// TestSharedInFlight: an in-flight rule that is Shared holds one count of
// slots for every route of the group.
func TestSharedInFlight(t *testing.T) {
	t.Parallel()
	_, c := newMini(t)
	l, err := New(Redis(c), Timeout(testTimeout))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	pa, err := l.Policy(Key(prefix(t)), InFlight(1, time.Minute), Per(Shared))
	if err != nil {
		t.Fatal(err)
	}
	ka := rule.BuildKey(&pa.route.Slots[0].Base, pa.route.Named, rule.Scope{Method: http.MethodGet, Route: "/a"}, nil)
	kb := rule.BuildKey(&pa.route.Slots[0].Base, pa.route.Named, rule.Scope{Method: http.MethodPost, Route: "/b"}, nil)
	if ka != kb || !strings.HasSuffix(ka, "if:{* shared} rule:"+pa.route.Slots[0].Name) {
		t.Fatalf("keys %q and %q: want one, under {* shared}", ka, kb)
	}
}

// TestSharedKeysAndTarget: the key of a Shared rule is the group's
// whatever the route, and the same for a rule declared alone or with
// Rule; Peek and Reset name it with or without a route; a key given to
// Policy.Allow stays the whole identity.
func TestSharedKeysAndTarget(t *testing.T) {
	t.Parallel()
	_, c := newMini(t)
	pfx := prefix(t)
	l, err := New(Redis(c), Timeout(testTimeout), DenyCache(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	alone, err := l.Policy(Key(pfx), Name("grp"), Limit(3), Per(Shared))
	if err != nil {
		t.Fatal(err)
	}
	ruled, err := l.Policy(Rule(Name("grp"), Key(pfx), Limit(3), Per(Shared)))
	if err != nil {
		t.Fatal(err)
	}
	want := alone.route.Rules[0].Prefix + "{* shared} rule:grp"
	for _, k := range []string{
		rule.BuildKey(&alone.route.Rules[0].Base, alone.route.Named, rule.Scope{Method: http.MethodGet, Route: "/a"}, nil),
		rule.BuildKey(&alone.route.Rules[0].Base, alone.route.Named, rule.Scope{Method: rule.UnmatchedMethod, Route: rule.UnmatchedRoute}, nil),
		rule.BuildKey(&ruled.route.Rules[0].Base, ruled.route.Named, rule.Scope{Method: http.MethodPost, Route: "/b"}, nil),
	} {
		if k != want {
			t.Fatalf("key %q, want the group's %q", k, want)
		}
	}
	if k := ruleKey(alone, 0, "x"); strings.Contains(k, "shared") {
		t.Fatalf("Policy.Allow's key %q: want its own, not the group's", k)
	}

	e := gin.New()
	e.GET("/a", alone.route.Serve, ok)
	e.POST("/b", ruled.route.Serve, ok)
	do(e, http.MethodGet, "/a", nil)
	do(e, http.MethodPost, "/b", nil)
	ctx := context.Background()
	for _, tg := range []Target{{}, {Route: "GET /a"}, {Route: "POST /elsewhere"}} {
		d, err := alone.Peek(ctx, tg)
		if err != nil || d.Remaining != 1 {
			t.Fatalf("Peek(%+v): %+v, %v; want 1 remaining of the group's 3", tg, d, err)
		}
	}
	if err := ruled.Reset(ctx, Target{Rule: "grp", Route: "POST /b"}, "test"); err != nil {
		t.Fatal(err)
	}
	if w := do(e, http.MethodGet, "/a", nil); w.Header().Get("X-RateLimit-Remaining") != "2" {
		t.Fatalf("after Reset through the other route: %d %v, want 2 remaining", w.Code, w.Header())
	}
}

// TestSharedConfig: what a Shared rule refuses at start-up, naming why.
func TestSharedConfig(t *testing.T) {
	t.Parallel()
	_, c := newMini(t)
	l, err := New(Redis(c))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	pfx := prefix(t)
	for _, tc := range []struct {
		name string
		opts []Option
		want string // "" for accepted
	}{
		{"Shared twice", []Option{Per(Shared, Shared)}, "Shared is given twice"},
		{"with Method", []Option{Per(Shared, Method)}, "Method counts the whole route"},
		{"rate rules mixed", []Option{Rule(Name("a"), Per(Shared)), Rule(Name("b"))}, `rules "a" and "b": one is Shared`},
		{"in-flight rules mixed", []Option{Rule(Name("a"), InFlight(2, time.Minute)), Rule(Name("b"), InFlight(3, time.Minute), Per(Shared))}, "one is Shared"},
		{"rate and in-flight apart", []Option{Rule(Name("r"), Key(pfx+"r:"), Per(Shared)), Rule(Name("s"), InFlight(2, time.Minute))}, ""},
		{"the group declared", []Option{Key(pfx), Limit(3), Per(Shared, User), UserIdentity(staticUser("u"))}, ""},
		{"the same again", []Option{Key(pfx), Limit(3), Per(Shared, User), UserIdentity(staticUser("u"))}, ""},
		{"another limit", []Option{Key(pfx), Limit(4), Per(Shared, User), UserIdentity(staticUser("u"))}, "the routes of a group must agree"},
		{"another algorithm", []Option{Key(pfx), Limit(3), Algorithm(FixedWindow), Per(Shared, User), UserIdentity(staticUser("u"))}, "the routes of a group must agree"},
		{"other dimensions", []Option{Key(pfx), Limit(3), Per(Shared)}, "the routes of a group must agree"},
		{"another name", []Option{Key(pfx), Name("other"), Limit(4), Per(Shared)}, ""},
		{"not Shared", []Option{Key(pfx), Limit(4)}, ""},
	} {
		_, err := l.Policy(tc.opts...)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v, want accepted", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
}

// staticUser is a UserIdentity that finds the same user for every request.
type staticUser string

func (u staticUser) UserID(*gin.Context) (string, error) { return string(u), nil }

// TestSharedInProcessState: the routes of a group on one Limiter share the
// in-process state of its keys, so that the FailLocal fallback and the
// deny cache of any route continue from what Redis said on any other.
func TestSharedInProcessState(t *testing.T) {
	t.Parallel()
	_, c := newMini(t)
	l, err := New(Redis(c))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	opts := []Option{Key(prefix(t)), Per(Shared), Ban(3, time.Minute, time.Minute), LimitBy(func(*gin.Context) string { return "" }, map[string]int{"pro": 9})}
	a, err := l.Policy(opts...)
	if err != nil {
		t.Fatal(err)
	}
	b, err := l.Policy(opts...)
	if err != nil {
		t.Fatal(err)
	}
	ra, rb := a.route.Rules[0], b.route.Rules[0]
	switch {
	case ra.Local == nil || ra.Deny == nil:
		t.Fatal("the rule has no fallback or deny cache: the test needs both")
	case rb.Local != ra.Local || rb.Deny != ra.Deny:
		t.Error("the second route keeps a fallback or deny cache of its own")
	case rb.Ban.Local != ra.Ban.Local || rb.Ban.Deny != ra.Ban.Deny:
		t.Error("the second route's Ban keeps state of its own")
	case rb.Plans["pro"].Local != ra.Plans["pro"].Local:
		t.Error("the second route's plan keeps state of its own")
	}
	other, err := l.Policy(Key(prefix(t)), Per(Shared))
	if err != nil {
		t.Fatal(err)
	}
	if other.route.Rules[0].Local == ra.Local {
		t.Error("another group shares the first group's state")
	}
}
