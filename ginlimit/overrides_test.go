package ginlimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/ginlimit/internal/rule"
	"github.com/ginlimit/ginlimit/identity"
	"github.com/ginlimit/ginlimit/internal/redistest"
)

// Overrides set with SetLimit, on a real redis-server. Every test on a
// shared server writes the one LimitsKey: each uses its own key prefix, so
// that its overrides are its own, and the test of each quota has a
// server of its own.

// planOf is the test's plan pick: the X-Plan header.
func planOf(c *gin.Context) string { return c.GetHeader("X-Plan") }

// claimAs makes one claim on in as user, in plan (none for ""), and
// returns the status and the decision the observer saw.
func (in *instance) claimAs(user, plan string) (int, Decision) {
	hdr := map[string]string{"X-User": user}
	if plan != "" {
		hdr["X-Plan"] = plan
	}
	w := do(in.e, http.MethodGet, "/claim", hdr)
	return w.Code, in.seen.last().Decision
}

// TestSetLimitPrecedence: the identity's override applies before its
// plan's, which applies before the rule's, which applies before the
// configuration; each decision says which applied, and clearing them goes
// back to the configuration.
func TestSetLimitPrecedence(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	in := newInstance(t, srv.Client(), Key(prefix(t)), Limit(3), Window(time.Minute), Type(User),
		LimitBy(planOf, map[string]int{"vip": 4}))
	ctx := context.Background()
	set := func(tg Target, limit int, window time.Duration) {
		t.Helper()
		if err := in.policy.SetLimit(ctx, tg, limit, window); err != nil {
			t.Fatal(err)
		}
	}
	set(Target{Route: claimRoute}, 5, 0)
	set(Target{Route: claimRoute, Plan: "vip"}, 7, 2*time.Minute)
	set(Target{Route: claimRoute, User: "alice"}, 9, time.Hour)
	for _, tc := range []struct {
		user, plan string
		limit      int
		window     time.Duration
		source     Source
	}{
		{"bob", "", 5, time.Minute, SourceOverride},
		{"carol", "vip", 7, 2 * time.Minute, SourcePlanOverride},
		{"alice", "vip", 9, time.Hour, SourceIdentityOverride},
		{"alice", "", 9, time.Hour, SourceIdentityOverride},
	} {
		code, d := in.claimAs(tc.user, tc.plan)
		if code != http.StatusOK || d.Limit != tc.limit || d.Window != tc.window || d.Source != tc.source {
			t.Errorf("%s (plan %q): %d, limit %d, window %v, source %d; want 200, %d, %v, %d",
				tc.user, tc.plan, code, d.Limit, d.Window, d.Source, tc.limit, tc.window, tc.source)
		}
	}
	// Peek of the rule or a plan alone reads the settings, no count.
	for _, tc := range []struct {
		target Target
		limit  int
		source Source
	}{{Target{Route: claimRoute}, 5, SourceOverride}, {Target{Route: claimRoute, Plan: "vip"}, 7, SourcePlanOverride}} {
		d, err := in.policy.Peek(ctx, tc.target)
		if err != nil || d.Limit != tc.limit || d.Source != tc.source {
			t.Errorf("Peek(%+v): %+v, %v; want limit %d, source %d", tc.target, d, err, tc.limit, tc.source)
		}
	}
	set(Target{Route: claimRoute}, 0, 0)
	set(Target{Route: claimRoute, Plan: "vip"}, 0, 0)
	set(Target{Route: claimRoute, User: "alice"}, 0, 0)
	if code, d := in.claimAs("alice", ""); code != http.StatusOK || d.Limit != 3 || d.Window != time.Minute || d.Source != SourceConfig {
		t.Errorf("alice after clearing every override: %d, %+v; want 200 on the configured 3 per minute", code, d)
	}
	if code, d := in.claimAs("carol", "vip"); code != http.StatusOK || d.Limit != 4 || d.Source != SourceConfig {
		t.Errorf("carol (vip) after clearing: %d, %+v; want 200 on the plan's configured 4", code, d)
	}
}

