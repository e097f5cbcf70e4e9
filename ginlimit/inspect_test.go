package ginlimit

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/identity"
	"github.com/ginlimit/ginlimit/internal/redistest"
)

// recorder is an Observer that keeps every event.
type recorder struct {
	mu     sync.Mutex
	events []Event
}

func (r *recorder) Observe(_ context.Context, e Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) last() Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.events) == 0 {
		return Event{}
	}
	return r.events[len(r.events)-1]
}

// instance is one application instance: its limiter on a client of its
// own, one route GET /claim limited by policy, and what it observed.
type instance struct {
	e      *gin.Engine
	policy *Policy
	seen   *recorder
}

// claimRoute is the route of the instances, as a Target names it.
const claimRoute = "GET /claim"

// newInstance builds an instance on client c with the route's options.
// The user is the X-User header.
func newInstance(t *testing.T, c redis.Scripter, opts ...Option) *instance {
	t.Helper()
	seen := &recorder{}
	l, err := New(Redis(c), Timeout(5*time.Second), UserIdentity(identity.FromContext("uid")), Observe(seen.Observe))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	p, err := l.Policy(opts...)
	if err != nil {
		t.Fatal(err)
	}
	e := gin.New()
	setUser := func(c *gin.Context) {
		if u := c.GetHeader("X-User"); u != "" {
			c.Set("uid", u)
		}
	}
	e.GET("/claim", setUser, p.route.Serve, ok)
	return &instance{e: e, policy: p, seen: seen}
}

// waitSubscribed waits, up to 30 s, until the reset subscription of p's
// backend is up. Until then its deny cache learns nothing (so a refusal
// comes from Redis, not the cache) and a Reset cannot count the
// acknowledgements: New waits for the subscription only up to a second,
// which a loaded machine can outlast.
func waitSubscribed(t *testing.T, p *Policy) {
	t.Helper()
	h := p.route.Hub
	if h == nil {
		t.Fatal("the policy's backend has no reset subscription")
	}
	for deadline := time.Now().Add(30 * time.Second); !h.Live(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the reset subscription was not up within 30 s")
		}
	}
}

// claim sends one claim by user and returns the status and the decision.
func (in *instance) claim(user string) (int, Decision) {
	w := do(in.e, http.MethodGet, "/claim", map[string]string{"X-User": user})
	return w.Code, in.seen.last().Decision
}

// inspectCases are the routes the reset tests run on: each algorithm on a
// User rule of 3 per minute, and a route with two rules (a User rule of 3
// and a Method rule of 100).
var inspectCases = []struct {
	name   string
	rule   string // the Target.Rule
	opts   func(pre string) []Option
	extras int // how many admissions the route's other rules allow beyond the user's 3
}{
	{"sliding log", "", func(pre string) []Option {
		return []Option{Key(pre), Window(time.Minute), Limit(3), Type(User)}
	}, 0},
	{"sliding counter", "", func(pre string) []Option {
		return []Option{Key(pre), Window(time.Minute), Limit(3), Type(User), Algorithm(SlidingCounter)}
	}, 0},
	{"fixed window", "", func(pre string) []Option {
		return []Option{Key(pre), Window(time.Hour), Limit(3), Type(User), Algorithm(FixedWindow)}
	}, 0},
	{"token bucket", "", func(pre string) []Option {
		return []Option{Key(pre), Window(time.Hour), Limit(3), Type(User), Algorithm(TokenBucket)}
	}, 0},
	{"two rules", "per-user", func(pre string) []Option {
		return []Option{Key(pre),
			Rule(Name("per-user"), Window(time.Minute), Limit(3), Type(User)),
			Rule(Name("route"), Window(time.Minute), Limit(100), Type(Method), Algorithm(FixedWindow)),
		}
	}, 0},
}