// TestSetLimitRefusesWhatStartUpRefuses: an override the scripts would
// refuse is refused when it is set, with the very reason start-up gives for
// the same option, and nothing is stored.
func TestSetLimitRefusesWhatStartUpRefuses(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	cases := []struct {
		name   string
		opts   []Option
		limit  int
		window time.Duration
	}{
		{"sliding log over 100,000", nil, 200_000, 0},
		{"sliding log window over 24 days", nil, 10, 25 * 24 * time.Hour},
		{"negative limit", nil, -1, 0},
		{"limit over 1e9", []Option{Algorithm(FixedWindow)}, 2e9, 0},
		{"window under 1 ms", nil, 10, 500 * time.Microsecond},
		{"sliding counter window not in sub-windows", []Option{Algorithm(SlidingCounter)}, 10, time.Second + time.Microsecond},
		{"token bucket burst × window over 2^53", []Option{Algorithm(TokenBucket), Burst(1e6)}, 10, 24 * time.Hour * 365},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			opts := append([]Option{Key(prefix(t)), Limit(3), Window(time.Minute), Type(User)}, tc.opts...)
			in := newInstance(t, c, opts...)
			err := in.policy.SetLimit(ctx, Target{Route: claimRoute}, tc.limit, tc.window)
			if !errors.Is(err, ErrBadLimit) {
				t.Fatalf("SetLimit(%d, %v): %v, want ErrBadLimit", tc.limit, tc.window, err)
			}
			// Start-up's reason for the same settings.
			startOpts := append(opts, Limit(tc.limit))
			if tc.window != 0 {
				startOpts = append(startOpts, Window(tc.window))
			}
			l, lerr := New(Redis(c), UserIdentity(identity.FromContext("uid")))
			if lerr != nil {
				t.Fatal(lerr)
			}
			defer l.Close()
			_, startErr := l.Policy(startOpts...)
			if startErr == nil {
				t.Fatal("start-up accepts these settings: the case proves nothing")
			}
			if !strings.Contains(err.Error(), startErr.Error()) {
				t.Errorf("SetLimit's reason %q does not give start-up's %q", err, startErr)
			}
			if d, err := in.policy.Peek(ctx, Target{Route: claimRoute}); err != nil || d.Limit != 3 || d.Source != SourceConfig {
				t.Errorf("after the refusal: %+v, %v; want the configured 3", d, err)
			}
		})
	}
	in := newInstance(t, c, Key(prefix(t)), Type(User), Rule(Name("a")), Rule(Name("b")))
	for _, tg := range []Target{{Rule: "c"}, {Rule: "a", Plan: "vip"}, {Rule: "a", User: "x"}, {Rule: "a", Plan: "vip", Route: claimRoute, User: "x"}} {
		if err := in.policy.SetLimit(ctx, tg, 5, 0); !errors.Is(err, ErrBadTarget) {
			t.Errorf("SetLimit(%+v): %v, want ErrBadTarget", tg, err)
		}
	}
}

// TestSetLimitIsSeenByAnotherInstance: an override set on one instance
// holds on another, with its own Limiter and client, by the first poll
// that starts after it was stored: of the polls counted from just before
// SetLimit, one may have run while SetLimit had not stored it yet and one
// may have been under way as it did, so the third at the latest applies
// it; polls are OverridePoll apart, each bounded by overridePollTimeout.
func TestSetLimitIsSeenByAnotherInstance(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	opts := []Option{Key(prefix(t)), Limit(3), Window(time.Minute), Type(User)}
	a, b := newInstance(t, srv.Client(), opts...), newInstance(t, srv.Client(), opts...)
	ctx := context.Background()
	exhaust(t, b, "alice")

	before := b.policy.route.Fleet.Polls()
	set := time.Now()
	if err := a.policy.SetLimit(ctx, Target{Route: claimRoute, User: "alice"}, 10, 0); err != nil {
		t.Fatal(err)
	}
	if d, err := a.policy.Peek(ctx, Target{Route: claimRoute, User: "alice"}); err != nil || d.Limit != 10 || d.Remaining != 7 {
		t.Fatalf("A, right after SetLimit: %+v, %v; want 7 of 10 remaining", d, err)
	}
	var polls int64
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		polls = b.policy.route.Fleet.Polls() - before
		if d, err := b.policy.Peek(ctx, Target{Route: claimRoute, User: "alice"}); err == nil && d.Limit == 10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("B did not apply the override within 30 s")
		}
	}
	t.Logf("B applied the override %v after it was set, in %d polls", time.Since(set).Round(time.Millisecond), polls)
	if polls > 3 {
		t.Errorf("B applied the override after %d polls, want at most 3", polls)
	}
	// The count went on: B admits 7 more of alice's claims, not 10.
	for i := range 7 {
		if code, d := b.claimAs("alice", ""); code != http.StatusOK || d.Source != SourceIdentityOverride {
			t.Fatalf("B, claim %d under the override: %d, %+v", i+1, code, d)
		}
	}
	if code, _ := b.claimAs("alice", ""); code != http.StatusTooManyRequests {
		t.Fatalf("B, claim 8 under the override: %d, want 429", code)
	}
	if code, d := b.claimAs("bob", ""); code != http.StatusOK || d.Limit != 3 {
		t.Fatalf("bob, whom no override names: %d, %+v; want 200 of 3", code, d)
	}
}