// exhaust makes user use up the claim rule on in: 3 admitted, then refused.
func exhaust(t *testing.T, in *instance, user string) {
	t.Helper()
	for i := range 3 {
		if code, _ := in.claim(user); code != http.StatusOK {
			t.Fatalf("claim %d: %d, want 200", i+1, code)
		}
	}
	if code, _ := in.claim(user); code != http.StatusTooManyRequests {
		t.Fatalf("claim 4: %d, want 429", code)
	}
}

// TestResetIsSeenAtOnceByEveryInstance is the scenario on a real
// redis-server, for every algorithm and a two-rule route: alice exhausts
// her claims on instance A; instance B refuses her too, from its deny cache;
// a Reset through A; her next claim on B, sent as soon as Reset returns, is
// admitted; Peek on either instance shows the new count.
//
// Nothing here waits on time: both instances' reset subscriptions are up
// before the claims (B's deny cache learns only then, and A's Reset counts
// acknowledgements only then), and MaxStaleness is a minute, so neither
// B's cached refusal nor A's wait for B's acknowledgement can lapse on a
// loaded machine. Each case has a redis-server of its own: a hub that sees
// a reset, of any key, keeps nothing its calls then in flight proved, so
// another case's Reset on a shared server could keep B's refusal out of
// its cache.
func TestResetIsSeenAtOnceByEveryInstance(t *testing.T) {
	t.Parallel()
	for _, tc := range inspectCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			opts := append(tc.opts(prefix(t)), maxStaleness(time.Minute))
			a, b := newInstance(t, srv.Client(), opts...), newInstance(t, srv.Client(), opts...)
			waitSubscribed(t, a.policy)
			waitSubscribed(t, b.policy)
			ctx := context.Background()
			target := Target{Route: claimRoute, Rule: tc.rule, User: "alice"}

			exhaust(t, a, "alice")
			if code, _ := b.claim("alice"); code != http.StatusTooManyRequests {
				t.Fatalf("B, first claim after A used them up: %d, want 429", code)
			}
			// B now answers alice from its cache, while that lasts.
			code, d := b.claim("alice")
			if code != http.StatusTooManyRequests {
				t.Fatalf("B, second claim: %d, want 429", code)
			}
			if !d.Cached {
				t.Fatalf("B's second refusal came from Redis, not its deny cache: the test proves nothing")
			}
			for _, in := range []*instance{a, b} {
				pd, err := in.policy.Peek(ctx, target)
				if err != nil {
					t.Fatal(err)
				}
				if pd.Allowed || pd.Remaining != 0 || pd.Limit != 3 || pd.RetryAfter <= 0 || pd.Reset <= 0 {
					t.Fatalf("Peek before the reset: %+v, want not allowed, 0 of 3 remaining, a retry", pd)
				}
			}

			if err := a.policy.Reset(ctx, target, "test"); err != nil {
				t.Fatal(err)
			}
			code, d = b.claim("alice")
			if code != http.StatusOK {
				t.Fatalf("B, right after the reset on A: %d (cached %v), want 200", code, d.Cached)
			}
			for _, in := range []*instance{a, b} {
				pd, err := in.policy.Peek(ctx, target)
				if err != nil {
					t.Fatal(err)
				}
				if !pd.Allowed || pd.Remaining != 2 || pd.Limit != 3 || pd.RetryAfter != 0 {
					t.Fatalf("Peek after the reset and one claim: %+v, want allowed with 2 of 3 remaining", pd)
				}
			}
			// Bob was never touched.
			if code, _ := a.claim("bob"); code != http.StatusOK {
				t.Fatalf("bob: %d, want 200", code)
			}
			// The reset was observed, with who asked and no identity.
			var resets int
			for _, e := range a.seen.events {
				if e.Outcome == OutcomeReset {
					resets++
					if e.By != "test" || e.Route != claimRoute || e.Rule == "" {
						t.Errorf("reset event %+v: want By test, Route %q and the rule", e, claimRoute)
					}
				}
			}
			if resets != 1 {
				t.Errorf("A observed %d resets, want 1", resets)
			}
		})
	}
}