// TestSetLimitCountsAcrossAChange: every algorithm goes on with the count
// when its limit changes (docs/operations.md), the token bucket from its
// level; and Reset clears it.
func TestSetLimitCountsAcrossAChange(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client()
	for _, tc := range []struct {
		alg   AlgorithmKind
		after int // remaining after one more claim under a limit of 5
	}{
		{SlidingLog, 1}, {SlidingCounter, 1}, {FixedWindow, 1}, {TokenBucket, 1},
	} {
		t.Run(string(tc.alg), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			in := newInstance(t, c, Key(prefix(t)), Algorithm(tc.alg), Limit(3), Window(time.Hour), Type(User))
			for range 3 {
				if code, _ := in.claimAs("alice", ""); code != http.StatusOK {
					t.Fatalf("claim under the configured limit: %d", code)
				}
			}
			target := Target{Route: claimRoute, User: "alice"}
			if err := in.policy.SetLimit(ctx, target, 5, 0); err != nil {
				t.Fatal(err)
			}
			code, d := in.claimAs("alice", "")
			if code != http.StatusOK || d.Remaining != tc.after || d.Limit != 5 {
				t.Fatalf("claim 4, limit raised to 5: %d, remaining %d of %d; want 200, %d of 5", code, d.Remaining, d.Limit, tc.after)
			}
			if err := in.policy.Reset(ctx, target, "test"); err != nil {
				t.Fatal(err)
			}
			if d, err := in.policy.Peek(ctx, target); err != nil || d.Remaining != 5 {
				t.Fatalf("Peek after Reset: %+v, %v; want 5 of 5 remaining", d, err)
			}
		})
	}
}

// TestOverrideKeysAreBuiltAsCounts: an identity's override is stored
// under its count's key past the algorithm's tag, with the identity hashed
// when the rule hashes identities: no user id in LimitsKey.
func TestOverrideKeysAreBuiltAsCounts(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	pre := prefix(t)
	in := newInstance(t, c, Key(pre), Limit(3), Type(User), HashIdentities([]byte("0123456789abcdef0123456789abcdef")))
	const user = "alice@example.com"
	if err := in.policy.SetLimit(ctx, Target{Route: claimRoute, User: user}, 10, 0); err != nil {
		t.Fatal(err)
	}
	fields, err := c.HKeys(ctx, LimitsKey).Result()
	if err != nil {
		t.Fatal(err)
	}
	var mine []string
	for _, f := range fields {
		if strings.HasPrefix(f, pre) {
			mine = append(mine, f)
		}
	}
	r := in.policy.route.Rules[0]
	var w rule.Who
	if err := r.TargetWho(&w, Target{User: user}.forRule()); err != nil {
		t.Fatal(err)
	}
	key := rule.BuildKey(&r.Base, false, rule.Scope{Method: "GET", Route: "/claim"}, &w)
	want := pre + key[len(r.Prefix):]
	if len(mine) != 1 || mine[0] != want {
		t.Fatalf("the override's fields: %q, want [%q]", mine, want)
	}
	if strings.Contains(mine[0], "alice") {
		t.Fatalf("the field %q holds the user id", mine[0])
	}
}