// TestChangesBehindTheBackAreSeenWithinTheStalenessBound: a FLUSHALL by
// hand, which no instance hears of, is seen by both instances once the
// staleness bound has passed: each admits again. Before that, an instance
// may still answer from its cache (checked only while the bound certainly
// has not passed, so that the test also proves the cache was in use).
//
// The times are taken around the calls, on the safe side of each: a cached
// answer lasts the bound from when its call was sent, which is after
// before and before after.
func TestChangesBehindTheBackAreSeenWithinTheStalenessBound(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const bound = 2 * time.Second
	opts := []Option{Key(prefix(t)), Window(time.Hour), Limit(3), Type(User), maxStaleness(bound)}
	a, b := newInstance(t, srv.Client(), opts...), newInstance(t, srv.Client(), opts...)
	waitSubscribed(t, a.policy) // the deny caches learn only then
	waitSubscribed(t, b.policy)
	exhaust(t, a, "alice")
	before := time.Now()
	if code, _ := b.claim("alice"); code != http.StatusTooManyRequests {
		t.Fatalf("B: %d, want 429", code)
	}
	after := time.Now()
	if err := srv.Client().FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	code, d := b.claim("alice")
	if time.Since(before) < bound && (code != http.StatusTooManyRequests || !d.Cached) {
		t.Fatalf("B right after FLUSHALL: %d, cached %v: want the cached refusal (the bound has not passed)", code, d.Cached)
	}
	time.Sleep(time.Until(after.Add(bound)))
	for name, in := range map[string]*instance{"A": a, "B": b} {
		if code, d := in.claim("alice"); code != http.StatusOK {
			t.Fatalf("%s, the staleness bound after FLUSHALL: %d (cached %v), want 200", name, code, d.Cached)
		}
	}
}

// TestPeekCountsNothing: any number of Peeks leave the whole limit to
// requests.
func TestPeekCountsNothing(t *testing.T) {
	t.Parallel()
	_, c := newMini(t)
	in := newInstance(t, c, Key(prefix(t)), Window(time.Minute), Limit(3), Type(User))
	for range 10 {
		d, err := in.policy.Peek(context.Background(), Target{Route: claimRoute, User: "alice"})
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed || d.Remaining != 3 || d.Limit != 3 {
			t.Fatalf("Peek on a fresh count: %+v, want allowed with 3 of 3", d)
		}
	}
	exhaust(t, in, "alice")
}

// TestTargetsNameKeysAsRequestsDo: for every kind of rule and identity, a
// Reset through a Target clears exactly the key the request used, so the
// request is admitted again, and Peek reads it.
func TestTargetsNameKeysAsRequestsDo(t *testing.T) {
	t.Parallel()
	m, c := newMini(t)
	secret := []byte("0123456789abcdef0123456789abcdef")
	cases := []struct {
		name   string
		opts   []Option
		hdr    map[string]string
		target Target
	}{
		{"user", []Option{Type(User)}, map[string]string{"X-User": "a l/i{ce}"}, Target{User: "a l/i{ce}"}},
		{"hashed user", []Option{Type(User), HashIdentities(secret)}, map[string]string{"X-User": "alice"}, Target{User: "alice"}},
		{"ipv4", []Option{Type(IP)}, map[string]string{"RemoteAddr": "192.0.2.7:1234"}, Target{IP: netip.MustParseAddr("192.0.2.7")}},
		{"ipv6 bucket", []Option{Type(IP)}, map[string]string{"RemoteAddr": "[2001:db8::1]:1234"}, Target{IP: netip.MustParseAddr("2001:db8::ffff")}},
		{"hashed ip", []Option{Type(IP), HashIdentities(secret)}, map[string]string{"RemoteAddr": "192.0.2.7:1234"}, Target{IP: netip.MustParseAddr("192.0.2.7")}},
		{"anonymous", []Option{Type(UserOrIP)}, map[string]string{"RemoteAddr": "192.0.2.9:1"}, Target{IP: netip.MustParseAddr("192.0.2.9")}},
		{"method", []Option{Type(Method)}, nil, Target{}},
		{"named rule", []Option{Rule(Name("n"), Type(User), Window(time.Minute), Limit(2))}, map[string]string{"X-User": "alice"}, Target{Rule: "n", User: "alice"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in := newInstance(t, c, append([]Option{Key(prefix(t)), Window(time.Minute), Limit(2)}, tc.opts...)...)
			send := func() int { return do(in.e, http.MethodGet, "/claim", tc.hdr).Code }
			for i := 0; send() == http.StatusOK; i++ {
				if i == 10 {
					t.Fatal("never refused")
				}
			}
			tc.target.Route = claimRoute
			d, err := in.policy.Peek(context.Background(), tc.target)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed || d.Remaining != 0 {
				t.Fatalf("Peek after the limit was reached: %+v, want refused: the Target names another key than the request's (keys %v)", d, m.Keys())
			}
			if err := in.policy.Reset(context.Background(), tc.target, "test"); err != nil {
				t.Fatal(err)
			}
			if code := send(); code != http.StatusOK {
				t.Fatalf("after Reset: %d, want 200", code)
			}
		})
	}
}