// TestMaxOverrides: past MaxIdentityOverrides identities' overrides,
// SetLimit refuses a new one, naming the bound; it still changes and
// clears those there are.
func TestMaxOverrides(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	pre := prefix(t)
	in := newInstance(t, c, Key(pre), Limit(3), Type(User))
	if err := in.policy.SetLimit(ctx, Target{Route: claimRoute, User: "kept"}, 5, 0); err != nil {
		t.Fatal(err)
	}
	var fill []any
	for i := range MaxIdentityOverrides - 1 {
		fill = append(fill, fmt.Sprintf("other:{GET /x user:%d}", i), "5 0")
	}
	if err := c.HSet(ctx, LimitsKey, fill...).Err(); err != nil {
		t.Fatal(err)
	}
	err := in.policy.SetLimit(ctx, Target{Route: claimRoute, User: "new"}, 5, 0)
	if !errors.Is(err, ErrBadLimit) || !strings.Contains(err.Error(), "MaxIdentityOverrides (10000)") {
		t.Fatalf("SetLimit past MaxIdentityOverrides: %v, want ErrBadLimit naming MaxIdentityOverrides", err)
	}
	for _, limit := range []int{6, 0} {
		if err := in.policy.SetLimit(ctx, Target{Route: claimRoute, User: "kept"}, limit, 0); err != nil {
			t.Fatalf("SetLimit(%d) of an override there is, at MaxIdentityOverrides: %v", limit, err)
		}
	}
	if err := in.policy.SetLimit(ctx, Target{Route: claimRoute, User: "new"}, 5, 0); err != nil {
		t.Fatalf("SetLimit once one was cleared: %v", err)
	}
}

// TestOverridesLoadNoScripts: however many values are set, overridden
// rules run the several-rule script, which every engine loads at start-up:
// Redis's script cache does not grow with them.
func TestOverridesLoadNoScripts(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	in := newInstance(t, c, Key(prefix(t)), Limit(3), Type(User))
	// The rule's own script, SetLimit's and the poll's are loaded once.
	in.claimAs("warm", "")
	if err := in.policy.SetLimit(ctx, Target{Route: claimRoute, User: "warm"}, 5, 0); err != nil {
		t.Fatal(err)
	}
	in.claimAs("warm", "")
	before := cachedScripts(t, c)
	for i := range 20 {
		user := fmt.Sprintf("u%d", i)
		if err := in.policy.SetLimit(ctx, Target{Route: claimRoute, User: user}, 10+i, time.Duration(i+1)*time.Minute); err != nil {
			t.Fatal(err)
		}
		if code, d := in.claimAs(user, ""); code != http.StatusOK || d.Limit != 10+i {
			t.Fatalf("%s: %d, %+v", user, code, d)
		}
	}
	if after := cachedScripts(t, c); after > before {
		t.Fatalf("Redis caches %d scripts after 20 overrides, %d before", after, before)
	}
}

// cachedScripts is Redis's number_of_cached_scripts.
func cachedScripts(t *testing.T, c *redis.Client) int {
	t.Helper()
	info, err := c.Info(context.Background(), "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "number_of_cached_scripts:"); ok {
			var n int
			if _, err := fmt.Sscan(v, &n); err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("INFO memory has no number_of_cached_scripts")
	return 0
}

// TestSetLimitOnAllow: a policy used through Allow takes an override per
// key (the identity there) and for the rule.
func TestSetLimitOnAllow(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	p := mustPolicy(t, Redis(srv.Client()), Key(prefix(t)), Limit(2), Window(time.Minute))
	if err := p.SetLimit(ctx, Target{Key: "tenant-a"}, 4, 0); err != nil {
		t.Fatal(err)
	}
	if err := p.SetLimit(ctx, Target{Route: "Policy.Allow"}, 3, 0); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]int{"tenant-a": 4, "tenant-b": 3} {
		admitted := 0
		for range 6 {
			d, err := p.Allow(ctx, key, 1)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				admitted++
			}
		}
		if admitted != want {
			t.Errorf("%s: %d admitted, want %d", key, admitted, want)
		}
	}
}