// TestBadTargets: a Target that names no count of the policy is refused with
// ErrBadTarget, touches no key, and its error does not repeat the identity.
func TestBadTargets(t *testing.T) {
	t.Parallel()
	m, c := newMini(t)
	const secretUser = "secret-user-7"
	one := newInstance(t, c, Key(prefix(t)), Type(User))
	two := newInstance(t, c, Key(prefix(t)),
		Rule(Name("a"), Type(User)), Rule(Name("b"), Type(IP)))
	ip := netip.MustParseAddr("192.0.2.1")
	cases := []struct {
		name string
		p    *Policy
		t    Target
	}{
		{"no route or key", one.policy, Target{User: secretUser}},
		{"route and key", one.policy, Target{Route: claimRoute, Key: "k", User: secretUser}},
		{"route without method", one.policy, Target{Route: "/claim", User: secretUser}},
		{"route without slash", one.policy, Target{Route: "GET claim", User: secretUser}},
		{"route with control bytes", one.policy, Target{Route: "GET /cl\naim", User: secretUser}},
		{"route too long", one.policy, Target{Route: "GET /" + strings.Repeat("x", 2000), User: secretUser}},
		{"unknown rule", one.policy, Target{Route: claimRoute, Rule: "nope", User: secretUser}},
		{"no rule on two", two.policy, Target{Route: claimRoute, User: secretUser}},
		{"user rule with ip", one.policy, Target{Route: claimRoute, User: secretUser, IP: ip}},
		{"ip rule with user", two.policy, Target{Route: claimRoute, Rule: "b", User: secretUser}},
		{"key with user", one.policy, Target{Key: "k", User: secretUser}},
		{"unknown tier", one.policy, Target{Route: claimRoute, User: secretUser, Plan: "gold"}},
	}
	for _, tc := range cases {
		_, err := tc.p.Peek(context.Background(), tc.t)
		rerr := tc.p.Reset(context.Background(), tc.t, "test")
		for _, err := range []error{err, rerr} {
			if !errors.Is(err, ErrBadTarget) {
				t.Errorf("%s: %v, want ErrBadTarget", tc.name, err)
			} else if strings.Contains(err.Error(), secretUser) {
				t.Errorf("%s: the error %q repeats the identity", tc.name, err)
			}
		}
	}
	// A route without the identity its rule counts per names no count to
	// Reset; to Peek, it asks for the rule's settings on that route.
	if err := one.policy.Reset(context.Background(), Target{Route: claimRoute}, "test"); !errors.Is(err, ErrBadTarget) {
		t.Errorf("Reset of a user rule without user: %v, want ErrBadTarget", err)
	}
	if d, err := one.policy.Peek(context.Background(), Target{Route: claimRoute}); err != nil || d.Source != SourceConfig || d.Remaining != 0 {
		t.Errorf("Peek of a user rule's route without user: %+v, %v; want its settings alone", d, err)
	}
	if keys := ruleKeys(m); len(keys) != 0 {
		t.Errorf("bad targets touched keys %v", keys)
	}
}