// TestOverrideHeaders: the headers of a decision under an override carry
// its limit and window.
func TestOverrideHeaders(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	in := newInstance(t, srv.Client(), Key(prefix(t)), Limit(3), Window(time.Minute), Type(User))
	if err := in.policy.SetLimit(context.Background(), Target{Route: claimRoute}, 5, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	w := do(in.e, http.MethodGet, "/claim", map[string]string{"X-User": "alice"})
	name := in.policy.route.Rules[0].QuotedName
	if got := w.Header().Get("RateLimit-Policy"); got != name+";q=5;w=120" {
		t.Errorf("RateLimit-Policy %q, want %s;q=5;w=120", got, name)
	}
	if got := w.Header().Get("X-RateLimit-Limit"); got != "5" {
		t.Errorf("X-RateLimit-Limit %q, want 5", got)
	}
}

// TestPackageLevelRouteFollowsOverrides: a route of the package-level
// RateLimit without a Limiter has no background poll; its requests poll,
// at most every OverridePoll, so it applies an override set through
// another Limiter's Policy.
func TestPackageLevelRouteFollowsOverrides(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client()
	opts := []Option{Redis(c), Key(prefix(t)), Limit(3), Window(time.Minute)}
	e := gin.New()
	e.GET("/x", testLimit(opts...), ok)
	if w := do(e, http.MethodGet, "/x", nil); w.Header().Get("X-RateLimit-Limit") != "3" {
		t.Fatalf("before the override: %d, limit %q", w.Code, w.Header().Get("X-RateLimit-Limit"))
	}
	admin := mustPolicy(t, opts...)
	if err := admin.SetLimit(context.Background(), Target{Route: "GET /x"}, 50, 0); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if w := do(e, http.MethodGet, "/x", nil); w.Header().Get("X-RateLimit-Limit") == "50" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the package-level route did not apply the override within 30 s")
		}
	}
}

// TestSetLimitOnAClusterWithRules: on a Redis Cluster, the overrides and
// their version share a slot, so SetLimit and the poll work there; on a
// route with Rules an override names its rule, and leaves the other alone.
func TestSetLimitOnAClusterWithRules(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	opts := []Option{Key(prefix(t)), Window(time.Minute), Type(User),
		Rule(Name("burst"), Limit(3)), Rule(Name("hourly"), Limit(100), Window(time.Hour))}
	a, b := newInstance(t, cl.Client(), opts...), newInstance(t, cl.Client(), opts...)
	ctx := context.Background()
	if err := a.policy.SetLimit(ctx, Target{Rule: "burst", Route: claimRoute, User: "alice"}, 6, 0); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if d, err := b.policy.Peek(ctx, Target{Rule: "burst", Route: claimRoute, User: "alice"}); err == nil && d.Limit == 6 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("B did not apply the override within 30 s")
		}
	}
	admitted := 0
	for range 8 {
		if code, d := b.claimAs("alice", ""); code == http.StatusOK {
			admitted++
			if len(d.Rules) != 2 || d.Rules[0].Limit != 6 || d.Rules[0].Source != SourceIdentityOverride || d.Rules[1].Limit != 100 || d.Rules[1].Source != SourceConfig {
				t.Fatalf("the rules' decisions: %+v", d.Rules)
			}
		}
	}
	if admitted != 6 {
		t.Fatalf("%d of alice's claims admitted, want 6", admitted)
	}
	if d, err := b.policy.Peek(ctx, Target{Rule: "hourly", Route: claimRoute}); err != nil || d.Limit != 100 || d.Source != SourceConfig {
		t.Fatalf("the hourly rule: %+v, %v", d, err)
	}
}

// TestSetLimitOnASharedRule: an identity's override of a Shared rule holds
// on every route of the group, on the group's one count.
func TestSetLimitOnASharedRule(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	l, err := New(Redis(srv.Client()), Timeout(testTimeout))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	opts := []Option{Key(prefix(t)), Window(time.Minute), Limit(2), Per(Shared, ByHeader("X-API-Key"))}
	p, err := l.Policy(opts...)
	if err != nil {
		t.Fatal(err)
	}
	e := gin.New()
	api := e.Group("/api", p.route.Serve)
	api.GET("/orders", ok)
	api.POST("/orders", ok)
	if err := p.SetLimit(context.Background(), Target{Route: "GET /api/orders", Values: map[string]string{"X-Api-Key": "k1"}}, 4, 0); err != nil {
		t.Fatal(err)
	}
	admitted := map[string]int{}
	for _, key := range []string{"k1", "k2"} {
		for i := range 6 {
			method := []string{http.MethodGet, http.MethodPost}[i%2]
			if w := do(e, method, "/api/orders", map[string]string{"X-API-Key": key}); w.Code == http.StatusOK {
				admitted[key]++
			}
		}
	}
	if admitted["k1"] != 4 || admitted["k2"] != 2 {
		t.Fatalf("admitted across the group's routes: %v, want k1 4 (its override), k2 2", admitted)
	}
}