// TestResetClearsTheFallbackBuckets: a FailLocal bucket used up during an
// outage is full again after a Reset of its count.
func TestResetClearsTheFallbackBuckets(t *testing.T) {
	t.Parallel()
	_, c := newMini(t)
	in := newInstance(t, c, Key(prefix(t)), Window(time.Minute), Limit(3), Type(User))
	r := in.policy.route.Rules[0]
	_, keys, err := in.policy.target(Target{Route: claimRoute, User: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if _, _, ok := r.Local.Take(keys[0], now, 3); !ok {
		t.Fatal("the fallback bucket does not hold 3")
	}
	if _, _, ok := r.Local.Take(keys[0], now, 1); ok {
		t.Fatal("the fallback bucket holds more than 3")
	}
	if err := in.policy.Reset(context.Background(), Target{Route: claimRoute, User: "alice"}, "test"); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := r.Local.Take(keys[0], now, 3); !ok {
		t.Fatal("after Reset the fallback bucket is still used up")
	}
}

// TestResetClearsTheZSETLogsKey: the sliding log's script counts the
// admissions that the version before kept in a sorted set, under the key
// without the sl2: tag (zsetKey), so Reset deletes that key too: an
// identity whose older key is full is refused, Peek says so, and after
// Reset it is admitted up to the limit again.
func TestResetClearsTheZSETLogsKey(t *testing.T) {
	t.Parallel()
	m, c := newMini(t)
	pre := prefix(t)
	in := newInstance(t, c, Key(pre), Window(time.Minute), Limit(3), Type(User))
	ctx := context.Background()
	target := Target{Route: claimRoute, User: "alice"}
	alice := map[string]string{"X-User": "alice"}
	oldKey := pre + "{GET /claim user:alice}"
	// Three admissions of the oldest format: one unit per member, named
	// after its time in µs.
	for i := range int64(3) {
		at := t0.UnixMicro() - i*time.Second.Microseconds()
		if err := c.ZAdd(ctx, oldKey, redis.Z{Score: float64(at), Member: strconv.FormatInt(at, 10)}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if w := do(in.e, http.MethodGet, "/claim", alice); w.Code != http.StatusTooManyRequests {
		t.Fatalf("with the older key full: %d, want 429", w.Code)
	}
	if d, err := in.policy.Peek(ctx, target); err != nil || d.Allowed || d.Remaining != 0 {
		t.Fatalf("Peek with the older key full: %+v, %v; want refused, 0 remaining", d, err)
	}
	if err := in.policy.Reset(ctx, target, "test"); err != nil {
		t.Fatal(err)
	}
	if m.Exists(oldKey) {
		t.Fatalf("Reset left the older key %q", oldKey)
	}
	for i, want := range []int{200, 200, 200, 429} {
		if w := do(in.e, http.MethodGet, "/claim", alice); w.Code != want {
			t.Fatalf("request %d after Reset: %d, want %d", i, w.Code, want)
		}
	}
}

// TestResetWaitsNoLongerThanTheBound: a subscriber that never acknowledges
// (here a bare SUBSCRIBE) does not hold Reset past MaxStaleness; Reset
// still succeeds, and the log says some instance did not answer, with no
// identity in it.
func TestResetWaitsNoLongerThanTheBound(t *testing.T) {
	t.Parallel()
	_, c := newMini(t)
	mute := c.Subscribe(context.Background(), ResetChannel)
	t.Cleanup(func() { _ = mute.Close() })
	if _, err := mute.Receive(context.Background()); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	l, err := New(Timeout(testTimeout), Redis(c), UserIdentity(identity.FromContext("uid")), maxStaleness(100*time.Millisecond),
		withLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	p, err := l.Policy(Key(prefix(t)), Type(User))
	if err != nil {
		t.Fatal(err)
	}
	// Until this instance's own subscription is live, Reset cannot count
	// acknowledgements and only waits out the bound (announce): on a
	// loaded machine that can take a while.
	for deadline := time.Now().Add(30 * time.Second); !p.route.Hub.Live(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the reset subscription never went live")
		}
	}
	if err := p.Reset(context.Background(), Target{Route: claimRoute, User: "alice"}, "test"); err != nil {
		t.Fatal(err)
	}
	if out := logs.String(); !strings.Contains(out, "not acknowledged") || strings.Contains(out, "alice") {
		t.Fatalf("log %q: want the unacknowledged reset, without the user", out)
	}
}

// TestResetOnACluster runs the two-instance scenario on a Redis Cluster:
// the keys live on their slot's master, the reset's announcement on the
// channel's, and every instance still hears of it before Reset returns.
func TestResetOnACluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	// As in TestResetIsSeenAtOnceByEveryInstance: subscribed first, and a
	// staleness bound no loaded machine outlasts.
	opts := []Option{Key(prefix(t)), Window(time.Minute), Limit(3), Type(User), maxStaleness(time.Minute)}
	a, b := newInstance(t, cl.Client(), opts...), newInstance(t, cl.Client(), opts...)
	waitSubscribed(t, a.policy)
	waitSubscribed(t, b.policy)
	for _, user := range []string{"alice", "bob", "carol", "dave"} { // several slots
		exhaust(t, a, user)
		for i := range 2 {
			code, d := b.claim(user)
			if code != http.StatusTooManyRequests || i == 1 && !d.Cached {
				t.Fatalf("%s on B, claim %d: %d (cached %v), want 429, the second from B's deny cache", user, i+1, code, d.Cached)
			}
		}
		target := Target{Route: claimRoute, User: user}
		if err := a.policy.Reset(context.Background(), target, "test"); err != nil {
			t.Fatal(err)
		}
		if code, d := b.claim(user); code != http.StatusOK {
			t.Fatalf("%s on B right after the reset: %d (cached %v), want 200", user, code, d.Cached)
		}
		d, err := b.policy.Peek(context.Background(), target)
		if err != nil {
			t.Fatal(err)
		}
		if d.Remaining != 2 {
			t.Fatalf("%s: Peek %+v, want 2 remaining", user, d)
		}
	}
}

// TestALostSubscriptionDropsTheCache: when an instance loses its reset
// subscription it forgets what its deny cache held, since a reset may have
// gone by unheard, and learns nothing until the subscription is back.
func TestALostSubscriptionDropsTheCache(t *testing.T) {
	t.Parallel()
	_, c := newMini(t)
	in := newInstance(t, c, Key(prefix(t)), Window(time.Minute), Limit(3), Type(User), maxStaleness(time.Minute))
	waitSubscribed(t, in.policy) // the deny cache learns only then
	exhaust(t, in, "alice")
	if _, d := in.claim("alice"); !d.Cached {
		t.Fatal("the refusal was not cached: the test proves nothing")
	}
	in.policy.route.Hub.Lose()
	for i := range 2 {
		if code, d := in.claim("alice"); code != http.StatusTooManyRequests || d.Cached {
			t.Fatalf("claim %d after the loss: %d, cached %v: want Redis's 429", i+1, code, d.Cached)
		}
	}
}

// TestResetAfterRedisRestarts: a Redis restart breaks every subscription;
// each instance subscribes again by itself, and resets are seen at once
// again.
func TestResetAfterRedisRestarts(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	// A staleness bound no loaded machine outlasts: B's cached refusal
	// and A's wait for B's acknowledgement must not lapse.
	opts := []Option{Key(prefix(t)), Window(time.Minute), Limit(3), Type(User), maxStaleness(time.Minute)}
	a, b := newInstance(t, srv.Client(), opts...), newInstance(t, srv.Client(), opts...)
	srv.Restart()
	// Each hub notices the loss and subscribes again by itself: wait (as
	// long as a loaded machine needs) until the new server has both
	// subscribers and both hubs have seen their confirmation.
	admin := srv.Client()
	deadline := time.Now().Add(30 * time.Second)
	for {
		subs, err := admin.PubSubNumSub(context.Background(), ResetChannel).Result()
		if err == nil && subs[ResetChannel] == 2 && a.policy.route.Hub.Live() && b.policy.route.Hub.Live() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the reset subscriptions did not come back within 30 s of the restart (%v, %v)", subs, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	exhaust(t, a, "alice")
	for i := range 2 {
		if code, d := b.claim("alice"); code != http.StatusTooManyRequests || i == 1 && !d.Cached {
			t.Fatalf("B, claim %d: %d (cached %v), want 429, the second cached", i+1, code, d.Cached)
		}
	}
	if err := a.policy.Reset(context.Background(), Target{Route: claimRoute, User: "alice"}, "test"); err != nil {
		t.Fatal(err)
	}
	if code, _ := b.claim("alice"); code != http.StatusOK {
		t.Fatalf("B right after the reset: %d, want 200", code)
	}
}

// TestFloodCostsOneCallPerStalenessBound: a flood on one over-limit key
// reaches Redis once per MaxStaleness once the limit is used up: one probe
// per lapse of the cached refusal, however many goroutines flood (the
// others are answered from the cache while the probe is out). The deny
// cache's clock is driven by the test, one bound per phase, so the count
// does not depend on how fast the machine is.
func TestFloodCostsOneCallPerStalenessBound(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const bound, limit, flooders, phases = time.Second, 10, 8, 10
	// Only the calls on the flooded key count, not the upkeep's: a client
	// that honours the context is called as it is, hooks included, and
	// without auto-pipelining every call goes through ProcessHook.
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	pre := prefix(t)
	calls := &keyCalls{key: pre}
	c.AddHook(calls)
	p := mustPolicy(t, Redis(c), Key(pre), Window(time.Hour), Limit(limit), maxStaleness(bound), autoPipeline(false))
	var clock atomic.Int64
	p.route.Rules[0].Deny.SetClock(clock.Load)
	ctx := context.Background()
	var admitted int64
	flood := func(n int) {
		admitted += allowConcurrently(t, flooders, n, func(int) (Decision, error) { return p.Allow(ctx, "flooded", 1) })
	}
	flood(limit) // uses the limit up, and the cache learns the refusal
	if admitted != limit {
		t.Fatalf("%d admitted, want exactly %d", admitted, limit)
	}
	if calls.n.Load() < limit {
		t.Fatalf("%d calls on the key counted for %d admissions: the hook does not see the decisions", calls.n.Load(), limit)
	}
	before := calls.n.Load()
	for phase := 1; phase <= phases; phase++ {
		clock.Add(int64(bound))
		flood(20)
	}
	n := calls.n.Load() - before
	t.Logf("%d script calls on the key over %d lapses of the cached refusal, %d requests each", n, phases, flooders*20)
	if admitted != limit {
		t.Fatalf("%d admitted, want exactly %d", admitted, limit)
	}
	if n != phases {
		t.Fatalf("%d script calls on the key over %d lapses: want one probe per lapse", n, phases)
	}
}

// keyCalls is a go-redis hook that counts the script calls (EVAL, EVALSHA)
// with an argument that holds key: a policy's decisions, whose keys start
// with its Key, and not the upkeep's calls.
type keyCalls struct {
	key string
	n   atomic.Int64
}

func (*keyCalls) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *keyCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}
func (h *keyCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			h.count(cmd)
		}
		return next(ctx, cmds)
	}
}

func (h *keyCalls) count(cmd redis.Cmder) {
	if name := cmd.Name(); name != "evalsha" && name != "eval" {
		return
	}
	for _, a := range cmd.Args() {
		if s, ok := a.(string); ok && strings.Contains(s, h.key) {
			h.n.Add(1)
			return
		}
	}
}
